"""gpt-oss's expert bias and clamped activation under Megatron-Core (issue 18): without Transformer Engine's op fuser,
TEGroupedMLP adds each local expert's output bias times its routing probability in a Python loop and clamps the
activation's halves with PyTorch ops (megatron/core/transformer/moe/experts.py `_apply_bias`,
fusions/fused_bias_geglu.py `weighted_bias_quick_geglu_impl` @core_v0.17.0); --use-transformer-engine-op-fuser
runs both inside the fused grouped-MLP kernels."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.errors import InvalidArgument
from gpuwise.estimate import step_time as st
from gpuwise.estimate.kernels import memory_s
from gpuwise.estimate.layer_ops import MEGATRON_EXPERT_BIAS_BYTES, MEGATRON_GLU_CLAMP_BYTES

KW = dict(gpu="h100-sxm", num_gpus=8, ep=8, seq=4096, global_batch=8, micro_batch=1, zero=1, framework="megatron")


def _block(monkeypatch, model: str, **kw):
    seen = []
    real = st._time_block

    def spy(*a, **k):
        bt = real(*a, **k)
        seen.append(bt)
        return bt

    st._CACHE.clear()
    monkeypatch.setattr(st, "_time_block", spy)
    gpuwise.train(model, **{**KW, **kw})
    st._CACHE.clear()
    return seen[0]


def test_the_unfused_bias_and_clamp_cost_their_counted_bytes_and_kernels(monkeypatch):
    """gpt-oss-120b on 8 H100, EP 8: 16 local experts, 4,096 tokens x top-4 routed copies per rank, hidden and expert
    width 2,880."""
    unfused = _block(monkeypatch, "gpt-oss-120b")
    fused = _block(monkeypatch, "gpt-oss-120b", use_transformer_engine_op_fuser=True)
    h100 = default_profile(get_gpu("h100-sxm"))
    rows, width, local, k = 4096 * 4, 2880, 16, h100.kernel_overhead_s
    fwd = (memory_s(h100, MEGATRON_EXPERT_BIAS_BYTES[0] * rows * width) + (2 * local + 1) * k
           + memory_s(h100, MEGATRON_GLU_CLAMP_BYTES[0] * rows * 2 * width) + 3 * k)
    bwd = (memory_s(h100, MEGATRON_EXPERT_BIAS_BYTES[1] * rows * width) + 4 * local * k
           + memory_s(h100, MEGATRON_GLU_CLAMP_BYTES[1] * rows * 2 * width) + 3 * k)
    assert unfused.forward - fused.forward == pytest.approx(fwd, rel=1e-9)
    assert unfused.backward - fused.backward == pytest.approx(bwd, rel=1e-9)
    assert unfused.expert_forward - fused.expert_forward == pytest.approx(fwd, rel=1e-9)
    assert unfused.expert_dgrad - fused.expert_dgrad == pytest.approx(bwd, rel=1e-9)
    assert unfused.gemm_forward == fused.gemm_forward
    assert 0.8e-3 < fwd + bwd < 2e-3  # about 3.5 GB per layer and micro-batch at H100's stream rate


def test_experts_without_bias_or_clamp_and_other_frameworks_pay_nothing(monkeypatch):
    assert _block(monkeypatch, "qwen3-30b-a3b").forward == _block(
        monkeypatch, "qwen3-30b-a3b", use_transformer_engine_op_fuser=True).forward
    with pytest.raises(InvalidArgument, match="needs --framework megatron"):
        gpuwise.train("gpt-oss-120b", **{**KW, "framework": "torchtitan"}, use_transformer_engine_op_fuser=True)


def test_the_op_fuser_makes_the_step_faster_and_the_recipe_says_so():
    slow = gpuwise.train("gpt-oss-120b", **KW).perf.step.step_time_s
    fast = gpuwise.train("gpt-oss-120b", **KW, use_transformer_engine_op_fuser=True).perf.step.step_time_s
    assert fast < slow
    from gpuwise.plan.recipe import recipes

    for fuser in (False, True):
        plan = gpuwise.plan("gpt-oss-20b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=64,
                            framework="megatron", use_transformer_engine_op_fuser=fuser)
        assert plan.plans[0].train_options(plan.request)["use_transformer_engine_op_fuser"] is fuser
        assert ("--use-transformer-engine-op-fuser" in recipes(plan, plan.plans[0])["megatron.args"]) is fuser
