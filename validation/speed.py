"""Training speed against published runs (`validation/speed_sources/*.toml` and `train.toml`, issue 18).

Each row states a real run's model, GPU, layout, batch and framework settings, mapped to `gpuwise train` options,
and the figure the source measured: tokens/s per GPU, step time, or an MFU / model TFLOP/s per GPU in the source's
own FLOP count (the row gives that count per token, `flops_per_token`, and for MFU the peak it divides by,
`peak_tflops`). No efficiency is given to gpuwise.

Every error is a throughput ratio: predicted / published - 1 for tokens/s, MFU and TFLOP/s, published / predicted
- 1 for a step time; positive means gpuwise predicts the run faster than it ran. Each row's part (calibration or
held-out) was fixed by a hash of its name before anything was scored (speed_sources/README.md); constants may be
chosen on calibration rows only. `train.toml`'s 2020-2023 rows built the model before this split existed, so they
are all calibration (category `a100_legacy`). Every run that ran is also a must-fit row for the memory model.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from gpuwise.catalog._toml import tomllib
from validation.memory import _model  # noqa: F401 (validation.layouts imports it from here)

HERE = Path(__file__).parent
ROOT = HERE.parent
SOURCES = HERE / "speed_sources"
GiB = 1 << 30
HELD_OUT_MEDIAN_TARGET = 0.08
HELD_OUT_P90_TARGET = 0.20
"""Issue 18: the held-out part's median and 90th-percentile |error|, every run predicted to fit."""
LEGACY = "a100_legacy"


@dataclass(frozen=True, slots=True)
class Scored:
    category: str
    split: str
    name: str
    metric: str
    published: float
    predicted: float
    error: float
    """Throughput ratio - 1 (positive: predicted faster than measured)."""
    fits: bool
    required_gib: float
    capacity_gib: float
    rule_category: str
    """The category gpuwise's rule gives the configuration (gpuwise.plan.confidence.speed_category)."""
    config: dict
    """What the run covers: gpu, precision, framework, degrees, num_gpus, seq."""


def load() -> list[dict]:
    rows = []
    for path in sorted(SOURCES.glob("*.toml")):
        with open(path, "rb") as fh:
            rows += [dict(row, file=path.stem) for row in tomllib.load(fh)["run"]]
    with open(HERE / "train.toml", "rb") as fh:
        rows += [dict(row, file="train", category=LEGACY, split="calibration") for row in tomllib.load(fh)["run"]]
    return rows


def _predicted(row: dict, r) -> float:
    """The row's metric as gpuwise predicts it (for a step time: its reciprocal's ratio is taken in `score`)."""
    p = r.perf
    metric = row["metric"]
    if metric == "tokens_per_s_per_gpu":
        return p.tokens_per_s_per_gpu
    if metric == "step_time_s":
        return p.step.step_time_s
    if metric in ("model_tflops_per_gpu", "mfu") and "flops_per_token" in row:
        tflops = p.tokens_per_s_per_gpu * row["flops_per_token"] / 1e12
        return tflops if metric == "model_tflops_per_gpu" else tflops / row["peak_tflops"]
    # train.toml's conventions (hardware FLOPs with recompute; Hoffmann et al.'s count)
    from validation.__main__ import predict_train

    return predict_train(row)


def score(row: dict) -> Scored:
    import gpuwise

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    r = gpuwise.train(_model(row["model"]), gpu=row["gpu"], **row["options"])
    predicted = _predicted(row, r)
    published = row["published"]
    error = published / predicted - 1 if row["metric"] == "step_time_s" else predicted / published - 1
    capacity = row.get("device_memory_gib", r.request.gpu.memory_bytes / GiB)
    required = r.memory.required / GiB
    from gpuwise.plan.confidence import speed_category
    from gpuwise.plan.train import fp8_family, recurrent_kind

    req, lay = r.request, r.layout
    rule = speed_category(moe=req.model.spec.moe is not None, cp=lay.cp, seq=req.seq, vendor=req.gpu.vendor,
                          architecture=req.gpu.architecture or "", precision=req.precision, framework=r.framework,
                          tp=lay.tp, pp=lay.pp)
    config = {"gpu": req.gpu.id, "precision": req.precision, "framework": r.framework, "num_gpus": req.num_gpus,
              "seq": req.seq, "finetune": req.finetune, "optimizer": req.optimizer,
              "power_limit_w": req.gpu.power_limit_w,
              "fp8_kernels": fp8_family(req), "mixer": recurrent_kind(req.model.spec),
              "attention_share": r.flops.forward.attention_share,
              "degrees": {"tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep}}
    return Scored(row["category"], row["split"], row["name"], row["metric"], published, predicted, error,
                  required <= capacity, required, capacity, rule, config)


def run() -> tuple[list[Scored], list[tuple[str, str, str]]]:
    """(scored rows, rows gpuwise cannot evaluate yet: (category, name, why)), the latter listed, never hidden."""
    from gpuwise.errors import GpuwiseError

    scored, unscored = [], []
    for row in load():
        if row["model"].startswith("custom:") or row["gpu"].startswith("custom:"):
            unscored.append((row["category"], row["name"], "model or GPU not in the catalog yet"))
            continue
        if row.get("not_modelled"):  # a framework gpuwise has no model of (listed with the reason, never hidden)
            unscored.append((row["category"], row["name"], row["not_modelled"]))
            continue
        try:
            scored.append(score(row))
        except (GpuwiseError, KeyError) as exc:
            unscored.append((row["category"], row["name"], str(exc).split(";")[0]))
    return scored, unscored


@dataclass(frozen=True, slots=True)
class Summary:
    rows: int
    median: float | None
    p90: float | None
    worst: float | None
    bias: float | None
    """Median signed error (positive: too fast)."""
    not_fitting: int


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 1]."""
    v = sorted(values)
    k = (len(v) - 1) * q
    lo = math.floor(k)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (k - lo)


def summarize(scored: list[Scored]) -> Summary:
    errors = [abs(s.error) for s in scored]
    if not errors:
        return Summary(0, None, None, None, None, 0)
    return Summary(len(errors), statistics.median(errors), percentile(errors, 0.9), max(errors),
                   statistics.median(s.error for s in scored), sum(not s.fits for s in scored))


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:5.1f}%"


def report(scored: list[Scored], *, rows: bool = True) -> tuple[str, Summary, Summary]:
    """The table (every row when `rows`) and the per-category, per-part summary; returns the held-out and
    calibration summaries over the 2023-2026 rows."""
    lines = []
    if rows:
        width = min(96, max(len(s.name) for s in scored))
        lines.append(f"{'category':16}  {'part':11}  {'run':{width}}  {'metric':12}  {'published':>9}  "
                     f"{'predicted':>9}  {'error':>7}  fits")
        for s in sorted(scored, key=lambda s: (s.category, s.split, s.name)):
            fits = "yes" if s.fits else f"NO ({s.required_gib:.0f} of {s.capacity_gib:.0f} GiB)"
            lines.append(f"{s.category:16}  {s.split:11}  {s.name[:width]:{width}}  {s.metric[:12]:12}  "
                         f"{s.published:9.4g}  {s.predicted:9.4g}  {100 * s.error:+6.1f}%  {fits}")
        lines.append("")
    lines.append("Training speed (error = predicted / published throughput - 1, + = predicted too fast; p90 = 90th "
                 "percentile of |error|):")
    lines.append(f"  {'category':16}  {'part':11}  {'rows':>4}  {'median':>6}  {'p90':>6}  {'worst':>6}  "
                 f"{'bias':>6}  not fitting")
    categories = sorted({s.category for s in scored} - {LEGACY})
    recent = [s for s in scored if s.category != LEGACY]
    for part in ("calibration", "held-out"):
        for cat in categories + ["all"]:
            sel = [s for s in recent if s.split == part and (cat == "all" or s.category == cat)]
            if sel:
                sm = summarize(sel)
                lines.append(f"  {cat:16}  {part:11}  {sm.rows:>4}  {_pct(sm.median)}  {_pct(sm.p90)}  "
                             f"{_pct(sm.worst)}  {_pct(sm.bias)}  {sm.not_fitting}")
    legacy = summarize([s for s in scored if s.category == LEGACY])
    if legacy.rows:
        lines.append(f"  {LEGACY:16}  {'calibration':11}  {legacy.rows:>4}  {_pct(legacy.median)}  "
                     f"{_pct(legacy.p90)}  {_pct(legacy.worst)}  {_pct(legacy.bias)}  {legacy.not_fitting}")
    held = summarize([s for s in recent if s.split == "held-out"])
    cal = summarize([s for s in recent if s.split == "calibration"])
    return "\n".join(lines), held, cal


def meets_targets(held: Summary) -> bool:
    return (held.median is not None and held.median <= HELD_OUT_MEDIAN_TARGET and held.p90 <= HELD_OUT_P90_TARGET
            and held.not_fitting == 0)


BANDS = ROOT / "src/gpuwise/catalog/data/speed_validation.toml"


def bands_toml(scored: list[Scored]) -> str:
    """`catalog/data/speed_validation.toml`: the held-out bands per category and what the scored runs cover."""
    from gpuwise.plan.confidence import ATTENTION_DOMINATED

    recent = [s for s in scored if s.category != LEGACY]
    held = [s for s in recent if s.split == "held-out"]
    out = ["# Written by `python -m validation.speed --write-bands` from the held-out part of validation/speed_sources/",
           "# (never edit by hand; tests/test_validation.py checks it is current). Errors are throughput ratios,",
           "# predicted / published - 1: bias > 0 means the published runs ran slower than predicted.", ""]

    def section(name: str, sel: list[Scored]) -> None:
        sm = summarize(sel)
        errors = [s.error for s in sel]
        out.extend([f"[held_out.{name}]", f"runs = {sm.rows}", f"median = {sm.median:.4f}", f"p90 = {sm.p90:.4f}",
                    f"bias = {sm.bias:.4f}", f"low = {min(errors):.4f}", f"high = {max(errors):.4f}", ""])

    for cat in sorted({s.category for s in held}):
        section(cat, [s for s in held if s.category == cat])
    section("all", held)
    # across the categories: steps whose FLOPs are mostly attention (gpuwise.plan.confidence.ATTENTION_DOMINATED)
    section("attention_dominated", [s for s in held if s.config["attention_share"] >= ATTENTION_DOMINATED])
    cover = [s.config for s in scored]

    def strings(key: str) -> str:
        return "[" + ", ".join(f'"{v}"' for v in sorted({c[key] for c in cover})) + "]"

    degrees = {d: max(c["degrees"][d] for c in cover) for d in ("tp", "pp", "cp", "ep")}
    limits = sorted({(c["gpu"], c["power_limit_w"]) for c in cover if c["power_limit_w"]})
    out.extend(["[covered]", f"gpus = {strings('gpu')}", f"precisions = {strings('precision')}",
                f"frameworks = {strings('framework')}", f"finetunes = {strings('finetune')}",
                f"optimizers = {strings('optimizer')}",
                "fp8_kernels = [" + ", ".join(f'"{v}"' for v in sorted({c["fp8_kernels"] for c in cover
                                                                           if c["fp8_kernels"]})) + "]",
                "mixers = [" + ", ".join(f'"{v}"' for v in sorted({c["mixer"] for c in cover if c["mixer"]})) + "]",
                f"max_gpus = {max(c['num_gpus'] for c in cover)}",
                f"max_seq = {max(c['seq'] for c in cover)}",
                "power_limits = [" + ", ".join(f'"{g} at {w:g} W"' for g, w in limits) + "]",
                "max_degree = { " + ", ".join(f"{d} = {v}" for d, v in degrees.items()) + " }", ""])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print every row (or only the summary with --summary); exit 1 when the held-out part misses its targets."""
    scored, unscored = run()
    if "--write-bands" in (argv or []):
        BANDS.write_text(bands_toml(scored))
        print(f"wrote {BANDS.relative_to(ROOT)}")
    text, held, cal = report(scored, rows="--summary" not in (argv or []))
    print(text)
    for s in scored:
        if s.category != LEGACY and s.category != s.rule_category:
            print(f"  category {s.category} of {s.name!r} differs from gpuwise's rule ({s.rule_category})")
    for category, name, why in unscored:
        print(f"  not scored ({category}): {name}: {why}")
    print(f"held-out: median |error| {_pct(held.median).strip()} (target <= {100 * HELD_OUT_MEDIAN_TARGET:.0f}%), "
          f"p90 {_pct(held.p90).strip()} (target <= {100 * HELD_OUT_P90_TARGET:.0f}%), {held.not_fitting} runs "
          f"that ran predicted not to fit (target 0)")
    return 0 if meets_targets(held) else 1


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
