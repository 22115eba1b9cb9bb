"""Where a `gpuwise bench train` step's GPU time goes: every step (warm-up and timed) runs under torch.profiler, and
the CUDA kernel time per step is summed by kind (matrix products, attention, optimizer, the rest), next to the wall
time per step the benchmark measured and gpuwise's predicted forward / backward / optimizer split.

GPU busy time well under the wall time means the step is host-bound (launch gaps); kernel time over the prediction
means the kernels themselves are slower than the roofline model says. Meant for a GPU.

Run: python benchmarks/train_kernels.py llama-3.2-1b --seq 4096 --micro-batch 2 [other bench train options]
     [--json FILE]
"""

from __future__ import annotations

import json
import re
import sys

KINDS = (  # first match wins; names as CUDA kernels show them in torch.profiler (cuBLAS, CUTLASS, cuDNN, flash)
    ("attention", re.compile(r"flash|fmha|cudnn|attention|sdpa", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|xmma|nvjet|sm90_|sm80_|ampere_|hopper_", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|foreach", re.I)),
    ("loss", re.compile(r"softmax|nll|cross_entropy|log_softmax", re.I)),
    ("copy/cast", re.compile(r"copy|cast|convert|memcpy|memset|fill", re.I)),
)


def kind(name: str) -> str:
    return next((k for k, rx in KINDS if rx.search(name)), "elementwise/other")


def main() -> None:
    argv = sys.argv[1:]
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out = argv[i + 1]
        del argv[i:i + 2]
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpuwise.cli.main import _parse
    from gpuwise.measure.train_run import bench

    args = _parse(["bench", "train", *argv, "--json"])
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        r = bench(args)
    steps = args.steps + args.warmup_steps
    per_kind: dict[str, float] = {}
    top: list[tuple[float, str]] = []
    for ev in prof.key_averages():
        us = getattr(ev, "self_device_time_total", None)
        if us is None:
            us = ev.self_cuda_time_total
        if us <= 0 or ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if getattr(ev, "is_user_annotation", False) or "#" in ev.key or ev.key.startswith("ProfilerStep"):
            continue  # a range over kernels counted on their own (Optimizer.step#AdamW.step), not a kernel
        per_kind[kind(ev.key)] = per_kind.get(kind(ev.key), 0.0) + us / 1e3 / steps
        top.append((us / 1e3 / steps, ev.key[:90]))
    wall = r.measured.step_time_s * 1e3
    busy = sum(per_kind.values())
    pred = r.prediction.perf.step if r.prediction is not None else None
    rows = {"model": r.config.model.id, "layout": r.config.describe(), "wall_ms": wall, "gpu_busy_ms": busy,
            "kernel_ms_by_kind": per_kind, "top_kernels_ms": sorted(top, reverse=True)[:25],
            "predicted_step_ms": pred.step_time_s * 1e3 if pred else None,
            "predicted_split_ms": ({k: v * 1e3 for k, v in pred.breakdown.items()}
                                   if pred and hasattr(pred, "breakdown") else None),
            "peak_allocated_gib": (r.measured.peak_allocated_bytes or 0) / 2**30}
    print(f"{rows['model']}: {rows['layout']}")
    print(f"  wall {wall:8.1f} ms per step, GPU busy {busy:8.1f} ms ({busy / wall:.0%} of wall); "
          f"predicted {rows['predicted_step_ms'] or float('nan'):.1f} ms")
    for k, v in sorted(per_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {k:18} {v:8.2f} ms")
    for ms, name in rows["top_kernels_ms"][:8]:
        print(f"    {ms:7.2f} ms  {name}")
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
