"""MIG slices as GPU-like catalog entries, and the "GPU:PROFILE" names that select one (`--gpus h100-sxm:3g.40gb`).

A slice keeps its card's datasheet figures pro-rata to its share: compute by its compute fraction, memory bandwidth,
L2 and TDP by its memory share (TDP by the larger of the two), no interconnect. Its price is the card's pro-rata to
the larger share (plan/pick.py).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import InvalidArgument
from .gpus import GPU, get_gpu


def mig_slices(gpu: GPU) -> list[GPU]:
    """One GPU-like entry per MIG profile smaller than the whole card (compute, bandwidth, TDP pro-rata)."""
    out = []
    for p in gpu.mig_profiles:
        if p.compute_fraction >= 1:
            continue
        mem_share = p.memory_gb / gpu.memory_gb
        out.append(replace(
            gpu, id=f"{gpu.id}:{p.name}", name=f"{gpu.name} MIG {p.name}", memory_gb=p.memory_gb,
            memory_bytes=p.memory_bytes, memory_bytes_source="MIG profile size read as GiB",
            peak_flops={k: v * p.compute_fraction for k, v in gpu.peak_flops.items()},
            memory_bandwidth_bytes_per_s=(gpu.memory_bandwidth_bytes_per_s or 0) * mem_share or None,
            l2_cache_bytes=int(gpu.l2_cache_bytes * mem_share) if gpu.l2_cache_bytes else None,
            interconnect="none (MIG slice)", interconnect_bytes_per_s=None, nvlink=False,
            tdp_w=gpu.tdp_w * max(p.compute_fraction, mem_share) if gpu.tdp_w else None, mig_profiles=(),
            extra={**gpu.extra, "mig_parent": gpu.id, "mig_share": max(p.compute_fraction, mem_share)}))
    return out


def resolve_gpu(name: str) -> GPU:
    """A catalog GPU, or one of its MIG slices as 'GPU:PROFILE' (e.g. 'h100-sxm:3g.40gb')."""
    base, _, profile = name.partition(":")
    gpu = get_gpu(base)
    if not profile:
        return gpu
    slices = {s.id.split(":", 1)[1]: s for s in mig_slices(gpu)}
    if profile not in slices:
        raise InvalidArgument(f"{gpu.name} has no MIG profile '{profile}' smaller than the card; valid: "
                              f"{', '.join(slices) or 'none'}")
    return slices[profile]
