"""Prefill on the GPU next to gpuwise's forward-pass model (estimate/infer_time.py `forward_pass_s`), in bursts and
sustained: does a dense model's prefill run at the rate the kernel model gives, and does it keep that rate for a
minute, as a serving engine at full load must (issue 19: prefill-heavy serving runs measured slower than predicted)?

The model is a plain decoder stack with the catalog model's shapes and random bf16 weights (every layer its own, so
the weights are read from DRAM as in a real model): RMSNorm, fused QKV, per-head q/k RMSNorm where the model has it,
SDPA causal attention, O projection, RMSNorm, fused gate/up, SiLU x up, down, residual adds; the LM head on each
sequence's last token. No RoPE (an elementwise pass, under 1% of the time). The same shapes vLLM runs, with
PyTorch's kernels (cuBLAS, and the best of the SDPA backends) in place of vLLM's.

It prints and writes, for each shape (sequences x prompt tokens): the pass's median time in a burst (10 passes after
warm-up) and gpuwise's prediction with its parts; the block's GEMMs and the attention kernel alone at the first shape;
then the first shape's passes back to back for `--seconds`, with the SM clock, power and throttle reasons that
nvidia-smi logs every 250 ms, so a throughput that falls as the card heats or reaches its power limit shows.

Run: python benchmarks/prefill_sustained.py [--model qwen3-14b] [--shapes 2x4096,1x2048,4x4096] [--seconds 60]
     [--json FILE] [--smi-log FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import time

from bench_device import events_time  # benchmarks/ is on the path when this file runs as a script

SMI_FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
SMI_BASIC = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"


class Stack:
    """Random bf16 weights with the spec's shapes, and the prefill forward over them."""

    def __init__(self, torch, spec, dev, dtype, layers: int) -> None:
        self.torch, self.spec = torch, spec
        h, hd = spec.hidden_size, spec.head_dim
        self.nq, self.nkv, self.hd, self.h = spec.num_heads, spec.num_kv_heads, hd, h
        self.qk_norm = spec.qk_norm == "head"
        qkv = (self.nq + 2 * self.nkv) * hd
        ffn = spec.intermediate_size

        def w(k, n):
            return (torch.randn(k, n, device=dev, dtype=dtype) * k ** -0.5)
        self.layers = [dict(qkv=w(h, qkv), o=w(self.nq * hd, h), gate_up=w(h, 2 * ffn), down=w(ffn, h),
                            ln1=torch.ones(h, device=dev, dtype=dtype), ln2=torch.ones(h, device=dev, dtype=dtype),
                            qn=torch.ones(hd, device=dev, dtype=dtype), kn=torch.ones(hd, device=dev, dtype=dtype))
                       for _ in range(layers)]
        self.head = w(h, spec.vocab_size)
        self.ffn = ffn
        self.sdpa_backend = None
        self.native_gqa = True
        """K/V heads handed to SDPA as they are (`enable_gqa`); False: repeated to the query heads first, where the
        backend refuses them (the time then includes the repeat)."""

    def _sdpa(self, q, k, v, **kw):
        F = self.torch.nn.functional
        if self.sdpa_backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel(self.sdpa_backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)

    def attention(self, q, k, v):
        """q: (B, nq, L, hd), k and v: (B, nkv, L, hd); causal."""
        if self.nkv == self.nq:
            return self._sdpa(q, k, v)
        if self.native_gqa:
            try:
                return self._sdpa(q, k, v, enable_gqa=True)
            except (RuntimeError, TypeError):
                self.native_gqa = False
        rep = self.nq // self.nkv
        return self._sdpa(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1))

    def forward(self, x, batch: int, seq: int):
        """x: (batch x seq, hidden) -> logits of each sequence's last token."""
        F = self.torch.nn.functional
        h, hd, nq, nkv = self.h, self.hd, self.nq, self.nkv
        for p in self.layers:
            y = F.rms_norm(x, (h,), p["ln1"], 1e-6)
            qkv = y @ p["qkv"]
            q, k, v = qkv.split((nq * hd, nkv * hd, nkv * hd), dim=-1)
            q = q.view(batch, seq, nq, hd)
            k = k.view(batch, seq, nkv, hd)
            if self.qk_norm:
                q, k = F.rms_norm(q, (hd,), p["qn"], 1e-6), F.rms_norm(k, (hd,), p["kn"], 1e-6)
            v = v.view(batch, seq, nkv, hd)
            a = self.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            x = x + a.transpose(1, 2).reshape(batch * seq, nq * hd) @ p["o"]
            y = F.rms_norm(x, (h,), p["ln2"], 1e-6)
            g, u = (y @ p["gate_up"]).split(self.ffn, dim=-1)
            x = x + (F.silu(g) * u) @ p["down"]
        last = x.view(batch, seq, h)[:, -1]
        return F.rms_norm(last, (h,), self.layers[-1]["ln1"], 1e-6) @ self.head


def _smi_start(path: str):
    """nvidia-smi logging every 250 ms to `path`, or None where there is no nvidia-smi."""
    for fields in (SMI_FIELDS, SMI_BASIC):
        try:
            fh = open(path, "w")
            fh.write(fields + "\n")
            fh.flush()
            cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "250"]
            p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.DEVNULL)
        except OSError:
            return None
        time.sleep(1.0)
        if p.poll() is None:
            return p
    return None


def _smi_rows(path: str, start: dt.datetime, end: dt.datetime) -> list[dict]:
    rows = []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return rows
    names = lines[0].split(",") if lines else []
    for line in lines[1:]:
        parts = [s.strip() for s in line.split(",")]
        if len(parts) != len(names):
            continue
        try:
            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
        except ValueError:
            continue
        if start <= t <= end:
            rows.append(dict(zip(names, parts)))
    return rows


def _median_field(rows: list[dict], name: str) -> float | None:
    vals = []
    for r in rows:
        try:
            vals.append(float(r[name]))
        except (KeyError, ValueError):
            pass
    return statistics.median(vals) if vals else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-14b")
    ap.add_argument("--shapes", default="2x4096,1x2048,4x4096", help="sequences x prompt tokens, comma-separated; "
                    "the first is also timed part by part and sustained")
    ap.add_argument("--layers", type=int, help="build this many layers (default: the model's)")
    ap.add_argument("--seconds", type=float, default=60.0, help="the sustained run's length")
    ap.add_argument("--gpu", help="catalog GPU for the prediction (default: the one torch reports)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    ap.add_argument("--smi-log", default="prefill-smi.csv")
    args = ap.parse_args()

    import torch

    from gpuwise.catalog.attention_kernels import flash_tiles
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import engine_perf, forward_pass_s
    from gpuwise.estimate.kernels import attention_s, matmul_s
    from gpuwise.estimate.layer_ops import attention_head_dim, block_ops, keys_per_query

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    gpu = get_gpu(args.gpu or (torch.cuda.get_device_name(dev) if cuda else "h100-sxm"))
    profile = default_profile(gpu)
    spec = load_model(args.model).spec
    layers = args.layers or spec.num_layers
    dtype = torch.bfloat16 if cuda else torch.float32
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
    torch.manual_seed(0)
    stack = Stack(torch, spec, dev, dtype, layers)
    scale = layers / spec.num_layers  # the prediction is for the whole model: scale it to the layers built
    topo = topology(gpu, num_gpus=1)
    eng = engine_perf("vllm")
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print(f"{args.model}, {layers} of {spec.num_layers} layers, on {name} (catalog {gpu.id}); "
          f"torch {torch.__version__}")

    # attention backends: pick the fastest that runs (cuDNN's is FA3-class on Hopper; flash is FA2)
    b0, l0 = shapes[0]
    q = torch.randn(b0, stack.nq, l0, stack.hd, device=dev, dtype=dtype)
    kv = torch.randn(b0, stack.nkv, l0, stack.hd, device=dev, dtype=dtype)
    ops0 = block_ops(spec, 0, tokens=b0 * l0, keys=keys_per_query(spec, 0, l0))
    attn_pred = attention_s(profile, ops0.attention_flops, ops0.attention_io_elements * 2, backward=False, seq=l0,
                            head_dim=attention_head_dim(spec), tiles=flash_tiles(b0, spec.num_heads, l0))
    backends, native = {}, {}  # seconds per backend; whether it took the K/V heads as they are
    if cuda:
        from torch.nn.attention import SDPBackend
        for label in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
            be = getattr(SDPBackend, label, None)
            if be is None:
                continue
            stack.sdpa_backend, stack.native_gqa = be, True
            try:
                backends[label] = events_time(torch, cuda, lambda: stack.attention(q, kv, kv), rounds=10, warmup=3)
                native[label] = stack.native_gqa
            except RuntimeError as e:
                print(f"attention {label}: failed ({str(e).splitlines()[0][:80]})")
        best = min(backends, key=backends.get) if backends else None
        stack.sdpa_backend = getattr(SDPBackend, best) if best else None
        stack.native_gqa = native.get(best, True)
    else:
        backends["default"] = events_time(torch, cuda, lambda: stack.attention(q, kv, kv), rounds=2, warmup=1)
        native["default"] = stack.native_gqa
    print(f"attention, one layer at {b0}x{l0}: predicted {attn_pred * 1e3:.3f} ms ({ops0.attention_flops / 1e12:.2f} "
          f"TFLOP)")
    for label, t in backends.items():
        print(f"  {label:20} {t * 1e3:8.3f} ms  {ops0.attention_flops / t / 1e12:6.1f} TFLOP/s  "
              f"pred/meas {attn_pred / t - 1:+.1%}" + ("" if native[label] else "  (K/V heads repeated first)"))
    q = kv = None  # free them before the passes

    # the block's GEMMs alone at the first shape's rows
    rows0 = b0 * l0
    gemms = []
    print(f"{'gemm':8} {'M x K x N':>20} {'ms meas':>8} {'ms pred':>8} {'err':>7} {'TFLOP/s':>8}")
    for g, wname in (("qkv", "qkv"), ("o", "o"), ("gate_up", "gate_up"), ("down", "down")):
        wt = stack.layers[0][wname]
        k, n = wt.shape
        x = torch.randn(rows0, k, device=dev, dtype=dtype)
        t = events_time(torch, cuda, lambda: x @ wt, rounds=20 if cuda else 2, warmup=3 if cuda else 1)
        pred = matmul_s(profile, rows0, n, k, "bf16", 2.0)
        fl = 2.0 * rows0 * n * k
        gemms.append(dict(gemm=g, m=rows0, k=k, n=n, measured_s=t, predicted_s=pred, tflops=fl / t / 1e12))
        print(f"{g:8} {f'{rows0}x{k}x{n}':>20} {t * 1e3:8.3f} {pred * 1e3:8.3f} {pred / t - 1:+7.1%} "
              f"{fl / t / 1e12:8.1f}")
        del x

    # whole passes in a burst
    passes = []
    print(f"{'shape':>8} {'ms meas':>9} {'ms pred':>9} {'err':>7} {'tok/s meas':>11} {'tok/s pred':>11}  "
          "predicted parts (gemm / attention / stream ms)")
    for b, seq in shapes:
        x = torch.randn(b * seq, spec.hidden_size, device=dev, dtype=dtype)
        with torch.inference_mode():
            t = events_time(torch, cuda, lambda: stack.forward(x, b, seq), rounds=10 if cuda else 1,
                                warmup=2 if cuda else 0)
        p = forward_pass_s(spec, profile=profile, topo=topo, engine=eng, dtype="bf16", weight_bytes_per_param=2.0,
                           kv_bytes_per_element=2.0, rows=b * seq, sequences=b, context=seq, num_gpus=1,
                           decode=False, logits_rows=b)
        pred = p.seconds * scale
        passes.append(dict(sequences=b, prompt=seq, measured_s=t, predicted_s=pred, pred_gemm_s=p.gemm_s * scale,
                           pred_attention_s=p.attention_s * scale, pred_stream_s=p.stream_s * scale,
                           pred_host_s=p.host_s * scale, flops=p.flops * scale))
        print(f"{f'{b}x{seq}':>8} {t * 1e3:9.2f} {pred * 1e3:9.2f} {pred / t - 1:+7.1%} {b * seq / t:11.0f} "
              f"{b * seq / pred:11.0f}  {p.gemm_s * scale * 1e3:.1f} / {p.attention_s * scale * 1e3:.1f} / "
              f"{p.stream_s * scale * 1e3:.1f} (host {p.host_s * scale * 1e3:.1f})")
        del x

    # the first shape, back to back
    sustained = {}
    if args.seconds > 0:
        smi = _smi_start(args.smi_log) if cuda else None
        x = torch.randn(b0 * l0, spec.hidden_size, device=dev, dtype=dtype)
        times, marks = [], []
        t_start, w_start = dt.datetime.now(), time.perf_counter()
        with torch.inference_mode():
            while time.perf_counter() - w_start < args.seconds:
                t = events_time(torch, cuda, lambda: stack.forward(x, b0, l0), rounds=1, warmup=0)
                times.append(t)
                marks.append(time.perf_counter() - w_start)
        t_end = dt.datetime.now()
        if smi is not None:
            time.sleep(0.5)
            smi.terminate()
        rows = _smi_rows(args.smi_log, t_start, t_end) if smi is not None else []
        first = [t for t, m in zip(times, marks) if m <= 5.0] or times[:1]
        last = [t for t, m in zip(times, marks) if m >= args.seconds - 20.0] or times[-1:]
        tail_rows = [r for r in rows if (dt.datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f") - t_start)
                     .total_seconds() >= args.seconds - 20.0]
        head_rows = [r for r in rows if (dt.datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f") - t_start)
                     .total_seconds() <= 5.0]
        reasons = sorted({r.get("clocks_event_reasons.active", "") for r in rows} - {""})
        sustained = dict(shape=f"{b0}x{l0}", seconds=args.seconds, passes=len(times),
                         first5s_median_s=statistics.median(first), last20s_median_s=statistics.median(last),
                         pass_times_s=[round(t, 6) for t in times],
                         sm_clock_mhz_first5s=_median_field(head_rows, "clocks.sm"),
                         sm_clock_mhz_last20s=_median_field(tail_rows, "clocks.sm"),
                         power_w_last20s=_median_field(tail_rows, "power.draw"),
                         temperature_c_last20s=_median_field(tail_rows, "temperature.gpu"),
                         event_reasons=reasons, smi_samples=len(rows))
        toks = b0 * l0
        print(f"sustained {b0}x{l0} for {args.seconds:.0f} s, {len(times)} passes: first 5 s "
              f"{sustained['first5s_median_s'] * 1e3:.2f} ms ({toks / sustained['first5s_median_s']:.0f} tok/s), "
              f"last 20 s {sustained['last20s_median_s'] * 1e3:.2f} ms ({toks / sustained['last20s_median_s']:.0f} "
              f"tok/s); SM clock {sustained['sm_clock_mhz_first5s']} -> {sustained['sm_clock_mhz_last20s']} MHz, "
              f"power {sustained['power_w_last20s']} W, {sustained['temperature_c_last20s']} C, reasons {reasons}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "layers": layers, "device": name, "gpu": gpu.id,
                       "torch": torch.__version__, "attention_backends_s": backends,
                       "attention_native_gqa": native,
                       "attention_predicted_s": attn_pred, "attention_flops": ops0.attention_flops,
                       "gemms": gemms, "passes": passes, "sustained": sustained}, f, indent=1)


if __name__ == "__main__":
    main()
