"""The published-results comparison (`python -m validation`) runs and stays within a regression bound."""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_published_result_gets_a_prediction():
    sys.path.insert(0, str(ROOT))
    try:
        from validation.__main__ import run
    finally:
        sys.path.pop(0)
    rows, median, worst = run()
    assert len(rows) >= 30
    assert all(math.isfinite(r[3]) and r[3] > 0 for r in rows)
    # The target is median <= 10% (met) and worst <= 25% (one row, OPT-175B, is at +35%: see
    # docs/performance.md); the worst bound here only catches regressions from that recorded state.
    assert median <= 0.10 and worst <= 0.4
