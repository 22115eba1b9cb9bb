"""torchao's float8 recipe and torchtitan's tensor parallelism (issue 18): under the tensorwise recipe torchtitan
(until 2026-04-27) swapped its TP styles for torchao's float8 ones, which cast a sharded activation (and, in the
backward, the gradient bound for an all-gather) to fp8 before gathering it; the reduce-scatters of partial sums stay
16-bit. Rowwise recipes, torchtitan's default and only float8 since, keep the plain 16-bit styles."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.estimate.comm import topology
from gpuwise.catalog.gpus import get_gpu

KW = dict(gpu="h100-sxm", num_gpus=64, tp=8, seq=8192, global_batch=64, micro_batch=1, framework="torchtitan",
          compile=True, ac="none")


def _tp_comm(**kw) -> float:
    return gpuwise.train("llama-3.1-70b", **{**KW, **kw}).perf.step.breakdown["tp_comm"]


def test_tensorwise_gathers_in_fp8_and_rowwise_does_not():
    bf16 = _tp_comm(precision="bf16")
    tensorwise = _tp_comm(precision="fp8", float8_recipe="tensorwise")
    assert _tp_comm(precision="fp8") == bf16  # torchtitan's default today: rowwise
    assert _tp_comm(precision="fp8", float8_recipe="rowwise") == bf16
    assert _tp_comm(precision="fp8", float8_recipe="rowwise_with_gw_hp") == bf16
    # every collective pair: a 16-bit reduce-scatter and an fp8 all-gather of the same activation (nccl-tests'
    # factors), against a 16-bit all-reduce's worth (the pair's bytes) without the recipe
    topo = topology(get_gpu("h100-sxm"), num_gpus=64)
    tokens, h = 8192, 8192
    pair_16 = topo.collective_s("all_reduce", tokens * h * 2, 8)
    pair_8 = topo.collective_s("reduce_scatter", tokens * h * 2, 8) + topo.collective_s("all_gather", tokens * h, 8)
    assert tensorwise / bf16 == pytest.approx(pair_8 / pair_16, rel=1e-9)
    assert 0.7 < tensorwise / bf16 < 0.8  # three quarters of the bytes, two latencies


def test_an_moe_layers_expert_part_keeps_16_bit_pairs():
    """torchtitan's MoE TP (PrepareModuleInputOutput around the experts) never used the float8 styles: in a MoE layer
    only the attention part's pair gathers fp8."""
    kw = dict(KW, num_gpus=16, tp=4, global_batch=16, seq=4096)

    def tp(precision, **extra):
        return gpuwise.train("qwen3-30b-a3b", precision=precision, **{**kw, **extra}).perf.step.breakdown["tp_comm"]

    bf16, tensorwise = tp("bf16"), tp("fp8", float8_recipe="tensorwise")
    topo = topology(get_gpu("h100-sxm"), num_gpus=16)
    tokens, h = 4096, 2048
    pair_16 = topo.collective_s("all_reduce", tokens * h * 2, 4)
    pair_8 = topo.collective_s("reduce_scatter", tokens * h * 2, 4) + topo.collective_s("all_gather", tokens * h, 4)
    assert tensorwise / bf16 == pytest.approx((pair_8 + pair_16) / (2 * pair_16), rel=1e-9)


def test_transformer_engines_tp_collectives_stay_16_bit():
    kw = dict(KW, framework="megatron", num_gpus=64)
    kw.pop("ac"), kw.pop("compile")
    assert (gpuwise.train("llama-3.1-70b", precision="fp8", **kw).perf.step.breakdown["tp_comm"]
            == gpuwise.train("llama-3.1-70b", precision="bf16", **kw).perf.step.breakdown["tp_comm"])


def test_the_recipe_is_refused_where_it_cannot_apply():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="torchao's float8 recipe"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", precision="bf16", float8_recipe="rowwise")
    with pytest.raises(gpuwise.errors.InvalidArgument, match="torchao's float8 recipe"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", precision="fp8", framework="megatron", float8_recipe="rowwise")
    for recipe in ("rowwise", None):  # torchtitan's default is rowwise: fp8 weight gathers need tensorwise
        with pytest.raises(gpuwise.errors.InvalidArgument, match="tensorwise recipe only"):
            gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, precision="fp8", framework="torchtitan",
                          float8_recipe=recipe, fp8_param_gather=True)
    gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, precision="fp8", framework="torchtitan",
                  float8_recipe="tensorwise", fp8_param_gather=True)
    gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, precision="fp8", framework="fsdp",
                  fp8_param_gather=True)  # torchao's own default recipe is tensorwise


def test_the_json_names_the_recipe(capsys):
    import json

    from gpuwise.cli.main import main

    def recipe(*argv):
        assert main(["train", "llama-3.1-8b", "--gpu", "h100-sxm", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["float8_recipe"]

    assert recipe("--num-gpus", "8", "--precision", "fp8", "--framework", "torchtitan") == "rowwise"
    assert recipe("--num-gpus", "8", "--precision", "fp8", "--framework", "fsdp") == "tensorwise"
    assert recipe("--num-gpus", "8", "--precision", "fp8", "--framework", "torchtitan", "--float8-recipe",
                  "tensorwise") == "tensorwise"
    assert recipe("--precision", "bf16") is None
    assert recipe("--precision", "fp8", "--framework", "megatron") is None  # Transformer Engine's fp8
