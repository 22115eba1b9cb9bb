"""A measured network (the `network` section `gpuwise bench comm` writes) replaces the model's defaults."""

from __future__ import annotations

import math

from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.comm import topology


def test_measured_bus_bandwidth_and_latency_replace_the_defaults() -> None:
    h100 = get_gpu("h100-sxm")
    base = topology(h100, num_gpus=16)
    over = {"intra_node_busbw_gb_s": 300.0, "intra_node_latency_us": 20.0, "inter_node_latency_us": 50.0}
    t = topology(h100, num_gpus=16, overrides=over)
    assert t.intra.busbw_bytes_per_s == 300e9 and math.isclose(t.intra.latency_s, 20e-6)
    assert t.inter.busbw_bytes_per_s == base.inter.busbw_bytes_per_s and math.isclose(t.inter.latency_s, 50e-6)
    # all-reduce of 1 GB over the 8 GPUs of a node: 3 latency steps + 2 (n-1)/n S / busbw (nccl-tests' bus factor)
    s = 1e9
    assert math.isclose(t.collective_s("all_reduce", s, 8), 3 * 20e-6 + 2 * 7 / 8 * s / 300e9)
    # untouched levels stay the defaults
    assert topology(h100, num_gpus=16, overrides={}).intra == base.intra


def test_sharded_gradients_are_reduced_every_micro_batch() -> None:
    """DDP and ZeRO-1 accumulate full gradients and reduce once per step; ZeRO-2 and FSDP full shard keep only a
    gradient shard, so each micro-batch's backward reduce-scatters (more micro-batches, more DP communication)."""
    import gpuwise

    def dp_comm(gb: int, **kw) -> float:  # a slow network (10 Gb/s per GPU), so that the reductions are exposed
        r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=64, seq=4096, global_batch=gb, micro_batch=1,
                          inter_node_gbps=10, **kw)
        return r.perf.step.breakdown["dp_comm"]

    for kw in (dict(zero=0), dict(zero=1, framework="deepspeed")):
        assert dp_comm(256, **kw) == dp_comm(64, **kw)  # 4 micro-batches or 1: one reduction
    for kw in (dict(zero=2, framework="deepspeed"), dict(fsdp="full")):
        assert dp_comm(256, **kw) > dp_comm(64, **kw)
