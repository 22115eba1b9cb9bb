"""Findings from a tracker summary: what is holding the training loop back, with evidence, threshold and fix.

Pure functions, no torch: `findings(summary, context)` reads plain numbers from the summary (duck typing: the
attributes of `tracker.TrackerSummary` listed under `SummaryLike`) and the facts of the job in `RuleContext`.
Each rule abstains (returns None) when an input it needs is unknown: a finding is never based on a guess.
Every threshold is a named constant below with its justification; every finding carries the measured numbers
(units in the keys), the threshold it crossed, and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..estimate.flops import gemm_operand_bytes

# --- thresholds (one place each, with the reason) --------------------------------------------------------------

MIN_STEPS = 3
"""Fewer measured steps than this and a mean is one or two samples of noise: every rule abstains."""

INPUT_BOUND_SHARE = 0.10
"""Data wait above 10% of the step: the loader alone then costs more throughput than most remaining tuning knobs
would win (a judgement, not a measurement: a loader that keeps up with prefetching leaves a wait near 0)."""

LOW_UTILIZATION_PCT = 80.0
"""NVML utilization below this during an input-bound run corroborates it (an idle GPU between steps); above
`BUSY_UTILIZATION_PCT` a slow step is not a starved GPU (nvidia-smi's GPU-Util: any kernel running)."""

BUSY_UTILIZATION_PCT = 80.0
"""See LOW_UTILIZATION_PCT: NCCL kernels count as busy, so a communication-bound GPU looks busy."""

SMALL_BATCH_FACTOR = 1.0
"""Fire below the ridge point itself: tokens per micro-batch per GPU < ridge x bytes/element / 2 means the weight
GEMMs sit left of the ridge (memory-bound) on the roofline (REFERENCE.md section 2: ridge = peak / bandwidth)."""

TF32_PRECISIONS = ("high", "medium")
"""torch.get_float32_matmul_precision() values that let fp32 matmuls use TF32 (or bf16) tensor cores."""

MEMORY_HEADROOM_USED = 0.50
"""Peak reserved below half the GPU: at least as much memory again is free for a larger micro-batch or less
recompute (both raise throughput); above it the gain shrinks and fragmentation risk grows."""

COMM_UNEXPLAINED_SHARE = 0.25
"""A quarter of the measured step explained neither by predicted compute nor by data wait: beyond the step-time
model's error on published runs (docs/performance.md, Validation: median |error| 7%, worst 20%)."""

COMM_PREDICTED_MIN_SHARE = 0.10
"""The prediction must itself expect communication to matter (exposed comm >= 10% of the predicted step),
otherwise the unexplained time has no reason to be communication."""

LOW_MFU = 0.30
"""REFERENCE.md section 1: 30%+ MFU is good, 40%+ excellent (Llama 3 405B: high 30s to low 40s)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    id: str
    """Stable identifier: input-bound, small-batch, no-tensor-cores, memory-headroom, communication-bound, low-mfu."""
    title: str
    evidence: dict[str, Any]
    """Metric -> value, units in the metric names (`_s`, `_bytes`, `_share` as a fraction, `_pct` in percent)."""
    threshold: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "evidence": dict(self.evidence), "threshold": self.threshold,
                "fix": self.fix}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleContext:
    """Facts about the job that the measurement cannot see; None = unknown (rules needing it abstain)."""

    world_size: int = 1
    precision: str | None = None
    """Training precision: fp32, bf16, fp16, bf16-pure, fp8 (gpuwise's names)."""
    float32_matmul_precision: str | None = None
    """torch.get_float32_matmul_precision(): 'highest' (no TF32), 'high' or 'medium'."""
    recompute: str | None = None
    """none, selective or full (activation checkpointing)."""
    gpu_name: str | None = None
    memory_bandwidth_bytes_per_s: float | None = None
    """HBM bandwidth of one GPU (datasheet), for the ridge point."""
    fp32_peak_flops_per_gpu: float | None = None
    """Dense fp32 (CUDA-core, non-tensor) peak."""
    bf16_peak_flops_per_gpu: float | None = None
    """Dense bf16 tensor-core peak."""
    tokens_per_microbatch_per_gpu: int | None = None
    """Tokens in one forward/backward on one GPU (micro-batch x sequence): the m of the weight GEMMs."""
    predicted_step_time_s: float | None = None
    """gpuwise's predicted step time for the job's layout (`gpuwise train`)."""
    predicted_comm_s: float | None = None
    """Exposed communication in that prediction (tp/cp/ep/pp/dp comm of the breakdown)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


class SummaryLike(Protocol):
    """The attributes of a tracker summary that the rules read (None = unknown)."""

    steps: int
    step_time_mean_s: float | None
    data_wait_share: float | None
    data_wait_mean_s: float | None
    mfu: float | None
    peak_flops_per_gpu: float | None
    memory_reserved_peak_bytes: int | None
    memory_capacity_bytes: int | None
    gpu_utilization_pct_mean: float | None


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def input_bound(s: SummaryLike, ctx: RuleContext) -> Finding | None:
    share = s.data_wait_share
    if share is None or share <= INPUT_BOUND_SHARE:
        return None
    util = s.gpu_utilization_pct_mean
    evidence = {"data_wait_share": round(share, 4), "data_wait_mean_s": s.data_wait_mean_s,
                "step_time_mean_s": s.step_time_mean_s, "gpu_utilization_pct_mean": util}
    title = f"input-bound: {_pct(share)} of each step waits for the data loader"
    if util is not None and util < LOW_UTILIZATION_PCT:
        title += f" (GPU busy only {util:.0f}% of the time)"
    return Finding(
        id="input-bound", title=title, evidence=evidence,
        threshold=f"data wait share > {_pct(INPUT_BOUND_SHARE)} of step time",
        fix="feed the GPU ahead of time: DataLoader(num_workers=<CPU cores per GPU, e.g. 4-8>, pin_memory=True, "
            "prefetch_factor=2-4, persistent_workers=True); tokenize/decode offline (pre-tokenized memory-mapped "
            "shards) instead of in __getitem__; copy with .to(device, non_blocking=True) from pinned memory")


def small_batch(s: SummaryLike, ctx: RuleContext) -> Finding | None:
    m = ctx.tokens_per_microbatch_per_gpu
    peak, bw = s.peak_flops_per_gpu, ctx.memory_bandwidth_bytes_per_s
    e = gemm_operand_bytes(ctx.precision) if ctx.precision is not None else None
    if m is None or not peak or not bw or e is None:
        return None
    ridge = peak / bw
    # A weight GEMM (m x k)(k x n) with k, n >> m does 2mkn FLOPs on ~e*k*n bytes of weights: 2m/e FLOP/byte,
    # below the ridge (memory-bound) when m < ridge * e / 2.
    min_tokens = SMALL_BATCH_FACTOR * ridge * e / 2
    if m >= min_tokens:
        return None
    return Finding(
        id="small-batch",
        title=f"small batch: {m} tokens per micro-batch per GPU keeps the weight GEMMs memory-bound",
        evidence={"tokens_per_microbatch_per_gpu": m, "gemm_intensity_flops_per_byte": round(2 * m / e, 1),
                  "ridge_flops_per_byte": round(ridge, 1), "min_tokens_per_microbatch": round(min_tokens)},
        threshold=f"tokens per micro-batch per GPU < ridge x bytes per element / 2 = {min_tokens:.0f} "
                  f"(peak {peak / 1e12:.0f} TFLOP/s / {bw / 1e12:.2f} TB/s, {e:g}-byte operands)",
        fix="raise the micro-batch (or sequence length) per GPU to at least that many tokens; gradient accumulation "
            "does not help (each micro-batch is still small); if memory is short, free it with activation "
            "checkpointing or sharding (FSDP/ZeRO) and spend it on the micro-batch")


def no_tensor_cores(s: SummaryLike, ctx: RuleContext) -> Finding | None:
    if ctx.precision != "fp32" or ctx.float32_matmul_precision is None:
        return None
    if ctx.float32_matmul_precision in TF32_PRECISIONS:
        return None
    fp32, bf16 = ctx.fp32_peak_flops_per_gpu, ctx.bf16_peak_flops_per_gpu
    evidence: dict[str, Any] = {"precision": ctx.precision, "float32_matmul_precision": ctx.float32_matmul_precision,
                                "fp32_peak_flops_per_gpu": fp32, "bf16_peak_flops_per_gpu": bf16}
    title = "fp32 matmuls on the CUDA cores: the tensor cores are idle"
    if fp32 and bf16:
        evidence["bf16_over_fp32_peak"] = round(bf16 / fp32, 1)
        title += f" (bf16 tensor-core peak is {bf16 / fp32:.0f}x the fp32 peak)"
    return Finding(
        id="no-tensor-cores", title=title, evidence=evidence,
        threshold="precision fp32 and torch.get_float32_matmul_precision() == 'highest' (TF32 off)",
        fix="train in bf16 mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss "
            "(HF TrainingArguments(bf16=True), Lightning Trainer(precision='bf16-mixed')); or keep fp32 and allow "
            "TF32 tensor cores with torch.set_float32_matmul_precision('high')")


def memory_headroom(s: SummaryLike, ctx: RuleContext) -> Finding | None:
    used, cap = s.memory_reserved_peak_bytes, s.memory_capacity_bytes
    if used is None or not cap:
        return None
    share = used / cap
    if share >= MEMORY_HEADROOM_USED:
        return None
    fixes = ["raise the micro-batch (fewer gradient-accumulation steps for the same global batch)"]
    if ctx.recompute not in (None, "none"):
        fixes.append(f"recompute less (recompute is '{ctx.recompute}': try selective or none)")
    if ctx.world_size > 1:
        fixes.append("shard less (DDP or ZeRO-1/2 instead of full FSDP/ZeRO-3) or use fewer GPUs")
    return Finding(
        id="memory-headroom",
        title=f"memory headroom unused: peak reserved is {_pct(share)} of the GPU",
        evidence={"memory_reserved_peak_bytes": used, "memory_capacity_bytes": cap,
                  "memory_used_share": round(share, 4)},
        threshold=f"peak reserved < {_pct(MEMORY_HEADROOM_USED)} of GPU memory",
        fix="; ".join(fixes) + "; check with `gpuwise train ... --micro-batch N` that the new setting fits")


def communication_bound(s: SummaryLike, ctx: RuleContext) -> Finding | None:
    # Honest only with a compute prediction to subtract and a busy GPU: the measured step minus the predicted
    # compute minus the measured data wait is time nothing else explains; NCCL kernels keep NVML's utilization
    # high, while host overhead or a starved loop would let it drop.
    t, comm, pred = s.step_time_mean_s, ctx.predicted_comm_s, ctx.predicted_step_time_s
    util, wait = s.gpu_utilization_pct_mean, s.data_wait_mean_s
    if ctx.world_size <= 1 or t is None or comm is None or pred is None or util is None or wait is None or t <= 0:
        return None
    compute = pred - comm
    unexplained = t - wait - compute
    if (comm < COMM_PREDICTED_MIN_SHARE * pred or unexplained < COMM_UNEXPLAINED_SHARE * t
            or util < BUSY_UTILIZATION_PCT):
        return None
    return Finding(
        id="communication-bound",
        title=f"communication-bound (likely): {_pct(unexplained / t)} of the step is neither predicted compute nor "
              f"data wait, on a busy GPU, and the layout's prediction exposes {_pct(comm / pred)} communication",
        evidence={"step_time_mean_s": t, "predicted_compute_s": compute, "predicted_comm_s": comm,
                  "data_wait_mean_s": wait, "unexplained_share": round(unexplained / t, 4),
                  "gpu_utilization_pct_mean": util, "world_size": ctx.world_size},
        threshold=f"unexplained share >= {_pct(COMM_UNEXPLAINED_SHARE)} of the step, predicted exposed comm >= "
                  f"{_pct(COMM_PREDICTED_MIN_SHARE)} of the predicted step, "
                  f"GPU utilization >= {BUSY_UTILIZATION_PCT:.0f}%",
        fix="measure the network with `gpuwise bench comm` (NCCL_DEBUG=INFO shows whether NVLink/InfiniBand is used); "
            "overlap communication (FSDP forward/backward prefetch, DDP bucket_cap_mb), keep sharding inside a node "
            "(HSDP), reduce syncs per token (gradient accumulation with no_sync, a larger micro-batch), and compare "
            "layouts with `gpuwise plan`")


def low_mfu(s: SummaryLike, ctx: RuleContext, others: list[Finding]) -> Finding | None:
    if s.mfu is None or s.mfu >= LOW_MFU:
        return None
    causes = ", ".join(f.id for f in others)
    fix = (f"start with the other findings ({causes})" if causes else
           "no rule found a cause: profile a few steps with torch.profiler (kernel time vs gaps) and compare the "
           "step with `gpuwise train` for the same layout")
    return Finding(id="low-mfu", title=f"low MFU: {100 * s.mfu:.1f}%", evidence={"mfu": round(s.mfu, 4),
                   "peak_flops_per_gpu": s.peak_flops_per_gpu, "step_time_mean_s": s.step_time_mean_s},
                   threshold=f"MFU < {_pct(LOW_MFU)} (30%+ is good, 40%+ excellent)", fix=fix)


RULES = (input_bound, small_batch, no_tensor_cores, memory_headroom, communication_bound)
"""Cause rules, in the order their findings are listed; `low_mfu` comes last and points at them."""


def findings(summary: SummaryLike, context: RuleContext | None = None) -> list[Finding]:
    """Every finding that fires on this summary (none with fewer than MIN_STEPS steps)."""
    ctx = context if context is not None else RuleContext()
    if summary.steps < MIN_STEPS:
        return []
    out = [f for rule in RULES if (f := rule(summary, ctx)) is not None]
    low = low_mfu(summary, ctx, out)
    return out + [low] if low is not None else out
