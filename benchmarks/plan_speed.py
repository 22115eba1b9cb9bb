"""The planner's full search for Llama-3.1-405B on 16,384 H100 (seq 8192, 16M tokens per batch): prints the
search time and layouts evaluated per second (issue 5 targets: at most 1 s, at least 30,000 per second), for the
whole search space and for the space without CPU offload and HSDP (the search as first built, for comparison
with earlier figures; Megatron has no HSDP, so only offload differs); then DeepSeek-V3 on 1,024 H100.

Run: python benchmarks/plan_speed.py
"""

from __future__ import annotations

import gpuwise
from gpuwise.plan.planner import describe


def main() -> None:
    gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=2048, global_batch=8)  # load the catalogs once
    print("Llama-3.1-405B on 16,384 H100, seq 8192, 2048 sequences (16M tokens) per step, framework megatron")
    for label, options in (("full search", {}), ("without offload/HSDP", dict(no_offload=True, no_hsdp=True))):
        # Each call loads the model afresh, so the caches keyed by the model start cold every time; the second
        # search finds the GEMM times (keyed by device and shape) warm, worth ~2 ms here.
        r = gpuwise.plan("llama-3.1-405b", gpu="h100-sxm", num_gpus=16384, seq=8192, global_batch=2048, **options)
        print(f"{label}:")
        print(f"  search time      : {r.search_time_s * 1e3:8.1f} ms")
        print(f"  layouts evaluated: {r.evaluated:8,d} (memory model), {r.timed:,d} timed, {r.feasible:,d} fit")
        print(f"  evaluated per s  : {r.evaluated / r.search_time_s:8,.0f}")
        print(f"  best             : {describe(r.plans[0])}, step {r.plans[0].step_time_s:.2f} s, "
              f"MFU {100 * r.plans[0].mfu:.1f}%")
    # An MoE model with a prime layer count: DeepSeek-V3's 61 layers split unevenly over every pipeline degree, and
    # each split multiplies by its interleavings and the expert-parallel degrees (the largest space the planner has).
    print("DeepSeek-V3 on 1,024 H100, seq 4096, 8192 sequences per step, framework megatron")
    r = gpuwise.plan("deepseek-v3", gpu="h100-sxm", num_gpus=1024, seq=4096, global_batch=8192, framework="megatron")
    print(f"  search time      : {r.search_time_s * 1e3:8.1f} ms")
    print(f"  layouts evaluated: {r.evaluated:8,d} (memory model), {r.timed:,d} timed, {r.feasible:,d} fit")
    print(f"  best             : {describe(r.plans[0])}, step {r.plans[0].step_time_s:.2f} s")


if __name__ == "__main__":
    main()
