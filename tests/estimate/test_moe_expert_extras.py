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
from gpuwise.estimate.kernels import memory_s
from gpuwise.estimate.layer_ops import MEGATRON_EXPERT_BIAS_BYTES, MEGATRON_GLU_CLAMP_BYTES

from _block_spy import first_block  # noqa: E402

KW = dict(gpu="h100-sxm", num_gpus=8, ep=8, seq=4096, global_batch=8, micro_batch=1, zero=1, framework="megatron")


def _block(monkeypatch, model: str, **kw):
    return first_block(monkeypatch, model, **{**KW, **kw})[1]


@pytest.mark.parametrize("dispatcher, probs", [("alltoall", "bf16"), ("flex", "fp32")])
def test_the_unfused_bias_and_clamp_cost_their_counted_bytes_and_kernels(monkeypatch, dispatcher, probs):
    """gpt-oss-120b on 8 H100, EP 8: 16 local experts, 4,096 tokens x top-4 routed copies per rank, hidden and expert
    width 2,880; HybridEP and DeepEP (the flex dispatcher) carry fp32 routing probabilities, the all-to-all bf16."""
    # the kernels, counted op by op from Megatron-Core's code and PyTorch's autograd formulas: bf16 probabilities,
    # forward b * p and the sum per expert, the concatenation; backward grad * p and grad * b and their sums per
    # expert, the split's gradient and the bias's row sums. The bytes are measured (tests/measure,
    # test_megatron_expert_extras_on_h200), at least what the tensors touched: forward b * p (2), the sum (6), the
    # concatenation (4); backward (6 + 6) and the split's (4); fp32: forward 4 + 10 + 8 and the cast back (6),
    # backward the cast's gradient (6), the per-expert cast (6), 12 + 12, the split's (4)
    kernels = {"bf16": ((2, 1), (4, 2)), "fp32": ((2, 2), (5, 3))}
    touched = {"bf16": (2 + 6 + 4, 6 + 6 + 4), "fp32": (4 + 10 + 8 + 6, 6 + 6 + 12 + 12 + 4)}
    assert tuple(k[1:] for k in MEGATRON_EXPERT_BIAS_BYTES[probs]) == kernels[probs]
    assert all(m[0] >= t for m, t in zip(MEGATRON_EXPERT_BIAS_BYTES[probs], touched[probs]))
    # the clamp: three kernels forward (each half, the concatenation), seven and two scalar fills backward; at least
    # each half read and written and the concatenation (8) forward, the masks and `where` (22 / 2) and the chunk's
    # gradient (4) backward
    assert tuple(k for _, k in MEGATRON_GLU_CLAMP_BYTES) == (3, 7 + 2)
    assert all(m >= t for (m, _), t in zip(MEGATRON_GLU_CLAMP_BYTES, (4 + 4, (8 + 14) / 2 + 4)))
    unfused = _block(monkeypatch, "gpt-oss-120b", moe_token_dispatcher=dispatcher)
    fused = _block(monkeypatch, "gpt-oss-120b", moe_token_dispatcher=dispatcher, use_transformer_engine_op_fuser=True)
    h100 = default_profile(get_gpu("h100-sxm"))
    rows, width, local, k = 4096 * 4, 2880, 16, h100.kernel_overhead_s
    want = []
    for i in (0, 1):  # forward, backward
        nbytes, per_expert, more = MEGATRON_EXPERT_BIAS_BYTES[probs][i]
        clamp_bytes, clamp_kernels = MEGATRON_GLU_CLAMP_BYTES[i]
        want.append(memory_s(h100, nbytes * rows * width) + (per_expert * local + more) * k
                    + memory_s(h100, clamp_bytes * rows * 2 * width) + clamp_kernels * k)
    assert unfused.forward - fused.forward == pytest.approx(want[0], rel=1e-9)
    assert unfused.backward - fused.backward == pytest.approx(want[1], rel=1e-9)
    assert unfused.expert_forward - fused.expert_forward == pytest.approx(want[0], rel=1e-9)
    assert unfused.expert_dgrad - fused.expert_dgrad == pytest.approx(want[1], rel=1e-9)
    assert unfused.gemm_forward == fused.gemm_forward
    assert 2e-3 < sum(want) < 5e-3  # 8.0 GB (bf16 probabilities) to 11.1 GB per layer and micro-batch at H100's rate


def test_experts_without_bias_or_clamp_and_other_frameworks_pay_nothing(monkeypatch):
    assert _block(monkeypatch, "qwen3-30b-a3b").forward == _block(
        monkeypatch, "qwen3-30b-a3b", use_transformer_engine_op_fuser=True).forward
    # only Megatron-Core's TEGroupedMLP is charged; other frameworks are not (not modelled there)
    from gpuwise.estimate.job import TrainJob
    assert TrainJob(framework="torchtitan").expert_extras_unfused is None
    assert TrainJob(framework="megatron").expert_extras_unfused == "bf16"
    assert TrainJob(framework="megatron", moe_token_dispatcher="flex").expert_extras_unfused == "fp32"
    with pytest.raises(InvalidArgument, match="needs --framework megatron"):
        gpuwise.train("gpt-oss-120b", **{**KW, "framework": "torchtitan"}, use_transformer_engine_op_fuser=True)


def test_the_fused_grouped_mlp_takes_no_expert_tensor_parallelism():
    """Megatron-Core's _is_fused_impl_supported is False when the experts' TP group is larger than one."""
    kw = {**KW, "num_gpus": 16, "tp": 2}
    with pytest.raises(InvalidArgument, match="expert tensor parallelism"):
        gpuwise.train("gpt-oss-120b", **kw, use_transformer_engine_op_fuser=True)
    assert gpuwise.train("gpt-oss-120b", **kw, etp=1, use_transformer_engine_op_fuser=True).layout.expert_tp == 1
    plan = gpuwise.plan("gpt-oss-20b", gpu="h100-sxm", num_gpus=16, seq=4096, global_batch=64, framework="megatron",
                        use_transformer_engine_op_fuser=True)
    assert plan.plans and all(p.layout.expert_tp == 1 for p in plan.plans)


def test_the_unfused_clamp_keeps_one_more_copy_of_the_fc1_output():
    """The clamps keep their input (the fc1 output) and the fused activation its clamped copy: 2 x 2,880 x 2 bytes
    more per routed copy, four copies per token, in each of a stage's nine layers."""
    kw = {**KW, "num_gpus": 64, "pp": 4, "global_batch": 1280}
    fused = gpuwise.train("gpt-oss-120b", **kw, use_transformer_engine_op_fuser=True).memory
    unfused = gpuwise.train("gpt-oss-120b", **kw).memory
    extra = 9 * 4096 * 4 * 2 * 2880 * 2
    assert unfused.activations_per_microbatch - fused.activations_per_microbatch == pytest.approx(extra, rel=1e-6)


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
