"""Megatron-Core's unfused MoE token permutation on the GPU next to gpuwise's price of it (`layer_ops.
UNFUSED_PERMUTE_BYTES`, measured first on a torchtitan-style layer by benchmarks/moe_layer.py).

Without --moe-permute-fusion, Megatron-Core (megatron/core/transformer/moe/moe_utils.py `permute` / `unpermute`)
gathers the routed copies with `index_select` and sums them back, weighted by their routing probabilities, with
`scatter_add_`; autograd runs the backward. This script times that pair, forward and backward, with balanced routing,
and reports the bytes' worth of the copy rate per (k + 1) x hidden element and pass that gpuwise charges the permute
(one pass forward, two backward), next to the constant and to the bytes the kernels must move (PERMUTE_BYTES).

Run: python benchmarks/moe_permute.py [--models qwen3-30b-a3b,gpt-oss-20b] [--tokens 4096,16384] [--json FILE]
     (--device cpu: a dry run at tiny sizes; its times mean nothing)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench_device import add_device_options, open_device  # benchmarks/ is on the path when this file runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen3-30b-a3b,gpt-oss-20b,deepseek-v3")
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--probs-dtype", default="fp32", choices=("fp32", "bf16"),
                    help="the routing probabilities' dtype (Megatron's --moe-router-dtype fp32 promotes the weighted "
                         "copies to fp32 before the scatter-add; bf16 keeps them in bf16)")
    add_device_options(ap)
    args = ap.parse_args()

    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.layer_ops import PERMUTE_BYTES, UNFUSED_PERMUTE_BYTES

    d = open_device(args)
    torch, dev, cuda, profile = d.torch, d.dev, d.cuda, d.profile
    bf = torch.bfloat16
    rows = []
    print(f"Megatron-Core unfused permute + unpermute (index_select, scatter_add_), bf16, on {d.name}; "
          f"bytes' worth of {profile.bandwidth / 1e9:.0f} GB/s per (k+1) x h element and pass")
    print(f"{'model':14} {'tokens':>6} {'fwd ms':>7} {'bwd ms':>7} {'B/elem':>7} {'gpuwise':>7} {'moved':>6}")
    for model in args.models.split(","):
        spec = load_model(model).spec
        k, h = spec.moe.top_k, spec.hidden_size
        E = spec.moe.num_experts
        for tokens in (int(t) for t in args.tokens.split(",")):
            T = tokens if cuda else max(64, tokens // 64)
            if not cuda:
                h = max(16, spec.hidden_size // 64 // 16 * 16)
            experts = (torch.arange(T * k, device=dev) % E).view(T, k)  # balanced routing
            order = experts.flatten().argsort(stable=True)
            sorted_indices = order // k  # the token of each routed copy, in expert order
            x = torch.randn(T, h, device=dev, dtype=bf, requires_grad=True)
            pdt = torch.float32 if args.probs_dtype == "fp32" else bf
            probs = torch.rand(T * k, device=dev, dtype=pdt)[order].requires_grad_()
            dy = torch.randn(T, h, device=dev, dtype=bf)

            def forward():
                permuted = x.index_select(0, sorted_indices)  # permute
                weighted = permuted * probs.unsqueeze(-1)  # unpermute: fp32 probs promote the copies to fp32
                out = torch.zeros(T, h, device=dev, dtype=weighted.dtype)
                return out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, h), weighted).to(bf)

            fw, bw = [], []
            for i in range(13):
                x.grad = probs.grad = None
                if cuda:
                    a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                    a.record()
                    out = forward()
                    b.record()
                    out.backward(dy)
                    c.record()
                    torch.cuda.synchronize()
                    f, g = a.elapsed_time(b) / 1e3, b.elapsed_time(c) / 1e3
                else:
                    t0 = time.perf_counter()
                    out = forward()
                    t1 = time.perf_counter()
                    out.backward(dy)
                    f, g = t1 - t0, time.perf_counter() - t1
                if i >= 3:
                    fw.append(f)
                    bw.append(g)
            f, g = statistics.median(fw), statistics.median(bw)
            elements = (k + 1) * h * T
            per_pass = (f + g) / 3 * profile.bandwidth / elements
            rows.append(dict(model=model, tokens=T, hidden=h, top_k=k, probs_dtype=args.probs_dtype, forward_s=f,
                             backward_s=g,
                             bytes_per_element_pass=per_pass))
            print(f"{model:14} {T:6d} {f * 1e3:7.3f} {g * 1e3:7.3f} {per_pass:7.1f} {UNFUSED_PERMUTE_BYTES:7.1f} "
                  f"{PERMUTE_BYTES:6.1f}")
            if cuda:
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": d.name, "gpu": d.gpu.id, "torch": torch.__version__,
                       "copy_bandwidth_gb_s": profile.bandwidth / 1e9, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
