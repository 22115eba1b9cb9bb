"""One linear layer's training passes in bf16 and in dynamic tensorwise fp8 on the GPU, next to gpuwise's model of
them (issue 18, defect 2: what an fp8 recipe really costs).

For each weight of a decoder block (q/k/v and gate/up fused) at `tokens` rows, the script times, CUDA-graph
replayed over enough copies to defeat the L2 cache:

- the three bf16 GEMMs (forward x @ w, input gradient dy @ w^T, weight gradient x^T @ dy);
- the three fp8 GEMMs through `torch._scaled_mm` (e4m3 operands, per-tensor scales, bf16 out), each operand in the
  K-major layout Hopper's fp8 kernels take;
- the quantization of each operand, two ways: `eager` as torchao's float8 writes it without torch.compile
  (`torch.max(torch.abs(t))`, then `(t.float() * scale).clamp(...).to(float8)`), and `compiled`, the same function
  through torch.compile (its amax and its cast fused into few kernels); plus the transposed fp8 copies the backward
  GEMMs need (`t.t().contiguous()`).

It prints, per weight, measured next to gpuwise's prediction: the fp8 GEMMs against `matmul_s(..., "fp8")`, the
casts and transposes against `step_time.FP8_QUANTIZE` (torchao eager and compiled), and the layer's fp8 speed-up
over bf16 (forward + backward) as measured and as predicted.

Unlike torchao's Float8Linear, which saves its bf16 input and weight and casts them again in the backward (and,
compiled, runs forward and backward as two graphs), this layer casts each tensor once and reuses the fp8 copies:
its cast time is a floor for torchao's.

Run: python benchmarks/fp8_linear.py [--model llama-3.1-8b] [--tokens 8192] [--json FILE]
     (--device cpu: a dry run of the logic at tiny sizes; its times mean nothing)
"""

from __future__ import annotations

import argparse
import json
import math

from bench_device import add_device_options, open_device  # benchmarks/ is on the path when this file runs

E4M3_MAX = 448.0


def shapes(model: str) -> list[tuple[str, int, int]]:
    from gpuwise.catalog.models import load_model

    s = load_model(model).spec
    h, hd = s.hidden_size, s.head_dim
    out = [("qkv", h, (s.num_heads + 2 * s.num_kv_heads) * hd), ("o", s.num_heads * hd, h)]
    return out + [("gate_up", h, 2 * s.intermediate_size), ("down", s.intermediate_size, h)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tokens", default="8192")
    ap.add_argument("--no-compile", action="store_true")
    add_device_options(ap)
    args = ap.parse_args()

    from gpuwise.estimate.kernels import matmul_s, memory_s
    from gpuwise.estimate.step_time import FP8_QUANTIZE

    d = open_device(args)
    torch, dev, cuda, name, gpu, profile, l2 = d.torch, d.dev, d.cuda, d.name, d.gpu, d.profile, d.l2
    timer = d.timer()
    f8, bf = torch.float8_e4m3fn, torch.bfloat16
    ov = profile.kernel_overhead_s

    def cast_eager(t):  # torchao float8 (tensor_to_amax, to_fp8_saturated) without torch.compile
        amax = torch.max(torch.abs(t)).float()
        scale = E4M3_MAX / torch.clamp(amax, min=1e-12)
        return (t.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(f8), scale.reciprocal()
    # the casts alone compiled once for every shape (dynamic); the whole layer below compiles per shape
    cast_compiled = cast_eager if args.no_compile or not cuda else torch.compile(cast_eager, dynamic=True)

    d.static_compile()

    def bf16_layer(x, w, dy):  # forward, input gradient, weight gradient
        return x @ w, dy @ w.t(), x.t() @ dy

    def fp8_layer(x, w, dy):  # the same in fp8 as torchao's Float8Linear computes it (dynamic tensorwise scales)
        x8, sx = cast_eager(x)
        w8, sw = cast_eager(w)
        dy8, sdy = cast_eager(dy)
        y = torch._scaled_mm(x8, w8.t().contiguous().t(), sx, sw, out_dtype=bf)
        dx = torch._scaled_mm(dy8, w8.t(), sdy, sw, out_dtype=bf)
        dw = torch._scaled_mm(x8.t().contiguous(), dy8.t().contiguous().t(), sx, sdy, out_dtype=bf)
        return y, dx, dw

    rows = []
    print(f"bf16 vs dynamic tensorwise fp8 linear layers on {name} (prediction: catalog {gpu.id}); ms")
    print(f"{'weight':8} {'tokens':>6} {'what':22} {'measured':>9} {'predicted':>9} {'err':>7}")
    for tokens in (int(t) for t in args.tokens.split(",")):
        for wname, k, n in shapes(args.model):
            m = tokens
            if not cuda:
                m, k, n = max(16, m // 64), max(16, k // 256 * 16), max(16, n // 256 * 16)
            copies = max(2, math.ceil(4 * l2 / (k * n * 2)))
            ws = [torch.randn(k, n, device=dev, dtype=bf) * 0.02 for _ in range(copies)]
            x = torch.randn(m, k, device=dev, dtype=bf)
            dy = torch.randn(m, n, device=dev, dtype=bf) * 1e-3
            reps = max(copies, 16 // copies * copies)
            t = lambda fn: timer(fn, reps, copies)  # noqa: E731
            meas = {
                "bf16 fwd": t(lambda i: x @ ws[i % copies]),
                "bf16 dgrad": t(lambda i: dy @ ws[i % copies].t()),
                "bf16 wgrad": t(lambda i: x.t() @ dy),
            }
            # fp8 operands: A row-major (M, K), B column-major (K, N) as _scaled_mm requires
            x8, sx = cast_eager(x)
            dy8, sdy = cast_eager(dy)
            w8s = [cast_eager(w)[0] for w in ws]
            w8cm = [w.t().contiguous().t() for w in w8s]  # (k, n) column-major: forward's B
            w8t = [w for w in w8s]  # (k, n) row-major = (n, k)^T column-major: the input gradient's B
            x8t = x8.t().contiguous()  # (k, m) row-major: the weight gradient's A
            dy8cm = dy8.t().contiguous().t()  # (m, n) column-major: the weight gradient's B
            one = torch.ones((), device=dev)
            meas |= {
                "fp8 fwd": t(lambda i: torch._scaled_mm(x8, w8cm[i % copies], sx, one, out_dtype=bf)),
                "fp8 dgrad": t(lambda i: torch._scaled_mm(dy8, w8t[i % copies].t(), sdy, one, out_dtype=bf)),
                "fp8 wgrad": t(lambda i: torch._scaled_mm(x8t, dy8cm, one, sdy, out_dtype=bf)),
            }
            for style, fn in (("eager", cast_eager), ("compiled", cast_compiled)):
                try:
                    fn(x), fn(dy), fn(ws[0])  # compile (or warm) outside the graph
                except Exception as exc:  # torch.compile unusable here: report the eager casts alone
                    print(f"{style} cast failed ({type(exc).__name__}: {str(exc)[:200]}); timing the eager one")
                    cast_compiled = fn = cast_eager
                meas[f"cast x {style}"] = t(lambda i: fn(x))
                meas[f"cast dy {style}"] = t(lambda i: fn(dy))
                meas[f"cast w {style}"] = t(lambda i: fn(ws[i % copies]))
            meas["transpose x8"] = t(lambda i: x8.t().contiguous())
            meas["transpose dy8"] = t(lambda i: dy8.t().contiguous())
            meas["transpose w8"] = t(lambda i: w8s[i % copies].t().contiguous())
            if cuda and not args.no_compile:  # the whole layer compiled: inductor fuses casts and transposes
                for label, fn in (("bf16 layer whole-compiled", bf16_layer), ("fp8 layer whole-compiled", fp8_layer)):
                    try:
                        cfn = torch.compile(fn)
                        cfn(x, ws[0], dy)
                        meas[label] = t(lambda i: cfn(x, ws[i % copies], dy))
                    except Exception as exc:
                        print(f"{label} failed ({type(exc).__name__}: {str(exc)[:200]})")
            pred = {
                "bf16 fwd": matmul_s(profile, m, n, k, "bf16", 2.0),
                "bf16 dgrad": matmul_s(profile, m, k, n, "bf16", 2.0),
                "bf16 wgrad": matmul_s(profile, k, n, m, "bf16", 2.0),
                "fp8 fwd": matmul_s(profile, m, n, k, "fp8", 1.0),
                "fp8 dgrad": matmul_s(profile, m, k, n, "fp8", 1.0),
                "fp8 wgrad": matmul_s(profile, k, n, m, "fp8", 1.0),
            }
            for style in ("eager", "compiled"):
                q = FP8_QUANTIZE[style]
                pred[f"cast x {style}"] = memory_s(profile, q.cast * m * k) + q.kernels * ov
                pred[f"cast dy {style}"] = memory_s(profile, q.cast * m * n) + q.kernels * ov
                pred[f"cast w {style}"] = memory_s(profile, q.cast * k * n) + q.kernels * ov
            # the transposes, priced at the eager strided copy's rate (the compiled layer writes them in its casts)
            tr = FP8_QUANTIZE["eager"].transpose
            pred["transpose x8"] = memory_s(profile, tr * m * k) + ov
            pred["transpose dy8"] = memory_s(profile, tr * m * n) + ov
            pred["transpose w8"] = memory_s(profile, tr * k * n) + ov
            for style in ("eager", "compiled"):
                for d in (meas, pred):
                    bf16 = d["bf16 fwd"] + d["bf16 dgrad"] + d["bf16 wgrad"]
                    fp8 = (d["fp8 fwd"] + d["fp8 dgrad"] + d["fp8 wgrad"] + d[f"cast x {style}"]
                           + d[f"cast dy {style}"] + d[f"cast w {style}"] + d["transpose x8"] + d["transpose dy8"]
                           + d["transpose w8"])
                    d[f"fp8 layer {style}"] = fp8
                    d["bf16 layer"] = bf16
                    d[f"speed-up {style} (x)"] = bf16 / fp8
            if "fp8 layer whole-compiled" in meas:
                pred["bf16 layer whole-compiled"] = pred["bf16 layer"]
                q = FP8_QUANTIZE["compiled"]  # as step_time prices a compiled torchao layer
                quantize = memory_s(profile, (q.cast + q.transpose) * (m * k + k * n + m * n)) + 3 * q.kernels * ov
                pred["fp8 layer whole-compiled"] = pred["fp8 fwd"] + pred["fp8 dgrad"] + pred["fp8 wgrad"] + quantize
                if "bf16 layer whole-compiled" in meas:
                    meas["speed-up whole-compiled (x)"] = (meas["bf16 layer whole-compiled"]
                                                           / meas["fp8 layer whole-compiled"])
                    pred["speed-up whole-compiled (x)"] = pred["bf16 layer"] / pred["fp8 layer whole-compiled"]
            for what in meas:
                mv, pv = meas[what], pred[what]
                scale = 1.0 if what.startswith("speed") else 1e3
                rows.append(dict(weight=wname, tokens=m, k=k, n=n, what=what, measured=mv, predicted=pv))
                print(f"{wname:8} {m:6d} {what:22} {mv * scale:9.3f} {pv * scale:9.3f} {pv / mv - 1:+7.1%}")
            if cuda:
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "gpu": gpu.id, "torch": torch.__version__, "model": args.model,
                       "rows": rows, "note": "seconds, except speed-up rows (bf16 time / fp8 time)"}, f, indent=1)


if __name__ == "__main__":
    main()
