"""Context parallelism in the step-time model: each rank's queries attend over the whole context."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.estimate.layer_ops import block_ops, keys_per_query
from gpuwise.estimate.step_time import _block_time

SPEC = load_model("llama-2-7b").spec
PROFILE = default_profile(get_gpu("h100-sxm"))


@settings(max_examples=25, deadline=None)
@given(st.integers(10, 17), st.sampled_from([2, 4, 8, 16]))
def test_attention_flops_summed_over_cp_ranks_equal_the_unsplit_total(log_seq, cp) -> None:
    seq = 2 ** log_seq
    whole = block_ops(SPEC, 0, tokens=seq, keys=keys_per_query(SPEC, 0, seq)).attention_flops
    # what the step-time model gives one rank: seq/cp queries, each over the keys of the whole context
    rank = block_ops(SPEC, 0, tokens=seq // cp, keys=keys_per_query(SPEC, 0, seq)).attention_flops
    assert cp * rank == pytest.approx(whole)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_splitting_the_sequence_never_shrinks_the_attention_time(cp) -> None:
    seq = 65536
    kw = dict(tp=1, ep=1, dtype="bf16", e=2.0, recompute="none", frozen_base=False, framework="megatron")
    whole = _block_time(PROFILE, SPEC, 0, tokens=seq, seq_local=seq, cp=1, **kw)
    rank = _block_time(PROFILE, SPEC, 0, tokens=seq // cp, seq_local=seq // cp, cp=cp, **kw)
    assert cp * rank.attention_forward >= 0.99 * whole.attention_forward
    assert cp * rank.attention_backward >= 0.99 * whole.attention_backward


def test_context_parallelism_does_not_raise_throughput_per_gpu_on_one_node() -> None:
    # Llama-2-7B at 64K tokens on 8 H100: the attention work per GPU is the same with or without CP; the ring's
    # exchanges can only add to it (issue 18: tokens/s/GPU rose 4365 -> 6535 -> 8630 for cp 1 -> 2 -> 4).
    rates = [gpuwise.train("llama-2-7b", gpu="h100-sxm", num_gpus=8, seq=65536, cp=cp, global_batch=8, fsdp="full",
                           recompute="full").perf.tokens_per_s_per_gpu for cp in (1, 2, 4, 8)]
    assert all(later <= first * 1.01 for first, later in zip(rates, rates[1:]))
