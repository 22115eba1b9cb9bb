"""Decode-shaped GEMMs (few rows, a large weight) on the GPU next to gpuwise's kernel model (estimate/kernels.py
`matmul_s`): the weight-streaming time that sets the time per output token at small batch.

For each weight shape of a model's decoder block (and its LM head) and each number of rows M, the script times
`x @ w` (bf16) replayed in a CUDA graph (as vLLM and SGLang decode), over enough copies of the weight to defeat the
L2 cache, and reports the time per GEMM, the bytes it must move (weight + input + output) over that time, and the
prediction of `matmul_s` with the catalog's device profile.

Run: python benchmarks/decode_gemm.py [--model llama-3.1-8b] [--tp 1] [--rows 1,8,32,64,128,256] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math

from kernel_floor import graph_time  # benchmarks/ is on the path when this file runs as a script


def shapes(model: str, tp: int = 1) -> list[tuple[str, int, int]]:
    """(name, k, n) of the block's matmuls with q/k/v and gate/up fused, as vLLM runs them, and the LM head, on one
    of `tp` tensor-parallel ranks (column-parallel: n / tp; row-parallel o and down: k / tp)."""
    from gpuwise.catalog.models import load_model

    s = load_model(model).spec
    h, hd = s.hidden_size, s.head_dim
    qkv = (s.num_heads + 2 * s.num_kv_heads) * hd
    out = [("qkv", h, qkv // tp), ("o", s.num_heads * hd // tp, h)]
    out += [("gate_up", h, 2 * s.intermediate_size // tp), ("down", s.intermediate_size // tp, h)] if s.gated_mlp \
        else [("up", h, s.intermediate_size // tp), ("down", s.intermediate_size // tp, h)]
    return out + [("lm_head", h, s.vocab_size // tp)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--rows", default="1,8,32,64,128,256")
    ap.add_argument("--tp", type=int, default=1, help="the shards of one tensor-parallel rank")
    ap.add_argument("--gpu", help="catalog GPU for the prediction (default: the one torch reports)")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import matmul_s

    dev = torch.device("cuda")
    gpu = get_gpu(args.gpu or torch.cuda.get_device_name(dev))
    profile = default_profile(gpu)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    rows = [int(r) for r in args.rows.split(",")]
    results = []
    print(f"{args.model} (TP {args.tp} shards) on {torch.cuda.get_device_name(dev)} (catalog {gpu.id}: copy bandwidth "
          f"{profile.bandwidth / 1e9:.0f} GB/s in the profile)")
    print(f"{'matmul':8} {'M':>4} {'k x n':>14} {'us meas':>8} {'us pred':>8} {'err':>7} {'GB/s':>6}")
    for name, k, n in shapes(args.model, args.tp):
        copies = max(2, math.ceil(4 * l2 / (k * n * 2)))
        ws = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
        for m in rows:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            reps = max(copies, 64 // copies * copies)
            t = graph_time(torch, lambda i: x @ ws[i % copies], reps, warmup=copies, replays=7)
            nbytes = (k * n + m * k + m * n) * 2
            pred = matmul_s(profile, m, n, k, "bf16", 2.0)
            results.append(dict(matmul=name, m=m, k=k, n=n, measured_s=t, predicted_s=pred, bytes=nbytes,
                                achieved_gb_s=nbytes / t / 1e9))
            print(f"{name:8} {m:4d} {f'{k}x{n}':>14} {t * 1e6:8.1f} {pred * 1e6:8.1f} {pred / t - 1:+7.1%} "
                  f"{nbytes / t / 1e9:6.0f}")
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "tp": args.tp, "device": torch.cuda.get_device_name(dev), "gpu": gpu.id,
                       "profile_bandwidth_gb_s": profile.bandwidth / 1e9,
                       "kernel_overhead_us": profile.kernel_overhead_s * 1e6, "torch": torch.__version__,
                       "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
