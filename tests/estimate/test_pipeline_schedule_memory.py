"""What a pipeline rank holds at once, checked against a replay of the schedules' own orders.

`replay` walks one rank's forward and backward passes in the order Megatron-Core runs them
(`forward_backward_pipelining_without_interleaving` and `..._with_interleaving`: warm-up forwards, then one forward
and one backward per step, then the cool-down backwards; chunk and micro-batch of the k-th pass from the same index
arithmetic, with microbatch_group_size_per_vp_stage = p) and GPipe (all forwards, then all backwards), and counts
the chunk-micro-batches alive (forward run, backward not yet) and those of the last chunk, which computes the loss.
The estimates must equal the largest counts seen.
"""

from __future__ import annotations

import pytest

from gpuwise import train
from gpuwise.estimate.activations import stage_activations
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.pipeline import in_flight_microbatches, loss_in_flight


def replay(p: int, v: int, m: int, rank: int, schedule: str) -> tuple[float, int]:
    """(most stage-micro-batches alive, in units of the rank's full layers; most loss-chunk micro-batches alive)."""
    total = m * v
    if schedule == "gpipe":
        order = [("F", k) for k in range(total)] + [("B", k) for k in range(total)]
    else:
        if v == 1:
            warm = min(p - rank - 1, m)
        else:
            warm = (p - rank - 1) * 2 + (v - 1) * p
            warm = total if warm >= total else warm
        order = [("F", k) for k in range(warm)]
        for k in range(total - warm):
            order += [("F", warm + k), ("B", k)]
        order += [("B", k) for k in range(total - warm, total)]

    def chunk(k: int, forward: bool) -> int:
        c = (k % (p * v)) // p if v > 1 else 0
        return c if forward else v - 1 - c

    def micro(k: int) -> int:
        return (k // (p * v)) * p + k % p if v > 1 else k

    alive: set[tuple[int, int]] = set()
    most = most_loss = 0
    for kind, k in order:
        key = (chunk(k, kind == "F"), micro(k))
        if kind == "F":
            assert key not in alive
            alive.add(key)
        else:
            assert key in alive, "a backward before its forward"
            alive.discard(key)
        most = max(most, len(alive))
        most_loss = max(most_loss, sum(1 for c, _ in alive if c == v - 1))
    assert not alive
    return most / v, most_loss


# Megatron-Core's interleaved schedule takes micro-batches in groups of p (num_microbatches a multiple of it)
CASES = [(p, v, m) for p in (2, 4, 8) for v in (1, 2, 4, 8) for m in (p, 2 * p, 3 * p, 4 * p)] + [
    (4, 1, 3), (8, 1, 5)]


@pytest.mark.parametrize("p,v,m", CASES)
def test_interleaved_and_1f1b_hold_what_the_replay_holds(p, v, m):
    layout = Layout(num_gpus=p, pp=p, vpp=v, schedule="interleaved" if v > 1 else "1f1b")
    for rank in range(p):
        layers, loss = replay(p, v, m, rank, "1f1b")
        assert in_flight_microbatches(layout, rank, m) == pytest.approx(layers)
        if rank == p - 1:
            assert loss_in_flight(layout, m) == loss


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (8, 3)])
def test_gpipe_holds_every_micro_batch(p, m):
    layout = Layout(num_gpus=p, pp=p, schedule="gpipe")
    layers, loss = replay(p, 1, m, p - 1, "gpipe")
    assert in_flight_microbatches(layout, p - 1, m) == layers == m
    assert loss_in_flight(layout, m) == loss == m


def test_interleaved_last_stage_holds_one_micro_batch_of_logits():
    """Megatron-LM's functional test gpt3_7b_tp1_pp4_memory_speed (PP 4, one layer per virtual stage, 4 micro-batches
    of 8,192 tokens, vocab 131,200): the last stage holds 29 of its 32 layer-micro-batches (3.625 micro-batches) but
    one micro-batch's logits, the same logits as the last stage of 1F1B, which holds one micro-batch of everything."""
    model = "validation/models/gpt3-7b-gqa-megatron-ci-v131200.json"
    common = dict(gpu="h100-sxm", num_gpus=8, seq=8192, micro_batch=1, global_batch=8, tp=1, pp=4,
                  precision="bf16", framework="megatron", recompute="none", zero=1)
    interleaved = train(model, vpp=8, schedule="interleaved", **common)
    plain = train(model, **common)
    last = [stage_activations(r.request.model.spec, r.layout, 3, r.request.job, micro_batch=1, num_microbatches=4)
            for r in (interleaved, plain)]
    assert last[0].in_flight == pytest.approx(29 / 8) and last[1].in_flight == 1
    assert last[1].logits > 0 and last[0].logits == pytest.approx(last[1].logits)
    assert interleaved.memory.stage == 3 and interleaved.memory.logits == pytest.approx(last[1].logits)
