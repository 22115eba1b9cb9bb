"""Fitting the performance model's GEMM curve to `gpuwise calibrate`'s sweep (no torch: arithmetic on the points).

The model (estimate/kernels.py: tile and wave quantization at one large-GEMM efficiency, a roofline against DRAM,
a fixed per-kernel time) is fitted per dtype: the efficiency that minimizes the squared log error over all shapes.
The model's time and bandwidth figures are what the same run measured, not the catalog's for the board: the copy
bandwidth, the launch overhead and, when the one-row sweep ran, the GEMM line (its intercept is the GEMMs' fixed time,
its rate their streaming bandwidth); without a line the GEMMs take the launch overhead and the copy bandwidth. The
catalog's tile and matmul_shape_efficiency stay in the model (loading the profile applies the same factor again, so
the fitted efficiency round-trips).
The device profile stores that fitted efficiency; the best single shape (the "maximum achievable matmul FLOPS") is
reported next to it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..catalog.devices import default_profile
from ..catalog.gpus import GPU
from ..dtypes import peak_operand_bytes
from .calibrate_result import DtypeResult, GemmLine, GemmPoint


def fit_gemm(gpu: GPU | None, dtype: str, points: list[GemmPoint], copy_bytes_per_s: float,
             overhead_s: float, line: GemmLine | None = None) -> DtypeResult:
    """The sweep of one dtype with the fitted efficiency and each point's predicted time (None without a peak).
    `line`: the measured one-row GEMM line (None: not measured; the GEMMs then take `overhead_s` and the copy rate)."""
    peak = gpu.peak_flops.get(dtype) if gpu else None  # the measured dtypes are the catalog's peak keys
    if gpu is None or peak is None or not gpu.memory_bandwidth_bytes_per_s:
        return DtypeResult(dtype, tuple(points), peak / 1e12 if peak else None, None, None)
    from ..estimate.kernels import matmul_s

    base = default_profile(gpu)
    mem_eff = min(1.0, copy_bytes_per_s / gpu.memory_bandwidth_bytes_per_s)
    gemm_mem_eff = min(1.0, line.bytes_per_s / gpu.memory_bandwidth_bytes_per_s) if line else None

    def model(eff: float):
        prof = replace(base, matmul_efficiency={**base.matmul_efficiency, dtype: eff}, memory_efficiency=mem_eff,
                       kernel_overhead_s=overhead_s, matmul_memory_efficiency=gemm_mem_eff,
                       gemm_overhead_s=line.intercept_s if line else None)
        return [matmul_s(prof, p.m, p.n, p.k, dtype, peak_operand_bytes(dtype)) for p in points]

    def loss(eff: float) -> float:
        return sum(math.log(t / p.stats.median_s) ** 2 for t, p in zip(model(eff), points))

    grid = [i / 200 for i in range(2, 201)]
    best = min(grid, key=loss)
    lo, hi = max(0.005, best - 0.005), min(1.0, best + 0.005)
    for _ in range(30):  # golden-section refinement around the best grid point
        a, b = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        lo, hi = (lo, b) if loss(a) < loss(b) else (a, hi)
    eff = round((lo + hi) / 2, 4)
    predicted = model(eff)
    errors = sorted(abs(t - p.stats.median_s) / p.stats.median_s for t, p in zip(predicted, points))
    fitted = tuple(replace(p, predicted_s=t) for p, t in zip(points, predicted))
    return DtypeResult(dtype, fitted, peak / 1e12, eff, errors[len(errors) // 2])
