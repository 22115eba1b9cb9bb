"""`gpuwise calibrate`: what this device really achieves, written as a device profile for `--profile`.

Measured, each with timing.py's discipline (CUDA events, warm-up, median and p10-p90 of many repetitions, inputs
rotated through more than twice the L2 cache, random normal values):

- GEMM TFLOP/s per dtype (fp32 without TF32, tf32, bf16, fp16, fp8 via `torch._scaled_mm` where the GPU has it)
  over a sweep of square and LLM-shaped problems. The performance model's GEMM curve (estimate/kernels.py: tile
  and wave quantization at one large-GEMM efficiency, a roofline against DRAM, a fixed per-kernel time) is then
  fitted to the sweep: the efficiency per dtype that minimizes the squared log error over all shapes. The profile
  stores that fitted efficiency; the best single shape (the "maximum achievable matmul FLOPS") is reported too.
- DRAM bandwidth: a device-to-device copy (read + write bytes) and a read-only reduction.
- Host-to-device bandwidth, pinned and pageable, and device-to-host pinned (the CPU-offload model uses pinned H2D).
- Kernel launch overhead: back-to-back tiny kernels, GPU time per kernel.
- The card's state before and after (SM clock, power, temperature from NVML), to spot throttling.
"""

from __future__ import annotations

import math
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from ..catalog.devices import PROFILE_KIND, default_profile
from ..catalog.gpus import GPU, get_gpu
from ..errors import GpuwiseError, InvalidArgument, UnknownGPUError
from ._deps import require_torch, resolve_device, set_tf32
from .timing import Stats, buffers_to_rotate, hold_gpu, summarize, time_op

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
OPERAND_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
TARGET_S_PER_POINT = 0.4
"""Time budget per measured point: repetitions are cut to about this much GPU time (at least MIN_REPS)."""
MIN_REPS = 5

# (m, n, k): square sweeps, and the GEMMs of a Llama-3.1-8B / 70B layer at 8,192 tokens per micro-batch
# (QKV, attention output, gate+up, down), which is where training time goes.
_LLM_SHAPES = ((8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336),
               (8192, 10240, 8192), (8192, 57344, 8192), (8192, 8192, 28672))
_SQUARES_GPU = (256, 512, 1024, 2048, 4096, 6144, 8192, 12288, 16384)
_SQUARES_GPU_QUICK = (1024, 4096, 8192)
_SQUARES_CPU = (128, 256, 512, 1024)
_SQUARES_CPU_QUICK = (128, 256, 512)
_FP32_MAX_DIM = 8192
"""fp32 without tensor cores is ~15x slower than bf16: its sweep stops at 8,192 to keep calibrate in minutes."""


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
        return self.moved_bytes / self.stats.median_s / 1e9


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

    def transfer(self, kind: str) -> Transfer | None:
        return next((t for t in self.transfers if t.kind == kind), None)


# ----------------------------------------------------------------------------------------------------------------
# measuring


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


def _supported(torch, dev, dtype: str) -> str | None:
    """None when `dtype` GEMMs can run on `dev`, else why not."""
    if dev.type == "cpu":
        if dtype == "tf32":
            return "TF32 is a tensor-core mode of NVIDIA GPUs (Ampere and later), not a CPU format"
        if dtype == "fp8":
            return "fp8 GEMMs need an NVIDIA GPU of compute capability 8.9+ (Ada, Hopper, Blackwell)"
        return None
    major, minor = torch.cuda.get_device_capability(dev)
    if dtype in ("tf32", "bf16") and major < 8:
        return f"{dtype} needs compute capability 8.0+ (this GPU is {major}.{minor})"
    if dtype == "fp8":
        if (major, minor) < (8, 9):
            return f"fp8 needs compute capability 8.9+ (this GPU is {major}.{minor})"
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return f"this PyTorch ({torch.__version__}) has no float8 GEMM (torch._scaled_mm)"
    return None


def _shapes(dev, dtype: str, quick: bool) -> list[tuple[int, int, int]]:
    if dev.type == "cpu":
        return [(s, s, s) for s in (_SQUARES_CPU_QUICK if quick else _SQUARES_CPU)]
    squares = _SQUARES_GPU_QUICK if quick else _SQUARES_GPU
    llm = _LLM_SHAPES[2:4] if quick else _LLM_SHAPES
    shapes = [(s, s, s) for s in squares] + list(llm)
    if dtype == "fp32":
        shapes = [s for s in shapes if max(s) <= _FP32_MAX_DIM]
    return shapes


def _cache_bytes(torch, dev) -> int:
    if dev.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 64 << 20)
    return 64 << 20  # a server CPU's last-level cache is tens of MiB: assume 64 MiB


def _reps(torch, dev, fn, quick: bool) -> tuple[int, int]:
    """(warmup, reps) sized so that one point takes about TARGET_S_PER_POINT."""
    fn(0)  # first call: cuBLAS handle, heuristics, lazy loading
    one = time_op(torch, dev, fn, warmup=0, reps=2).median_s
    cap = 10 if quick else 50
    reps = int(max(MIN_REPS, min(cap, TARGET_S_PER_POINT / max(one, 1e-9))))
    return max(2, reps // 5), reps


def _gemm(torch, dev, dtype: str, m: int, n: int, k: int, quick: bool) -> Stats:
    tdt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp8": torch.float32}[dtype]
    set_bytes = (m * k + k * n) * OPERAND_BYTES[dtype]
    count = buffers_to_rotate(set_bytes, _cache_bytes(torch, dev))
    if dev.type == "cuda":  # never let the rotation itself take more than a quarter of the free memory
        free, _ = torch.cuda.mem_get_info(dev)
        count = max(1, min(count, int(free * 0.25) // max(1, set_bytes + m * n * 4)))
    a = [torch.randn(m, k, device=dev, dtype=tdt) for _ in range(count)]
    if dtype == "fp8":
        f8 = torch.float8_e4m3fn
        a = [x.to(f8) for x in a]
        b = [torch.randn(n, k, device=dev).to(f8).t() for _ in range(count)]  # column-major B, as _scaled_mm wants
        one = torch.ones((), device=dev, dtype=torch.float32)

        def fn(i: int):
            return torch._scaled_mm(a[i % count], b[i % count], one, one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)
    else:
        b = [torch.randn(k, n, device=dev, dtype=tdt) for _ in range(count)]
        out = torch.empty(m, n, device=dev, dtype=tdt)

        def fn(i: int):
            return torch.matmul(a[i % count], b[i % count], out=out)

    warmup, reps = _reps(torch, dev, fn, quick)
    return time_op(torch, dev, fn, warmup=warmup, reps=reps)


def _transfers(torch, dev, quick: bool, progress: _Progress) -> list[Transfer]:
    out = []
    size = (256 << 20 if quick else 1 << 30) if dev.type == "cuda" else (64 << 20 if quick else 256 << 20)
    n = size // 4
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)

    def copy(_: int):
        dst.copy_(src)

    w, r = _reps(torch, dev, copy, quick)
    out.append(Transfer("copy", size, time_op(torch, dev, copy, warmup=w, reps=r), 2 * size))
    progress.step(f"device memory copy {size >> 20} MiB")

    def read(_: int):
        return src.sum()

    w, r = _reps(torch, dev, read, quick)
    out.append(Transfer("read", size, time_op(torch, dev, read, warmup=w, reps=r), size))
    progress.step(f"device memory read {size >> 20} MiB")
    src = dst = None  # free the device buffers before the host copies
    if dev.type != "cuda":
        return out
    hsize = 64 << 20 if quick else 256 << 20
    d = torch.empty(hsize, dtype=torch.uint8, device=dev)
    pinned = torch.randint(0, 255, (hsize,), dtype=torch.uint8).pin_memory()
    pageable = torch.randint(0, 255, (hsize,), dtype=torch.uint8)
    cases = (("h2d_pinned", lambda _: d.copy_(pinned, non_blocking=True)),
             ("h2d_pageable", lambda _: d.copy_(pageable)),
             ("d2h_pinned", lambda _: pinned.copy_(d, non_blocking=True)))
    for kind, fn in cases:
        # Pageable copies are staged by the host: time them on the host clock, with a sync on each side.
        if kind == "h2d_pageable":
            stats = _host_timed(torch, dev, fn, reps=5 if quick else 20)
        else:
            w, r = _reps(torch, dev, fn, quick)
            stats = time_op(torch, dev, fn, warmup=w, reps=r)
        out.append(Transfer(kind, hsize, stats, hsize))
        progress.step(f"{kind.replace('_', ' ')} {hsize >> 20} MiB")
    return out


def _host_timed(torch, dev, fn, reps: int) -> Stats:
    fn(0)
    samples = []
    for i in range(reps):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        fn(i)
        torch.cuda.synchronize(dev)
        samples.append(time.perf_counter() - t0)
    return summarize(samples)


def _launch_overhead_us(torch, dev) -> float:
    """GPU time per kernel of a stream of tiny back-to-back kernels (the gap between kernels + ramp-up + tail).

    On CUDA each burst is queued behind a GPU spin (timing.hold_gpu) so the kernels run back to back and the events
    measure the GPU, not the host's eager dispatch (which is slower per kernel and overlaps real work)."""
    x = torch.zeros(1, device=dev)
    burst = 500

    def fn(_: int):
        for _ in range(burst):
            x.add_(1.0)

    if dev.type != "cuda":
        return time_op(torch, dev, fn, warmup=2, reps=7).median_s / burst * 1e6
    fn(0)
    samples = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hold_gpu(torch)  # ~10 ms of spin: the host queues the 500 launches (~2.5 ms) behind it
        start.record()
        fn(0)
        end.record()
        torch.cuda.synchronize(dev)
        samples.append(start.elapsed_time(end) * 1e-3)
    return summarize(samples).median_s / burst * 1e6


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


def parse_dtypes(text: str | None) -> tuple[str, ...]:
    if not text:
        return DTYPES
    out = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in DTYPES]
    if bad or not out:
        raise InvalidArgument(f"--dtypes: unknown {', '.join(bad) or 'empty list'} (choose from {', '.join(DTYPES)})")
    return out


def calibrate(*, device: str | None = None, quick: bool = False, dtypes: tuple[str, ...] = DTYPES,
              progress=None) -> Calibration:
    """Measure the device (see the module docstring). `progress`: a stream for progress lines (None: silent)."""
    torch = require_torch("gpuwise calibrate")
    dev = resolve_device(torch, device, "gpuwise calibrate")
    t0 = time.perf_counter()
    name = _device_name(torch, dev)
    gpu, gpu_note = _catalog_gpu(dev, name)
    before, state_note = _state(dev)
    skipped = {dt: why for dt in dtypes if (why := _supported(torch, dev, dt))}
    plan = [(dt, shape) for dt in dtypes if dt not in skipped for shape in _shapes(dev, dt, quick)]
    bar = _Progress(progress, len(plan) + (5 if dev.type == "cuda" else 2) + 1)
    threads = torch.get_num_threads()
    raw: dict[str, list[GemmPoint]] = {}
    notes = []
    for dt, (m, n, k) in plan:
        restore = set_tf32(torch, dt == "tf32")  # fp32: exact IEEE GEMMs; tf32: TF32 tensor cores
        try:
            stats = _gemm(torch, dev, dt, m, n, k, quick)
        except (RuntimeError, MemoryError) as exc:  # out of memory, or a kernel this build lacks
            notes.append(f"{dt} {m}x{n}x{k} not measured: {str(exc).splitlines()[0][:160]}")
            continue
        finally:
            restore()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        raw.setdefault(dt, []).append(GemmPoint(dt, m, n, k, stats))
        bar.step(f"{dt} GEMM {m}x{n}x{k}: {raw[dt][-1].tflops:,.2f} TFLOP/s")
    for dt in dtypes:
        if dt not in skipped and dt not in raw:
            skipped[dt] = "every shape failed (see notes)"
    transfers = _transfers(torch, dev, quick, bar)
    overhead_us = _launch_overhead_us(torch, dev)
    bar.step(f"launch overhead: {overhead_us:.2f} us per kernel")
    bar.close()
    after, _ = _state(dev)
    copy = next(t for t in transfers if t.kind == "copy")
    results = tuple(_fit(gpu, dt, raw[dt], copy.gb_s * 1e9, overhead_us * 1e-6) for dt in dtypes if dt in raw)
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
                       measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=tuple(notes))


# ----------------------------------------------------------------------------------------------------------------
# fitting the GEMM model


def _fit(gpu: GPU | None, dtype: str, points: list[GemmPoint], copy_bytes_per_s: float,
         overhead_s: float) -> DtypeResult:
    peak = gpu.peak_flops.get(dtype) if gpu else None  # the measured dtypes are the catalog's peak keys
    if gpu is None or peak is None or not gpu.memory_bandwidth_bytes_per_s:
        return DtypeResult(dtype, tuple(points), peak / 1e12 if peak else None, None, None)
    from ..estimate.kernels import matmul_s

    base = default_profile(gpu)
    mem_eff = min(1.0, copy_bytes_per_s / gpu.memory_bandwidth_bytes_per_s)

    def model(eff: float):
        prof = replace(base, matmul_efficiency={**base.matmul_efficiency, dtype: eff}, memory_efficiency=mem_eff,
                       kernel_overhead_s=overhead_s)
        return [matmul_s(prof, p.m, p.n, p.k, dtype, OPERAND_BYTES[dtype]) for p in points]

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


# ----------------------------------------------------------------------------------------------------------------
# the profile file


def profile_doc(c: Calibration) -> dict:
    """The device profile `load_profile` reads (catalog/devices.py), with what was measured and how."""
    from ..version import __version__

    doc: dict = {"kind": PROFILE_KIND, "gpu": c.gpu.id if c.gpu else None, "device_name": c.device_name}
    eff = {d.dtype: d.fitted_efficiency for d in c.dtypes if d.fitted_efficiency is not None}
    if eff:
        doc["matmul_efficiency"] = eff
    absolute = {d.dtype: round(d.best.tflops, 4) for d in c.dtypes if d.fitted_efficiency is None}
    if absolute:  # no datasheet peak to divide by: absolute figures (load_profile divides by the --gpu's peak)
        doc["matmul_tflops"] = absolute
    copy = c.transfer("copy")
    datasheet = c.gpu.memory_bandwidth_bytes_per_s / 1e9 if c.gpu and c.gpu.memory_bandwidth_bytes_per_s else None
    # A copy can beat the datasheet a little (rounded figures, boost clocks): the model's fraction stays <= 1.
    doc["memory_bandwidth_gb_s"] = round(min(copy.gb_s, datasheet) if datasheet else copy.gb_s, 3)
    doc["kernel_overhead_us"] = round(c.kernel_overhead_us, 3)
    h2d = c.transfer("h2d_pinned")
    if h2d is not None:
        doc["host_to_device_gb_s"] = round(h2d.gb_s, 3)
    doc["measured"] = {
        "by": f"gpuwise {__version__} calibrate{' --quick' if c.quick else ''}", "at": c.measured_at,
        "device": c.device, "environment": c.environment, "state_before": c.state_before,
        "state_after": c.state_after, "duration_s": round(c.duration_s, 2),
        "best_tflops": {d.dtype: round(d.best.tflops, 4) for d in c.dtypes},
        "fit_median_error": {d.dtype: d.fit_median_error for d in c.dtypes},
        "transfers_gb_s": {t.kind: round(t.gb_s, 3) for t in c.transfers},
        "skipped": c.skipped, "notes": list(c.notes),
    }
    return doc


def default_path(c: Calibration) -> str:
    slug = c.gpu.id if c.gpu else "".join(ch if ch.isalnum() else "-" for ch in c.device_name.lower()).strip("-")
    return f"gpuwise-profile-{slug or 'device'}.json"


def save_profile(c: Calibration, path: str) -> Path:
    """Write the profile; an existing profile's `network` section (from `bench comm`) is kept."""
    import json

    p = Path(path)
    doc = profile_doc(c)
    try:
        if p.exists():
            old = json.loads(p.read_text())
            if isinstance(old, dict) and isinstance(old.get("network"), dict):
                doc["network"] = old["network"]
        p.write_text(json.dumps(doc, indent=2) + "\n")
    except (OSError, ValueError) as exc:
        raise GpuwiseError(f"--save: cannot write {p}: {getattr(exc, 'strerror', None) or exc}") from None
    return p


def _check_writable(path: str) -> None:
    """Before minutes of measuring: the folder of --save FILE must exist and be writable."""
    import os

    folder = Path(path).resolve().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise GpuwiseError(f"--save: cannot write into {folder}")


def cli_main(args) -> str:
    dtypes = parse_dtypes(args.dtypes)
    if args.save:
        _check_writable(args.save)
    c = calibrate(device=args.device, quick=args.quick, dtypes=dtypes, progress=sys.stderr)
    saved = save_profile(c, args.save or default_path(c)) if args.save is not None else None
    from .calibrate_report import render, to_dict

    if args.json:
        from ..schema import dumps

        doc = to_dict(c)
        doc["saved"] = str(saved) if saved else None
        return dumps(doc)
    return render(c, saved)
