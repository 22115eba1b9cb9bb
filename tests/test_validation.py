"""The published-results comparison (`python -m validation`) runs and stays within a regression bound."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _validation():
    sys.path.insert(0, str(ROOT))
    try:
        from validation import __main__ as module
    finally:
        sys.path.pop(0)
    return module


def test_every_published_result_gets_a_prediction():
    rows, median, worst = _validation().run()
    assert len(rows) >= 30
    assert all(math.isfinite(r[3]) and r[3] > 0 for r in rows)
    # The targets (docs/performance.md has the table).
    assert median <= 0.10 and worst <= 0.25


def test_chinchilla_flops_reduce_to_six_n_without_attention():
    """Hoffmann et al.'s count, with the s x s terms removed, is 6 FLOPs per matmul weight per token; the
    embedding counts as a matmul, so an untied model's weights are the parameters transformers counts."""
    from gpuwise.catalog.models import load_model
    from gpuwise.model.params import param_counts

    model = str(ROOT / "validation/models/opt-175b.json")
    per_token = _validation().chinchilla_flops_per_token(model, seq=1)
    spec = load_model(model).spec
    weights = param_counts(spec).total + spec.vocab_size * spec.hidden_size  # OPT ties the head to the embedding
    attention_at_seq_1 = spec.num_layers * (4 * spec.hidden_size + 3 * spec.num_heads)
    assert 3 * 2 * weights == pytest.approx(per_token - 3 * attention_at_seq_1, rel=2e-3)
