"""`gpuwise plan`: every returned layout fits by the memory model, the best is the fastest evaluated, known
layouts are found, bad input is one line and exit status 2."""

from __future__ import annotations

import json

import pytest

import gpuwise
from gpuwise.cli import main


def _check_fits(result, plans):
    for p in plans:
        lay = p.layout
        r = gpuwise.train(result.request.model, gpu=result.request.gpu, num_gpus=lay.num_gpus, seq=result.request.seq,
                          global_batch=result.request.global_batch, micro_batch=p.micro_batch, tp=lay.tp, pp=lay.pp,
                          vpp=lay.vpp, cp=lay.cp, ep=lay.ep, sp=lay.sp, zero=1, recompute=p.recompute,
                          pp_first_layers=lay.pp_first_layers, pp_last_layers=lay.pp_last_layers,
                          framework="megatron")
        assert r.memory.total == pytest.approx(p.memory_bytes)
        assert r.memory.total <= result.request.gpu.memory_bytes
        assert r.perf.step.step_time_s == pytest.approx(p.step_time_s)


def test_plans_fit_and_are_ranked_by_step_time():
    r = gpuwise.plan("llama-3.1-70b", gpu="h100-sxm", num_gpus=64, seq=8192, global_batch=128, top=10_000)
    assert r.feasible == len(r.plans) > 10
    times = [p.step_time_s for p in r.plans]
    assert times == sorted(times)
    _check_fits(r, r.plans[:3] + r.plans[-2:])
    assert "shorter than the runner-up" in r.why


def test_fixing_the_llama3_layout_gives_a_feasible_plan():
    r = gpuwise.plan("llama-3.1-405b", gpu="h100-sxm", num_gpus=16384, seq=8192, global_batch=2048, tp=8, pp=16, cp=1)
    assert r.plans, r.why
    best = r.plans[0].layout
    assert (best.tp, best.pp, best.cp, best.dp) == (8, 16, 1, 128)
    assert (best.pp_first_layers, best.pp_last_layers) == (7, 7)


def test_memory_objective_ranks_by_memory():
    r = gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=32, objective="memory",
                     top=1000)
    mems = [p.memory_bytes for p in r.plans]
    assert mems == sorted(mems)


def test_nothing_fits_is_said_plainly():
    r = gpuwise.plan("llama-3.1-405b", gpu="rtx-4090", num_gpus=2, seq=4096, global_batch=2)
    assert r.plans == () and "no layout fits" in r.why


def test_plan_json(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "16", "--seq", "4096", "--global-batch", "64",
                 "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["plans"]) == 3 and doc["evaluated"] >= doc["feasible"] >= 3
    assert {"tp", "pp", "cp", "dp", "micro_batch", "recompute", "step_time_s", "mfu", "memory_per_gpu"} <= set(doc["plans"][0])
    assert doc["search_time_s"] > 0


@pytest.mark.parametrize("argv, msg", [
    (["--reserve-gib", "500"], "--reserve-gib"),
    (["--no-pp", "--pp", "2"], "--no-pp"),
])
def test_bad_plan_input_is_one_line(capsys, argv, msg):
    base = ["plan", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "8", "--seq", "4096", "--global-batch", "32"]
    assert main(base + argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
