"""`python -m validation`: predict every published result in train.toml and infer.toml and print the errors.

No efficiency is given to gpuwise: each row states only the model, hardware, layout and batch the source
states. Exit status 1 when the median |error| is above 10% or any row is worse than 25% (the issue's target),
so that CI notices a model change that breaks agreement with published numbers.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from gpuwise.catalog._toml import tomllib

HERE = Path(__file__).parent
ROOT = HERE.parent
MEDIAN_TARGET = 0.10
MAX_TARGET = 0.25


def _load(name: str) -> list[dict]:
    with open(HERE / name, "rb") as fh:
        return tomllib.load(fh)["run"]


def _model(ref: str) -> str:
    return str(ROOT / ref) if ref.startswith("validation/") else ref


def predict_train(row: dict) -> float:
    import gpuwise

    r = gpuwise.train(_model(row["model"]), gpu=row["gpu"], **row["options"])
    p = r.perf
    metric = row["metric"]
    if metric == "step_time_s":
        return p.step.step_time_s
    if metric == "tokens_per_s_per_gpu":
        return p.tokens_per_s_per_gpu
    if metric == "mfu":
        return p.mfu
    if metric == "hardware_tflops_per_gpu":
        return r.flops.hardware / p.step.step_time_s / r.request.num_gpus / 1e12
    if metric == "chinchilla_tflops_per_gpu":
        tokens = r.request.global_batch * r.request.seq
        flops = chinchilla_flops_per_token(_model(row["model"]), r.request.seq) * tokens
        return flops / p.step.step_time_s / r.request.num_gpus / 1e12
    raise ValueError(f"unknown training metric {metric!r}")


def chinchilla_flops_per_token(model: str, seq: int) -> float:
    """Forward + backward FLOPs per token by Hoffmann et al. 2022 (arXiv 2203.15556) Appendix F.

    The convention some sources quote their TFLOP/s in (metaseq converted OPT's words per second this way,
    facebookresearch/metaseq#185): embeddings and logits as matmuls, full (non-causal) s x s attention,
    3 FLOPs per softmax element, no recomputation, backward = 2 x forward. Dense decoder models only.
    """
    from gpuwise.catalog.models import load_model

    m = load_model(model).spec
    d, inner, ff = m.hidden_size, m.num_heads * m.head_dim, m.intermediate_size
    attention = 2 * 3 * d * inner + 2 * seq * inner + 3 * m.num_heads * seq + 2 * seq * inner + 2 * inner * d
    dense = 2 * (2 + m.gated_mlp) * d * ff
    forward = 2 * m.vocab_size * d + m.num_layers * (attention + dense) + 2 * d * m.vocab_size
    return 3 * forward


def predict_infer(row: dict) -> float:
    import gpuwise

    r = gpuwise.infer(_model(row["model"]), gpu=row["gpu"], **row["options"])
    metric = row["metric"]
    if metric == "decode_tokens_per_s":
        return r.output_tokens_per_s_per_sequence
    if metric == "prefill_tokens_per_s":
        return r.request.prompt_tokens * r.request.batch / r.prefill.seconds
    if metric == "tpot_s":
        return r.tpot_s
    raise ValueError(f"unknown inference metric {metric!r}")


def run() -> tuple[list[tuple[str, str, float, float, float]], float, float]:
    rows = []
    for kind, name, predict in (("train", "train.toml", predict_train), ("infer", "infer.toml", predict_infer)):
        for row in _load(name):
            pred = predict(row)
            err = pred / row["published"] - 1
            rows.append((kind, row["name"], row["published"], pred, err))
    errors = [abs(r[4]) for r in rows]
    return rows, statistics.median(errors), max(errors)


def main() -> int:
    """The first speed and serving results (train.toml, infer.toml), then the 2023-2026 training-speed runs with
    their fixed split (validation/speed.py), then training memory (validation/memory.py), then serving under load
    (validation/serving.py); exit 1 when any misses its targets."""
    status = _speed()
    print()
    from validation import memory, speed

    status = max(status, speed.main(sys.argv[1:]))
    print()
    status = max(status, memory.main(sys.argv[1:]))
    print()
    from validation import kv_capacity, serving

    status = max(status, serving.main(sys.argv[1:]))
    print()
    return max(status, kv_capacity.main(sys.argv[1:]))


def _speed() -> int:
    rows, median, worst = run()
    width = max(len(r[1]) for r in rows)
    print(f"{'':5}  {'result':{width}}  {'published':>10}  {'predicted':>10}  {'error':>7}")
    for kind, name, pub, pred, err in rows:
        print(f"{kind:5}  {name:{width}}  {pub:>10.4g}  {pred:>10.4g}  {100 * err:>+6.1f}%")
    print(f"\n{len(rows)} results: median |error| {100 * median:.1f}% (target <= {100 * MEDIAN_TARGET:.0f}%), "
          f"worst {100 * worst:.1f}% (target <= {100 * MAX_TARGET:.0f}%)")
    return 0 if median <= MEDIAN_TARGET and worst <= MAX_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
