"""`gpuwise calibrate`'s memory measurements: DRAM and host<->device bandwidth, and the kernel launch overhead.

- DRAM bandwidth: a device-to-device copy (read + write bytes) and a read-only reduction.
- Host-to-device bandwidth, pinned and pageable, and device-to-host pinned (the CPU-offload model uses pinned H2D).
- Kernel launch overhead: back-to-back tiny kernels, GPU time per kernel.
"""

from __future__ import annotations

import time

from ..units import GiB, MiB
from .calibrate_result import Transfer
from .timing import Stats, budget_reps, hold_gpu, summarize, time_op


def measure_transfers(torch, dev, quick: bool, progress) -> list[Transfer]:
    """Device copy and read, then (CUDA only) the host copies; `progress.step(text)` after each."""
    out = []
    size = (256 * MiB if quick else GiB) if dev.type == "cuda" else (64 * MiB if quick else 256 * MiB)
    n = size // 4
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)

    def copy(_: int):
        dst.copy_(src)

    w, r = budget_reps(torch, dev, copy, quick)
    out.append(Transfer("copy", size, time_op(torch, dev, copy, warmup=w, reps=r), 2 * size))
    progress.step(f"device memory copy {size // MiB} MiB")

    def read(_: int):
        return src.sum()

    w, r = budget_reps(torch, dev, read, quick)
    out.append(Transfer("read", size, time_op(torch, dev, read, warmup=w, reps=r), size))
    progress.step(f"device memory read {size // MiB} MiB")
    src = dst = None  # free the device buffers before the host copies
    if dev.type != "cuda":
        return out
    hsize = 64 * MiB if quick else 256 * MiB
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
            w, r = budget_reps(torch, dev, fn, quick)
            stats = time_op(torch, dev, fn, warmup=w, reps=r)
        out.append(Transfer(kind, hsize, stats, hsize))
        progress.step(f"{kind.replace('_', ' ')} {hsize // MiB} MiB")
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


def launch_overhead_us(torch, dev) -> float:
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
