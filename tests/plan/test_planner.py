"""`gpuwise plan`: every returned layout fits by the memory model, the best is the fastest evaluated, known
layouts are found, bad input is one line and exit status 2."""

from __future__ import annotations

import json
import math

import pytest

import gpuwise
from gpuwise.cli import main
from gpuwise.plan.planner import describe

TRAIN_SHARDING = {"zero1": dict(zero=1), "zero2": dict(zero=2), "zero3": dict(zero=3), "fsdp-full": dict(fsdp="full"),
                  "fsdp-grad-op": dict(fsdp="grad-op"), "hsdp": dict(fsdp="hybrid")}


def _check_fits(result, plans):
    """Each plan's memory and step time are `gpuwise train`'s for the same options, exactly."""
    req = result.request
    for p in plans:
        lay = p.layout
        r = gpuwise.train(req.model, gpu=req.gpu, num_gpus=lay.num_gpus, seq=req.seq, global_batch=req.global_batch,
                          micro_batch=p.micro_batch, tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, ep=lay.ep,
                          etp=lay.etp, sp=lay.sp,
                          shard_group=lay.shard_group, recompute=p.recompute, offload=p.offload,
                          pp_first_layers=lay.pp_first_layers, pp_last_layers=lay.pp_last_layers,
                          framework=req.framework, **TRAIN_SHARDING[lay.sharding])
        assert r.memory.total == p.memory_bytes
        assert r.fits and r.memory.required <= req.gpu.memory_bytes  # the allocator's allowance is headroom
        assert r.perf.step.step_time_s == p.step_time_s


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


def test_deepseek_v3_prime_layer_count_gets_pipeline_plans():
    # 61 layers divide over no pipeline degree but 61: the planner must still try the uneven splits Megatron runs.
    # NVIDIA's DGX Cloud recipe for 1,024 H100 (validation/speed_sources/megatron_nemo.toml) splits them 3 + 14 x 4 + 2,
    # with TP 2 and EP 64 over expert TP 1 (EP folded over the TP ranks too: 64 does not divide dp x cp = 32).
    r = gpuwise.plan("deepseek-v3", gpu="h100-sxm", num_gpus=1024, seq=4096, global_batch=8192, framework="megatron",
                     tp=2, pp=16, ep=64, top=1000)
    assert r.plans, r.why
    best = r.plans[0].layout
    assert (best.pp, best.pp_first_layers, best.pp_last_layers) == (16, 3, 2)
    assert {p.layout.expert_tp for p in r.plans} == {1}  # expert TP 2 cannot fold EP 64 over 32 ranks
    assert "EP 64 (expert TP 1)" in describe(r.plans[0])
    _check_fits(r, r.plans[:1])
    free = gpuwise.plan("deepseek-v3", gpu="h100-sxm", num_gpus=1024, seq=4096, global_batch=8192,
                        framework="megatron", top=50)
    assert any(p.layout.pp > 1 for p in free.plans)
    # the free search is never beaten by the published layout it now contains
    assert free.plans[0].step_time_s <= r.plans[0].step_time_s


@pytest.mark.parametrize("layers", [5, 7, 31, 32, 61, 62, 80, 126])
def test_every_pipeline_split_the_planner_tries_is_a_valid_balanced_one(layers):
    from gpuwise.estimate.pipeline import _stage_layers, pp_splits

    for pp in range(2, layers + 1):
        for first, last in pp_splits(layers, pp):
            stages = _stage_layers(pp, first, last, layers)  # raises on a split Megatron would refuse
            assert sum(stages) == layers and min(stages) >= 1
            middle = max(stages)
            # the ends hold the embedding / head: never more layers than a middle stage, the last no more than the first
            # one
            assert stages[0] <= middle and stages[-1] <= stages[0]
            assert max(stages) - min(stages) < middle
    # whatever the layer count's factors, every degree up to sqrt(2 x layers) has a split (the ends are short by at
    # most pp - 1 layers in all, which two ends absorb while pp <= 2 x the rounded-up share)
    assert all(pp_splits(layers, pp) for pp in range(1, math.isqrt(2 * layers) + 1))


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


def test_hsdp_plans_match_train_and_use_node_sized_groups():
    r = gpuwise.plan("llama-3.1-70b", gpu="h100-sxm", num_gpus=64, seq=8192, global_batch=128, framework="torchtitan",
                     top=10_000, no_offload=True)
    hsdp = [p for p in r.plans if p.layout.sharding == "hsdp"]
    assert hsdp
    for p in hsdp:
        lay = p.layout
        node = max(2, 8 // (lay.tp * lay.pp))  # the data-parallel ranks of one 8-GPU node
        assert lay.shard_group in (node, 2 * node, 4 * node, 8 * node) and lay.shard_group < lay.dp * lay.cp
    assert {p.layout.shard_group for p in hsdp} >= {2, 4, 8}
    _check_fits(r, hsdp[:3] + hsdp[-2:])
    assert "(hsdp, shard group" in describe(hsdp[0])
    assert not any(p.layout.sharding == "hsdp" for p in gpuwise.plan(
        "llama-3.1-70b", gpu="h100-sxm", num_gpus=64, seq=8192, global_batch=128, framework="megatron",
        top=10_000).plans)


@pytest.mark.parametrize("framework", ["fsdp", "deepspeed", "megatron"])
def test_offload_only_where_nothing_fits_on_the_gpu_and_matches_train(framework):
    # 70B on 8 H100: with ~1.1 TB of model states most layouts fit only with offload.
    r = gpuwise.plan("llama-3.1-70b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, framework=framework,
                     top=10_000)
    offloaded = [p for p in r.plans if p.offload]
    assert offloaded
    _check_fits(r, offloaded[:3] + offloaded[-2:])
    for p in offloaded[:3] + offloaded[-2:]:
        lay = p.layout
        assert p.offload in (("optimizer",), ("optimizer", "params"))
        assert "params" not in p.offload or lay.sharding in ("zero3", "fsdp-full", "hsdp")
        assert "offload " + " + ".join(p.offload) in describe(p)
        for rc in ("none", "selective", "full"):  # the objective is time: offload only where no recompute mode fits
            on_gpu = gpuwise.train(r.request.model, gpu=r.request.gpu, num_gpus=8, seq=4096, global_batch=16,
                                   micro_batch=p.micro_batch, tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, sp=lay.sp,
                                   shard_group=lay.shard_group, recompute=rc, pp_first_layers=lay.pp_first_layers,
                                   pp_last_layers=lay.pp_last_layers, framework=framework,
                                   **TRAIN_SHARDING[lay.sharding])
            assert not on_gpu.fits


def test_memory_objective_always_considers_offload():
    r = gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, framework="fsdp",
                     objective="memory", top=10_000)
    assert r.plans[0].offload == ("optimizer", "params")
    _check_fits(r, r.plans[:2])
    plain = gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, framework="fsdp",
                         objective="memory", top=10_000, no_offload=True)
    assert not any(p.offload for p in plain.plans) and plain.evaluated < r.evaluated


@pytest.mark.parametrize("model, num_gpus, framework", [
    ("llama-3.1-70b", 64, "torchtitan"), ("mixtral-8x7b", 32, "deepspeed"), ("llama-3.1-8b", 8, "megatron")])
def test_pruning_never_drops_the_fastest(model, num_gpus, framework):
    # The memory objective prunes nothing: its fastest plan is the best of the whole space. Offload is left out:
    # the planner takes it to cost more than any recompute mode, which the step-time model does not charge yet.
    kw = dict(gpu="h100-sxm", num_gpus=num_gpus, seq=4096, global_batch=2 * num_gpus, framework=framework,
              no_offload=True, top=100_000)
    fastest = gpuwise.plan(model, **kw).plans[0]
    every = gpuwise.plan(model, objective="memory", **kw)
    assert fastest.step_time_s == min(p.step_time_s for p in every.plans)
