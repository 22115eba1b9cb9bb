"""Megatron-Core's recompute modules around MoE layers (issues 17 and 18): `mlp` recomputes dense blocks' MLPs only
(TransformerLayer skips it in MoE layers, `if not isinstance(self.mlp, MoELayer)`, core_v0.12 on), `moe` the whole MoE
layer, `moe_act` the routed experts' activation (TEGroupedMLP's CheckpointWithoutOutput: fc2's input dropped, rebuilt
from the kept fc1 output)."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.errors import InvalidArgument

KW = dict(gpu="h100-sxm", num_gpus=8, ep=8, seq=4096, global_batch=8, micro_batch=1, zero=1, framework="megatron")


def _train(model: str, modules: str | None, **kw):
    extra = {} if modules is None else dict(recompute_granularity="selective", recompute_modules=modules)
    return gpuwise.train(model, **{**KW, **kw}, **extra)


def test_mlp_recomputes_nothing_in_an_all_moe_model():
    """Qwen3-30B-A3B: every block is MoE, so `mlp` leaves its memory and step as `none` does."""
    none, mlp = _train("qwen3-30b-a3b", None), _train("qwen3-30b-a3b", "mlp")
    assert mlp.memory.activations_per_microbatch == none.memory.activations_per_microbatch
    assert mlp.perf.step.breakdown["recompute"] == 0.0
    moe = _train("qwen3-30b-a3b", "moe")
    assert moe.memory.activations_per_microbatch < 0.8 * none.memory.activations_per_microbatch


def test_moe_act_drops_the_activation_output_and_rebuilds_it_on_the_expert_side():
    """fc2's input: top_k x expert width x 2 bytes per token, 48 blocks of Qwen3-30B-A3B (8 experts of 768 per
    token) on one rank's 4,096 tokens; its recompute is a streaming op, charged to the experts."""
    none, act = _train("qwen3-30b-a3b", None), _train("qwen3-30b-a3b", "moe_act")
    saved = 48 * 4096 * 8 * 768 * 2
    assert none.memory.activations_per_microbatch - act.memory.activations_per_microbatch == pytest.approx(saved,
                                                                                                         rel=1e-6)
    rec = act.perf.step.breakdown["recompute"]
    assert 0 < rec < 0.05 * act.perf.step.step_time_s
    both = _train("qwen3-30b-a3b", "moe,moe_act")  # moe already rebuilds the activation: nothing twice
    assert both.perf.step.breakdown["recompute"] == _train("qwen3-30b-a3b", "moe").perf.step.breakdown["recompute"]


def test_moe_act_under_an_fp8_activation_store_keeps_the_16_bit_fc1_output():
    """With --activation-func-fp8-input-store the activation keeps an fp8 copy of the fc1 output; under moe_act the
    checkpoint keeps its 16-bit input instead: 1 byte more per element of 2 x expert width per routed copy."""
    kw = dict(precision="fp8", activation_func_fp8_input_store=True)
    store = _train("qwen3-30b-a3b", "moe_act", **kw).memory.activations_per_microbatch
    plain = _train("qwen3-30b-a3b", "moe_act", precision="fp8").memory.activations_per_microbatch
    assert store == pytest.approx(plain, rel=1e-9)
    # without moe_act the store keeps the fp8 copy: 1 byte less per element of 2 x 768 per routed copy
    kept = _train("qwen3-30b-a3b", "layernorm", **kw).memory.activations_per_microbatch
    bf16 = _train("qwen3-30b-a3b", "layernorm", precision="fp8").memory.activations_per_microbatch
    assert bf16 - kept == pytest.approx(48 * 4096 * 8 * 2 * 768 * 1, rel=1e-6)


def test_moe_act_is_megatrons_and_the_op_fuser_takes_dense_models():
    with pytest.raises(InvalidArgument, match="moe_act is Megatron-Core's"):
        gpuwise.train("qwen3-30b-a3b", **{**KW, "framework": "torchtitan"}, recompute_granularity="selective",
                      recompute_modules="moe_act")
    kw = dict(gpu="h100-sxm", num_gpus=8, tp=8, seq=4096, global_batch=8, framework="megatron")
    dense = gpuwise.train("llama-3.1-8b", use_transformer_engine_op_fuser=True, **kw)
    # a dense model has no grouped MLP for the fuser to take: the same step as without it
    assert dense.perf.step.step_time_s == gpuwise.train("llama-3.1-8b", **kw).perf.step.step_time_s
