"""What the GPU benchmark scripts share (fp8_linear.py, moe_grouped_gemm.py, moe_layer.py): their common options, the
device with the catalog GPU and profile gpuwise predicts with, a timer (CUDA-graph replays on a GPU, wall clock for a
`--device cpu` dry run), and torch.compile set to compile each shape once, statically.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass


def add_device_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--gpu", help="catalog GPU for the prediction (default: the one torch reports; h100 on cpu)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")


@dataclass
class Device:
    torch: object
    dev: object
    cuda: bool
    name: str
    """torch's name for the device ('cpu' for a dry run)."""
    gpu: object
    """The catalog GPU the prediction uses."""
    profile: object
    l2: int
    """L2 bytes (1 MiB stands in on the CPU)."""

    def timer(self):
        """fn(i), reps, copies -> seconds per call: the median of CUDA-graph replays, or wall clock on the CPU."""
        torch = self.torch
        if self.cuda:
            from kernel_floor import graph_time  # benchmarks/ is on the path when a script of it runs

            return lambda fn, reps, copies: graph_time(torch, fn, reps, warmup=copies, replays=7)

        def cpu_time(fn, reps, copies):
            t0 = time.perf_counter()
            for i in range(reps):
                fn(i)
            return (time.perf_counter() - t0) / reps
        return cpu_time

    def static_compile(self) -> None:
        """One static torch.compile per shape (as torchtitan compiles for its fixed shapes), never an eager
        fallback at the recompile limit."""
        if not self.cuda:
            return
        import torch._dynamo

        torch._dynamo.config.automatic_dynamic_shapes = False
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 64)


def open_device(args) -> Device:
    import torch

    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    gpu = get_gpu(args.gpu or (name if cuda else "h100"))
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size if cuda else 1 << 20
    return Device(torch, dev, cuda, name, gpu, default_profile(gpu), l2)


def events_time(torch, cuda: bool, fn, *, calls: int = 1, rounds: int = 5, warmup: int = 2) -> float:
    """Seconds per call of `fn()`: `calls` calls back to back between one pair of CUDA events (the host enqueues
    ahead of the GPU, so a short kernel is not timed with its dispatch), the median over `rounds` such runs, after
    `warmup` calls; the wall clock on the CPU."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(rounds):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls)
    return statistics.median(out)


def forward_backward_s(torch, cuda: bool, fwd, fwd_bwd, **kw) -> tuple[float, float]:
    """(forward, backward) seconds per call (`events_time`, its options in `kw`): `fwd` under no_grad, the backward
    as `fwd_bwd` less the forward."""
    with torch.no_grad():
        tf = events_time(torch, cuda, fwd, **kw)
    return tf, max(events_time(torch, cuda, fwd_bwd, **kw) - tf, 1e-9)
