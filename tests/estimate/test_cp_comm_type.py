"""Context-parallel K/V exchange kinds (issue 18): a ring hides behind attention, an all-gather or all-to-all does
not; each framework's default."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.errors import InvalidArgument

KW = dict(gpu="h100-sxm", num_gpus=8, cp=8, seq=131072, recompute="full")


def _cp(**kw):
    return gpuwise.train("llama-3.1-8b", **KW, **kw).perf.step.breakdown["cp_comm"]


def test_a_long_ring_hides_behind_attention_but_a_gather_does_not():
    ring, gather = _cp(framework="megatron"), _cp(framework="megatron", cp_comm_type="allgather")
    assert 0.0 < ring < gather  # the hidden ring costs only the compute it slows
    assert _cp(framework="torchtitan") == _cp(framework="torchtitan", cp_comm_type="allgather") > 0.0
    assert _cp(framework="megatron", cp_comm_type="a2a") > 0.0


def test_ulysses_needs_heads_to_split_over_cp_and_tp():
    with pytest.raises(InvalidArgument, match="a2a splits attention heads"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=64, cp=64, seq=131072, cp_comm_type="a2a")
    with pytest.raises(InvalidArgument, match="--cp-comm-type"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, cp=8, seq=131072, cp_comm_type="ring")
