"""What a tracker reports: one record per step, a window of steps aggregated, and the summary (text and JSON).

Split from tracker.py, which measures; this module only holds, aggregates and presents the numbers (no torch, no
clock). MFU/HFU go through `estimate.flops.utilization`, the one formula every MFU in gpuwise uses.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..estimate.flops import utilization
from ..schema import SCHEMA_VERSION
from ..units import GiB
from .rules import Finding, RuleContext

SAMPLER_FIELDS = (("samples", "nvml_samples"), ("duration_s", "nvml_duration_s"),
                  ("mean_utilization_gpu_pct", "gpu_utilization_pct_mean"), ("mean_power_w", "power_w_mean"),
                  ("max_power_w", "power_w_max"), ("energy_j", "energy_j"), ("energy_source", "energy_source"),
                  ("max_temperature_c", "temperature_c_max"), ("mean_sm_clock_mhz", "sm_clock_mhz_mean"),
                  ("max_memory_used_bytes", "gpu_memory_used_bytes_max"))
"""(sampler summary field, tracker summary field): what the NVML sampler's SamplerSummary carries."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One optimizer step as measured (None = unknown)."""

    index: int
    """0-based, counting every step since the tracker was made (also steps that fell out of the history)."""
    step_time_s: float
    """Wall time of the step: its bracket plus the data wait before it."""
    data_wait_s: float
    """Time spent waiting for the data loader that this step consumed."""
    tokens: int | None
    """Tokens of the whole job in this step."""
    tokens_per_s: float | None
    mfu: float | None
    hfu: float | None
    memory_allocated_peak_bytes: int | None = None
    """torch's running peak at the step's end (only with memory_per_step=True)."""
    memory_reserved_peak_bytes: int | None = None
    gpu: Any = None
    """The NVML sampler's summary of this step's window (only with nvml_per_step=True)."""


def window_figures(window: Sequence[StepRecord], *, world_size: int, model_flops_per_step: float | None,
                   hardware_flops_per_step: float | None, peak_flops_per_gpu: float | None) -> dict[str, Any]:
    """The TrackerSummary fields a non-empty window gives: step-time statistics, data wait, tokens and MFU/HFU.
    Rates are totals over the window (total tokens / total time) and MFU/HFU use the mean step time; tokens are
    None when a step has no token count."""
    n = len(window)
    times = [r.step_time_s for r in window]
    total = math.fsum(times)
    mean = total / n
    waits = math.fsum(r.data_wait_s for r in window)
    tokens = [r.tokens for r in window]
    if all(t is not None for t in tokens):
        total_tokens = sum(tokens)
        tokens_per_step = total_tokens / n
        tps = total_tokens / total if total > 0 else None
    else:
        tokens_per_step = tps = None

    def util(flops: float | None) -> float | None:
        return utilization(flops, mean, world_size, peak_flops_per_gpu) if flops is not None else None

    return dict(steps=n, step_time_median_s=statistics.median(times), step_time_mean_s=mean,
                step_time_min_s=min(times), step_time_max_s=max(times), data_wait_mean_s=waits / n,
                data_wait_share=waits / total if total > 0 else None, tokens_per_step=tokens_per_step,
                tokens_per_s=tps, tokens_per_s_per_gpu=tps / world_size if tps is not None else None,
                mfu=util(model_flops_per_step), hfu=util(hardware_flops_per_step))


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "unknown" if x is None else format(x, fmt)


def _dur(s: float | None) -> str:
    if s is None:
        return "unknown"
    return f"{1e3 * s:.1f} ms" if s < 1 else f"{s:.3f} s"


def _gib(b: float | None) -> str:
    return "unknown" if b is None else f"{b / GiB:.2f} GiB"


def _share(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.1f}%"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrackerSummary:
    """A window of steps, aggregated. Rates are totals over the window (total tokens / total time), MFU/HFU use
    the mean step time; None = unknown, never 0."""

    steps: int = 0
    skipped_steps: int = 0
    """Steps before the window (warm-up: compilation, autotuning, allocator growth)."""
    synced: bool = False
    """True when every step ended with torch.cuda.synchronize() (exact per-step times)."""
    step_time_median_s: float | None = None
    step_time_mean_s: float | None = None
    step_time_min_s: float | None = None
    step_time_max_s: float | None = None
    data_wait_mean_s: float | None = None
    data_wait_share: float | None = None
    """Sum of data wait / sum of step time over the window."""
    tokens_per_step: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    model_flops_per_step: float | None = None
    hardware_flops_per_step: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    peak_flops_per_gpu: float | None = None
    """The denominator's peak: dense FLOP/s of one GPU in the GEMM dtype."""
    peak_label: str | None = None
    """What that peak is, e.g. 'NVIDIA H100 80GB HBM3 (h100-sxm) bf16 dense'."""
    world_size: int = 1
    mfu_note: str | None = None
    """Why MFU is unknown, when it is."""
    memory_allocated_peak_bytes: int | None = None
    """torch.cuda.max_memory_allocated(): live tensors at the peak (since start or the last reset)."""
    memory_reserved_peak_bytes: int | None = None
    """torch.cuda.max_memory_reserved(): what the caching allocator held at the peak."""
    memory_predicted_peak_bytes: int | None = None
    """gpuwise's prediction of what the allocator holds (comparable to reserved)."""
    memory_capacity_bytes: int | None = None
    nvml_samples: int | None = None
    nvml_duration_s: float | None = None
    gpu_utilization_pct_mean: float | None = None
    """nvidia-smi's GPU-Util: share of time any kernel ran (not how well)."""
    power_w_mean: float | None = None
    power_w_max: float | None = None
    energy_j: float | None = None
    """Energy of the sampled GPU over the window (one GPU, not the job)."""
    energy_source: str | None = None
    """'counter' (the driver's energy counter) or 'power integral'."""
    temperature_c_max: float | None = None
    sm_clock_mhz_mean: float | None = None
    gpu_memory_used_bytes_max: int | None = None
    """nvidia-smi's memory used: the allocator's reservation plus CUDA context and other processes."""
    context: RuleContext = field(default_factory=RuleContext)
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def denominator(self) -> str | None:
        """'8 x 989.4 TFLOP/s (NVIDIA H100 80GB HBM3 (h100-sxm) bf16 dense)', or None without a peak."""
        if self.peak_flops_per_gpu is None:
            return None
        label = self.peak_label or "peak as given"
        return f"{self.world_size} x {self.peak_flops_per_gpu / 1e12:.4g} TFLOP/s ({label})"

    def render(self) -> str:
        head = (f"gpuwise track: {self.steps} steps measured (first {self.skipped_steps} skipped); step time median "
                f"{_dur(self.step_time_median_s)}, mean {_dur(self.step_time_mean_s)} "
                f"({'device-synced' if self.synced else 'host clock, no device sync: exact as a mean'})")
        tps = (f"{_num(self.tokens_per_s)} tokens/s ({_num(self.tokens_per_s_per_gpu)} per GPU), "
               f"{_num(self.tokens_per_step)} tokens per step" if self.tokens_per_s is not None else "unknown tokens/s "
               "(no token count: pass tokens= or tokens_per_step=)")
        if self.mfu is not None:
            util = f"MFU {_share(self.mfu)}, HFU {_share(self.hfu)} of {self.denominator}"
        else:
            util = f"MFU unknown ({self.mfu_note or 'no peak or no FLOP count'})"
        wait = (f"{_share(self.data_wait_share)} of step time ({_dur(self.data_wait_mean_s)} per step)"
                if self.data_wait_share is not None else "unknown")
        mem = (f"peak reserved {_gib(self.memory_reserved_peak_bytes)}, "
               f"allocated {_gib(self.memory_allocated_peak_bytes)}; predicted {_gib(self.memory_predicted_peak_bytes)}; capacity {_gib(self.memory_capacity_bytes)}")
        if self.memory_reserved_peak_bytes and self.memory_predicted_peak_bytes:
            mem += f" (reserved / predicted {self.memory_reserved_peak_bytes / self.memory_predicted_peak_bytes:.2f})"
        lines = [head, f"  throughput : {tps}", f"  utilization: {util}", f"  data wait  : {wait}",
                 f"  memory     : {mem}"]
        if self.nvml_samples is not None:
            energy = ("unknown" if self.energy_j is None else
                      f"{self.energy_j / 1e3:.2f} kJ ({self.energy_source or 'source unknown'})")
            lines.append(f"  GPU (NVML) : utilization {_num(self.gpu_utilization_pct_mean, '.0f')}%, power "
                         f"{_num(self.power_w_mean)} W mean / {_num(self.power_w_max)} W max, energy {energy}, "
                         f"{_num(self.temperature_c_max)} C max, SM clock {_num(self.sm_clock_mhz_mean)} MHz "
                         f"({self.nvml_samples} samples over {_dur(self.nvml_duration_s)}, one GPU)")
        else:
            lines.append("  GPU (NVML) : not sampled")
        if self.findings:
            lines.append("findings:")
            for f in self.findings:
                ev = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in f.evidence.items()
                               if v is not None)
                lines += [f"  [{f.id}] {f.title}", f"      evidence : {ev}", f"      threshold: {f.threshold}",
                          f"      fix      : {f.fix}"]
        else:
            lines.append("findings: none")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        nvml = None if self.nvml_samples is None else {dst: getattr(self, dst) for _, dst in SAMPLER_FIELDS}
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "track",
            "steps": self.steps,
            "skipped_steps": self.skipped_steps,
            "synced": self.synced,
            "step_time_median_s": self.step_time_median_s,
            "step_time_mean_s": self.step_time_mean_s,
            "step_time_min_s": self.step_time_min_s,
            "step_time_max_s": self.step_time_max_s,
            "data_wait_mean_s": self.data_wait_mean_s,
            "data_wait_share": self.data_wait_share,
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "mfu_denominator": {"peak_flops_per_gpu": self.peak_flops_per_gpu, "world_size": self.world_size,
                                "label": self.peak_label, "text": self.denominator},
            "mfu_note": self.mfu_note,
            "memory": {"allocated_peak_bytes": self.memory_allocated_peak_bytes,
                       "reserved_peak_bytes": self.memory_reserved_peak_bytes,
                       "predicted_peak_bytes": self.memory_predicted_peak_bytes,
                       "capacity_bytes": self.memory_capacity_bytes},
            "nvml": nvml,
            "context": self.context.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        }
