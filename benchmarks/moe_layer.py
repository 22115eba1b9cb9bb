"""One MoE feed-forward layer, forward and backward, on the GPU next to gpuwise's price of it (issue 18, defect 3:
router, permute/unpermute, grouped GEMMs at the real tokens per expert, the activation).

The layer is written as torchtitan's token-choice MoE runs it on one rank (expert parallelism 1): a router GEMM, a
softmax over the experts and the top-k (renormalized, as Qwen3 does), the routed copies gathered in expert order
(permute), `torch._grouped_mm` for the gate/up and the down projections with SwiGLU between them, the copies
weighted and summed back per token (`index_add_`, the unpermute). Routing is forced to balance (token t's j-th copy
goes to expert (t k + j) mod E, as Megatron's --moe-router-force-load-balancing benchmarks do), so every expert gets
the same rows, as gpuwise assumes. bf16 weights and activations, autograd for the backward.

Timed eager (torchtitan without torch.compile) and compiled (torch.compile over the layer), with CUDA events around
each forward + backward, the median of several; next to the MoE part of `estimate.step_time`'s block price
(`block_ops`: the router and expert GEMMs through `matmul_s`, the permute/unpermute and activation bytes through
`memory_s`, their kernels at the profile's fixed cost), in the matching kernel style (eager / fused).

Run: python benchmarks/moe_layer.py [--models qwen3-30b-a3b,gpt-oss-20b] [--tokens 4096,16384] [--json FILE]
     (--device cpu: a dry run of the logic at tiny sizes; its times mean nothing)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench_device import add_device_options, open_device  # benchmarks/ is on the path when this file runs


def predicted(profile, spec, tokens: int, style: str) -> dict[str, float]:
    """Forward and backward seconds of the MoE feed-forward part of one block, priced as estimate/step_time.py
    prices torchtitan's (one rank, no tensor or expert parallelism; experts as one grouped GEMM, unfused permute)."""
    from gpuwise.estimate.kernels import memory_s
    from gpuwise.estimate.layer_ops import STREAM_BYTES, UNFUSED_PERMUTE_BYTES, block_ops
    from gpuwise.estimate.step_time import gemm_passes_s

    layer = next(i for i, on in enumerate(spec.moe.moe_layers) if on)
    ops = block_ops(spec, layer, tokens=tokens, keys=tokens / 2, style=style)
    gemms = [g for g in ops.gemms if g.name in ("router", "experts_up", "experts_down")]
    moe = spec.moe
    act = STREAM_BYTES[style]["act_gated" if spec.gated_mlp else "act"]
    stream_bytes = tokens * (UNFUSED_PERMUTE_BYTES * (moe.top_k + 1) * spec.hidden_size
                             + act * moe.top_k * moe.expert_intermediate_size)
    stream = memory_s(profile, stream_bytes) + 4 * profile.kernel_overhead_s  # top-k, permute, activation, unpermute
    passes = [gemm_passes_s(profile, g, "bf16", 2.0, grouped=True) for g in gemms]
    fwd = sum(f for f, _, _ in passes)
    bwd = sum(d + w for _, d, w in passes)
    return {"forward": fwd + stream, "backward": bwd + 2 * stream, "gemm_forward": fwd, "gemm_backward": bwd}


def build(torch, spec, tokens: int, dev, shrink: int = 1):
    """(fn, inputs): the layer as a function of (x, router weight, up weight, down weight)."""
    moe = spec.moe
    k = moe.top_k
    E = max(2 * k, moe.num_experts // shrink)
    h = spec.hidden_size if shrink == 1 else max(16, spec.hidden_size // shrink // 16 * 16)  # rows of 16-byte multiples
    inter = moe.expert_intermediate_size if shrink == 1 else max(16, moe.expert_intermediate_size // shrink // 16 * 16)
    T = tokens // shrink
    bf = torch.bfloat16
    F = torch.nn.functional
    # balanced routing: every expert gets T k / E rows (a multiple of 16 for the sizes used here)
    forced = (torch.arange(T * k, device=dev) % E).view(T, k)
    order = forced.flatten().argsort(stable=True)
    offs = (torch.arange(1, E + 1, device=dev) * (T * k // E)).to(torch.int32)
    tok = order // k

    def layer(x, w_router, w_up, w_down):
        probs = (x @ w_router).float().softmax(-1)
        top = probs.topk(k, dim=-1).values  # the router's top-k weights; the copies go to the forced experts
        top = (top / top.sum(-1, keepdim=True)).to(bf)
        xs = x[tok]  # permute: each routed copy in expert order
        g, u = torch._grouped_mm(xs, w_up, offs=offs).chunk(2, dim=-1)
        y = torch._grouped_mm(F.silu(g) * u, w_down, offs=offs)
        y = y * top.flatten()[order, None]
        return torch.zeros_like(x).index_add_(0, tok, y)  # unpermute: the weighted copies summed per token

    def p(*shape):
        return (torch.randn(*shape, device=dev, dtype=bf) * 0.02).requires_grad_()
    x = torch.randn(T, h, device=dev, dtype=bf).requires_grad_()
    return layer, (x, p(h, E), p(E, h, 2 * inter), p(E, inter, h))


def time_layer(torch, dev, fn, inputs, reps: int = 10) -> tuple[float, float]:
    """Median seconds of (forward, forward + backward)."""
    dy = torch.randn_like(inputs[0])

    def once():
        out = fn(*inputs)
        out.backward(dy)
        for t in inputs:
            t.grad = None
    for _ in range(3):
        once()
    cuda = dev.type == "cuda"
    fw, fb = [], []
    for _ in range(reps):
        if cuda:
            a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            a.record()
            out = fn(*inputs)
            b.record()
            out.backward(dy)
            c.record()
            torch.cuda.synchronize()
            fw.append(a.elapsed_time(b) / 1e3)
            fb.append(a.elapsed_time(c) / 1e3)
        else:
            t0 = time.perf_counter()
            out = fn(*inputs)
            t1 = time.perf_counter()
            out.backward(dy)
            fw.append(t1 - t0)
            fb.append(time.perf_counter() - t0)
        for t in inputs:
            t.grad = None
    return statistics.median(fw), statistics.median(fb)


def profile_layer(torch, dev, fn, inputs) -> dict[str, float]:
    """Seconds of device time per kernel name over one eager forward + backward (after the timed runs)."""
    from torch.profiler import ProfilerActivity, profile

    dy = torch.randn_like(inputs[0])
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn(*inputs).backward(dy)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.events():
        if getattr(ev, "device_type", None) is not None and str(ev.device_type).endswith("CUDA"):
            out[ev.name[:90]] = out.get(ev.name[:90], 0.0) + ev.time_range.elapsed_us() / 1e6
    for t in inputs:
        t.grad = None
    total = sum(out.values())
    print(f"  device time per kernel, one eager forward + backward: {total * 1e3:.3f} ms in all")
    for n, s in sorted(out.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {s * 1e3:8.3f} ms {s / total:5.1%}  {n}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen3-30b-a3b,gpt-oss-20b")
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="also print the device time per kernel of one eager forward + backward (torch.profiler)")
    add_device_options(ap)
    args = ap.parse_args()

    from gpuwise.catalog.models import load_model

    d = open_device(args)
    torch, dev, cuda, name, gpu, profile = d.torch, d.dev, d.cuda, d.name, d.gpu, d.profile
    d.static_compile()
    rows = []
    print(f"MoE feed-forward layer (router, permute, grouped GEMMs, SwiGLU, unpermute), bf16, on {name} "
          f"(prediction: catalog {gpu.id}); ms")
    print(f"{'model':16} {'tokens':>6} {'style':8} {'fwd meas':>8} {'fwd pred':>8} {'err':>7} {'f+b meas':>8} "
          f"{'f+b pred':>8} {'err':>7} {'gemm share pred':>15}")
    for model in args.models.split(","):
        spec = load_model(model).spec
        for tokens in (int(t) for t in args.tokens.split(",")):
            layer, inputs = build(torch, spec, tokens, dev, shrink=1 if cuda else 16)
            for style, key in (("eager", "eager"), ("compiled", "fused")):
                if style == "compiled" and (args.no_compile or not cuda):
                    continue
                fn = layer if style == "eager" else torch.compile(layer)
                try:
                    f, fb = time_layer(torch, dev, fn, inputs)
                except Exception as exc:
                    print(f"{model} {tokens} {style} failed ({type(exc).__name__}: {str(exc)[:300]})")
                    continue
                pr = predicted(profile, spec, tokens, key)
                pf, pfb = pr["forward"], pr["forward"] + pr["backward"]
                share = (pr["gemm_forward"] + pr["gemm_backward"]) / pfb
                rows.append(dict(model=model, tokens=tokens, style=style, forward_s=f, forward_backward_s=fb,
                                 predicted_forward_s=pf, predicted_forward_backward_s=pfb, predicted=pr))
                print(f"{model:16} {tokens:6d} {style:8} {f * 1e3:8.3f} {pf * 1e3:8.3f} {pf / f - 1:+7.1%} "
                      f"{fb * 1e3:8.3f} {pfb * 1e3:8.3f} {pfb / fb - 1:+7.1%} {share:15.0%}")
            if args.profile:
                kernels = profile_layer(torch, dev, layer, inputs)
                rows.append(dict(model=model, tokens=tokens, style="eager", kernels_s=kernels))
            del inputs
            if cuda:
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "gpu": gpu.id, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
