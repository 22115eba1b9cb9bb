"""`gpuwise calibrate`'s report: the measured figures next to the datasheet, as text and as JSON.

Reads the result types (calibrate_result.py) and the profile document (calibrate_profile.py); nothing measuring
imports this module.
"""

from __future__ import annotations

from pathlib import Path

from ..catalog.devices import pcie_x16_bytes_per_s
from ..schema import SCHEMA_VERSION
from ..units import GB, MiB
from .calibrate_profile import profile_doc
from .calibrate_result import Calibration, GemmPoint


def to_dict(c: Calibration) -> dict:
    def point(p: GemmPoint) -> dict:
        return {"m": p.m, "n": p.n, "k": p.k, "tflops": p.tflops, **p.stats.to_dict(), "predicted_s": p.predicted_s}

    return {
        "schema_version": SCHEMA_VERSION, "command": "calibrate", "device": c.device, "device_name": c.device_name,
        "gpu": c.gpu.id if c.gpu else None, "gpu_note": c.gpu_note, "quick": c.quick,
        "matmul": [{"dtype": d.dtype, "best_tflops": d.best.tflops, "best_shape": [d.best.m, d.best.n, d.best.k],
                    "peak_tflops": d.peak_tflops, "best_fraction_of_peak": d.best_fraction,
                    "fitted_efficiency": d.fitted_efficiency, "fit_median_error": d.fit_median_error,
                    "points": [point(p) for p in d.points]} for d in c.dtypes],
        "skipped": c.skipped,
        "transfers": [{"kind": t.kind, "size_bytes": t.size_bytes, "gb_s": t.gb_s, **t.stats.to_dict(),
                       "reference_gb_s": _reference_gb_s(c, t.kind)} for t in c.transfers],
        "kernel_overhead_us": c.kernel_overhead_us,
        "one_row_gemm": None if c.gemm_line is None else {
            "dtype": c.gemm_line.dtype, "fixed_us": c.gemm_line.intercept_s * 1e6,
            "gb_s": c.gemm_line.bytes_per_s / GB, "points": [{"bytes": b, "s": t} for b, t in c.gemm_line.points]},
        "state_before": c.state_before, "state_after": c.state_after,
        "state_note": c.state_note, "environment": c.environment, "duration_s": c.duration_s,
        "measured_at": c.measured_at, "notes": list(c.notes), "profile": profile_doc(c),
    }


def _reference_gb_s(c: Calibration, kind: str) -> float | None:
    """The datasheet figure a transfer compares with: DRAM bandwidth, or the PCIe x16 line rate."""
    if c.gpu is None:
        return None
    if kind in ("copy", "read"):
        return c.gpu.memory_bandwidth_bytes_per_s / GB if c.gpu.memory_bandwidth_bytes_per_s else None
    rate = pcie_x16_bytes_per_s(c.gpu)
    return rate / GB if rate is not None else None


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.1%}"


def render(c: Calibration, saved: Path | None = None) -> str:
    lines = [f"{c.device_name} ({c.device}; {c.gpu_note}), torch {c.environment['torch']}"
             f"{', CUDA ' + c.environment['cuda'] if c.environment.get('cuda') else ''}"
             f"{'  [quick]' if c.quick else ''}", ""]
    rows = [("dtype", "best TFLOP/s", "at m x n x k", "datasheet dense", "achieved", "fitted eff.", "fit error")]
    for d in c.dtypes:
        b = d.best
        rows.append((d.dtype, f"{b.tflops:,.2f}", f"{b.m}x{b.n}x{b.k}",
                     "unknown" if d.peak_tflops is None else f"{d.peak_tflops:,.1f}", _pct(d.best_fraction),
                     "unknown" if d.fitted_efficiency is None else f"{d.fitted_efficiency:.3f}",
                     "unknown" if d.fit_median_error is None else f"{d.fit_median_error:.1%} median"))
    lines += _table(rows)
    for dt, why in c.skipped.items():
        lines.append(f"  {dt}: not measured ({why})")
    lines += ["", "memory and host transfers (median of repetitions, p10-p90 spread)"]
    rows = [("transfer", "size", "GB/s", "spread", "datasheet GB/s", "achieved")]
    for t in c.transfers:
        ref = _reference_gb_s(c, t.kind)
        rows.append((t.kind.replace("_", " "), f"{t.size_bytes // MiB} MiB", f"{t.gb_s:,.1f}", f"{t.stats.spread:.1%}",
                     "unknown" if ref is None else f"{ref:,.1f}", "unknown" if ref is None else f"{t.gb_s / ref:.1%}"))
    lines += _table(rows)
    lines += ["", f"kernel launch overhead: {c.kernel_overhead_us:.2f} us per kernel (back-to-back tiny kernels)"]
    if c.gemm_line is not None:
        ref = c.gpu.memory_bandwidth_bytes_per_s if c.gpu and c.gpu.memory_bandwidth_bytes_per_s else None
        share = "" if ref is None else f" ({c.gemm_line.bytes_per_s / ref:.0%} of the datasheet)"
        line = c.gemm_line
        lines.append(f"one-row {line.dtype} GEMMs (a decode step's weight GEMMs): "
                     f"{line.intercept_s * 1e6:.2f} us + bytes / {line.bytes_per_s / GB:,.1f} GB/s{share}")
    if c.state_before:
        b, a = c.state_before, c.state_after or {}
        lines.append(f"card state before/after: SM clock {b.get('sm_clock_mhz')}/{a.get('sm_clock_mhz')} MHz "
                     f"(max {b.get('sm_clock_max_mhz')}), power {b.get('power_w')}/{a.get('power_w')} W, "
                     f"temperature {b.get('temperature_c')}/{a.get('temperature_c')} C")
    else:
        lines.append(f"card state: unknown ({c.state_note})")
    lines += [f"note: {n}" for n in c.notes]
    lines.append(f"took {c.duration_s:.1f} s")
    if saved is not None:
        lines.append(f"profile written to {saved}: use it with --profile {saved} (train, infer, plan, roofline)")
    return "\n".join(lines)


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
           for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out
