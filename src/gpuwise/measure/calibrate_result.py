"""What `gpuwise calibrate` measured: the result types, no torch and no measuring.

The measuring modules (calibrate_gemm.py, calibrate_bandwidth.py, calibrate_fit.py, calibrate_run.py) fill them;
the profile file (calibrate_profile.py) and the report (calibrate_report.py) read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog.gpus import GPU
from ..units import GB
from .timing import Stats


@dataclass(frozen=True, slots=True)
class GemmPoint:
    dtype: str
    m: int
    n: int
    k: int
    stats: Stats
    predicted_s: float | None = None
    """The fitted performance model's time for this shape (None without a catalog GPU)."""

    @property
    def tflops(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.stats.median_s / 1e12


@dataclass(frozen=True, slots=True)
class DtypeResult:
    dtype: str
    points: tuple[GemmPoint, ...]
    peak_tflops: float | None
    """Datasheet dense peak of this dtype (None: the catalog has none, or the device is not in it)."""
    fitted_efficiency: float | None
    """The large-GEMM efficiency that makes estimate/kernels.py fit the sweep best (None without a peak)."""
    fit_median_error: float | None
    """Median |predicted - measured| / measured over the sweep with the fitted efficiency."""

    @property
    def best(self) -> GemmPoint:
        return max(self.points, key=lambda p: p.tflops)

    @property
    def best_fraction(self) -> float | None:
        return self.best.tflops / self.peak_tflops if self.peak_tflops else None


@dataclass(frozen=True, slots=True)
class Transfer:
    kind: str
    """copy (device to device, read + write counted), read, h2d_pinned, h2d_pageable, d2h_pinned."""
    size_bytes: int
    stats: Stats
    moved_bytes: int

    @property
    def gb_s(self) -> float:
        return self.moved_bytes / self.stats.median_s / GB


@dataclass(frozen=True, slots=True)
class GemmLine:
    """One-row GEMMs (x[1, k] @ w[k, n]) of growing size: seconds = intercept + bytes / bandwidth, least squares."""
    dtype: str
    points: tuple[tuple[int, float], ...]
    """(bytes moved, median seconds) per size."""
    intercept_s: float
    bytes_per_s: float


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares seconds = intercept + bytes / bandwidth over (bytes, seconds): (intercept s, bytes/s); the
    intercept is kept at 0 or above and the bandwidth positive (a flat or falling sweep gives the largest point's)."""
    n = len(points)
    sx, sy = sum(b for b, _ in points), sum(t for _, t in points)
    sxx, sxy = sum(b * b for b, _ in points), sum(b * t for b, t in points)
    den = n * sxx - sx * sx
    slope = (n * sxy - sx * sy) / den if den > 0 else 0.0
    if slope <= 0:
        b, t = max(points)
        return 0.0, b / t
    intercept = (sy - slope * sx) / n
    if intercept < 0:
        slope = sxy / sxx  # through the origin
        intercept = 0.0
    return intercept, 1.0 / slope


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    device: str
    """'cuda:0' or 'cpu'."""
    device_name: str
    gpu: GPU | None
    """The catalog GPU the device is (None: a CPU, or a GPU the catalog lacks: fractions are then unknown)."""
    gpu_note: str
    quick: bool
    dtypes: tuple[DtypeResult, ...]
    skipped: dict[str, str]
    """dtype -> why it was not measured."""
    transfers: tuple[Transfer, ...]
    kernel_overhead_us: float
    state_before: dict | None
    state_after: dict | None
    """SM clock, power, temperature from NVML (None: NVML not available, with the reason in `state_note`)."""
    state_note: str
    environment: dict
    duration_s: float
    measured_at: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    gemm_line: GemmLine | None = None
    """The one-row GEMM line (None: not measured)."""

    def transfer(self, kind: str) -> Transfer | None:
        return next((t for t in self.transfers if t.kind == kind), None)
