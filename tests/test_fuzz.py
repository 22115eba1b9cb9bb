"""Fuzzing the inputs (issue 21): CLI arguments, config.json files, device profiles and HTTP requests, more than 1,000
cases from a fixed seed in well under a minute. Every case must end in an answer or one line on stderr with exit
status 2 (a `GpuwiseError`), never a traceback, a hang, or NaN / Infinity in JSON."""

from __future__ import annotations

import contextlib
import io
import json
import random
import urllib.error
import urllib.request

import pytest

from gpuwise.catalog.devices import load_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.cli import main
from gpuwise.errors import GpuwiseError
from gpuwise.model import spec_from_hf_config
from gpuwise.model.params import param_counts

SEED = 20261126
NASTY = ["", " ", "-1", "0", "1e309", "nan", "inf", "-inf", "1e-400", "9" * 400, "3.5", "2**64", "x" * 3000,
         "\u202e\u0000", "🦙", "--", "--json", "../../etc/passwd", "/dev/zero", "/proc/kmsg", "h100-sxm:9g.99gb",
         "Q4_K_M", "bf16", "fp8", "llama-3.1-8b", "h100", "4x rtx-3090", "24GiB", "full", "none", "1", "8", "4096"]
COMMANDS = {
    "fit": ["--gpu", "--num-gpus", "--weights", "--kv-dtype", "--context", "--batch", "--engine", "--gpu-memory",
            "--gpu-memory-utilization", "--max-num-seqs"],
    "infer": ["--gpu", "--num-gpus", "--weights", "--batch", "--prompt-tokens", "--output-tokens", "--engine",
              "--request-rate", "--samples"],
    "train": ["--gpu", "--num-gpus", "--seq", "--global-batch", "--micro-batch", "--tp", "--pp", "--recompute",
              "--precision", "--optimizer", "--fsdp", "--zero", "--offload", "--optimizer-impl"],
    "roofline": ["--gpu", "--phase", "--batch", "--seq"],
    "models": ["--fits", "--engine", "--context", "--top", "--gpu-memory"],
    "gpus": [],
    "explain": ["--model", "--gpu"],
}
MODELS = ["llama-3.2-1b", "gpt2", "qwen3-30b-a3b", "gpt-oss-20b", "nope/none", "", "tests/fixtures/configs/malformed.json"]


def _strict_json(text: str | bytes):
    """json.loads refusing the NaN / Infinity / -Infinity tokens (never valid JSON)."""
    def refuse(token):
        raise AssertionError(f"non-JSON number {token}")

    return json.loads(text, parse_constant=refuse)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors exit 2 too
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


VALID = {"--gpu": ["h100-sxm", "rtx-4090", "a100-sxm-40gb", "m3-max", "mi300x", "h100-sxm:3g.40gb", "4090"],
         "--num-gpus": ["1", "2", "4", "8", "3"], "--weights": ["bf16", "fp8", "Q4_K_M", "nf4", "awq", "mxfp4"],
         "--kv-dtype": ["fp8", "bf16", "q8_0"], "--context": ["1", "512", "131072", "10000000"],
         "--batch": ["1", "7", "256"], "--engine": ["vllm", "llamacpp", "hf", "sglang"],
         "--gpu-memory": ["24GiB", "0.5GiB", "16TiB"], "--gpu-memory-utilization": ["0.5", "0.95", "1.5"],
         "--max-num-seqs": ["1", "4096"], "--prompt-tokens": ["1", "4096"], "--output-tokens": ["1", "1024"],
         "--request-rate": ["0.5", "50"], "--samples": ["1", "8"], "--seq": ["128", "8192", "1000000"],
         "--global-batch": ["8", "64", "7"], "--micro-batch": ["1", "4"], "--tp": ["1", "2", "8", "3"],
         "--pp": ["1", "2", "4"], "--recompute": ["none", "full", "selective"],
         "--precision": ["bf16", "fp8", "fp32", "fp16"], "--optimizer": ["adamw", "sgd", "adamw-8bit"],
         "--fsdp": ["full", "grad-op"], "--zero": ["1", "3"], "--offload": ["optimizer", "activations"],
         "--optimizer-impl": ["fused", "foreach"], "--phase": ["decode", "prefill"],
         "--fits": ["rtx-4090", "2x rtx-3090", "24GiB", "4x h100"], "--top": ["1", "3"], "--model": ["gpt2"]}
GOOD_MODELS = ["llama-3.2-1b", "gpt2", "qwen3-30b-a3b", "gpt-oss-20b", "smollm3-3b"]


def test_cli_arguments(capsys) -> None:
    """Each case starts from a question that parses (a model, a GPU) and changes up to four options, each to a
    value that is valid, out of range or garbage, so that the estimators themselves meet the odd values."""
    rng = random.Random(SEED)
    cases = answered = 0
    for _ in range(600):
        command = rng.choice(list(COMMANDS))
        argv = [command]
        if command in ("fit", "infer", "train", "roofline"):
            argv += [rng.choice(GOOD_MODELS if rng.random() < 0.85 else MODELS), "--gpu", rng.choice(VALID["--gpu"])]
            if command == "train":
                argv += ["--seq", "1024"]
        elif command in ("models", "gpus", "explain") and rng.random() < 0.5:
            argv.append(rng.choice(NASTY + ["mfu", "kv cache", "qwen"]))
        for flag in rng.sample(COMMANDS[command], k=min(len(COMMANDS[command]), rng.randint(0, 4))):
            pool = VALID.get(flag, NASTY) if rng.random() < 0.7 else NASTY
            argv += [flag, rng.choice(pool)]
        if rng.random() < 0.5:
            argv.append("--json")
        code, out, err = _run(argv)
        cases += 1
        answered += code == 0
        assert "Traceback" not in err and "Traceback" not in out, (argv, err[-500:])
        assert code in (0, 2), (argv, code, err[-300:])
        if code == 2:
            assert err.startswith("gpuwise: error:") or "usage:" in err, (argv, err[-300:])
        elif "--json" in argv and out.strip():
            _strict_json(out)
    assert cases == 600 and answered > 150  # the fuzz reaches the estimators, not only the option parser


GOOD = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16"}
FAMILIES = ["llama", "qwen3_moe", "gpt_oss", "deepseek_v3", "qwen3_next", "nemotron_h", "gemma3", "gpt2", "falcon",
            "opt", "bloom", "mistral", "phi3", "granitemoehybrid", "llama4", "qwen2_5_vl", "unknown_type", 7, None]
VALUES = [None, True, False, 0, -1, 1, 2, 3, 7, 64, 10**6, 10**12, 1.5, float("nan"), "8", "", [], [1, 2], {},
          {"a": 1}, ["full_attention"] * 4, ["sliding_attention", "linear_attention"], "M*-E", 2**63]


def test_config_files() -> None:
    rng = random.Random(SEED + 1)
    keys = list(GOOD) + ["num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                         "sliding_window", "layer_types", "head_dim", "q_lora_rank", "kv_lora_rank", "text_config",
                         "hybrid_override_pattern", "tie_word_embeddings", "quantization_config", "rope_scaling",
                         "linear_num_value_heads", "mamba_num_heads", "n_routed_experts", "first_k_dense_replace"]
    h100 = get_gpu("h100-sxm")
    import gpuwise

    for _ in range(400):
        raw = dict(GOOD)
        raw["model_type"] = rng.choice(FAMILIES)
        for key in rng.sample(keys, k=rng.randint(1, 5)):
            raw[key] = rng.choice(VALUES)
        try:
            spec = spec_from_hf_config(raw)
        except GpuwiseError:
            continue
        assert param_counts(spec).total > 0
        try:
            gpuwise.fit(_loaded(spec), gpu=h100)
        except GpuwiseError:
            pass


def _loaded(spec):
    from gpuwise.catalog.models import LoadedModel

    return LoadedModel(id="fuzzed", hf_id=None, spec=spec, source="file")


def test_device_profiles(tmp_path) -> None:
    rng = random.Random(SEED + 2)
    h100 = get_gpu("h100-sxm")
    keys = ["matmul_efficiency", "matmul_tflops", "memory_efficiency", "memory_bandwidth_gb_s", "kernel_overhead_us",
            "attention_kernel", "network", "gpu", "host_to_device_gb_s", "attention_forward_efficiency"]
    values = VALUES + [{"bf16": 0.5}, {"bf16": 5e-324}, {"bf16": "x"}, {"intra_node_busbw_gb_s": 0}, "fa3", "h100-sxm"]
    path = tmp_path / "profile.json"
    for _ in range(150):
        doc = {"kind": "gpuwise-device-profile"}
        for key in rng.sample(keys, k=rng.randint(1, 4)):
            doc[key] = rng.choice(values)
        try:
            path.write_text(json.dumps(doc))
        except ValueError:  # NaN is not JSON: write it as Python does
            path.write_text(json.dumps(doc, allow_nan=True))
        try:
            load_profile(path, h100)
        except GpuwiseError:
            continue
        code, out, err = _run(["infer", "llama-3.2-1b", "--gpu", "h100-sxm", "--profile", str(path), "--json"])
        assert "Traceback" not in err and code in (0, 2), (doc, err[-300:])
        if code == 0:
            _strict_json(out)


@pytest.fixture(scope="module")
def server():
    import threading

    from gpuwise.serve.server import make_server

    srv = make_server("127.0.0.1", 0, quiet=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_http_requests(server) -> None:
    rng = random.Random(SEED + 3)
    from urllib.parse import quote

    paths = ["/api/fit", "/api/infer", "/api/models", "/api/gpus", "/api/explain", "/api/nope", "/static/x",
             "/static/" + "a" * 400, "/docs", "/openapi.json", "/api/cli", "/" + "%" * 10]
    params = ["model", "gpu", "num_gpus", "batch", "context", "engine", "fits", "top", "query", "term", "command",
              "weights", "gpu_memory", "json", "x" * 50]
    for _ in range(100):
        q = "&".join(f"{quote(rng.choice(params))}={quote(rng.choice(NASTY))}" for _ in range(rng.randint(0, 4)))
        url = server + rng.choice(paths) + ("?" + q if q else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        assert status in (200, 400, 403, 404, 405, 413), (url, status, body[:200])
        assert b"Traceback" not in body
        if body.startswith(b"{"):
            _strict_json(body)
