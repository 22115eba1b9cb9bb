"""What the tracker costs per training step: prints microseconds per step and the share of a 100 ms and a 10 ms step.

The issue's target is an overhead under 1% of step time. Each variant runs an empty step body many times; the
loop's own cost (the same loop without the tracker) is subtracted. The sampler is a stand-in with the NvmlSampler
protocol whose mark() takes a lock, as a thread-safe sampler does; NVML itself runs in its own thread, off the
step's path. Defaults only: no device sync, no per-step memory or NVML reads (each is a torch/NVML call, opt-in).
Run: python benchmarks/tracker_overhead.py
"""

from __future__ import annotations

import threading
import time

from gpuwise.measure.tracker import Tracker

N = 200_000


class StandInSampler:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0

    def start(self):
        return self

    def stop(self) -> None:
        pass

    def mark(self) -> int:
        with self._lock:
            return self._n

    def summary(self, since=None):
        return None


def tracker(sampler=None) -> Tracker:
    return Tracker(flops_per_step=1e15, hardware_flops_per_step=1.2e15, tokens_per_step=1 << 20, peak_flops=989e12,
                   world_size=8, sampler=sampler)


def bare() -> None:
    for _ in range(N):
        pass


def bare_iter() -> None:
    for _ in iter(range(N)):
        pass


def with_step(t: Tracker) -> None:
    for _ in range(N):
        with t.step():
            pass


def start_end(t: Tracker) -> None:
    for _ in range(N):
        t.start_step()
        t.end_step()


def tick(t: Tracker) -> None:
    for _ in range(N):
        t.tick()


def wrap_step(t: Tracker) -> None:
    for _ in t.wrap(range(N)):
        with t.step():
            pass


def best_of(fn, *args, reps: int = 5) -> float:
    """Seconds per iteration, best of `reps` (the least disturbed run)."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best / N


def main() -> None:
    loop = best_of(bare)
    variants = [
        ("with tracker.step()", with_step, lambda: tracker(), loop),
        ("start_step() / end_step()", start_end, lambda: tracker(), loop),
        ("tick()", tick, lambda: tracker(), loop),
        ("wrap(loader) + step()", wrap_step, lambda: tracker(), best_of(bare_iter)),
        ("wrap(loader) + step(), sampler", wrap_step, lambda: tracker(StandInSampler()), best_of(bare_iter)),
    ]
    print(f"tracker overhead per step ({N:,} empty steps, best of 5, the bare loop subtracted)")
    print(f"  {'variant':34} {'us/step':>8} {'of 100 ms':>10} {'of 10 ms':>9}")
    worst = 0.0
    for label, fn, make, base in variants:
        per = best_of(lambda: fn(make())) - base
        worst = max(worst, per)
        print(f"  {label:34} {1e6 * per:8.2f} {100 * per / 0.1:9.4f}% {100 * per / 0.01:8.3f}%")
    t = tracker()
    with_step(t)
    t0 = time.perf_counter()
    t.summary()
    took = time.perf_counter() - t0
    print(f"summary() over {len(t.records):,} kept steps: {1e3 * took:.1f} ms (once, not per step)")
    verdict = "under" if worst / 0.01 < 0.01 else "OVER"
    print(f"worst case {1e6 * worst:.2f} us = {100 * worst / 0.01:.3f}% of a 10 ms step: {verdict} the 1% target")


if __name__ == "__main__":
    main()
