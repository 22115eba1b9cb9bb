"""MoE expert GEMMs on the GPU next to gpuwise's kernel model (issue 18: grouped-GEMM throughput vs tokens per expert).

gpuwise times a rank's routed experts as `local` separate GEMMs of `per_expert` rows each (estimate/layer_ops.py
`experts_up` / `experts_down`, estimate/step_time.py: forward m x n x k, input gradient m x k x n, weight gradient
k x n x m, each through `kernels.matmul_s`). This script times the same products on the device two ways, bf16,
with balanced routing (every local expert gets the same rows):

- `grouped`: one `torch._grouped_mm` per pass (PyTorch's CUTLASS grouped GEMM: all experts' tiles in one
  persistent launch), as torchtitan runs its experts;
- `loop`: one cuBLAS `torch.mm` per expert, in order, replayed in a CUDA graph so that launches cost nothing;
- `streams4`: the same GEMMs with expert e on side stream e mod 4, as Transformer Engine's GroupedLinear runs them on
  Hopper (`multi_stream_cublas_gemm`, four compute streams; its CUTLASS grouped GEMM is off by default).

Shapes come from gpuwise's own block decomposition of each catalog model (`block_ops`) at an expert-parallel size
and tokens per micro-batch, so measured and predicted are the same products. Times are medians of CUDA-graph
replays over enough copies of the expert weights to defeat the L2 cache.

Run: python benchmarks/moe_grouped_gemm.py [--models qwen3-30b-a3b:8,...] [--tokens 2048,8192] [--json FILE]
     (--device cpu: a dry run of the script's logic at tiny sizes; its times mean nothing)
"""

from __future__ import annotations

import argparse
import json
import math

from bench_device import add_device_options, open_device  # benchmarks/ is on the path when this file runs

DEFAULT_MODELS = "qwen3-30b-a3b:8,gpt-oss-120b:8,deepseek-v3:32,qwen3-235b-a22b:16,mixtral-8x7b:4"


def expert_gemms(model: str, ep: int, tokens: int):
    """(spec, up, down): the Gemm entries gpuwise times for one MoE layer of `model` on one of `ep` expert-parallel
    ranks, `tokens` tokens routed per micro-batch (no tensor parallelism)."""
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.layer_ops import block_ops

    spec = load_model(model).spec
    layer = next(i for i, on in enumerate(spec.moe.moe_layers) if on)
    ops = block_ops(spec, layer, tokens=tokens, keys=tokens / 2, ep=ep)
    g = {x.name: x for x in ops.gemms}
    return spec, g["experts_up"], g["experts_down"]


def predicted(profile, g) -> dict[str, float]:
    """The three passes of one expert Gemm as estimate/step_time.py prices them (bf16, 2-byte operands)."""
    from gpuwise.estimate.kernels import matmul_s

    return {"fwd": g.count * matmul_s(profile, g.m, g.n, g.k, "bf16", 2.0),
            "dgrad": g.count * matmul_s(profile, g.m, g.k, g.n, "bf16", 2.0),
            "wgrad": g.count * matmul_s(profile, g.k, g.n, g.m, "bf16", 2.0)}


def measure(torch, dev, g, timer, l2: int) -> dict[str, dict[str, float]]:
    """Seconds per pass (fwd, dgrad, wgrad) of `g.count` experts of `g.m` rows each, grouped and looped."""
    E, m, n, k = g.count, g.m, g.n, g.k
    bf = torch.bfloat16
    copies = max(2, math.ceil(4 * l2 / (E * k * n * 2)))
    ws = [torch.randn(E, k, n, device=dev, dtype=bf) * 0.02 for _ in range(copies)]
    wts = [w.transpose(1, 2) for w in ws]  # (E, n, k) views: the input-gradient product's B, as autograd passes it
    x = torch.randn(E * m, k, device=dev, dtype=bf)
    dy = torch.randn(E * m, n, device=dev, dtype=bf)
    offs = torch.arange(1, E + 1, device=dev, dtype=torch.int32) * m
    reps = max(copies, 16 // copies * copies)
    grouped = {
        "fwd": lambda i: torch._grouped_mm(x, ws[i % copies], offs=offs),
        "dgrad": lambda i: torch._grouped_mm(dy, wts[i % copies], offs=offs),
        "wgrad": lambda i: torch._grouped_mm(x.t(), dy, offs=offs),
    }
    xs, dys = x.view(E, m, k), dy.view(E, m, n)

    def expert(kind, e, w):  # one expert's product of the pass
        if kind == "fwd":
            return xs[e] @ w[e]
        if kind == "dgrad":
            return dys[e] @ w[e].t()
        return xs[e].t() @ dys[e]

    def loop(kind):
        def run(i):
            w = ws[i % copies]
            for e in range(E):
                expert(kind, e, w)
        return run
    def streams(kind, n=4):  # Transformer Engine's multi_stream_cublas_gemm: expert e on compute stream e % 4
        side = [torch.cuda.Stream(device=dev) for _ in range(n)] if dev.type == "cuda" else []
        one = loop(kind)

        def run(i):
            if not side:
                return one(i)
            main = torch.cuda.current_stream(dev)
            fork = torch.cuda.Event()
            fork.record(main)
            for s in side:
                s.wait_event(fork)
            w = ws[i % copies]
            for e in range(E):
                with torch.cuda.stream(side[e % n]):
                    expert(kind, e, w)
            for s in side:
                join = torch.cuda.Event()
                join.record(s)
                main.wait_event(join)
        return run
    out = {"grouped": {}, "loop": {}, "streams4": {}}
    for kind, fn in grouped.items():
        out["grouped"][kind] = timer(fn, reps, copies)
        out["loop"][kind] = timer(loop(kind), reps, copies)
        out["streams4"][kind] = timer(streams(kind), reps, copies)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="model:ep,... (catalog names)")
    ap.add_argument("--tokens", default="1024,4096,16384", help="tokens per micro-batch on one rank")
    add_device_options(ap)
    args = ap.parse_args()

    d = open_device(args)
    torch, dev, cuda, name, gpu, profile, l2 = d.torch, d.dev, d.cuda, d.name, d.gpu, d.profile, d.l2
    timer = d.timer()
    rows = []
    print(f"MoE expert GEMMs, bf16, on {name} (prediction: catalog {gpu.id}); ms per layer pass, all local experts")
    print(f"{'model':16} {'ep':>3} {'gemm':5} {'E':>3} {'rows/exp':>8} {'pass':5} {'pred':>7} {'grouped':>7} "
          f"{'loop':>7} {'streams4':>8} {'err vs grouped':>14} {'err vs streams4':>15} {'TFLOP/s grouped':>15}")
    for item in args.models.split(","):
        model, ep = item.split(":")
        for tokens in (int(t) for t in args.tokens.split(",")):
            spec, up, down = expert_gemms(model, int(ep), tokens)
            for g in (up, down):
                if not cuda:  # a dry run: shrink every dimension
                    g = type(g)(g.name, max(1, g.m // 64), max(8, g.n // 512 * 8), max(8, g.k // 512 * 8),
                                min(g.count, 4))
                pred = predicted(profile, g)
                meas = measure(torch, dev, g, timer, l2)
                for kind in ("fwd", "dgrad", "wgrad"):
                    gm, lp, pr = meas["grouped"][kind], meas["loop"][kind], pred[kind]
                    s4 = meas["streams4"][kind]
                    flops = 2.0 * g.m * g.n * g.k * g.count
                    rows.append(dict(model=model, ep=int(ep), tokens=tokens, gemm=g.name, experts=g.count,
                                     rows_per_expert=g.m, n=g.n, k=g.k, pass_=kind, predicted_s=pr, grouped_s=gm,
                                     loop_s=lp, streams4_s=s4, flops=flops))
                    print(f"{model:16} {ep:>3} {g.name[8:]:5} {g.count:3d} {g.m:8d} {kind:5} {pr * 1e3:7.3f} "
                          f"{gm * 1e3:7.3f} {lp * 1e3:7.3f} {s4 * 1e3:8.3f} {pr / gm - 1:+14.1%} "
                          f"{pr / s4 - 1:+15.1%} {flops / gm / 1e12:15.0f}")
                if cuda:
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "gpu": gpu.id, "torch": torch.__version__,
                       "bf16_sustained_tflops": profile.matmul_flops("bf16") / 1e12, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
