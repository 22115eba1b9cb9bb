"""Timing a kernel so the number means something.

- GPU work is asynchronous: time it with CUDA events recorded on the stream around each repetition, never with
  a host clock around a launch (that measures the launch). On CPU, `time.perf_counter_ns` around the call.
- Warm up first (cuBLAS heuristics, autotuning, clocks ramping up, lazy module loading).
- Many repetitions; report the median (robust to a stray preemption) and the spread (p10-p90), not the mean.
- Rotate through enough input buffers that together exceed the L2 cache (50 MiB on H100), so a repetition
  cannot be served from the cache the previous one warmed.
- Inputs are random normal values, never zeros: tensor cores draw less power (and clock higher) on zeros.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class Stats:
    """Seconds per repetition."""

    median_s: float
    p10_s: float
    p90_s: float
    min_s: float
    reps: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative run-to-run spread."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"median_s": self.median_s, "p10_s": self.p10_s, "p90_s": self.p90_s, "min_s": self.min_s,
                "reps": self.reps}


def summarize(samples_s: list[float]) -> Stats:
    if not samples_s:
        raise ValueError("no samples")
    xs = sorted(samples_s)
    n = len(xs)

    def q(p: float) -> float:
        return xs[min(n - 1, max(0, round(p * (n - 1))))]

    return Stats(median_s=statistics.median(xs), p10_s=q(0.10), p90_s=q(0.90), min_s=xs[0], reps=n)


def time_op(torch, device, fn: Callable[[int], object], *, warmup: int, reps: int) -> Stats:
    """Run `fn(i)` warmup + reps times (i counts up: rotate buffers with it) and time each repetition."""
    for i in range(warmup):
        fn(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        hold_gpu(torch)  # the launches queue up behind it: the events time the GPU, not the host's launch gaps
        for i in range(reps):
            starts[i].record()
            fn(warmup + i)
            ends[i].record()
        torch.cuda.synchronize(device)  # the one sync point: read the events after the last repetition
        return summarize([s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends)])
    samples = []
    for i in range(reps):
        t0 = time.perf_counter_ns()
        fn(warmup + i)
        samples.append((time.perf_counter_ns() - t0) * 1e-9)
    return summarize(samples)


TARGET_S_PER_POINT = 0.4
"""Time budget per measured point: repetitions are cut to about this much GPU time (at least MIN_REPS)."""
MIN_REPS = 5


def budget_reps(torch, device, fn: Callable[[int], object], quick: bool) -> tuple[int, int]:
    """(warmup, reps) for `time_op` sized so that one point takes about TARGET_S_PER_POINT."""
    fn(0)  # first call: cuBLAS handle, heuristics, lazy loading
    one = time_op(torch, device, fn, warmup=0, reps=2).median_s
    cap = 10 if quick else 50
    reps = int(max(MIN_REPS, min(cap, TARGET_S_PER_POINT / max(one, 1e-9))))
    return max(2, reps // 5), reps

HOLD_CYCLES = 20_000_000
"""GPU clock cycles to spin before a timed batch (~10 ms at 2 GHz): longer than the host takes to queue the batch."""


def hold_gpu(torch, cycles: int = HOLD_CYCLES) -> None:
    """Keep the GPU busy while the host queues work behind it, so that the queued kernels (and the events between
    them) run back to back: without it, on an idle GPU each event also times the host's launch of the kernel (a
    few us, which would swamp small kernels). `torch.cuda._sleep` spins the GPU for a number of clock cycles."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(cycles)


def buffers_to_rotate(bytes_per_set: int, cache_bytes: int, most: int = 1024) -> int:
    """How many input sets to cycle through so that together they exceed twice the last-level cache."""
    if bytes_per_set <= 0:
        return 1
    return max(2, min(most, -(-2 * cache_bytes // bytes_per_set)))
