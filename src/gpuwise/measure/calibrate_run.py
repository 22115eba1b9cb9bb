"""`gpuwise calibrate` end to end: what this device really achieves, as one `Calibration`.

Measured, each with timing.py's discipline (CUDA events, warm-up, median and p10-p90 of many repetitions, inputs
rotated through more than twice the L2 cache, random normal values):

- GEMM TFLOP/s per dtype over a sweep of shapes (calibrate_gemm.py), with the performance model's GEMM curve
  fitted to it (calibrate_fit.py).
- DRAM and host<->device bandwidth and the kernel launch overhead (calibrate_bandwidth.py).
- The card's state before and after (SM clock, power, temperature from NVML), to spot throttling.

Here: the device's identity (name, catalog GPU), its NVML state, the progress lines, and the order of the work.
"""

from __future__ import annotations

import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from ..catalog.gpus import GPU, get_gpu
from ..dtypes import peak_operand_bytes
from ..errors import GpuwiseError, UnknownGPUError
from ..units import GB
from ._deps import require_torch, resolve_device, set_tf32
from .calibrate_bandwidth import launch_overhead_us, measure_transfers
from .calibrate_fit import fit_gemm
from .calibrate_gemm import DTYPES, one_row_sizes, shapes, time_gemm, unsupported
from .calibrate_result import Calibration, GemmLine, GemmPoint, fit_line


class _Progress:
    def __init__(self, stream, total: int) -> None:
        self.stream, self.total, self.done = stream, total, 0
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())

    def step(self, what: str) -> None:
        self.done += 1
        if self.stream is None:
            return
        line = f"calibrate [{self.done}/{self.total}] {what}"
        self.stream.write(("\r\x1b[K" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _state(dev) -> tuple[dict | None, str]:
    """NVML clocks, power and temperature of a CUDA device (None and why otherwise)."""
    if dev.type != "cuda":
        return None, "CPU device: no NVML state"
    try:
        from .nvml import snapshot

        snaps = [s for s in snapshot() if s.cuda_index == dev.index]
    except GpuwiseError as exc:
        return None, str(exc)
    if not snaps:
        return None, f"NVML does not list CUDA device {dev.index}"
    s = snaps[0]
    return ({"sm_clock_mhz": s.sm_clock_mhz, "sm_clock_max_mhz": s.sm_clock_max_mhz,
             "memory_clock_mhz": s.memory_clock_mhz, "power_w": s.power_w, "power_limit_w": s.power_limit_w,
             "temperature_c": s.temperature_c, "utilization_gpu_pct": s.utilization_gpu_pct}, "from NVML")


def _device_name(torch, dev) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _catalog_gpu(dev, name: str) -> tuple[GPU | None, str]:
    if dev.type != "cuda":
        return None, "a CPU is not in the GPU catalog: efficiencies are unknown, absolute figures are stored"
    try:
        gpu = get_gpu(name)
    except UnknownGPUError:
        return None, f"'{name}' is not in the catalog: efficiencies are unknown, absolute figures are stored"
    return gpu, f"catalog GPU {gpu.id}"


def calibrate(*, device: str | None = None, quick: bool = False, dtypes: tuple[str, ...] = DTYPES,
              progress=None) -> Calibration:
    """Measure the device (see the module docstring). `progress`: a stream for progress lines (None: silent)."""
    torch = require_torch("gpuwise calibrate")
    dev = resolve_device(torch, device, "gpuwise calibrate")
    t0 = time.perf_counter()
    name = _device_name(torch, dev)
    gpu, gpu_note = _catalog_gpu(dev, name)
    before, state_note = _state(dev)
    skipped = {dt: why for dt in dtypes if (why := unsupported(torch, dev, dt))}
    plan = [(dt, shape) for dt in dtypes if dt not in skipped for shape in shapes(dev, dt, quick)]
    line_dtype = next((dt for dt in ("bf16", "fp16", "fp32") if dt in dtypes and dt not in skipped), None)
    rows = one_row_sizes(dev, quick) if line_dtype else ()
    bar = _Progress(progress, len(plan) + len(rows) + (5 if dev.type == "cuda" else 2) + 1)
    threads = torch.get_num_threads()
    raw: dict[str, list[GemmPoint]] = {}
    notes = []

    def timed(dt: str, m: int, n: int, k: int):
        """One GEMM's Stats, or None (and a note) when it cannot run: out of memory, or a kernel this build lacks."""
        restore = set_tf32(torch, dt == "tf32")  # fp32: exact IEEE GEMMs; tf32: TF32 tensor cores
        try:
            return time_gemm(torch, dev, dt, m, n, k, quick)
        except (RuntimeError, MemoryError) as exc:
            notes.append(f"{dt} {m}x{n}x{k} not measured: {str(exc).splitlines()[0][:160]}")
            return None
        finally:
            restore()
            if dev.type == "cuda":
                torch.cuda.empty_cache()

    for dt, (m, n, k) in plan:
        if (stats := timed(dt, m, n, k)) is None:
            continue
        raw.setdefault(dt, []).append(GemmPoint(dt, m, n, k, stats))
        bar.step(f"{dt} GEMM {m}x{n}x{k}: {raw[dt][-1].tflops:,.2f} TFLOP/s")
    for dt in dtypes:
        if dt not in skipped and dt not in raw:
            skipped[dt] = "every shape failed (see notes)"
    line_points = []
    for k, n in rows:  # memory-bound GEMMs: a decode step's weights, one row against each
        if (stats := timed(line_dtype, 1, n, k)) is None:
            continue
        moved = int((k * n + k + n) * peak_operand_bytes(line_dtype))
        line_points.append((moved, stats.median_s))
        bar.step(f"{line_dtype} one-row GEMM 1x{n}x{k}: {moved / stats.median_s / GB:,.1f} GB/s")
    gemm_line = None
    if len(line_points) >= 2:
        intercept, bw = fit_line(line_points)
        gemm_line = GemmLine(line_dtype, tuple(line_points), intercept, bw)
    transfers = measure_transfers(torch, dev, quick, bar)
    overhead_us = launch_overhead_us(torch, dev)
    bar.step(f"launch overhead: {overhead_us:.2f} us per kernel")
    bar.close()
    after, _ = _state(dev)
    copy = next(t for t in transfers if t.kind == "copy")
    results = tuple(fit_gemm(gpu, dt, raw[dt], copy.gb_s * GB, overhead_us * 1e-6, gemm_line)
                    for dt in dtypes if dt in raw)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "cpu_threads": threads if dev.type == "cpu" else None}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        env.update(compute_capability=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                   memory_bytes=props.total_memory, l2_cache_bytes=getattr(props, "L2_cache_size", None))
    return Calibration(device=str(dev), device_name=name, gpu=gpu, gpu_note=gpu_note, quick=quick, dtypes=results,
                       skipped=skipped, transfers=tuple(transfers), kernel_overhead_us=overhead_us,
                       state_before=before, state_after=after, state_note=state_note, environment=env,
                       duration_s=time.perf_counter() - t0,
                       measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=tuple(notes),
                       gemm_line=gemm_line)
