"""`gpuwise pick`: the rules in order, the ranking, MIG slices, and the property that more memory never hurts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuwise
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.mig import mig_slices
from gpuwise.cli import main
from gpuwise.plan.pick_request import RULES

GIB = 2**30


@pytest.fixture(scope="module")
def infer70():
    return gpuwise.pick("llama-3.1-70b", task="infer", budget_usd_per_hour=20, top=1000)


def test_accepted_fit_with_headroom_within_budget_and_ranked_by_cost(infer70):
    r = infer70
    assert r.ranked and len(r.ranked) == r.accepted
    for c in r.ranked:
        assert c.fits and c.rule is None
        assert c.memory_bytes <= 0.9 * c.gpu.memory_bytes
        assert c.usd_per_hour is not None and c.usd_per_hour <= 20
    costs = [c.usd_per_million_tokens for c in r.ranked]
    assert costs == sorted(costs)


def test_each_rejection_names_the_first_rule_it_fails(infer70):
    for c in infer70.rejected:
        assert c.rule in RULES and c.reason
        assert (c.rule == "memory") == (not c.fits)
        if c.rule in ("budget", "headroom"):
            assert c.fits
        if c.rule == "headroom":
            assert c.usd_per_hour <= 20


def test_candidates_are_what_infer_predicts():
    r = gpuwise.pick("llama-3.1-8b", task="infer", gpus=["rtx-4090", "h100-sxm"], headroom=0, top=100)
    for c in r.ranked:
        ref = gpuwise.infer("llama-3.1-8b", gpu=c.gpu, num_gpus=c.count)
        assert c.tokens_per_s == pytest.approx(ref.requests_per_s * 128)  # output tokens of whole requests
        assert c.usd_per_million_tokens == pytest.approx(ref.usd_per_million_output_tokens)


def test_layer_split_that_is_no_faster_is_rejected_by_communication():
    r = gpuwise.pick("llama-3.1-8b", task="infer", engine="llamacpp", weights="Q4_K_M", gpus=["rtx-4090"], top=10)
    assert [c.count for c in r.ranked] == [1]
    assert {c.rule for c in r.rejected} == {"communication"}
    assert all("layer split" in c.reason for c in r.rejected)


def test_a_memory_rejection_names_the_engines_own_budget():
    """The memory rule's reason names the share the engine takes: vLLM's gpu_memory_utilization, SGLang's
    mem_fraction_static at its default for that GPU's memory (its own rule, estimate/engines.py)."""
    from gpuwise.estimate.engines import SGLANG

    for engine, needle in (("vllm", "vLLM takes gpu_memory_utilization 0.9"), ("sglang", "mem_fraction_static"),
                           ("trtllm", "TensorRT-LLM is given 0.9")):
        r = gpuwise.pick("llama-3.1-70b", task="infer", engine=engine, weights="bf16", gpus=["l4"], max_gpus=1)
        c = next(c for c in r.rejected if c.rule == "memory")
        assert needle in c.reason, c.reason
        if engine == "sglang":
            assert f"{SGLANG.mem_fraction_static(c.gpu.memory_bytes, c.count):g}" in c.reason


def test_mig_slices_are_pro_rata_and_single():
    h100 = get_gpu("h100-sxm")
    slices = mig_slices(h100)
    assert slices and all(s.memory_bytes < h100.memory_bytes for s in slices)
    one = next(s for s in slices if s.id.endswith("1g.10gb"))
    assert one.peak("bf16") == pytest.approx(h100.peak("bf16") / 7)
    r = gpuwise.pick("llama-3.1-8b", task="infer", engine="llamacpp", weights="Q4_K_M",
                     gpus=["h100-sxm:1g.10gb"], headroom=0)
    assert [c.count for c in r.ranked] == [1]
    from gpuwise.catalog.devices import rental_price

    assert r.ranked[0].usd_per_hour == pytest.approx(rental_price(h100)[0] * max(1 / 7, 10 / 80))


def test_training_candidates_keep_the_headroom():
    r = gpuwise.pick("llama-3.1-8b", task="finetune", finetune="qlora", gpus=["rtx-4090", "a100-sxm-80gb"], top=20)
    assert r.ranked
    for c in r.ranked:
        assert c.memory_bytes <= 0.9 * c.gpu.memory_bytes and c.tokens_per_s > 0


def test_fp8_training_rejects_gpus_without_fp8_and_prices_torchtitan_compiled():
    """--precision fp8: a GPU without fp8 tensor cores is rejected by the precision rule (torchao's float8 and
    Transformer Engine refuse it); the plans run torchtitan compiled, as its float8 runs, and say so."""
    r = gpuwise.pick("llama-3.1-8b", task="train", precision="fp8", seq=2048, global_batch=16,
                     gpus=["a100-sxm-80gb", "h100-sxm"], max_gpus=2, top=10)
    assert r.ranked and all(c.gpu.peak("fp8") for c in r.ranked)
    assert all(c.setup.startswith("torchtitan + compile:") for c in r.ranked)
    a100 = [c for c in r.rejected if c.gpu.id == "a100-sxm-80gb"]
    assert a100 and all(c.rule == "precision" and "fp8 tensor cores" in c.reason for c in a100)
    best = r.ranked[0]
    checked = gpuwise.plan("llama-3.1-8b", gpu=best.gpu.id, num_gpus=best.count, seq=2048, global_batch=16,
                           framework="torchtitan", precision="fp8", compile=True, top=1,
                           reserve_gib=0.10 * best.gpu.memory_bytes / 2**30)  # pick keeps its 10% headroom free
    assert checked.plans[0].step_time_s == pytest.approx(16 * 2048 / best.tokens_per_s, rel=1e-6)


MODELS = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.3"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), batch=st.sampled_from([1, 4, 32, 128]),
       prompt=st.sampled_from([128, 2048, 16384]), engine=st.sampled_from(["vllm", "llamacpp"]),
       factor=st.sampled_from([1.5, 2.0, 4.0]))
def test_a_bigger_memory_gpu_of_the_same_speed_never_ranks_lower(model, batch, prompt, engine, factor):
    """With the weights fixed: without --weights each card runs the most faithful format that fits it, and a
    smaller card's 4-bit format can be faster than a bigger card's 16 bits (test_pick_quantizes_...)."""
    base = get_gpu("rtx-4090")
    big = replace(base, id="rtx-4090-big", name="RTX 4090 with more memory", memory_gb=base.memory_gb * factor,
                  memory_bytes=int(base.memory_bytes * factor))
    r = gpuwise.pick(model, task="infer", gpus=[base, big], batch=batch, prompt_tokens=prompt, engine=engine,
                     prices={base.id: 0.5, big.id: 0.5}, top=100, weights="Q4_K_M" if engine == "llamacpp" else "bf16")
    order = [c.gpu.id for c in r.ranked]
    if base.id in order:
        assert big.id in order and order.index(big.id) < order.index(base.id)


def test_pick_quantizes_where_no_weights_are_given():
    """Issue 21, item 16: a 70B model on two 24 GB cards was rejected in 16 bits though 4 bits fit; without
    --weights each candidate runs the most faithful format that fits it with the headroom kept, and says which."""
    r = gpuwise.pick("llama-3.1-70b", task="infer", gpus=["rtx-3090"], max_gpus=2, engine="llamacpp")
    assert [(c.count, c.setup) for c in r.ranked] == [(2, "llama.cpp layer split over 2 GPUs, Q4_K_M")]
    fixed = gpuwise.pick("llama-3.1-70b", task="infer", gpus=["rtx-3090"], max_gpus=2, engine="llamacpp",
                         weights="F16")
    assert not fixed.ranked  # as asked: 16 bits fit nowhere


@pytest.mark.parametrize("argv", [
    ["pick", "llama-3.1-8b", "--task", "inference"],
    ["pick", "llama-3.1-8b", "--gpus", "no-such-gpu"],
    ["pick", "llama-3.1-8b", "--gpus", "h100-sxm:9g.99gb"],
    ["pick", "llama-3.1-8b", "--price", "h100-sxm=cheap"],
    ["pick", "llama-3.1-8b", "--headroom", "1.5"],
    ["pick", "llama-3.1-8b", "--task", "infer", "--seq", "4096"],
])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuwise: error:")


def test_cli_json(capsys):
    assert main(["pick", "llama-3.1-8b", "--gpus", "rtx-4090,l40s,h100-sxm", "--budget-usd-per-hour", "3",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "pick" and doc["ranked"]
    assert {c["rule"] for c in doc["rejected"]} <= set(RULES)
    assert all(c["usd_per_hour"] <= 3 for c in doc["ranked"])


def test_train_tokens_must_be_positive_and_an_empty_gpu_list_means_the_catalog(capsys):
    assert main(["pick", "llama-3-8b", "--task", "train", "--train-tokens=-1e12", "--gpus", "h100-sxm"]) == 2
    assert "--train-tokens" in capsys.readouterr().err
    whole = gpuwise.pick("llama-3-8b", top=100)
    assert main(["pick", "llama-3-8b", "--gpus", "", "--top", "100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["ranked"]) == len(whole.ranked) > 1


def test_serve_sizes_replicas_for_the_rate_and_the_targets():
    """--task serve: a replica's capacity comes from the simulated engine within the targets; more requests per second
    never need fewer GPUs, tighter targets never fewer, and a kind that cannot meet them even at low load is rejected by
    the slo rule with the latency it reaches."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.plan.pick import pick
    from gpuwise.plan.pick_request import PickRequest

    model = load_model("llama-3.1-8b")
    gpus = (get_gpu("h100-sxm"), get_gpu("l4"))

    def best(rate, ttft=1000.0, tpot=50.0):
        r = pick(PickRequest(model=model, task="serve", gpus=gpus, mig=False, max_gpus=2, request_rate=rate,
                             prompt_tokens=1000, output_tokens=200, slo_ttft_ms=ttft, slo_tpot_ms=tpot))
        return r

    r = best(5.0)
    assert r.ranked and r.ranked[0].tokens_per_s == 5.0 * 200
    c = r.ranked[0]
    assert c.latency["ttft_s"] <= 1.0 and c.latency["tpot_s"] <= 0.05
    assert c.count == c.latency["replicas"] * c.latency["gpus_per_replica"]
    h100 = lambda res: min(x.count for x in res.ranked if x.gpu.id == "h100-sxm")  # noqa: E731
    assert h100(best(40.0)) >= h100(best(5.0))
    assert h100(best(40.0, tpot=15.0)) >= h100(best(40.0))
    from gpuwise.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="the best reachable: TTFT"):
        best(5.0, tpot=2.0)  # 2 ms per token: no GPU decodes an 8B model that fast
    # an L4 streams the 16 GB of bf16 weights in ~55 ms: one GPU per replica misses a 50 ms TPOT at any load
    assert any(c.rule == "slo" and c.gpu.id == "l4" and "even alone" in c.reason for c in r.rejected)


@pytest.mark.parametrize(("argv", "needle"), [
    (["--task", "serve"], "--request-rate"),
    (["--task", "serve", "--request-rate", "inf"], "finite"),
    (["--task", "infer", "--slo-ttft-ms", "100"], "--slo-ttft-ms applies to --task serve"),
    (["--task", "infer", "--slo-ttft-ms", "100", "--request-rate", "2"],
     "--request-rate, --slo-ttft-ms apply to --task serve"),
    (["--task", "serve", "--request-rate", "2", "--engine", "hf"], "vllm, sglang, trtllm or llamacpp"),
    (["--task", "serve", "--request-rate", "2", "--slo-tpot-ms", "1", "--gpus", "h100-sxm,l4"], "best reachable"),
    (["--task", "serve", "--request-rate", "2", "--sglang-version", "0.5.9"], "SGLang's; this engine is vllm"),
    (["--task", "serve", "--request-rate", "2", "--vllm-version", "0.9.2"], "before 0.10"),
    (["--task", "train", "--vllm-version", "0.11.0"], "applies to --task infer or serve"),
    (["--engine", "sglang", "--sglang-version", "latest"], "not a SGLang version"),
])
def test_serve_bad_options_are_one_line(capsys, argv, needle):
    from gpuwise.cli import main

    try:
        code = main(["pick", "llama-3.1-8b", *argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def test_serve_and_infer_price_the_engine_version_given():
    """pick takes infer's --vllm-version and --sglang-version: vLLM 0.11 schedules synchronously (2 ms per step and
    13 us per running request outside the kernels, against 0.5 ms from 0.14), so a replica decodes more slowly there
    than on the newest, and one-batch costs rise with it; SGLang before 0.5.10 runs its prefill eagerly."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.plan.pick import pick
    from gpuwise.plan.pick_request import PickRequest

    base = dict(model=load_model("llama-3.1-8b"), gpus=(get_gpu("h100-sxm"),), mig=False, max_gpus=1,
                output_tokens=200)

    def first(prompt_tokens=1000, **kw):
        return pick(PickRequest(**base, prompt_tokens=prompt_tokens, **kw)).ranked[0]

    new, old = first(task="serve", request_rate=5.0), first(task="serve", request_rate=5.0, vllm_version="0.11.0")
    assert old.latency["tpot_s"] > new.latency["tpot_s"] + 1e-3
    assert first(vllm_version="0.11.0").usd_per_million_tokens > first().usd_per_million_tokens
    # a 64-token prompt's pass: SGLang 0.5.9 launches its ~400 kernels from the host (longer than they run), 0.5.10
    # and later replay them as graphs
    short = dict(task="serve", request_rate=5.0, engine="sglang", prompt_tokens=64)
    assert first(**short, sglang_version="0.5.9").latency["ttft_s"] > first(**short).latency["ttft_s"] + 5e-3


def test_pick_chooses_the_weights_by_the_memory_rule_of_the_version_given():
    """Without --weights, pick costs the most faithful format that `gpuwise fit` says fits under the vLLM release
    given (its pool rule changes between releases: the sampler's warm-up, the memory outside PyTorch), not under the
    newest one: Qwen3-8B at 32K tokens on one RTX 4090 fits in bf16 under vLLM 0.19's rule but not under 0.10's."""
    from gpuwise.catalog.models import load_model
    from gpuwise.plan.fit import FitRequest, fit
    from gpuwise.plan.pick import pick
    from gpuwise.plan.pick_request import PickRequest
    from gpuwise.plan.runnable import _formats

    model, gpu = load_model("qwen3-8b"), get_gpu("rtx-4090")

    def fitting(version):
        for fmt in _formats(model, "vllm"):
            if fit(FitRequest(model=model, gpu=gpu, weights=fmt.name, engine="vllm", context=32768,
                              vllm_version=version)).fits:
                return fmt.name
        return None

    old, new = fitting("0.10.0"), fitting(None)
    assert old != new  # the two rules disagree here, so the check below can tell them apart

    def chosen(version):
        c = pick(PickRequest(model=model, task="infer", gpus=(gpu,), mig=False, max_gpus=1, prompt_tokens=32000,
                             output_tokens=768, headroom=0.0, vllm_version=version))
        return (c.ranked + c.rejected)[0].setup

    assert old in chosen("0.10.0") and new not in chosen("0.10.0")
    assert new in chosen(None)


def test_serve_search_skips_only_what_cannot_rank():
    """The best-first search on cost floors gives the ranking of a full search (top large enough that nothing is
    skipped), and the candidates it skips carry the cost rule with a floor above the last ranked cost."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.plan.pick import pick
    from gpuwise.plan.pick_request import PickRequest

    gpus = tuple(get_gpu(g) for g in ("h100-sxm", "l4", "a10g", "rtx-4090", "a100-sxm-80gb", "l40s"))
    kw = dict(model=load_model("llama-3.1-8b"), task="serve", gpus=gpus, mig=False, max_gpus=4, request_rate=8.0,
              prompt_tokens=1000, output_tokens=200, slo_ttft_ms=2000, slo_tpot_ms=60)
    full = pick(PickRequest(**kw, top=1000))
    short = pick(PickRequest(**kw, top=3))
    assert not any(c.rule == "cost" for c in full.rejected)
    skipped = [c for c in short.rejected if c.rule == "cost"]
    assert skipped  # the bound did prune something, so the comparison below is not vacuous
    # each stage's floor prunes: the price of one replica, the analytic ceiling (before any simulation), and the
    # simulated saturation rate
    for stage in ("for a single replica", "at the most one can finish", "at its saturation rate"):
        assert any(stage in c.reason for c in skipped), stage
    assert [(c.gpu.id, c.count, c.usd_per_hour) for c in short.ranked] == \
           [(c.gpu.id, c.count, c.usd_per_hour) for c in full.ranked[:3]]
    worst_ranked = short.ranked[-1].usd_per_hour
    for c in skipped:
        assert "not searched further" in c.reason and c.reason.startswith("at least $")
        floor = float(c.reason.split("$")[1].split("/h")[0].replace(",", ""))
        assert floor > worst_ranked


@pytest.mark.parametrize(("model", "gpu", "n"), [("llama-3.1-8b", "l4", 1), ("llama-3.1-8b", "h100-sxm", 1),
                                                 ("llama-3.1-70b", "a100-sxm-80gb", 4), ("qwen3-30b-a3b", "h100-sxm", 2)])
def test_serve_probe_saturation_stays_under_the_ceiling_it_screens_with(model, gpu, n):
    """The scale rule's screen (no simulation) may only reject what the simulation would: a real engine model's
    simulated saturation is below the analytic ceiling."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.serving import Workload, saturation_ceiling
    from gpuwise.plan.pick_request import PickRequest
    from gpuwise.plan.pick_setups import ServeProbe, serve_probe

    req = PickRequest(model=load_model(model), task="serve", gpus=(get_gpu(gpu),), request_rate=1.0,
                      prompt_tokens=2000, output_tokens=300, slo_ttft_ms=1000, slo_tpot_ms=50)
    p = serve_probe(req, get_gpu(gpu), n, 2.0, "as given")
    assert isinstance(p, ServeProbe)
    wl = p.load.workload
    at_once = Workload(prompt_tokens=wl.prompt_tokens, output_tokens=wl.output_tokens, request_rate=float("inf"))
    assert p.saturation <= saturation_ceiling(p.cost, at_once, p.load.limits)
