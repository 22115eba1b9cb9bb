"""torchtitan's pipeline defaults (issue 18: the layouts torchtitan accepts are accepted): its generated split where
the layers do not divide over the stages, two stages per rank for the interleaved schedule, and FSDP2 under
torch.distributed.pipelining gathering each stage's parameters once per step, not once per micro-batch."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.pipeline import stage_layers, torchtitan_default_ends, torchtitan_split, virtual_stage_layers

# Llama 3.1 405B (126 layers) as torchtitan's generate_split_points (@9dec370) cuts it, stage by stage:
# one stage per rank: 126 // 8 = 15 for the first, 16 for the next six (remainder 6), the rest (15) for the last;
# two per rank (interleaved): 7, then 8 for fourteen stages (remainder 14), then 7; rank r holds stages r and r + 8.
ONE_PER_RANK = (15, 16, 16, 16, 16, 16, 16, 15)
TWO_PER_RANK = (7, *[8] * 14, 7)


def test_the_generated_split_of_126_layers():
    assert torchtitan_split(8, 126, 1, 1) == ONE_PER_RANK
    assert torchtitan_split(16, 126, 1, 1) == TWO_PER_RANK
    assert torchtitan_default_ends(126, 8, 1) == (ONE_PER_RANK[0], ONE_PER_RANK[-1])
    ranks = [TWO_PER_RANK[r] + TWO_PER_RANK[r + 8] for r in range(8)]
    assert torchtitan_default_ends(126, 8, 2) == (ranks[0], ranks[-1]) == (15, 15)


def test_an_even_split_or_an_unholdable_one_is_left_alone():
    assert torchtitan_default_ends(32, 4, 1) is None  # divides: the even split
    # 29 layers (31 effective, 7 each, the first three one more) over 4 stages: 8 - 1, 8, 8, 7 - 1: equal middles
    assert torchtitan_split(4, 29, 1, 1) == (7, 8, 8, 6)
    assert torchtitan_default_ends(29, 4, 1) == (7, 6)
    # 30 layers (32 effective, 6 each, the first two one more) over 5 stages: 7 - 1, 7, 6, 6, 6 - 1: middles 7, 6
    assert torchtitan_split(5, 30, 1, 1) == (6, 7, 6, 6, 5)
    assert torchtitan_default_ends(30, 5, 1) is None
    assert torchtitan_default_ends(10, 1, 1) is None


def test_torchtitan_accepts_pp8_on_405b_and_megatron_still_needs_its_first_and_last_layers():
    kw = dict(gpu="h100-sxm", num_gpus=512, fsdp="full", tp=8, pp=8, seq=8192, global_batch=256, precision="fp8",
              ac="full", framework="torchtitan")
    r = gpuwise.train("llama-3.1-405b", **kw)
    assert stage_layers(r.layout, 126) == ONE_PER_RANK
    r = gpuwise.train("llama-3.1-405b", **kw, schedule="interleaved")
    assert r.layout.vpp == 2
    assert virtual_stage_layers(r.layout, 126) == TWO_PER_RANK
    mega = dict(kw, framework="megatron", fsdp=None, zero=1)
    with pytest.raises(InvalidArgument, match="does not split 126 layers"):
        gpuwise.train("llama-3.1-405b", **mega)


def test_fsdp_under_pipelining_gathers_once_per_step():
    """torchtitan + PP: parameter gathers and gradient reduce-scatters do not grow with the micro-batch count;
    without PP, FSDP full shard gathers in every micro-batch."""
    def dp_comm(pp, global_batch):
        r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=16, fsdp="full", pp=pp, seq=4096,
                          global_batch=global_batch, framework="torchtitan", ac="full", gpus_per_node=2)
        return r.perf.step.breakdown["dp_comm"], r.perf.step.num_microbatches

    few, m_few = dp_comm(2, 16)
    many, m_many = dp_comm(2, 64)
    assert m_many == 4 * m_few and many == pytest.approx(few, rel=0.05)
    few, m_few = dp_comm(1, 16)
    many, m_many = dp_comm(1, 64)
    assert m_many == 4 * m_few and many > 3 * few
