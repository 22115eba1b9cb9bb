"""Megatron-Core's gpt-oss expert extras outside Transformer Engine's op fuser, on the GPU: device time and host time.

gpuwise prices two pieces of TEGroupedMLP's eager code from bytes counted in the code, not measured
(estimate/layer_ops.py `MEGATRON_EXPERT_BIAS_BYTES`, `MEGATRON_GLU_CLAMP_BYTES`):
- `_apply_bias` (megatron/core/transformer/moe/experts.py @core_v0.17.0): the fc2 output split by local expert, each
  expert's rows plus its bias times the routing probability, in a Python loop, concatenated and cast back;
- `weighted_bias_quick_geglu_impl` (megatron/core/fusions/fused_bias_geglu.py, the same tag and main): the fc1 output's
  halves clamped and concatenated (also timed alone: `clamp_*`), then
  `linear_offset = torch.tensor(linear_offset, ..., device=input.device)`
  before the fused activation (here a plain PyTorch quick-GeGLU stands for the fused kernel, not timed apart).

For each shape, forward then backward (autograd, as in training) run twice: once enqueued behind a long GPU sleep
(`torch.cuda._sleep`), so that CUDA events around them give the device time alone and the host clock the time the
host took to enqueue them (with a synchronizing call inside, the host waits for the sleep: that shows as host time
of about the sleep); and once in a plain loop with a synchronize at the end (wall time per iteration). Also timed:
`torch.tensor(1.0, device="cuda")` alone behind the sleep (does creating a one-element CUDA tensor from a Python
number wait for the device?); and fc2 as one GEMM per local expert followed by the bias loop, with and without a
host wait for the device just before it (the device time after such a wait, less the time without it, is what the
device idles while the host launches: gpuwise's `MOE_SYNC_GAP_S` is one such gap, measured on a DGX H100).

Run: python benchmarks/megatron_expert_extras.py [--experts 16,4] [--rows 1024,4096] [--hidden 2880] [--json FILE]
     (--device cpu: a dry run of the logic at tiny sizes; its times mean nothing)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

SLEEP_CYCLES = 100_000_000  # about 50 ms at 2 GHz: longer than any enqueue timed here


def apply_bias(torch, out, biases, tokens_per_expert, probs):
    """Megatron-Core TEGroupedMLP._apply_bias, as written at core_v0.17.0."""
    shape = out.shape
    return torch.cat([t + b * p for t, b, p in zip(torch.split(out.view(-1, shape[-1]), tokens_per_expert), biases,
                                                     torch.split(probs, tokens_per_expert))]).view(shape).to(out.dtype)


def clamp(torch, fc1, clamp_value=7.0):
    """weighted_bias_quick_geglu_impl's clamp of the fc1 output's halves, alone (Megatron-Core's lines)."""
    x_glu, x_linear = fc1.chunk(2, -1)
    return torch.cat((x_glu.clamp(min=None, max=clamp_value), x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)


def clamp_glu(torch, fc1, probs, clamp_value=7.0, linear_offset=1.0, alpha=1.702):
    """weighted_bias_quick_geglu_impl's clamp and offset tensor, then quick-GeGLU weighted by the probabilities."""
    x_glu, x_linear = fc1.chunk(2, -1)
    x = torch.cat((x_glu.clamp(min=None, max=clamp_value), x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)
    offset = torch.tensor(linear_offset, dtype=x.dtype, device=x.device)  # the line in Megatron-Core
    g, lin = x.chunk(2, -1)
    return (g * torch.sigmoid(alpha * g) * (lin + offset) * probs).to(fc1.dtype)


def timed(torch, cuda: bool, fn, reps: int) -> dict:
    """Median device seconds (behind a sleep), host enqueue seconds (behind the sleep) and wall seconds per call."""
    fn()  # warm-up
    if cuda:
        torch.cuda.synchronize()
    dev, host = [], []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            a.record()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        if cuda:
            b.record()
            b.synchronize()
            dev.append(a.elapsed_time(b) / 1e3)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if cuda:
        torch.cuda.synchronize()
    wall_s = (time.perf_counter() - t0) / reps
    return {"device_s": statistics.median(dev) if dev else None, "host_s": statistics.median(host), "wall_s": wall_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experts", default="16,4", help="local experts (gpt-oss-120b: 128 / EP)")
    ap.add_argument("--rows", default="1024,4096", help="routed rows per local expert")
    ap.add_argument("--hidden", type=int, default=2880)
    ap.add_argument("--width", type=int, default=2880, help="expert intermediate size (fc1 output 2x)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", help="comma-separated cases to run (default: all)")
    ap.add_argument("--probs", default="bf16,fp32", help="routing probabilities' dtypes")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    cuda = args.device == "cuda"
    dev = torch.device(args.device)
    if not cuda:  # tiny sizes: the logic only
        args.hidden, args.width, args.rows, args.reps = 8, 8, "4", 2
    results = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__, "rows": []}
    one = timed(torch, cuda, lambda: torch.tensor(1.0, dtype=torch.bfloat16, device=dev), args.reps)
    results["scalar_tensor"] = one
    print(f"torch.tensor(1.0, device) behind a {SLEEP_CYCLES:.0e}-cycle sleep: host {one['host_s'] * 1e3:.3f} ms, "
          f"wall {one['wall_s'] * 1e6:.1f} us per call")
    for local in (int(x) for x in args.experts.split(",")):
        for per in (int(x) for x in args.rows.split(",")):
            rows = local * per
            for probs_dtype in ({"bf16": torch.bfloat16, "fp32": torch.float32}[p] for p in args.probs.split(",")):
                out = torch.randn(rows, args.hidden, device=dev, dtype=torch.bfloat16, requires_grad=True)
                biases = [torch.randn(args.hidden, device=dev, dtype=torch.bfloat16, requires_grad=True)
                          for _ in range(local)]
                probs = torch.rand(rows, 1, device=dev, dtype=probs_dtype, requires_grad=True)
                fc1 = torch.randn(rows, 2 * args.width, device=dev, dtype=torch.bfloat16, requires_grad=True)
                g_out = torch.randn(rows, args.hidden, device=dev, dtype=torch.bfloat16)
                g_act = torch.randn(rows, args.width, device=dev, dtype=torch.bfloat16)
                g_fc1 = torch.randn(rows, 2 * args.width, device=dev, dtype=torch.bfloat16)
                split = [per] * local
                w2 = [torch.randn(args.width, args.hidden, device=dev, dtype=torch.bfloat16) for _ in range(local)]
                act = torch.randn(rows, args.width, device=dev, dtype=torch.bfloat16)

                def fc2_bias():  # fc2 as one GEMM per expert (TE's GroupedLinear on Hopper: cuBLAS per expert)
                    y = torch.cat([a @ w for a, w in zip(torch.split(act, split), w2)])
                    return apply_bias(torch, y, biases, split, probs)

                def sync_fc2_bias():  # the same after a host wait for the device (a sync before it in the layer)
                    if cuda:
                        torch.cuda.synchronize()
                    return fc2_bias()
                cases = {
                    "fc2_bias_fwd": fc2_bias,
                    "sync_fc2_bias_fwd": sync_fc2_bias,
                    "bias_fwd": lambda: apply_bias(torch, out, biases, split, probs),
                    "bias_fwd_bwd": lambda: apply_bias(torch, out, biases, split, probs).backward(g_out),
                    "clamp_fwd": lambda: clamp(torch, fc1),
                    "clamp_fwd_bwd": lambda: clamp(torch, fc1).backward(g_fc1),
                    "clamp_glu_fwd": lambda: clamp_glu(torch, fc1, probs),
                    "clamp_glu_fwd_bwd": lambda: clamp_glu(torch, fc1, probs).backward(g_act),
                }
                for name, fn in cases.items():
                    if args.only and name not in args.only.split(","):
                        continue
                    r = timed(torch, cuda, fn, args.reps)
                    row = dict(case=name, local_experts=local, rows_per_expert=per, hidden=args.hidden,
                               width=args.width, probs=str(probs_dtype).removeprefix("torch."), **r)
                    results["rows"].append(row)
                    d = r["device_s"]
                    print(f"{name:18} experts {local:3d} x {per:5d} rows, probs {row['probs']:8}: device "
                          f"{d * 1e3 if d is not None else float('nan'):7.3f} ms  host {r['host_s'] * 1e3:7.3f} ms  "
                          f"wall {r['wall_s'] * 1e3:7.3f} ms")
                    out.grad = probs.grad = fc1.grad = None
                    for b in biases:
                        b.grad = None
                out = biases = probs = fc1 = g_out = g_act = g_fc1 = w2 = act = None
                if cuda:
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
