"""The page of `gpuwise serve`, driven in a real headless Chromium (Debian's `chromium`, through Playwright for
Python; never a browser download): what it shows is what the API answers, rounded as displayed.

The expected numbers come from the API itself (the same JSON the page reads), not from copies of today's output.
Skipped with the reason when Chromium or Playwright is missing, except under CI (CI set), where missing either is
a failure: CI must run it. Every request the page makes must stay on the test server (127.0.0.1); screenshots
land in each test's tmp_path.
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
DONE = '#results[data-state="done"]'
TIMEOUT_MS = 20_000
FIXTURE = Path(__file__).parents[1] / "fixtures" / "configs" / "tiny-llama.json"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason}; CI must run the page's end-to-end test (apt-get install chromium; pip install playwright)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        _missing(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python is not installed (pip install playwright; no `playwright install` needed)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A browser tab on the test server that records every request and every script error."""

    def __init__(self, browser, base_url: str) -> None:
        self.base = base_url
        self.context = browser.new_context(viewport=VIEWPORT)
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(TIMEOUT_MS)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.tab.on("request", lambda r: self.requests.append(r.url))
        self.tab.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, **query: str) -> None:
        self.tab.goto(f"{self.base}/?{urllib.parse.urlencode(query)}")
        self.tab.wait_for_selector(DONE)

    def text(self, selector: str) -> str:
        return self.tab.locator(selector).inner_text().strip()

    def fact(self, testid: str) -> str:
        return self.text(f'[data-testid="{testid}"]')

    def shot(self, path: Path) -> None:
        self.tab.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000


@pytest.fixture
def page(browser, base_url):
    p = Page(browser, base_url)
    yield p
    p.context.close()
    outside = [u for u in p.requests if not u.startswith(f"{base_url}/")]
    assert not outside, f"the page reached outside the test server: {outside}"
    assert not p.errors, f"script errors: {p.errors}"


def api(base_url: str, endpoint: str, /, body: dict | None = None, **params) -> dict:
    """The API's own answer (the JSON the page reads), or its 400 error document."""
    q = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{base_url}/api/{endpoint}?{q}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def gib(n: int) -> str:
    """Bytes as the page shows them: GiB with two decimals."""
    return f"{n / 2**30:,.2f} GiB"


UNITS = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}


def seconds(text: str) -> float:
    number, unit = re.fullmatch(r"([\d,.]+) (µs|ms|s|min|h)", text).groups()
    return float(number.replace(",", "")) * UNITS[unit]


def leading_number(text: str) -> float:
    return float(re.match(r"\$?([\d,.]+)", text).group(1).replace(",", ""))


def close(shown: float, value: float, rel: float = 0.006) -> bool:
    """Three significant digits on screen: within half a unit of the third digit."""
    return abs(shown - value) <= rel * abs(value)


def test_inference_view_shows_the_apis_verdict_memory_speed_and_command(page, base_url, tmp_path) -> None:
    q = {"model": "llama-3.1-8b", "gpu": "rtx-4090"}
    fit = api(base_url, "fit", **q)
    infer = api(base_url, "infer", **q)
    page.open(task="infer", **q)

    assert fit["fits"]
    assert page.fact("verdict-title") == "FITS"
    assert page.fact("verdict-used") == gib(fit["memory"]["total"])
    assert page.fact("verdict-capacity") == gib(fit["gpu_memory"])
    assert page.fact("verdict-budget") == gib(fit["memory_budget"])
    assert page.fact("verdict-headroom") == f"{gib(fit['headroom_bytes'])} free"
    for part in ("weights", "kv_cache", "activations", "overhead"):  # the legend of the stacked bar
        assert page.text(f'#memory-legend li[data-part="{part}"] .legend-value') == gib(fit["memory"][part])
    assert page.tab.locator('#memory-bar svg g[data-part="weights"] rect').count() == 1
    assert page.tab.locator("#memory-assumptions li").count() == len(fit["assumptions"])

    assert close(seconds(page.fact("ttft")), infer["ttft_s"])
    assert close(seconds(page.fact("tpot")), infer["tpot_s"])
    assert close(leading_number(page.fact("tokens-per-s")), infer["output_tokens_per_s"])
    assert page.fact("tokens-per-s").endswith("output tokens/s")
    assert close(leading_number(page.fact("usd-per-million")), infer["usd_per_million_output_tokens"])
    assert page.fact("usd-per-million").endswith("per million output tokens")

    ops = api(base_url, "roofline", **q)["ops"]
    assert page.tab.locator('[data-testid="roofline-ops"] tbody tr').count() == len(ops)
    assert page.tab.locator("#roofline svg g.op circle").count() == sum(o["intensity_flops_per_byte"] > 0 for o in ops)
    # attained FLOP/s: 0 FLOPs (norms, residual adds) is a known zero, shown as such; "unknown" only for null
    attained = page.tab.locator('[data-testid="roofline-ops"] tbody tr td:nth-child(4)').all_inner_texts()
    zero = [i for i, o in enumerate(ops) if o["flops"] == 0]
    assert zero, "the roofline of a decode step has operations with no FLOPs (norms, residual adds)"
    for i, o in enumerate(ops):
        if o["flops"] == 0:
            assert attained[i].strip() == "0 FLOP/s"
        elif o["flops"] is not None and o["time_s"]:
            assert attained[i].strip().endswith("FLOP/s") and attained[i].strip() != "unknown"
    assert "unknown" not in page.text('[data-testid="roofline-ops"]'), "every number of this table is known"
    ranked = api(base_url, "pick", model=q["model"], task="infer", top=10)["ranked"]
    assert page.tab.locator('[data-testid="pick-table"] tbody tr').count() == len(ranked)
    assert page.tab.locator("#doctor-section").is_hidden()  # it fits: no remedies to show

    cli = api(base_url, "cli", command="fit", **q)["command"]
    assert cli == "gpuwise fit llama-3.1-8b --gpu rtx-4090"
    assert page.tab.input_value("#cli-command") == cli
    assert cli in page.text("#cli-commands")
    page.shot(tmp_path / "inference.png")

    # the link to this view restores the inputs and answers again
    link = page.tab.input_value("#view-link")
    assert link.startswith(f"{base_url}/?") and "model=llama-3.1-8b" in link and "gpu=rtx-4090" in link
    page.tab.goto(f"{base_url}/?task=infer&model=qwen3-8b&gpu=l4")
    page.tab.wait_for_selector(DONE)
    page.tab.goto(link)
    page.tab.wait_for_selector(DONE)
    assert page.tab.input_value("#model") == "llama-3.1-8b"
    assert page.tab.input_value("#cli-command") == cli


def test_a_request_rate_shows_the_engine_under_load(page, base_url, tmp_path) -> None:
    """Issue 19: the serving section (rate and SLO fields) shows the API's latency percentiles and goodput."""
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "request_rate": "4", "slo_ttft_ms": "200", "slo_tpot_ms": "20"}
    sv = api(base_url, "infer", **q)["serving"]
    page.open(task="infer", **q)
    assert page.tab.input_value("#request_rate") == "4"
    rows = page.tab.locator('[data-testid="serving-latency"] tbody tr').all_inner_texts()
    assert len(rows) == 4
    ttft_p50 = rows[0].split("\t")[2].strip()
    assert close(seconds(ttft_p50), sv["ttft_s"]["p50"])
    assert close(leading_number(page.fact("serving-goodput")), sv["goodput_requests_per_s"])
    assert "TTFT ≤ 200 ms" in page.fact("serving")
    # the GPU table answers the serving question: replicas within the targets, priced at that load
    ranked = api(base_url, "pick", model=q["model"], task="serve", request_rate="4", slo_ttft_ms="200",
                 slo_tpot_ms="20", top=10)["ranked"]
    assert page.tab.locator('[data-testid="pick-table"] tbody tr').count() == len(ranked)
    assert "per replica" in page.text('[data-testid="pick-table"]')
    page.shot(tmp_path / "serving.png")


def test_a_model_that_does_not_fit_shows_the_doctors_remedies(page, base_url, tmp_path) -> None:
    q = {"model": "llama-3.1-70b", "gpu": "rtx-4090", "weights": "bf16"}
    fit = api(base_url, "fit", **q)
    doctor = api(base_url, "doctor", task="infer", **q)
    page.open(task="infer", **q)

    assert not fit["fits"]
    assert page.fact("verdict-title") == "DOES NOT FIT"
    assert page.fact("verdict-used") == gib(fit["memory"]["total"])
    assert page.fact("verdict-headroom") == f"{gib(-fit['headroom_bytes'])} short"
    assert f"cheapest change that fits: {fit['cheapest_fix']['change']}" in page.text('[data-testid="verdict-reasons"]')
    assert page.tab.locator("#doctor-section").is_visible()
    assert page.fact("doctor-verdict") == doctor["verdict"]
    rows = page.tab.locator('[data-testid="doctor-remedies"] tbody tr')
    assert rows.count() == len(doctor["remedies"])
    assert rows.first.locator("td").first.inner_text().strip() == doctor["remedies"][0]["change"]
    page.shot(tmp_path / "does-not-fit.png")


def test_an_attention_dominated_step_shows_its_band_and_range(page, base_url) -> None:
    """A 256K-token step, 82% attention: the page names the attention-dominated band and its runs' range, as the CLI
    does, instead of the category's."""
    q = {"model": "llama-3.1-8b", "gpu": "h200-sxm", "num_gpus": "8", "seq": "262144", "global_batch": "8",
         "micro_batch": "1", "zero": "3", "framework": "deepspeed", "recompute": "full", "offload": "optimizer",
         "fused_loss": "true"}
    band = api(base_url, "train", **q)["speed_confidence"]
    assert band["band"] == "attention_dominated"
    page.open(task="train", **q)
    shown = page.fact("speed-how-sure")
    low, high = (f"{'+' if v >= 0 else ''}{math.floor(100 * v + 0.5)}%" for v in band["error_range"])  # Math.round
    assert f"{band['held_out_runs']} held-out published runs, attention-dominated steps" in shown, shown
    assert f"ranged from {low} to {high}" in shown, shown


def test_training_view_shows_mfu_with_its_denominator_and_the_plans(page, base_url, tmp_path) -> None:
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "num_gpus": "8", "fsdp": "full", "global_batch": "32"}
    train = api(base_url, "train", **q)
    page.open(task="train", **q)

    assert page.fact("verdict-title") == ("FITS (tight)" if train["tight"] else "FITS" if train["fits"] else "DOES NOT FIT")
    assert page.fact("verdict-used") == gib(train["memory_per_gpu"]["total"])
    # one decimal of the same figure (the JSON's 4 decimals can end in a 5, which JavaScript rounds up and Python's
    # binary float may round down)
    shown = page.fact("mfu")
    assert shown.endswith("%") and abs(float(shown[:-1]) - 100 * train["mfu"]) <= 0.05 + 1e-9
    peak = train["mfu_denominator"]["peak_flops_per_gpu"]
    denominator = page.text('[data-testid="mfu"] + dd.note')
    assert f"{peak / 1e12:,.1f} TFLOP/s per GPU" in denominator and train["mfu_denominator"]["dtype"] in denominator
    assert f"{train['num_gpus']} GPUs" in page.fact("mfu-denominator")
    # how sure: the held-out bands the JSON carries, as the CLI prints them (Math.round, not banker's rounding)
    bands = (("speed-how-sure", train["speed_confidence"]), ("verdict-reasons", train["memory_confidence"]))
    for testid, band in bands:
        shown = page.fact(testid)
        assert f"±{int(100 * band['median_abs_error'] + 0.5)}% typical" in shown, shown
        assert f"{band['held_out_runs']} held-out published runs, {band['category_name']}" in shown, shown
    assert close(seconds(page.fact("step-time")), train["step_time_s"])
    assert close(leading_number(page.fact("tokens-per-s")), train["tokens_per_s"])
    mfu_text = api(base_url, "explain", term="mfu", model=q["model"], gpu=q["gpu"])["text"]
    page.tab.click('details[data-explain="mfu"] summary')  # the concept, fetched when opened
    page.tab.locator('details[data-explain="mfu"] .explain-body p').first.wait_for()
    assert page.tab.locator('details[data-explain="mfu"] .explain-body p').first.inner_text() == mfu_text

    # the plans are for the job's own trainer (fsdp here), as the page asks for them
    plan = api(base_url, "plan", model=q["model"], gpu=q["gpu"], num_gpus=8, seq=train["seq"],
               global_batch=train["global_batch"], precision=train["precision"], framework=train["framework"], top=5)
    rows = page.tab.locator('[data-testid="plan-table"] tbody tr')
    assert rows.count() == len(plan["plans"])
    assert plan["plans"][0]["summary"] in rows.first.inner_text()
    cli = api(base_url, "cli", command="train", **q)["command"]
    assert page.tab.input_value("#cli-command") == cli
    assert cli.startswith("gpuwise train llama-3.1-8b --gpu h100-sxm --num-gpus 8")
    page.shot(tmp_path / "training.png")


def test_a_training_job_that_does_not_fit_is_short_by_its_allocated_peak_and_runtime(page, base_url) -> None:
    """The verdict compares what must fit (allocated peak + runtime, `memory_torch.required`) with the GPU, as the
    CLI does: the shortfall shown is that, not the total with the caching allocator's allowance."""
    q = {"model": "llama-3.1-70b", "gpu": "h100-sxm", "num_gpus": "1"}
    train = api(base_url, "train", **q)
    page.open(task="train", **q)

    assert not train["fits"] and train["memory_torch"]["required"] < train["memory_per_gpu"]["total"]
    assert page.fact("verdict-title") == "DOES NOT FIT"
    assert page.fact("verdict-headroom") == f"{gib(train['memory_torch']['required'] - train['gpu_memory'])} short"
    note = page.text('[data-testid="verdict-headroom"] + dd.note')
    assert f"allocated peak + runtime {gib(train['memory_torch']['required'])}" in note
    assert f"allocator's {gib(train['memory_per_gpu']['allocator'])} allowance" in note


def test_an_input_error_is_the_clis_message_next_to_its_input(page, base_url) -> None:
    message = api(base_url, "fit", model="llama-3.1-8b", gpu="rtx-9090")["error"]
    page.open(task="infer", model="llama-3.1-8b", gpu="rtx-9090")
    assert page.text("#gpu-error") == message
    assert page.tab.get_attribute("#gpu", "aria-invalid") == "true"
    assert page.fact("verdict-error") == message


def test_an_unknown_model_is_reported_once_and_the_other_sections_say_not_computed(page, base_url, tmp_path) -> None:
    q = {"model": "llama-9-999b", "gpu": "rtx-4090"}
    message = api(base_url, "fit", **q)["error"]
    assert message and api(base_url, "infer", **q)["error"] == message
    page.open(task="infer", **q)
    assert page.text("#model-error") == message  # next to the input
    assert page.fact("verdict-error") == message  # and in the verdict: nowhere else
    assert page.tab.locator("#results .error").count() == 1
    assert page.text("#results").count(message) == 1
    for section in ("memory", "speed", "roofline", "pick"):
        assert page.tab.get_attribute(f"#{section}-section", "data-state") == "not-computed"
        assert page.fact(f"{section}-not-computed").lower().startswith("not computed")
    page.shot(tmp_path / "unknown-model.png")


def test_a_pasted_config_is_posted_and_answered(page, base_url, tmp_path) -> None:
    config = json.loads(FIXTURE.read_text())
    fit = api(base_url, "fit", body={"config": config}, gpu="rtx-4090")
    page.open(task="infer", model="llama-3.1-8b", gpu="rtx-4090")
    page.tab.check('[data-testid="model-source-config"]')
    page.tab.fill("#config", json.dumps(config, indent=2))
    page.tab.click("#run")
    page.tab.wait_for_function("document.querySelector('#verdict').innerText.includes('pasted config.json')")
    page.tab.wait_for_selector(DONE)
    assert page.fact("verdict-used") == gib(fit["memory"]["total"])
    assert page.tab.input_value("#cli-command").startswith("gpuwise fit ./config.json --gpu rtx-4090")
    assert "config=" in page.tab.input_value("#view-link")
    page.shot(tmp_path / "pasted-config.png")


def test_what_runs_on_the_hardware_and_free_memory(page, base_url, tmp_path) -> None:
    """Issue 20: the page lists what runs on the GPUs chosen (gpuwise models --fits), and a free-memory field makes
    every answer use that much memory."""
    q = {"model": "llama-3.1-8b", "gpu": "rtx-4090", "engine": "llamacpp"}
    doc = api(base_url, "models", fits="1x rtx-4090", engine="llamacpp", top="10")
    page.open(task="infer", **q)
    rows = page.tab.locator('[data-testid="runnable-table"] tbody tr').all_inner_texts()
    assert len(rows) == 10 and rows[0].split("\t")[1].strip() == doc["runnable"][0]["id"]
    assert f"{len(doc['runnable'])} catalog models run on NVIDIA GeForce RTX 4090" in page.fact("runnable-what")
    # 10 GiB free of the card's 24: the verdict, the list and the link all use it
    small = api(base_url, "fit", gpu_memory="10GiB", **q)
    page.open(task="infer", gpu_memory="10GiB", **q)
    assert page.tab.input_value("#gpu_memory") == "10GiB"
    assert page.fact("verdict-capacity") == gib(small["gpu_memory"])
    assert "gpu_memory=10GiB" in page.tab.input_value("#view-link")
    assert "--gpu-memory 10GiB" in page.tab.input_value("#cli-command")
    listed = api(base_url, "models", fits="1x rtx-4090", gpu_memory="10GiB", engine="llamacpp", top="10")["runnable"]
    rows = page.tab.locator('[data-testid="runnable-table"] tbody tr').all_inner_texts()
    assert [r.split("\t")[1].strip() for r in rows] == [x["id"] for x in listed[:10]]
    assert listed[0]["decode_tokens_per_s"] and len(listed) < len(doc["runnable"])  # the card's speed, less memory
    page.shot(tmp_path / "runnable.png")
