"""The fixed time per kernel replayed in a CUDA graph (devices.toml `kernel_overhead_us`), measured: a line fitted to
time against bytes moved, for device-to-device copies and for one-row GEMMs (x[1, k] @ w[k, n], bf16) of growing
size, each replayed back to back in one graph over enough buffers to defeat the L2 cache; its intercept is the fixed
cost per kernel and its slope the bandwidth. Also the time of a graph of one-element kernels (the launch alone).

Run: python benchmarks/kernel_floor.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math


def graph_time(torch, fn, reps: int, *, warmup: int = 8, replays: int = 9) -> float:
    """Median over `replays` of the seconds per call of `fn(i)`, i < `reps`, captured in one CUDA graph; `warmup`
    eager calls first (cuBLAS handles, workspaces and heuristics stay out of the capture)."""
    for i in range(min(reps, warmup)):
        fn(i)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    return sorted(times)[len(times) // 2]


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept s, slope s/byte) of time against bytes."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    out: dict = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "l2_bytes": l2}

    tiny = [torch.zeros(1, device=dev) for _ in range(4)]
    out["one_element_kernel_s"] = graph_time(torch, lambda i: tiny[i % 4].add_(1.0), 512)

    copies = []
    for mb in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        n = mb * 2**20 // 2
        count = max(2, math.ceil(4 * l2 / (n * 2)))
        src = [torch.randn(n, device=dev, dtype=torch.bfloat16) for _ in range(count)]
        dst = [torch.empty_like(s) for s in src]
        t = graph_time(torch, lambda i: dst[i % count].copy_(src[i % count]), max(count, 32))
        copies.append({"bytes": 2 * n * 2, "s": t})
    gemms = []
    for k, n in ((1024, 1024), (2048, 2048), (4096, 2048), (4096, 4096), (4096, 8192), (8192, 8192),
                 (8192, 14336), (8192, 28672)):
        count = max(2, math.ceil(4 * l2 / (k * n * 2)))
        ws = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(count)]
        x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
        t = graph_time(torch, lambda i: x @ ws[i % count], max(count, 32))
        gemms.append({"k": k, "n": n, "bytes": (k * n + k + n) * 2, "s": t})
    torch.cuda.empty_cache()
    for name, pts in (("copy", copies), ("gemm_m1", gemms)):
        big = [(p["bytes"], p["s"]) for p in pts]
        c0, slope = _fit(big)
        out[name] = {"points": pts, "intercept_us": c0 * 1e6, "bandwidth_gb_s": 1 / slope / 1e9}
        print(f"{name:8} fixed {c0 * 1e6:6.2f} us per kernel, {1 / slope / 1e9:7.0f} GB/s   "
              + "  ".join(f"{p['bytes'] / 2**20:.0f}MiB:{p['s'] * 1e6:.1f}us" for p in pts))
    print(f"one-element kernel in a graph: {out['one_element_kernel_s'] * 1e6:.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
