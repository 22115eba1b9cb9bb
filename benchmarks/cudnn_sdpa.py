"""cuDNN's fused attention as Transformer Engine runs it for Megatron-Core, forward and backward, with what GPT-OSS
adds: a learnable softmax offset per head (attention sinks: `softmax_type = "learnable"`, which disables
FlashAttention in Transformer Engine and leaves cuDNN's FusedAttention) and a sliding window of 128 keys on every
second layer (`window_size = (127, 0)`: cuDNN's diagonal band, left bound 128). Issue 18: Megatron-Bridge's GPT-OSS-120B
runs are predicted 27-41% too fast on every GPU; gpuwise prices its attention at the flash curves for head dim 64
(the window layers at the curve's 128-token point) with no cost for the sinks.

Each variant (causal; causal + sink; window; window + sink) is built as a cuDNN frontend graph (the Python binding,
package nvidia-cudnn-frontend, over the cuDNN that PyTorch ships), timed with CUDA events around several executions
back to back (the median of three runs after warm-up), forward and backward separately. bshd layout (Megatron's
THD/sbhd differ only in strides), bf16, fp32 statistics, grouped-query K/V heads as the model has them. PyTorch's
SDPA (cuDNN and flash backends, causal, no sink) is timed beside it on the same shapes as a cross-check. `--check`
first compares each variant with a float32 reference (softmax with the sink's column, then dropped) at 512 tokens.

`--predict FILE` (any machine, no GPU): the measured file next to gpuwise's `attention_s`, priced as
`estimate/step_time.py` prices a block (flops from `keys_per_query` times `band_work`, the kernel's sequence the
window, its thread blocks from `flash_tiles`, the sinks' backward from `sink_backward_s`); TFLOP/s count the pairs
kept.

Run: python benchmarks/cudnn_sdpa.py [--seqs 4096,8192] [--batches 1,4] [--check] [--json FILE]
     python benchmarks/cudnn_sdpa.py --predict FILE [--gpu h200]
"""

from __future__ import annotations

import argparse
import json
import math

SHAPES = {  # name: (query heads, K/V heads, head dim)
    "gpt-oss": (64, 8, 64),
    "llama-8b": (32, 8, 128),
}
VARIANTS = ("causal", "causal+sink", "window", "window+sink")
UID = dict(q=1, k=2, v=3, o=4, stats=5, sink=6, dO=7, dQ=8, dK=9, dV=10, dSink=11)


def _strides(b, h, s, d):  # logical (b, h, s, d) over memory laid out (b, s, h, d)
    return (s * h * d, d, h * d, 1)


def build(cudnn, handle, b, hq, hkv, s, d, *, window, sink, backward):
    """One forward or backward cuDNN graph; returns it (built) and its workspace size."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    bf = cudnn.data_type.BFLOAT16
    q = g.tensor(uid=UID["q"], dim=(b, hq, s, d), stride=_strides(b, hq, s, d), data_type=bf)
    k = g.tensor(uid=UID["k"], dim=(b, hkv, s, d), stride=_strides(b, hkv, s, d), data_type=bf)
    v = g.tensor(uid=UID["v"], dim=(b, hkv, s, d), stride=_strides(b, hkv, s, d), data_type=bf)
    stats_dim, stats_stride = (b, hq, s, 1), (hq * s, s, 1, 1)
    sink_t = dsink_t = None
    if sink:
        sink_t = g.tensor(uid=UID["sink"], dim=(1, hq, 1, 1), stride=(hq, 1, 1, 1), data_type=cudnn.data_type.FLOAT)
    band = dict(diagonal_band_right_bound=0)  # causal
    if window:
        band["diagonal_band_left_bound"] = window
    scale = 1.0 / math.sqrt(d)
    if not backward:
        o, stats = g.sdpa(name="fwd", q=q, k=k, v=v, generate_stats=True, attn_scale=scale, sink_token=sink_t, **band)
        o.set_uid(UID["o"]).set_output(True).set_dim((b, hq, s, d)).set_stride(_strides(b, hq, s, d))
        stats.set_uid(UID["stats"]).set_output(True).set_data_type(cudnn.data_type.FLOAT) \
            .set_dim(stats_dim).set_stride(stats_stride)
    else:
        o = g.tensor(uid=UID["o"], dim=(b, hq, s, d), stride=_strides(b, hq, s, d), data_type=bf)
        dO = g.tensor(uid=UID["dO"], dim=(b, hq, s, d), stride=_strides(b, hq, s, d), data_type=bf)
        stats = g.tensor(uid=UID["stats"], dim=stats_dim, stride=stats_stride, data_type=cudnn.data_type.FLOAT)
        if sink:
            dsink_t = g.tensor(uid=UID["dSink"], dim=(1, hq, 1, 1), stride=(hq, 1, 1, 1),
                               data_type=cudnn.data_type.FLOAT)
        dQ, dK, dV = g.sdpa_backward(name="bwd", q=q, k=k, v=v, o=o, dO=dO, stats=stats, attn_scale=scale,
                                     sink_token=sink_t, dSink_token=dsink_t, **band)
        dQ.set_uid(UID["dQ"]).set_output(True).set_dim((b, hq, s, d)).set_stride(_strides(b, hq, s, d))
        dK.set_uid(UID["dK"]).set_output(True).set_dim((b, hkv, s, d)).set_stride(_strides(b, hkv, s, d))
        dV.set_uid(UID["dV"]).set_output(True).set_dim((b, hkv, s, d)).set_stride(_strides(b, hkv, s, d))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, g.get_workspace_size()


def tensors(torch, b, hq, hkv, s, d, *, sink):
    """Random inputs and outputs in (b, s, h, d) memory; poisoned outputs."""
    bf, dev = torch.bfloat16, "cuda"
    t = {"q": torch.randn(b, s, hq, d, device=dev, dtype=bf), "k": torch.randn(b, s, hkv, d, device=dev, dtype=bf),
         "v": torch.randn(b, s, hkv, d, device=dev, dtype=bf),
         "o": torch.full((b, s, hq, d), float("nan"), device=dev, dtype=bf),
         "stats": torch.full((b, hq, s, 1), float("nan"), device=dev, dtype=torch.float32),
         "dO": torch.randn(b, s, hq, d, device=dev, dtype=bf)}
    t["dQ"], t["dK"], t["dV"] = (torch.full_like(t[n], float("nan")) for n in ("q", "k", "v"))
    if sink:
        t["sink"] = torch.randn(1, hq, 1, 1, device=dev, dtype=torch.float32)
        t["dSink"] = torch.zeros(1, hq, 1, 1, device=dev, dtype=torch.float32)
    return t


def pack(t, names):
    return {UID[n]: t[n] for n in names if n in t}


FWD = ("q", "k", "v", "o", "stats", "sink")
BWD = ("q", "k", "v", "o", "stats", "sink", "dO", "dQ", "dK", "dV", "dSink")


def reference(torch, t, hq, hkv, d, *, window, sink):
    """float32 attention: o and (with autograd) dQ, dK, dV, dSink for dO."""
    q, k, v = (t[n].float().transpose(1, 2).detach().requires_grad_() for n in ("q", "k", "v"))  # (b, h, s, d)
    rep = hq // hkv
    kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = q.shape[2]
    scores = q @ kk.transpose(-1, -2) / math.sqrt(d)
    i = torch.arange(s, device=q.device)
    masked = i[None, :] > i[:, None]
    if window:
        masked |= i[None, :] <= i[:, None] - window
    scores = scores.masked_fill(masked, float("-inf"))
    sk = None
    if sink:
        sk = t["sink"].detach().clone().requires_grad_()
        col = sk.expand(q.shape[0], hq, s, 1)
        p = torch.softmax(torch.cat([scores, col], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(scores, dim=-1)
    o = p @ vv
    o.backward(t["dO"].float().transpose(1, 2))
    out = {"o": o.transpose(1, 2), "dQ": q.grad.transpose(1, 2), "dK": k.grad.transpose(1, 2),
           "dV": v.grad.transpose(1, 2)}
    if sink:
        out["dSink"] = sk.grad
    return out


def rel(torch, a, b):
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("nan")
    return ((a - b).norm() / b.norm()).item()


def measure(args) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.backends.cudnn.version()  # loads PyTorch's libcudnn before the frontend looks for one
    import cudnn

    from bench_device import events_time, forward_backward_s  # benchmarks/ is on the path when run as a script

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    name = torch.cuda.get_device_name()
    meta = {"device": name, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "cudnn_backend": cudnn.backend_version(), "cudnn_frontend": cudnn.__version__}
    print(meta)
    rows, checks = [], []

    def run(shape, b, s, variant, check=False):
        hq, hkv, d = SHAPES[shape]
        window = args.window if variant.startswith("window") else None
        sink = variant.endswith("sink")
        try:
            fg, fws = build(cudnn, handle, b, hq, hkv, s, d, window=window, sink=sink, backward=False)
            bg, bws = build(cudnn, handle, b, hq, hkv, s, d, window=window, sink=sink, backward=True)
        except Exception as e:  # not supported on this cuDNN: say so, go on
            print(f"{shape:8} b{b} s{s} {variant:12} not built: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            return None
        t = tensors(torch, b, hq, hkv, s, d, sink=sink)
        ws = torch.empty(max(fws, bws, 1), device="cuda", dtype=torch.uint8)
        fp, bp = pack(t, FWD), pack(t, BWD)
        fg.execute(fp, ws, handle)
        bg.execute(bp, ws, handle)
        torch.cuda.synchronize()
        if check:
            ref = reference(torch, t, hq, hkv, d, window=window, sink=sink)
            errs = {n: rel(torch, t[n], ref[n]) for n in ref}
            checks.append(dict(shape=shape, batch=b, seq=s, variant=variant, rel_err=errs))
            print(f"check {shape:8} b{b} s{s} {variant:12} " + " ".join(f"{n} {e:.1e}" for n, e in errs.items()))
            return None
        tf = events_time(torch, True, lambda: fg.execute(fp, ws, handle), calls=10, rounds=3)
        tb = events_time(torch, True, lambda: bg.execute(bp, ws, handle), calls=10, rounds=3)
        row = dict(kernel="cudnn-frontend", shape=shape, batch=b, seq=s, heads=hq, kv_heads=hkv, head_dim=d,
                   variant=variant, window=window, forward_s=tf, backward_s=tb)
        rows.append(row)
        print(f"{shape:8} b{b} s{s:5d} {variant:12} fwd {tf * 1e3:7.3f} ms  bwd {tb * 1e3:7.3f} ms")
        return row

    if args.check:
        for shape in SHAPES:
            for variant in VARIANTS:
                run(shape, 1, 512, variant, check=True)
    for shape in args.shapes.split(","):
        for b in (int(x) for x in args.batches.split(",")):
            for s in (int(x) for x in args.seqs.split(",")):
                for variant in VARIANTS:
                    run(shape, b, s, variant)
                hq, hkv, d = SHAPES[shape]  # PyTorch SDPA, causal, no sink: the same kernels through another door
                q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                        for _ in range(2))
                go = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
                for label, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                                       ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

                    def fwd_bwd():
                        q.grad = k.grad = v.grad = None
                        fwd().backward(go)
                    try:
                        with sdpa_kernel(backend):
                            tf, tb = forward_backward_s(torch, True, fwd, fwd_bwd, calls=10, rounds=3)
                    except RuntimeError as e:
                        print(f"{shape:8} b{b} s{s:5d} {label:12} failed: {str(e).splitlines()[0][:100]}")
                        continue
                    rows.append(dict(kernel=label, shape=shape, batch=b, seq=s, heads=hq, kv_heads=hkv, head_dim=d,
                                     variant="causal", window=None, forward_s=tf, backward_s=tb))
                    print(f"{shape:8} b{b} s{s:5d} {label:12} fwd {tf * 1e3:7.3f} ms  bwd {tb * 1e3:7.3f} ms")
                q = k = v = go = None
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "window": args.window, "checks": checks, "rows": rows}, f, indent=1)


def predict(path: str, gpu_id: str | None) -> None:
    """The measured rows next to gpuwise's price of the same kernels."""
    from gpuwise.catalog.attention_kernels import band_pairs, band_work, flash_tiles, sink_backward_s
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import attention_s

    with open(path) as f:
        data = json.load(f)
    gpu = get_gpu(gpu_id or data["device"])
    profile = default_profile(gpu)
    print("| kernel | shape | batch | seq | variant | fwd ms | predicted | error | TFLOP/s | bwd ms | predicted "
          "| error | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in data["rows"]:
        b, s, hq, d, w = r["batch"], r["seq"], r["heads"], r["head_dim"], r["window"]
        keys = band_pairs(0, s, w or s) / s  # layer_ops.keys_per_query
        flops = 4.0 * b * s * keys * hq * d  # scores and values, forward, the pairs kept
        work = flops * band_work(w, s)  # the pairs the kernel computes (step_time prices the same)
        nbytes = 2.0 * b * s * d * (2 * hq + 2 * r["kv_heads"])  # q, o; k, v (bf16)
        tiles = flash_tiles(b, hq, s)
        kseq = min(s, w) if w else s
        sdpa = r["kernel"] == "sdpa-flash"
        pf = attention_s(profile, work, nbytes, backward=False, dtype="bf16", sdpa=sdpa, seq=kseq, head_dim=d,
                         tiles=tiles)
        pb = attention_s(profile, 2.5 * work, 2 * nbytes, backward=True, dtype="bf16", sdpa=sdpa, seq=kseq,
                         head_dim=d, tiles=tiles)
        if r["variant"].endswith("sink"):
            pb += sink_backward_s("cudnn", b * hq * s)
        tf, tb = r["forward_s"], r["backward_s"]
        print(f"| {r['kernel']} | {r['shape']} | {b} | {s} | {r['variant']} | {tf * 1e3:.3f} | {pf * 1e3:.3f} | "
              f"{pf / tf - 1:+.0%} | {flops / tf / 1e12:.0f} | {tb * 1e3:.3f} | {pb * 1e3:.3f} | {pb / tb - 1:+.0%} | "
              f"{2.5 * flops / tb / 1e12:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="gpt-oss,llama-8b", help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--seqs", default="4096,8192")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--window", type=int, default=128, help="keys a query sees in a window layer, itself included")
    ap.add_argument("--check", action="store_true", help="first compare each variant with a float32 reference")
    ap.add_argument("--json")
    ap.add_argument("--predict", metavar="FILE", help="print a measured FILE next to gpuwise's prices (no GPU)")
    ap.add_argument("--gpu", help="catalog GPU for --predict (default: the file's device)")
    args = ap.parse_args()
    if args.predict:
        predict(args.predict, args.gpu)
    else:
        measure(args)


if __name__ == "__main__":
    main()
