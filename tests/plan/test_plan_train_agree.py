"""Property: every plan `gpuwise plan --json` returns is accepted by `gpuwise train` with the same layout flags (the
plan's own `train_command`), and `train` reports the same step time and memory per GPU.

Through the CLI on both sides, as a user checks a plan: the planner and `train` must evaluate one job the same way
(before the training-job object they disagreed on which TP degrees a model allows: gemma-2b's single KV head)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuwise.cli import main

MLA = str(Path(__file__).parents[1] / "fixtures" / "configs" / "deepseek-v2-lite.json")
MODELS = {
    "dense": "llama-3.2-1b",
    "gqa-one-kv-head": "gemma-2b",  # MQA: TP may not split its single key/value head
    "moe": "qwen1.5-moe-a2.7b",
    "mla-moe": MLA,  # DeepSeek-V2-Lite: latent KV attention, shared + routed experts
}


def _run(argv: list[str], capsys) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b))


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(MODELS)), gpu=st.sampled_from(["h100-sxm", "a100-sxm-80gb", "l40s"]),
       num_gpus=st.sampled_from([2, 8, 16, 64]), seq=st.sampled_from([2048, 4096, 8192]),
       batch=st.sampled_from([16, 64, 256]),
       framework=st.sampled_from(["megatron", "torchtitan", "fsdp", "deepspeed"]),
       precision=st.sampled_from(["bf16", "fp8"]), compiled=st.booleans())
def test_every_plan_runs_in_train_with_the_same_step_and_memory(kind, gpu, num_gpus, seq, batch, framework,
                                                                 precision, compiled, capsys):
    if precision == "fp8" and gpu == "a100-sxm-80gb":
        precision = "bf16"  # no fp8 tensor cores
    compile_flag = ["--compile"] if compiled and framework in ("torchtitan", "fsdp") else []
    doc = _run(["plan", MODELS[kind], "--gpu", gpu, "--num-gpus", str(num_gpus), "--seq", str(seq),
                "--global-batch", str(batch), "--framework", framework, "--precision", precision, "--top", "4",
                *compile_flag, "--json"], capsys)
    assume(doc["plans"])  # a job no layout fits (or splits) says so instead; those are other tests'
    for p in doc["plans"]:
        argv = shlex.split(p["train_command"])
        assert argv[:2] == ["gpuwise", "train"]
        got = _run([*argv[1:], "--json"], capsys)
        assert got["layout"]["tp"] == p["tp"] and got["layout"]["pp"] == p["pp"] and got["layout"]["cp"] == p["cp"]
        assert got["layout"]["ep"] == p["ep"] and got["layout"]["dp"] == p["dp"]
        assert got["micro_batch"] == p["micro_batch"] and got["recompute"] == p["recompute"]
        assert _close(got["step_time_s"], p["step_time_s"]), (p["train_command"], got["step_time_s"], p["step_time_s"])
        assert _close(got["memory_per_gpu"]["total"], p["memory_per_gpu"]), p["train_command"]
        assert got["fits"]


def test_gemma_2b_plans_never_split_its_single_kv_head(capsys):
    # The drift this property guards against: plan proposed TP 2/4/8 for an MQA model that train refuses.
    for framework in ("megatron", "torchtitan"):
        doc = _run(["plan", "gemma-2b", "--gpu", "h100-sxm", "--num-gpus", "8", "--seq", "4096", "--global-batch",
                    "64", "--framework", framework, "--top", "1000", "--json"], capsys)
        assert doc["plans"] and {p["tp"] for p in doc["plans"]} == {1}


@pytest.mark.parametrize("tp", [2, 4])
def test_train_refuses_tp_that_splits_the_kv_head(tp, capsys):
    assert main(["train", "gemma-2b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", str(tp)]) == 2
    assert "key/value heads (1)" in capsys.readouterr().err
