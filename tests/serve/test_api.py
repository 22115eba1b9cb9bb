"""The HTTP API answers exactly what the CLI answers: same JSON bytes, same error lines, for every endpoint."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuwise.cli import main
from gpuwise.serve import api
from gpuwise.serve.server import make_server

FIXTURE = Path(__file__).parents[1] / "fixtures" / "configs" / "tiny-llama.json"


def fetch(url: str, body: bytes | None = None, method: str | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def cli_stdout(capsys, argv: list[str]) -> bytes:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out.encode()


TIMING = re.compile(rb'"(search_time_s|evaluated_per_s)": [0-9.e+-]+')


def without_timing(doc: bytes) -> bytes:
    """plan and pick report how long their own search took: the one part of a document that differs run to run."""
    return TIMING.sub(rb'"\1": T', doc)


# (endpoint query, the same question on the command line)
CASES = [
    ("fit?model=llama-3.1-8b&gpu=rtx-4090&context=8192&engine=llamacpp",
     ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--context", "8192", "--engine", "llamacpp"]),
    ("train?model=llama-3.1-8b&gpu=h100-sxm&num_gpus=8&fsdp=full&seq=4096&global_batch=32&sp=false",
     ["train", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--fsdp", "full", "--seq", "4096",
      "--global-batch", "32"]),
    ("train?model=llama-3.1-70b&gpu=h100&num_gpus=64&tp=8&pp=4&sp=true&global_batch=64&zero=1",
     ["train", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "64", "--tp", "8", "--pp", "4", "--sp",
      "--global-batch", "64", "--zero", "1"]),
    ("infer?model=llama-3.1-8b&gpu=h100&batch=8&prompt_tokens=1000",
     ["infer", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--prompt-tokens", "1000"]),
    ("plan?model=llama-3.1-8b&gpu=h100-sxm&num_gpus=8&seq=4096&global_batch=64&top=3",
     ["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--seq", "4096", "--global-batch", "64",
      "--top", "3"]),
    ("pick?model=llama-3.1-8b&gpus=rtx-4090,l40s,h100-sxm&max_gpus=2",
     ["pick", "llama-3.1-8b", "--gpus", "rtx-4090,l40s,h100-sxm", "--max-gpus", "2"]),
    ("doctor?model=llama-3.1-70b&gpu=rtx-4090&task=infer",
     ["doctor", "llama-3.1-70b", "--gpu", "rtx-4090", "--task", "infer"]),
    ("roofline?model=llama-3.1-8b&gpu=h100&phase=prefill", ["roofline", "llama-3.1-8b", "--gpu", "h100",
                                                            "--phase", "prefill"]),
    ("train?model=llama-3.1-8b&gpu=h100&num_gpus=8&power_limit=500",
     ["train", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "8", "--power-limit", "500"]),
    ("models?query=qwen", ["models", "qwen"]),
    ("gpus", ["gpus"]),
    ("explain?term=mfu&gpu=h100-sxm", ["explain", "mfu", "--gpu", "h100-sxm"]),
]


@pytest.mark.parametrize("query, argv", CASES, ids=[c[0].split("?")[0] + str(i) for i, c in enumerate(CASES)])
def test_every_endpoint_returns_the_cli_json_byte_for_byte(base_url, capsys, query, argv) -> None:
    status, headers, body = fetch(f"{base_url}/api/{query}")
    assert status == 200, body
    assert headers["Content-Type"] == "application/json"
    assert without_timing(body) == without_timing(cli_stdout(capsys, [*argv, "--json"]))
    assert json.loads(body)["schema_version"]


def test_byte_identical_to_the_installed_command(base_url) -> None:
    """Against the CLI in its own process too (nothing shared in memory)."""
    _, _, body = fetch(f"{base_url}/api/fit?model=mixtral-8x7b&gpu=h100-sxm&num_gpus=2&weights=fp8")
    cli = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "mixtral-8x7b", "--gpu", "h100-sxm", "--num-gpus",
                          "2", "--weights", "fp8", "--json"], capture_output=True, timeout=60)
    assert cli.returncode == 0 and body == cli.stdout


@pytest.mark.parametrize("query, argv", [
    ("fit?model=nope&gpu=rtx-4090", ["fit", "nope", "--gpu", "rtx-4090"]),
    ("fit?model=llama-3.1-8b&gpu=h900", ["fit", "llama-3.1-8b", "--gpu", "h900"]),
    ("fit?model=llama-3.1-8b", ["fit", "llama-3.1-8b"]),
    ("train?model=llama-3.1-8b&gpu=h100&num_gpus=0", ["train", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "0"]),
    ("train?model=llama-3.1-8b&gpu=h100&recompute=some", ["train", "llama-3.1-8b", "--gpu", "h100", "--recompute",
                                                         "some"]),
    ("infer?model=llama-3.1-8b&gpu=h100&weights=q9", ["infer", "llama-3.1-8b", "--gpu", "h100", "--weights", "q9"]),
    ("train?model=llama-3.1-8b&gpu=h100&num_gpus=8&tp=3", ["train", "llama-3.1-8b", "--gpu", "h100", "--num-gpus",
                                                          "8", "--tp", "3"]),
    ("infer?model=llama-3.1-8b&gpu=h100&power_limit=20", ["infer", "llama-3.1-8b", "--gpu", "h100", "--power-limit",
                                                          "20"]),
])
def test_bad_input_is_a_400_with_the_cli_message(base_url, capsys, query, argv) -> None:
    status, _, body = fetch(f"{base_url}/api/{query}")
    assert status == 400
    assert main([*argv, "--json"]) == 2
    err = capsys.readouterr().err
    assert err == f"gpuwise: error: {json.loads(body)['error']}\n"


def test_parameters_the_cli_does_not_have(base_url) -> None:
    for query, words in (("fit?model=llama-3.1-8b&gpu=h100&bogus=1", "unknown parameter bogus"),
                         ("train?model=llama-3.1-8b&gpu=h100&sp=maybe", "true or false"),
                         ("fit?model=a&model=b&gpu=h100", "more than once"),
                         ("roofline?model=llama-3.1-8b&gpu=h100&plot=x.png", "unknown parameter plot"),
                         ("plan?model=llama-3.1-8b&gpu=h100&num_gpus=8&seq=4096&global_batch=8&emit=/tmp/x",
                          "unknown parameter emit")):
        status, _, body = fetch(f"{base_url}/api/{query}")
        assert status == 400 and words in json.loads(body)["error"], body
    status, _, body = fetch(f"{base_url}/api/calibrate")  # measurement commands are not offered
    assert status == 404 and "fit" in json.loads(body)["error"]


def test_dashed_names_work_too(base_url, capsys) -> None:
    _, _, body = fetch(f"{base_url}/api/fit?model=llama-3.1-8b&gpu=h100&kv-dtype=fp8&num-gpus=2")
    assert body == cli_stdout(capsys, ["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-dtype", "fp8", "--num-gpus", "2",
                                       "--json"])


def test_posted_config_is_the_model(base_url, capsys) -> None:
    config = json.loads(FIXTURE.read_text())
    status, _, body = fetch(f"{base_url}/api/fit?gpu=rtx-4090&batch=4", json.dumps({"config": config}).encode())
    assert status == 200
    doc = json.loads(body)
    want = json.loads(cli_stdout(capsys, ["fit", str(FIXTURE), "--gpu", "rtx-4090", "--batch", "4", "--json"]))
    assert doc["memory"] == want["memory"] and doc["model"]["layers"] == want["model"]["layers"] == 4
    for bad in (b"not json", b'{"config": 3}', b"[]"):
        status, _, body = fetch(f"{base_url}/api/fit?gpu=rtx-4090", bad)
        assert status == 400 and "config" in json.loads(body)["error"]
    status, _, body = fetch(f"{base_url}/api/gpus", json.dumps({"config": config}).encode())
    assert status == 400


def test_cli_endpoint_gives_the_equivalent_command(base_url) -> None:
    status, _, body = fetch(f"{base_url}/api/cli?command=train&model=llama-3.1-8b&gpu=h100&num_gpus=8&sp=true&tp=2")
    doc = json.loads(body)
    assert status == 200
    assert doc["command"] == "gpuwise train llama-3.1-8b --gpu h100 --num-gpus 8 --tp 2 --sp"
    assert main([*doc["argv"]]) == 0  # the command it shows runs


def test_openapi_lists_every_endpoint_with_the_cli_options(base_url) -> None:
    status, _, body = fetch(f"{base_url}/openapi.json")
    spec = json.loads(body)
    assert status == 200 and spec["openapi"].startswith("3.")
    for command in api.COMMANDS:
        params = {p["name"]: p for p in spec["paths"][f"/api/{command}"]["get"]["parameters"]}
        assert set(params) == {o.name for o in api.options(command)}
    fit = {p["name"]: p for p in spec["paths"]["/api/fit"]["get"]["parameters"]}
    assert fit["engine"]["schema"]["enum"] == ["hf", "vllm", "llamacpp", "trtllm", "sglang"]
    assert not fit["gpu"]["required"] and "gpu_memory" in fit  # a catalog GPU, or only its memory
    assert fit["num_gpus"]["schema"] == {"type": "integer", "default": 1}
    status, headers, page = fetch(f"{base_url}/docs")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"/api/train" in page and b"num_gpus" in page and b"http" not in page.replace(b"http://", b"")


def test_static_files_and_no_traversal(base_url) -> None:
    status, headers, page = fetch(f"{base_url}/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    for path in ("/static/../api.py", "/static/.hidden", "/static/%2e%2e/api.py", "/nothing"):
        assert fetch(base_url + path)[0] == 404
    assert fetch(f"{base_url}/api/fit", method="HEAD")[0] == 400  # HEAD answers like GET, without a body
    assert fetch(f"{base_url}/docs", b"{}")[0] == 405


def test_cli_serve_bad_port_and_busy_port(capsys) -> None:
    assert main(["serve", "--port", "70000"]) == 2
    server = make_server("127.0.0.1", 0, quiet=True)
    try:
        assert main(["serve", "--port", str(server.server_address[1])]) == 2
    finally:
        server.server_close()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "port" in err[0] and "cannot listen" in err[1]


def raw_request(base_url: str, text: bytes) -> bytes:
    """Send a hand-written HTTP request (headers the urllib client would not let us get wrong)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(base_url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(text)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_paths_that_are_not_config_files_are_refused_quickly(base_url) -> None:
    for query in ("fit?model=/dev/zero&gpu=h100", "train?model=llama-3.1-8b&gpu=h100&profile=/dev/zero",
                  "fit?model=-h&gpu=h100", "fit?model=a%00b&gpu=h100",
                  "train?model=llama-3.1-8b&gpu=h100&sp="):
        status, _, body = fetch(f"{base_url}/api/{query}")
        assert status == 400, (query, body)
        assert json.loads(body)["error"]
    status, _, body = fetch(f"{base_url}/api/models?query=--help")  # a query, not a request for argparse's help
    assert status == 200 and json.loads(body)["models"] == []


def test_malformed_bodies_get_an_answer(base_url) -> None:
    host = base_url.split("//")[1]
    cases = {b"Content-Length: abc": b" 411 ", b"Content-Length: -1": b" 400 ",
             b"Transfer-Encoding: chunked": b" 411 ", b"Content-Length: 99999999": b" 413 "}
    for header, status in cases.items():
        reply = raw_request(base_url, b"POST /api/fit?gpu=h100 HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
                            + header + b"\r\n\r\n")
        assert reply.split(b"\r\n", 1)[0].endswith(status.strip()) or status in reply.split(b"\r\n", 1)[0], reply[:80]


def test_only_this_machine_may_call_the_api(base_url) -> None:
    port = base_url.rsplit(":", 1)[1]
    other = int(port) + 1 if int(port) < 65535 else 1
    for headers in ({"Host": f"evil.example:{port}"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "http://evil.example"}, {"Origin": "http://localhost:1"},  # another local program
                    {"Origin": f"http://127.0.0.1:{other}"}, {"Origin": f"https://localhost:{port}"},
                    {"Origin": "http://localhost:99999"}):
        req = urllib.request.Request(f"{base_url}/api/gpus", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 403
    req = urllib.request.Request(f"{base_url}/api/gpus", headers={"Origin": base_url, "Sec-Fetch-Site": "same-origin"})
    assert urllib.request.urlopen(req, timeout=10).status == 200
    req = urllib.request.Request(f"{base_url}/api/gpus", headers={"Origin": f"http://localhost:{port}"})
    assert urllib.request.urlopen(req, timeout=10).status == 200


def test_a_very_long_static_name_is_a_404(base_url) -> None:
    """A /static/ name of 256+ characters made the OS raise and the connection drop (issue 21, item 8)."""
    for name in ("a" * 300, "a" * 300 + ".js", "x" * 5000):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base_url}/static/{name}", timeout=10)
        assert err.value.code == 404


def test_pasted_config_answer_is_the_clis_for_a_local_config_json(base_url, capsys, monkeypatch, tmp_path) -> None:
    config = json.loads(FIXTURE.read_text())
    status, _, body = fetch(f"{base_url}/api/train?gpu=h100-sxm&seq=1024",
                            json.dumps({"config": config}).encode())
    assert status == 200
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert body == cli_stdout(capsys, ["train", "./config.json", "--gpu", "h100-sxm", "--seq", "1024", "--json"])
    assert b"gpuwise-config-" not in body


def test_repeated_requests_do_not_grow_the_caches(base_url) -> None:
    from gpuwise.plan import train as plan_train

    query = f"{base_url}/api/train?model=llama-3.1-8b&gpu=h100-sxm&num_gpus=8&fsdp=full"
    fetch(query)
    sizes = {name: len(v) for name, v in vars(plan_train).items() if name.isupper() and isinstance(v, dict)}
    for _ in range(20):
        fetch(query)
    assert sizes == {name: len(v) for name, v in vars(plan_train).items() if name.isupper() and isinstance(v, dict)}


def test_memory_past_the_budget_empties_the_caches(monkeypatch) -> None:
    """Issue 21, item 7: the caches grew with every distinct posted config; past the server's memory budget they are
    emptied after the request, and the answers stay the same."""
    import gpuwise
    from gpuwise.model.params import param_counts
    from gpuwise.serve import server

    # handler threads of earlier tests' servers still finishing their requests call _bound_memory() with the default
    # budget, which the test process itself may exceed: keep them from emptying the caches under this test
    monkeypatch.setattr(server, "MEMORY_BUDGET_BYTES", 1 << 62)
    before = gpuwise.fit("llama-3.1-8b", gpu="h100").estimate.memory.total
    assert param_counts.cache_info().currsize > 0
    assert not server._bound_memory(budget=1 << 62)  # under budget: nothing dropped
    assert param_counts.cache_info().currsize > 0
    assert server._bound_memory(budget=1)  # over: every gpuwise lru cache and memo store emptied
    assert param_counts.cache_info().currsize == 0
    assert gpuwise.fit("llama-3.1-8b", gpu="h100").estimate.memory.total == before


def test_the_api_reads_no_local_file_and_reveals_nothing_about_paths(tmp_path, monkeypatch) -> None:
    """Issue 21, item 9: errors echoed values read from any local JSON file and told whether a path existed. Without
    --data-dir the API reads no file by path, with the same words for a file that exists and one that does not."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"model_type": "TOPSECRET"}')
    answers = []
    for model in (str(secret), str(tmp_path / "missing.json"), "/etc/passwd", "../../etc/passwd"):
        status, body = api.handle("GET", "fit", f"model={model}&gpu=h100")
        answers.append(json.loads(body)["error"])
        assert status == 400 and "TOPSECRET" not in body.decode()
    assert len(set(answers)) == 1 and "--data-dir" in answers[0]
    status, body = api.handle("GET", "infer", f"model=gpt2&gpu=h100&profile={secret}")
    assert status == 400 and json.loads(body)["error"].endswith(answers[0])
    # with --data-dir, the files under it are read, and nothing else
    good = tmp_path / "data" / "config.json"
    good.parent.mkdir()
    good.write_text(FIXTURE.read_text())
    monkeypatch.setattr(api, "DATA_DIR", str(good.parent))
    status, body = api.handle("GET", "fit", f"model={good}&gpu=h100")
    assert status == 200, body
    status, body = api.handle("GET", "fit", f"model={secret}&gpu=h100")
    assert status == 400 and "TOPSECRET" not in body.decode()
    assert main(["fit", str(good), "--gpu", "h100"]) == 0  # the CLI reads any file, as before


def test_the_pages_step_bar_names_every_part_of_the_step():
    """The page draws `time_breakdown_s` from its TIME_PARTS list: a part missing there leaves the bar short of the
    step time. Jobs that produce the optional parts: an eager Megatron MoE job (host_sync) and a CPU-offload one."""
    import re
    from pathlib import Path

    import gpuwise

    js = (Path(gpuwise.__file__).parent / "serve" / "static" / "render.js").read_text()
    drawn = set(re.findall(r'\["(\w+)", "[^"]*"\]', js[js.index("const TIME_PARTS"):js.index("const ENGINES")]))
    jobs = [gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, ep=8, framework="megatron"),
            gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, zero=2, framework="deepspeed",
                          offload=("optimizer",))]
    for r in jobs:
        assert set(r.perf.step.breakdown) <= drawn, set(r.perf.step.breakdown) - drawn
    assert {"host_sync", "offload"} <= set(jobs[0].perf.step.breakdown) | set(jobs[1].perf.step.breakdown)
