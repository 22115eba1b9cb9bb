"""The example settings behind explain's computed numbers, each said in the line that uses it.

Where an example is another command's default it reads that default rather than restating it: the training
sequence is `gpuwise train`'s --seq (`TrainJob.seq`), the decode context `gpuwise roofline`'s --seq
(`RooflineRequest.seq`, read when first needed so that only the terms that use it load the roofline planner).
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache

from ...estimate.job import job_default

DEFAULT_GPU = "h100-sxm"
"""GPU whose numbers are shown when none is given (the articles' running example)."""

EXAMPLE_DP = 8
"""Data-parallel GPUs for the ZeRO / FSDP bytes per parameter (one 8-GPU server)."""
EXAMPLE_HSDP_GPUS, EXAMPLE_HSDP_GROUP = 64, 8
EXAMPLE_SEQ: int = job_default("seq")
"""Tokens per training sequence for FLOPs and activation examples (`gpuwise train`'s default --seq)."""
EXAMPLE_KV_CONTEXT = 32768
"""A long serving context (tokens) for the KV cache examples, beside EXAMPLE_SEQ."""
EXAMPLE_DECODE_BATCH = 64
EXAMPLE_LONG_SEQ = 131072
"""A long training sequence (tokens), split by context parallelism EXAMPLE_CP."""
EXAMPLE_CP = 8
EXAMPLE_TP = 8
EXAMPLE_EP = 8
EXAMPLE_MFU = 0.40
"""REFERENCE.md: 30%+ MFU is good, 40%+ excellent (Llama 3 405B: 38-43%)."""
BUBBLE_EXAMPLES = ((4, 1, 1), (4, 4, 1), (8, 8, 1), (8, 64, 1), (8, 64, 2))
"""(stages p, micro-batches m, chunks per GPU v)."""
ACCUMULATION_EXAMPLE = (256, 2, 8)
"""(global batch, micro-batch, data-parallel GPUs), as in the gradient-accumulation command template."""
ACCUMULATION_PP = 4
"""Pipeline stages for the bubble that the accumulation example's micro-batches leave."""


@lru_cache(maxsize=1)
def decode_context() -> int:
    """Cached tokens per sequence for decode intensity (`gpuwise roofline`'s default --seq)."""
    from ..roofline import RooflineRequest

    return next(f.default for f in fields(RooflineRequest) if f.name == "seq")
