"""The published-results comparison (`python -m validation`) runs and stays within a regression bound."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str):
    """validation.<name>, imported from the checkout (validation/ is not part of the installed package)."""
    import importlib

    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"validation.{name}")
    finally:
        sys.path.pop(0)


def _validation():
    return _module("__main__")


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


def _memory():
    return _module("memory")


def test_training_memory_rows_are_scored_against_their_fixed_split():
    """Issue 17: >= 30 published memory measurements, >= 12 held out, every row with its source; the held-out part
    within its median target and no run that really ran predicted not to fit. The part of each row is the hash
    rule the sources' README fixed before anything was scored."""
    import hashlib

    memory = _memory()
    rows = memory.load()
    assert all(r["source"] and r["published"] is not None for _, r in rows)
    for _, r in rows:
        held = int(hashlib.sha256(r["name"].encode()).hexdigest(), 16) % 5 < 2
        assert r["split"] == ("held-out" if held else "calibration"), r["name"]
    scored, unscored = memory.run()
    assert len(unscored) <= 0.1 * len(rows)
    measured = [s for s in scored if s.error is not None]
    assert len(measured) >= 30 and sum(s.split == "held-out" for s in measured) >= 12
    assert all(math.isfinite(s.predicted_gib) and s.predicted_gib > 0 for s in scored)
    held = memory.summarize([s for s in scored if s.split == "held-out"])
    assert held.median <= memory.HELD_OUT_MEDIAN_TARGET
    # Every wrong held-out verdict is a known, explained one (validation/memory.KNOWN_WRONG_VERDICTS): a new one fails
    # here, and so does one that got fixed without being taken off the list.
    wrong = {s.name for s in scored if s.split == "held-out" and s.verdict_ok is False}
    assert wrong == set(memory.KNOWN_WRONG_VERDICTS)


def _speed():
    return _module("speed")


def test_training_speed_rows_keep_their_fixed_split_and_all_get_predictions():
    """Issue 18: published 2023-2026 speed runs, each with its source, in the part the hash rule of
    speed_sources/README.md put it before anything was scored; every scorable row gets a finite, positive
    prediction, and the rows gpuwise cannot express yet are few."""
    import hashlib

    speed = _speed()
    rows = [r for r in speed.load() if r["category"] != speed.LEGACY]
    assert len(rows) >= 45
    for r in rows:
        assert r["source"] and r["published"] > 0, r["name"]
        held = int(hashlib.sha256(r["name"].encode()).hexdigest(), 16) % 5 < 2
        assert r["split"] == ("held-out" if held else "calibration"), r["name"]
    scored, unscored = speed.run()
    assert len(unscored) <= 0.4 * len(rows)
    assert all(math.isfinite(s.predicted) and s.predicted > 0 for s in scored)
    assert sum(s.split == "held-out" for s in scored) >= 15


def test_every_speed_row_is_in_the_category_gpuwise_gives_its_configuration():
    """One rule decides a run's category, for the validation table and for the band a prediction reports."""
    speed = _speed()
    scored, _ = speed.run()
    wrong = [(s.name, s.category, s.rule_category) for s in scored
             if s.category != speed.LEGACY and s.category != s.rule_category]
    assert not wrong


def test_the_shipped_error_bands_are_those_of_the_held_out_rows():
    """catalog/data/speed_validation.toml is what `python -m validation.speed --write-bands` writes today: a change
    to the model or the rows that moves a band fails here until the bands are written again."""
    speed = _speed()
    scored, _ = speed.run()
    assert speed.BANDS.read_text() == speed.bands_toml(scored)


def test_the_shipped_memory_bands_are_those_of_the_held_out_rows():
    """catalog/data/memory_validation.toml is what `python -m validation.memory --write-bands` writes today."""
    memory = _memory()
    scored, _ = memory.run()
    assert memory.BANDS.read_text() == memory.bands_toml(scored)


def test_the_serving_error_infer_quotes_is_the_held_out_one():
    """`infer` under load says how sure it is with the held-out TTFT/TPOT median (plan/infer.py); a change that moves
    it fails here until the quoted figure follows."""
    import statistics

    from gpuwise.plan.infer import SERVING_HELD_OUT_MEDIAN

    serving = _module("serving")
    scored, _ = serving.score(serving.load())
    held = [abs(s.error) for s in scored if s.split == "held-out" and s.category in ("ttft", "tpot")]
    assert SERVING_HELD_OUT_MEDIAN == pytest.approx(statistics.median(held), abs=0.0005)


def test_the_planner_is_compared_with_every_published_layout_it_can_express():
    """Issue 18: for the validation runs' models the planner's best is the published layout, or a line says by how
    much (predicted) and where its step is shorter."""
    layouts = _module("layouts")
    speed = _speed()
    row = next(r for r in speed.load() if r["name"].startswith("NeMo 24.07 perf summary: Llama 2 13B"))
    c = layouts.compare(row)
    assert c is not None and c.published.startswith("TP 1, PP 4x10")
    assert c.published_s > 0 and c.best_s > 0 and c.best_s <= c.published_s * 1.0001
    assert (c.best == c.published) == (c.why == "")
    if c.best != c.published:
        assert "published layout spends more on" in c.why or c.why == "no single part dominates"


def test_serving_rows_keep_their_fixed_split_and_get_a_prediction_or_a_reason():
    """Issue 19: published serving runs and startup logs, each with its source, in the part the hash rule of
    serving_sources/README.md put it before anything was scored; every row is either scored with finite, positive
    predictions or listed with the reason it is not."""
    import hashlib

    from gpuwise.catalog._toml import tomllib

    serving = _module("serving")
    for name in ("published.toml", "kv_capacity.toml"):
        with open(serving.SOURCES / name, "rb") as fh:
            rows = tomllib.load(fh)["run"]
        assert len(rows) >= 20
        for r in rows:
            assert r["source"], r["name"]
            held = int(hashlib.sha256(r["name"].encode()).hexdigest(), 16) % 5 < 2
            assert r["split"] == ("held-out" if held else "calibration"), r["name"]
    rows = serving.load()
    scored, skipped = serving.score(rows)
    assert {s.name for s in scored} | {n for n, _ in skipped} == {r["name"] for r in rows}
    assert all(math.isfinite(s.predicted) and s.predicted > 0 for s in scored)
    assert sum(s.split == "held-out" for s in scored) >= 15
    assert len({s.name for s in scored}) >= 20


def test_drawn_random_lengths_follow_sglangs_draw_and_the_printed_totals():
    """A `sglang.bench_serving` random run without --random-range-ratio draws each length uniformly from [1, L]
    (sample_random_requests); the validation draws the same shape and scales it to the totals the run printed."""
    import json

    serving = _module("serving")
    row = {"random_input_len": 1000, "random_output_len": 1000, "random_range_ratio": 0.0}
    path = serving._uniform_file(80, row, 496, 478)
    lines = [json.loads(x) for x in Path(path).read_text().splitlines()]
    prompts = [x["prompt_tokens"] for x in lines]
    outputs = [x["output_tokens"] for x in lines]
    assert len(lines) == 80 and min(prompts + outputs) >= 1
    assert statistics.mean(prompts) == pytest.approx(496, abs=1) and statistics.mean(outputs) == pytest.approx(478, abs=1)
    assert max(prompts) > 5 * min(prompts)  # spread over the range, not one fixed length


def test_the_vllm_pool_matches_its_startup_logs():
    """Issue 19: the KV pool as vLLM sizes it, against its own logs: within 5% (median) on the held-out rows and every
    start and KV refusal predicted as such."""
    kv = _module("kv_capacity")
    scored, skipped = kv.score(kv.load())
    assert len(scored) >= 20 and len(skipped) <= len(scored)
    held = [s for s in scored if s.split == "held-out" and s.engine == "vllm"]
    errs = [abs(s.error) for s in held if s.error is not None]
    assert len(errs) >= 4 and statistics.median(errs) <= kv.TARGET
    assert all(s.verdict_ok for s in scored), [s.name for s in scored if not s.verdict_ok]
