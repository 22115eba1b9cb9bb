"""The measurement commands (torch / NVML, the `measure` extra): their options here, their work in measure/.

Their options are written out here rather than built from a request dataclass: they configure measurements on the
machine (sizes, repetitions, devices), not a question the HTTP API answers.
"""

from __future__ import annotations

import argparse

from .args import Parser, positive_float, positive_int
from .command import Command


def _calibrate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: the current CUDA GPU)")
    p.add_argument("--quick", action="store_true", help="fewer shapes and repetitions (seconds instead of minutes)")
    p.add_argument("--dtypes", help="comma list of fp32, tf32, bf16, fp16, fp8 (default: all the device supports)")
    p.add_argument("--save", nargs="?", const="", metavar="FILE",
                   help="write the device profile JSON (default file: gpuwise-profile-<gpu>.json)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _bench_options(p: argparse.ArgumentParser) -> None:
    bs = p.add_subparsers(dest="bench", parser_class=Parser, required=True)
    bc = bs.add_parser("comm", help="all-reduce, all-gather, reduce-scatter, all-to-all, send/recv: nccl-tests "
                                    "algbw/busbw over message sizes (run under torchrun)")
    bc.add_argument("--ops", help="comma list of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv "
                                  "(default: all)")
    bc.add_argument("--min-bytes", type=positive_int, help="smallest message (default 8 KiB; quick: 8 KiB)")
    bc.add_argument("--max-bytes", type=positive_int, help="largest message (default 1 GiB; quick: 4 MiB)")
    bc.add_argument("--iters", type=positive_int, help="timed repetitions per size (default 20; quick: 5)")
    bc.add_argument("--warmup", type=positive_int, help="untimed repetitions per size (default 5; quick: 2)")
    bc.add_argument("--quick", action="store_true", help="few sizes and repetitions")
    bc.add_argument("--device", help="cpu to use gloo on CPU (default: each rank's CUDA GPU, NCCL)")
    bc.add_argument("--save", nargs="?", const="", metavar="FILE",
                    help="write/merge the network section into a profile JSON (default gpuwise-network.json)")
    bc.add_argument("--json", action="store_true", help="machine-readable output")
    bt = bs.add_parser("train", help="real forward/backward/optimizer steps of MODEL with a layout, next to "
                                     "gpuwise's prediction (run under torchrun for more than one rank)")
    bt.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    bt.add_argument("--steps", type=positive_int, default=10, help="timed steps (default 10)")
    bt.add_argument("--warmup-steps", type=positive_int, default=3, help="untimed steps first (default 3)")
    bt.add_argument("--layers", type=positive_int, help="build only this many layers (the prediction is made for "
                                                         "the same shrunk model, and scaled to the full one)")
    bt.add_argument("--seq", type=positive_int, help="tokens per sequence (default 2048, or the model's maximum if "
                                                     "smaller: GPT-2's 1,024)")
    bt.add_argument("--micro-batch", type=positive_int, default=1, help="sequences per forward/backward per rank")
    bt.add_argument("--global-batch", type=positive_int, help="sequences per optimizer step (default dp x micro)")
    bt.add_argument("--tp", type=positive_int, default=1, help="tensor parallel degree (DeviceMesh + DTensor)")
    bt.add_argument("--sp", action="store_true", help="sequence parallelism with TP")
    bt.add_argument("--fsdp", choices=["full", "grad-op"],
                    help="FSDP2 fully_shard (full: reshard after forward; grad-op: keep params until backward)")
    bt.add_argument("--zero", type=int, choices=[0, 3], help="0 = DDP, 3 = FSDP2 full shard")
    bt.add_argument("--recompute", default="none",
                    help="activation checkpointing per block, torchtitan's modes: none, full, op (selective per-op "
                         "policy) or layer:N (every N-th block in full)")
    bt.add_argument("--precision", choices=["fp32", "bf16", "bf16-pure"], default="bf16",
                    help="bf16: mixed precision with fp32 master weights (default); fp32 runs GEMMs in TF32")
    bt.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    bt.add_argument("--optimizer-impl", choices=["fused", "foreach"], default="fused",
                    help="torch.optim implementation (torchtitan's optimizer.implementation; default fused, as "
                         "torchtitan's)")
    bt.add_argument("--plan", help="a plan JSON (`gpuwise plan --json`, the first plan) to take the layout from")
    bt.add_argument("--gpu", help="catalog GPU for the prediction (default: the GPU torch reports)")
    bt.add_argument("--profile", help="measured device profile (JSON) for the prediction")
    bt.add_argument("--device", help="cpu to run on CPU with gloo (default: each rank's CUDA GPU)")
    bt.add_argument("--json", action="store_true", help="machine-readable output")


def _watch_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=positive_float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--count", type=positive_int, help="stop after this many refreshes (default: until Ctrl-C)")
    p.add_argument("--once", action="store_true", help="one snapshot, then exit (same as --count 1)")
    p.add_argument("--json", action="store_true", help="one JSON document per refresh (JSON lines)")


def _calibrate(args: argparse.Namespace) -> str:
    from ..measure.commands import calibrate

    return calibrate(args)


def _bench(args: argparse.Namespace) -> str | None:
    from ..measure.commands import bench_comm, bench_train

    return (bench_comm if args.bench == "comm" else bench_train)(args)


def _watch(args: argparse.Namespace) -> str | None:
    from ..measure.commands import watch

    return watch(args)


MEASURE: dict[str, Command] = {
    "calibrate": Command("measure this GPU: matmul TFLOP/s per dtype, memory and host bandwidth, launch overhead -> "
                         "a device profile for --profile", _calibrate_options, _calibrate),
    "bench": Command("benchmarks under torchrun: collectives (comm) or real training steps (train)", _bench_options,
                     _bench),
    "watch": Command("live per-GPU view from NVML: utilization, memory, power, temperature, clocks, processes",
                     _watch_options, _watch),
}
