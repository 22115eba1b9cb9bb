"""Each rule fires past its threshold, with its evidence, and abstains below it or when an input is unknown."""

from __future__ import annotations

import pytest

from gpuwise.measure import rules
from gpuwise.measure.rules import RuleContext, findings
from gpuwise.measure.tracker import TrackerSummary

H100_BF16, H100_FP32, H100_BW = 989.5e12, 67e12, 3.35e12


def summary(**kw) -> TrackerSummary:
    base = dict(steps=10, step_time_mean_s=1.0, data_wait_mean_s=0.0, data_wait_share=0.0, mfu=0.45,
                peak_flops_per_gpu=H100_BF16)
    return TrackerSummary(**{**base, **kw})


def ids(s: TrackerSummary, ctx: RuleContext | None = None) -> list[str]:
    return [f.id for f in findings(s, ctx)]


def test_nothing_fires_on_a_healthy_run_or_with_too_few_steps() -> None:
    assert ids(summary()) == []
    assert ids(summary(steps=2, data_wait_share=0.9, mfu=0.01)) == []


def test_input_bound() -> None:
    assert ids(summary(data_wait_share=rules.INPUT_BOUND_SHARE)) == []
    assert ids(summary(data_wait_share=None)) == []
    s = summary(data_wait_share=0.30, data_wait_mean_s=0.3, gpu_utilization_pct_mean=55.0)
    (f,) = findings(s)
    assert f.id == "input-bound" and f.evidence["data_wait_share"] == 0.3
    assert "busy only 55%" in f.title
    for knob in ("num_workers", "pin_memory=True", "prefetch_factor", "persistent_workers=True", "offline"):
        assert knob in f.fix


def test_small_batch_uses_the_ridge_point() -> None:
    ctx = RuleContext(precision="bf16", memory_bandwidth_bytes_per_s=H100_BW, tokens_per_microbatch_per_gpu=128)
    (f,) = findings(summary(), ctx)
    # bf16: intensity 2m/e = m FLOP/byte; ridge 989.5e12 / 3.35e12 = 295: 128 tokens is memory-bound
    assert f.id == "small-batch"
    assert f.evidence["ridge_flops_per_byte"] == pytest.approx(295.4, abs=0.1)
    assert f.evidence["min_tokens_per_microbatch"] == 295
    assert f.evidence["gemm_intensity_flops_per_byte"] == 128
    assert ids(summary(), RuleContext(precision="bf16", memory_bandwidth_bytes_per_s=H100_BW,
                                      tokens_per_microbatch_per_gpu=4096)) == []
    # fp8 operands are 1 byte: 2m FLOP/byte, so 148 tokens reach the ridge
    assert ids(summary(), RuleContext(precision="fp8", memory_bandwidth_bytes_per_s=H100_BW,
                                      tokens_per_microbatch_per_gpu=160)) == []
    for missing in (dict(memory_bandwidth_bytes_per_s=None), dict(precision=None),
                    dict(tokens_per_microbatch_per_gpu=None)):
        base = dict(precision="bf16", memory_bandwidth_bytes_per_s=H100_BW, tokens_per_microbatch_per_gpu=128)
        assert ids(summary(), RuleContext(**{**base, **missing})) == []
    assert ids(summary(peak_flops_per_gpu=None, mfu=None), ctx) == []


def test_no_tensor_cores() -> None:
    ctx = RuleContext(precision="fp32", float32_matmul_precision="highest", fp32_peak_flops_per_gpu=H100_FP32,
                      bf16_peak_flops_per_gpu=H100_BF16)
    (f,) = findings(summary(), ctx)
    assert f.id == "no-tensor-cores" and f.evidence["bf16_over_fp32_peak"] == pytest.approx(14.8)
    assert "torch.set_float32_matmul_precision('high')" in f.fix and "bfloat16" in f.fix
    for other in (dict(float32_matmul_precision="high"), dict(precision="bf16"), dict(float32_matmul_precision=None),
                  dict(precision=None)):
        assert ids(summary(), RuleContext(**{**dict(precision="fp32", float32_matmul_precision="highest"),
                                             **other})) == []


def test_memory_headroom() -> None:
    cap = 80 * 2**30
    (f,) = findings(summary(memory_reserved_peak_bytes=20 * 2**30, memory_capacity_bytes=cap),
                    RuleContext(recompute="full", world_size=8))
    assert f.id == "memory-headroom" and f.evidence["memory_used_share"] == 0.25
    assert "micro-batch" in f.fix and "recompute less" in f.fix and "shard less" in f.fix
    assert ids(summary(memory_reserved_peak_bytes=60 * 2**30, memory_capacity_bytes=cap)) == []
    assert ids(summary(memory_reserved_peak_bytes=None, memory_capacity_bytes=cap)) == []
    assert ids(summary(memory_reserved_peak_bytes=1, memory_capacity_bytes=None)) == []


def test_communication_bound() -> None:
    ctx = RuleContext(world_size=16, predicted_step_time_s=1.0, predicted_comm_s=0.3)
    s = summary(step_time_mean_s=1.5, data_wait_mean_s=0.05, gpu_utilization_pct_mean=95.0)
    (f,) = findings(s, ctx)
    # predicted compute 0.7 s; unexplained 1.5 - 0.05 - 0.7 = 0.75 s = 50% of the step
    assert f.id == "communication-bound" and f.evidence["unexplained_share"] == pytest.approx(0.5)
    assert "gpuwise bench comm" in f.fix
    assert ids(summary(step_time_mean_s=0.8, data_wait_mean_s=0.0, gpu_utilization_pct_mean=95.0), ctx) == []
    assert ids(summary(step_time_mean_s=1.5, data_wait_mean_s=0.05, gpu_utilization_pct_mean=40.0), ctx) == []
    assert ids(s, RuleContext(world_size=1, predicted_step_time_s=1.0, predicted_comm_s=0.3)) == []
    assert ids(s, RuleContext(world_size=16, predicted_step_time_s=1.0, predicted_comm_s=0.01)) == []
    assert ids(s, RuleContext(world_size=16)) == []  # no prediction: abstain
    assert ids(summary(step_time_mean_s=1.5, data_wait_mean_s=0.05), ctx) == []  # no NVML: abstain


def test_low_mfu_points_at_the_other_findings() -> None:
    (f,) = findings(summary(mfu=0.12))
    assert f.id == "low-mfu" and "torch.profiler" in f.fix
    fs = findings(summary(mfu=0.12, data_wait_share=0.4))
    assert [x.id for x in fs] == ["input-bound", "low-mfu"] and "input-bound" in fs[-1].fix
    assert ids(summary(mfu=None)) == [] and ids(summary(mfu=0.31)) == []


def test_findings_serialize() -> None:
    (f,) = findings(summary(mfu=0.12))
    assert set(f.to_dict()) == {"id", "title", "evidence", "threshold", "fix"}
