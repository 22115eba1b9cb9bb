"""How fast one training configuration is evaluated (memory + step time): prints microseconds and configs/s.

The issue's target is at most 50 us per configuration (tens of thousands per second for the planner).
Run: python benchmarks/eval_speed.py
"""

from __future__ import annotations

import itertools
import time

from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.estimate.flops import job_flops
from gpuwise.estimate.train_memory import train_memory
from gpuwise.plan.train import TrainRequest, _perf


def configs():
    m = load_model("llama-3.1-70b")
    g = get_gpu("h100-sxm")
    for tp, pp, mb, rc, fsdp in itertools.product((1, 2, 4, 8), (1, 2, 4), (1, 2), ("none", "selective", "full"),
                                                   ("full", "grad-op", None)):
        yield TrainRequest(model=m, gpu=g, num_gpus=256, seq=8192, global_batch=256 // (tp * pp) * 2, micro_batch=mb,
                           tp=tp, pp=pp, recompute=rc, fsdp=fsdp)


def _memory(req: TrainRequest, layout):
    return train_memory(req.model.spec, layout, req.job, micro_batch=req.micro_batch,
                        num_microbatches=req.global_batch // layout.dp // req.micro_batch)


def _evaluate(req: TrainRequest) -> None:
    layout = req.layout()
    _perf(req, layout, _memory(req, layout), job_flops(req.model.spec, req.job, global_batch=req.global_batch))


def main() -> None:
    # Load the catalogs (GPU table, device profiles, prices) once, with another model, as any process does on its
    # first request; the 70B model's own caches stay cold, so every new (tp, pp, sharding) class pays its cost.
    _evaluate(TrainRequest(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), num_gpus=8, seq=2048,
                           global_batch=8))
    reqs = list(configs())
    n = len(reqs)
    print(f"{n} configurations of Llama-3.1-70B on 256 H100 (tp x pp x micro-batch x recompute x sharding)")
    for label in ("first pass (cold caches)", "steady state (planner)"):
        t_mem = t_time = 0.0
        t0 = time.perf_counter()
        for req in reqs:
            layout = req.layout()
            a = time.perf_counter()
            mem = _memory(req, layout)
            b = time.perf_counter()
            _perf(req, layout, mem, job_flops(req.model.spec, req.job, global_batch=req.global_batch))
            t_time += time.perf_counter() - b
            t_mem += b - a
        total = time.perf_counter() - t0
        print(f"{label}:")
        print(f"  memory model : {1e6 * t_mem / n:8.1f} us per configuration")
        print(f"  time model   : {1e6 * t_time / n:8.1f} us per configuration")
        print(f"  total        : {1e6 * total / n:8.1f} us per configuration, {n / total:,.0f} configurations/s")


if __name__ == "__main__":
    main()
