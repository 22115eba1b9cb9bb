"""Speed of the serving simulation (estimate/serving.py): 10,000 requests on one core, at several loads, and of
the capacity search over the catalog (`gpuwise pick --task serve`).

    python benchmarks/serving_sim.py

Prints the wall time of each whole `infer` call under load (cost table included) and of the search. The issue's
budgets are 1 s for 10,000 requests on one core and 5 s for the search; this prints figures, it is not a timed test.
"""

from __future__ import annotations

import math
import time

from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.plan.infer import InferRequest, infer


def main() -> None:
    gpu = get_gpu("h100-sxm")
    cases = [("llama-3.1-8b", 1, dict(request_rate=math.inf)), ("llama-3.1-8b", 1, dict(request_rate=20.0)),
             ("llama-3.1-8b", 1, dict(max_concurrency=256)), ("llama-3.1-70b", 4, dict(request_rate=5.0)),
             ("qwen3-30b-a3b", 1, dict(max_concurrency=64))]
    print(f"{'model':16} {'gpus':>4} {'load':24} {'requests':>8} {'steps':>7} {'wall s':>7}")
    for name, n, load in cases:
        model = load_model(name)
        req = InferRequest(model=model, gpu=gpu, num_gpus=n, prompt_tokens=1024, output_tokens=256,
                           num_prompts=10_000, **load)
        t0 = time.perf_counter()
        r = infer(req)
        wall = time.perf_counter() - t0
        label = ", ".join(f"{k}={v:g}" for k, v in load.items())
        print(f"{name:16} {n:>4} {label:24} {r.serving.result.completed:>8,} {r.serving.result.steps:>7,} {wall:>7.2f}")
    from gpuwise.plan.pick import pick
    from gpuwise.plan.pick_request import PickRequest

    for name, rate in (("llama-3.1-8b", 20.0), ("llama-3.1-70b", 20.0), ("qwen3-30b-a3b", 10.0)):
        t0 = time.perf_counter()
        res = pick(PickRequest(model=load_model(name), task="serve", request_rate=rate, prompt_tokens=2000,
                               output_tokens=300, slo_ttft_ms=1000, slo_tpot_ms=33))
        wall = time.perf_counter() - t0
        best = res.ranked[0].label if res.ranked else "none"
        print(f"pick --task serve {name} at {rate:g}/s: {wall:.2f} s over {res.accepted + len(res.rejected)} "
              f"candidates; best {best}")


if __name__ == "__main__":
    main()
