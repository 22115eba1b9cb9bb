"""Causal attention for training, forward and backward, on the GPU next to gpuwise's kernel price (estimate/kernels.py
`attention_s`): the flash-attention efficiencies of the device profile (cuDNN's kernels, which Transformer Engine and
torchtitan run on Hopper; FlashAttention-2, PyTorch SDPA's flash backend) and their sequence-length curves
(catalog/data/attention_kernels.toml), the part of a long-sequence or context-parallel step that grows as seq^2.

For each batch, sequence length and head count (batch 1 by default, head dim 128, bf16, causal, random inputs), each
SDPA backend's forward and forward + backward are timed with CUDA events around several calls back to back (the
median of three such runs, after warm-up); the backward is their difference. (The first H100 results, 2026-11-27,
synchronized after every call, so calls under ~0.2 ms also timed their host dispatch.) FLOPs are gpuwise's count:
4 x batch x heads x head_dim x seq^2 / 2 for the causal forward, 2.5x that backward.

Run: python benchmarks/attention_train.py [--seqs 4096,16384,65536] [--heads 32,8] [--batches 1,4] [--json FILE]
     (--device cpu: a dry run of the logic at tiny sizes; its times mean nothing)
"""

from __future__ import annotations

import argparse
import json

from bench_device import forward_backward_s  # benchmarks/ is on the path when this file runs as a script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", default="2048,4096,8192,16384,32768,65536")
    ap.add_argument("--heads", default="32,8")
    ap.add_argument("--batches", default="1", help="sequences per call (the batch), comma-separated")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--gpu", help="catalog GPU for the prediction (default: the one torch reports)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from gpuwise.catalog.attention_kernels import flash_tiles
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import attention_s

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    gpu = get_gpu(args.gpu or (torch.cuda.get_device_name(dev) if cuda else "h100-sxm"))
    profile = default_profile(gpu)
    dtype = torch.bfloat16 if cuda else torch.float32
    d = args.head_dim
    backends = [("cudnn", "CUDNN_ATTENTION", False), ("flash", "FLASH_ATTENTION", True)] if cuda \
        else [("math", None, False)]
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print(f"causal attention, head dim {d}, on {name} (catalog {gpu.id}); torch {torch.__version__}")
    print(f"{'backend':7} {'batch':>5} {'heads':>5} {'seq':>6} {'fwd ms':>8} {'pred':>8} {'err':>7} {'TF/s':>6}  "
          f"{'bwd ms':>8} {'pred':>8} {'err':>7} {'TF/s':>6}")
    rows = []
    shapes = [(b, h, s) for b in args.batches.split(",") for h in args.heads.split(",") for s in args.seqs.split(",")]
    for batch, heads, seq in ((int(b), int(h), int(s)) for b, h, s in shapes):
        q, k, v = (torch.randn(batch, heads, seq, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
        g = torch.randn(batch, heads, seq, d, device=dev, dtype=dtype)
        flops = 4.0 * batch * heads * d * seq * seq / 2
        nbytes = 4 * batch * heads * seq * d * 2  # q, k, v in, o out
        for label, attr, sdpa in backends:
            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd():
                q.grad = k.grad = v.grad = None
                fwd().backward(g)

            try:
                if attr is not None:
                    from torch.nn.attention import SDPBackend, sdpa_kernel
                    with sdpa_kernel(getattr(SDPBackend, attr)):
                        tf, tb = forward_backward_s(torch, cuda, fwd, fwd_bwd, calls=10, rounds=3)
                else:
                    tf, tb = forward_backward_s(torch, cuda, fwd, fwd_bwd, rounds=1, warmup=0)
            except RuntimeError as e:
                print(f"{label:7} {batch:5d} {heads:5d} {seq:6d} failed: {str(e).splitlines()[0][:80]}")
                continue
            tiles = flash_tiles(batch, heads, seq)
            pf = attention_s(profile, flops, nbytes, backward=False, sdpa=sdpa, seq=seq, head_dim=d, tiles=tiles)
            pb = attention_s(profile, 2.5 * flops, 2 * nbytes, backward=True, sdpa=sdpa, seq=seq, head_dim=d,
                             tiles=tiles)
            rows.append(dict(backend=label, batch=batch, heads=heads, seq=seq, head_dim=d, flops_forward=flops,
                             forward_s=tf, backward_s=tb, predicted_forward_s=pf, predicted_backward_s=pb))
            print(f"{label:7} {batch:5d} {heads:5d} {seq:6d} {tf * 1e3:8.3f} {pf * 1e3:8.3f} {pf / tf - 1:+7.1%} "
                  f"{flops / tf / 1e12:6.0f}  {tb * 1e3:8.3f} {pb * 1e3:8.3f} {pb / tb - 1:+7.1%} "
                  f"{2.5 * flops / tb / 1e12:6.0f}")
        q = k = v = g = None  # free them before the next size
        if cuda:
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "gpu": gpu.id, "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version() if cuda else None,
                       "peak_bf16_tflops": gpu.peak_flops.get("bf16", 0) / 1e12, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
