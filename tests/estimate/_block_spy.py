"""The first block `gpuwise.train` times (estimate/step_time._time_block), for tests that compare a block's parts."""

from __future__ import annotations

import gpuwise
from gpuwise.estimate import step_time as st


def first_block(monkeypatch, model: str, **options):
    """(the train result, the first `_BlockTime` its step model computed), the block cache cleared around it."""
    seen = []
    real = st._time_block

    def spy(*a, **k):
        bt = real(*a, **k)
        seen.append(bt)
        return bt

    st._CACHE.clear()
    monkeypatch.setattr(st, "_time_block", spy)
    r = gpuwise.train(model, **options)
    st._CACHE.clear()
    return r, seen[0]
