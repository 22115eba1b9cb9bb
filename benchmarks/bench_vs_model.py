"""Saved `gpuwise bench train --json` results next to today's model: for each train-*.json in a folder, the
measured step time and peak memory, the prediction recorded with the run, and the prediction the current code makes
for the same configuration (rebuilt from the JSON's model and layout). Runs on CPU, no GPU needed: this is how a
results folder stays comparable after the model changes.

Run: python benchmarks/bench_vs_model.py benchmarks/results/h100-sxm [--optimizer-impl foreach] [--markdown]

--optimizer-impl: the implementation the runs used when their JSON does not say (bench train before it recorded
layout.optimizer_impl ran foreach AdamW).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from gpuwise.catalog.gpus import get_gpu
from gpuwise.cli.main import parser
from gpuwise.measure.dist import DistEnv
from gpuwise.measure.train_config import configure
from gpuwise.measure.train_run import predict

GIB = 2**30


def bench_args(doc: dict, impl: str) -> argparse.Namespace:
    """The `bench train` options that reproduce a saved run's configuration (one rank)."""
    lay, model = doc["layout"], doc["model"]
    argv = ["bench", "train", model["id"], "--seq", str(lay["seq"]), "--micro-batch", str(lay["micro_batch"]),
            "--global-batch", str(lay["global_batch"]), "--recompute", lay["recompute"],
            "--precision", lay["precision"], "--optimizer", lay["optimizer"],
            "--optimizer-impl", lay.get("optimizer_impl", impl)]
    if model["layers_built"] != model["layers_full"]:
        argv += ["--layers", str(model["layers_built"])]
    return parser("bench").parse_args(argv)


def rows(folder: pathlib.Path, impl: str):
    for path in sorted(folder.glob("train-*.json")):
        doc = json.loads(path.read_text())
        if doc.get("world_size", 1) != 1 or "-profiled" in path.stem:
            continue  # one-rank runs; the profiled twins differ only in the device profile
        cfg = configure(bench_args(doc, impl), DistEnv(0, 1, 0, 1))
        pred, _ = predict(cfg, get_gpu(doc["gpu"]), None)
        cmp = doc["comparison"]
        yield dict(run=path.stem.removeprefix("train-"),
                   step_measured=cmp["step_time_s"]["measured"], step_then=cmp["step_time_s"]["predicted"],
                   step_now=pred.perf.step.step_time_s,
                   alloc_measured=cmp["peak_allocated_bytes"]["measured"] / GIB,
                   alloc_then=cmp["peak_allocated_bytes"]["predicted"] / GIB,
                   alloc_now=pred.memory.torch_allocated / GIB,
                   reserved_measured=cmp["peak_reserved_bytes"]["measured"] / GIB,
                   reserved_now=pred.memory.torch_reserved / GIB)


def _pct(pred: float, measured: float) -> str:
    return f"{pred / measured - 1:+.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--optimizer-impl", choices=["fused", "foreach"], default="foreach")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    a = ap.parse_args()
    head = ("run", "step ms measured", "predicted then", "predicted now", "error now",
            "allocated GiB measured", "predicted then", "predicted now", "error now",
            "reserved GiB measured", "predicted now", "error now")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for r in rows(a.folder, a.optimizer_impl):
        cells = (r["run"], f"{r['step_measured'] * 1e3:.0f}", f"{r['step_then'] * 1e3:.0f}",
                 f"{r['step_now'] * 1e3:.0f}", _pct(r["step_now"], r["step_measured"]),
                 f"{r['alloc_measured']:.2f}", f"{r['alloc_then']:.2f}", f"{r['alloc_now']:.2f}",
                 _pct(r["alloc_now"], r["alloc_measured"]), f"{r['reserved_measured']:.2f}",
                 f"{r['reserved_now']:.2f}", _pct(r["reserved_now"], r["reserved_measured"]))
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))


if __name__ == "__main__":
    main()
