"""Decode with expert parallelism waits for the busiest rank (estimate/infer_time.py `_active_experts`): the expected
maximum over the EP ranks of the experts each one's share of the batch touches, checked against a simulation of
uniform top-k routing."""

from __future__ import annotations

import random

import pytest

from gpuwise.catalog.models import load_model
from gpuwise.estimate.infer_time import _active_experts


def _simulated(num_experts: int, top_k: int, rows: int, ep: int, trials: int = 4000) -> float:
    rng = random.Random(7)
    per_rank = num_experts // ep
    total = 0
    for _ in range(trials):
        touched = set()
        for _ in range(rows):
            touched.update(rng.sample(range(num_experts), top_k))
        counts = [0] * ep
        for expert in touched:
            counts[expert // per_rank] += 1
        total += max(counts)
    return total / trials


@pytest.mark.parametrize(("rows", "ep"), [(1, 8), (4, 8), (16, 8), (1, 2), (64, 8), (1, 1), (16, 1)])
def test_the_busiest_rank_matches_a_simulation_of_uniform_routing(rows: int, ep: int) -> None:
    spec = load_model("deepseek-v3").spec  # 256 routed experts, 8 per token
    got = _active_experts(spec, rows, ep)
    assert got == pytest.approx(_simulated(256, 8, rows, ep), rel=0.06)


def test_one_rank_is_the_mean_and_more_ranks_never_read_less_than_their_share() -> None:
    spec = load_model("deepseek-v3").spec
    for rows in (1, 2, 8, 32, 256):
        whole = _active_experts(spec, rows, 1)
        for ep in (2, 4, 8, 16):
            busiest = _active_experts(spec, rows, ep)
            assert whole / ep <= busiest <= 256 / ep
