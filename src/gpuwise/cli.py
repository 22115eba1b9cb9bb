"""The `gpuwise` command line: a thin layer over the Python API.

argparse (stdlib) rather than a CLI framework keeps `gpuwise fit` far under the 0.3 s budget and
lets every input error come out as exactly one line on stderr with exit status 2. Each subcommand
builds one result object and hands it to a presenter (text or `--json`).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from .errors import GpuwiseError

EXIT_USAGE = 2


class UsageError(GpuwiseError):
    """Options argparse rejects (unknown flag, missing value, bad number): the same one line as any input error."""


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump): raised, so that `main` prints them and exits 2, and the
    web API (serve/) answers them with a 400 carrying the same message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuwise", description="Will it fit, how fast, on what: GPU answers for LLM work.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    fit = sub.add_parser("fit", help="inference memory per GPU: will MODEL fit on GPU?")
    fit.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    fit.add_argument("--gpu", required=True, help="GPU id or name, e.g. h100-sxm, rtx-4090, 'NVIDIA A100-SXM4-80GB'")
    fit.add_argument("--num-gpus", type=_positive_int, default=1, help="GPUs to split over (default 1)")
    fit.add_argument("--weights", help="dtype or quantization: bf16, fp16, fp8, int8, nf4, nf4-dq, gptq, awq, "
                                       "Q4_K_M, Q8_0 ... (default: what the engine loads)")
    fit.add_argument("--kv-dtype", help="KV cache type: fp16, bf16, fp8, or llama.cpp's q8_0/q4_0")
    fit.add_argument("--context", type=_positive_int, help="tokens per sequence, prompt + output (default 4096)")
    fit.add_argument("--batch", type=_positive_int, default=1, help="concurrent sequences (default 1)")
    fit.add_argument("--engine", choices=["hf", "vllm", "llamacpp"], default="vllm", help="default vllm")
    fit.add_argument("--json", action="store_true", help="machine-readable output (docs/json-schema.md)")

    _add_train(sub)
    _add_infer(sub)
    _add_roofline(sub)
    _add_measure(sub)

    sv = sub.add_parser("serve", help="a local web page and HTTP API over the same answers (http://127.0.0.1:8000)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks a free one)")
    sv.add_argument("--quiet", action="store_true", help="do not log each request on stderr")

    models = sub.add_parser("models", help="list the embedded model catalog")
    models.add_argument("query", nargs="?", help="filter by id, Hugging Face id or family")
    models.add_argument("--json", action="store_true")

    gpus = sub.add_parser("gpus", help="list the embedded GPU catalog")
    gpus.add_argument("query", nargs="?", help="filter by id, name, vendor, segment or architecture")
    gpus.add_argument("--json", action="store_true")
    return p


def _add_train(sub) -> None:
    t = sub.add_parser("train", help="training memory per GPU and FLOPs per step: will this job fit?")
    _train_options(t)
    d = sub.add_parser("doctor", help="a training job does not fit (or ran out of memory): remedies, ranked")
    _train_options(d)
    d.add_argument("--oom-at-gib", type=_positive_float,
                   help="memory the job held when it ran out (allocated + the failed request, GiB), if observed")
    d.add_argument("--task", choices=["train", "infer"], default="train",
                   help="train (default: train's options) or infer (fit's: --weights --kv-dtype --context --batch "
                        "--engine)")
    d.add_argument("--weights", help="infer: dtype or quantization")
    d.add_argument("--kv-dtype", help="infer: KV cache type")
    d.add_argument("--context", type=_positive_int, help="infer: tokens per sequence (default 4096)")
    d.add_argument("--batch", type=_positive_int, default=1, help="infer: concurrent sequences (default 1)")
    d.add_argument("--engine", choices=["hf", "vllm", "llamacpp", "trtllm"], default="vllm", help="infer: engine")


def _train_options(t: argparse.ArgumentParser) -> None:
    t.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    t.add_argument("--gpu", required=True, help="GPU id or name, e.g. h100-sxm, a100-80gb")
    t.add_argument("--num-gpus", type=_positive_int, default=1, help="GPUs in the job (default 1)")
    t.add_argument("--seq", type=_positive_int, default=4096, help="tokens per sequence (default 4096)")
    t.add_argument("--global-batch", type=_positive_int, help="sequences per optimizer step (default: dp x micro-batch)")
    t.add_argument("--micro-batch", type=_positive_int, default=1, help="sequences per forward/backward per rank")
    for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (interleaved)"),
                       ("cp", "context"), ("ep", "expert")):
        t.add_argument(f"--{name}", type=_positive_int, default=1, help=f"{what} parallel degree (default 1)")
    t.add_argument("--sp", action="store_true", help="sequence parallelism with TP")
    t.add_argument("--pp-first-layers", type=_positive_int, help="layers on the first pipeline stage (uneven split)")
    t.add_argument("--pp-last-layers", type=_positive_int, help="layers on the last pipeline stage (uneven split)")
    t.add_argument("--schedule", choices=["1f1b", "gpipe", "interleaved"], help="pipeline schedule (default 1f1b)")
    t.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage (DeepSpeed; 3 = FSDP full shard)")
    t.add_argument("--fsdp", choices=["full", "grad-op", "no-reshard", "hybrid"], help="FSDP sharding mode")
    t.add_argument("--shard-group", type=_positive_int, help="HSDP: ranks sharding model states (--fsdp hybrid)")
    t.add_argument("--recompute", choices=["none", "selective", "full"], default="none",
                   help="activation checkpointing (default none)")
    t.add_argument("--offload", default="", help="comma list of optimizer, params, activations to host memory")
    t.add_argument("--optimizer", choices=["adamw", "adamw-8bit", "sgd", "adafactor", "none"], default="adamw")
    t.add_argument("--precision", choices=["fp32", "bf16", "fp16", "bf16-pure", "fp8"], default="bf16",
                   help="bf16/fp16 = mixed with fp32 master weights (default bf16)")
    t.add_argument("--framework", choices=["megatron", "torchtitan", "fsdp", "hf", "deepspeed"],
                   help="implementation profile (default: from the other options, see docs/training-memory.md)")
    t.add_argument("--finetune", choices=["full", "lora", "qlora"], default="full")
    t.add_argument("--lora-rank", type=_positive_int, default=16, help="LoRA rank (default 16)")
    t.add_argument("--lora-targets", default="all-linear", help="all-linear or a comma list of q,k,v,o,gate,up,down")
    t.add_argument("--flops-convention", choices=["causal", "full"], default="causal",
                   help="attention FLOPs: causal (default) or full (FlopCounterMode)")
    t.add_argument("--attention", choices=["flash", "unfused"], default="flash",
                   help="flash (default: fused kernel, no score matrix) or unfused (scores, softmax and dropout in "
                        "memory, as Megatron-LM before flash attention)")
    t.add_argument("--tp-comm-overlap", action="store_true",
                   help="overlap tensor-parallel collectives with the split GEMMs (Megatron-LM --tp-comm-overlap)")
    t.add_argument("--gpus-per-node", type=_positive_int, help="GPUs per node (default 8)")
    t.add_argument("--inter-node-gbps", type=_positive_float,
                   help="per-GPU NIC line rate across nodes in Gb/s (default: 400 Hopper/Blackwell, 200 Ampere)")
    t.add_argument("--profile", help="measured device profile (JSON, from `gpuwise calibrate`) overriding defaults")
    t.add_argument("--train-tokens", type=_positive_float, help="token budget of the run (time, GPU-hours, cost)")
    t.add_argument("--usd-per-gpu-hour", type=_positive_float, help="price (default: catalog on-demand rental)")
    t.add_argument("--json", action="store_true", help="machine-readable output (docs/json-schema.md)")


def _add_infer(sub) -> None:
    i = sub.add_parser("infer", help="inference speed: time to first token, time per token, throughput, cost")
    i.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    i.add_argument("--gpu", required=True, help="GPU id or name")
    i.add_argument("--num-gpus", type=_positive_int, default=1, help="GPUs (tensor parallel or layer split by engine)")
    i.add_argument("--weights", help="dtype or quantization (default: what the engine loads)")
    i.add_argument("--kv-dtype", help="KV cache type")
    i.add_argument("--batch", type=_positive_int, default=1, help="concurrent sequences (default 1)")
    i.add_argument("--prompt-tokens", type=_positive_int, default=512, help="prompt tokens (default 512)")
    i.add_argument("--output-tokens", type=_positive_int, default=128, help="output tokens (default 128)")
    i.add_argument("--samples", type=_positive_int, default=1, help="completions per prompt (default 1)")
    i.add_argument("--engine", choices=["hf", "vllm", "llamacpp", "trtllm"], default="vllm", help="default vllm")
    i.add_argument("--profile", help="measured device profile (JSON) overriding the defaults")
    i.add_argument("--usd-per-gpu-hour", type=_positive_float, help="price (default: catalog on-demand rental)")
    i.add_argument("--json", action="store_true", help="machine-readable output (docs/json-schema.md)")


def _add_roofline(sub) -> None:
    pl = sub.add_parser("plan", help="search the parallel layouts of a training job and rank those that fit")
    pl.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    pl.add_argument("--gpu", required=True, help="GPU id or name")
    pl.add_argument("--num-gpus", type=_positive_int, required=True)
    pl.add_argument("--seq", type=_positive_int, required=True, help="tokens per sequence")
    pl.add_argument("--global-batch", type=_positive_int, required=True, help="sequences per optimizer step")
    pl.add_argument("--top", type=_positive_int, default=5, help="plans to show (default 5)")
    pl.add_argument("--framework", choices=["megatron", "torchtitan", "fsdp", "deepspeed"], default="megatron",
                    help="trainer whose shardings and memory profile to use (default megatron)")
    pl.add_argument("--objective", choices=["time", "cost", "memory"], default="time",
                    help="rank by step time (default), cost (same order at a fixed GPU count) or memory per GPU")
    pl.add_argument("--precision", choices=["fp32", "bf16", "fp16", "fp8"], default="bf16")
    for name in ("tp", "pp", "cp", "ep"):
        pl.add_argument(f"--{name}", type=_positive_int, help=f"fix the {name.upper()} degree")
    pl.add_argument("--max-tp", type=_positive_int, help="largest tensor-parallel degree to consider")
    pl.add_argument("--no-pp", action="store_true", help="no pipeline parallelism")
    pl.add_argument("--reserve-gib", type=_positive_float, default=0.0, help="memory to keep free per GPU (GiB)")
    pl.add_argument("--tp-across-nodes", action="store_true", help="allow tensor parallelism across nodes")
    pl.add_argument("--gpus-per-node", type=_positive_int, help="GPUs per node (default 8)")
    pl.add_argument("--inter-node-gbps", type=_positive_float, help="per-GPU NIC line rate across nodes (Gb/s)")
    pl.add_argument("--profile", help="measured device profile (JSON)")
    pl.add_argument("--emit", metavar="DIR", help="write the best plan's launch recipe to DIR (torchrun command, "
                                                  "torchtitan TOML, Megatron-LM flags, DeepSpeed JSON)")
    pl.add_argument("--json", action="store_true", help="machine-readable output (docs/json-schema.md)")

    pk = sub.add_parser("pick", help="which GPU kind and how many for a workload: ranked, with each rejection's rule")
    pk.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    pk.add_argument("--task", choices=["infer", "train", "finetune"], default="infer", help="default infer")
    pk.add_argument("--gpus", help="comma list of candidate GPUs (MIG slice as GPU:PROFILE); default: the catalog")
    pk.add_argument("--max-gpus", type=_positive_int, default=8, help="most GPUs of one kind (default 8)")
    pk.add_argument("--budget-usd-per-hour", type=_positive_float, help="most to spend per hour, all GPUs together")
    pk.add_argument("--objective", choices=["cost", "speed"], default="cost",
                    help="rank by cost per million tokens (default) or tokens per second")
    pk.add_argument("--headroom", type=float, default=0.10, help="share of GPU memory to keep free (default 0.10)")
    pk.add_argument("--no-mig", action="store_true", help="leave MIG slices out")
    pk.add_argument("--price", default="", help="your prices, USD per GPU-hour: ID=USD,ID=USD (overrides the catalog)")
    pk.add_argument("--top", type=_positive_int, default=10, help="candidates to show (default 10)")
    pk.add_argument("--weights", help="infer: dtype or quantization (default: what the engine loads)")
    pk.add_argument("--kv-dtype", help="infer: KV cache type")
    pk.add_argument("--batch", type=_positive_int, default=1, help="infer: concurrent sequences (default 1)")
    pk.add_argument("--prompt-tokens", type=_positive_int, default=512, help="infer: prompt tokens (default 512)")
    pk.add_argument("--output-tokens", type=_positive_int, default=128, help="infer: output tokens (default 128)")
    pk.add_argument("--engine", choices=["hf", "vllm", "llamacpp", "trtllm"], default="vllm", help="infer: default vllm")
    pk.add_argument("--seq", type=_positive_int, help="train/finetune: tokens per sequence (default 4096 / 2048)")
    pk.add_argument("--global-batch", type=_positive_int, help="train/finetune: sequences per step (default 256 / 16)")
    pk.add_argument("--precision", choices=["bf16", "fp16", "fp8", "fp32"], default="bf16", help="train/finetune")
    pk.add_argument("--finetune", choices=["full", "lora", "qlora"], help="finetune: method (default lora)")
    pk.add_argument("--train-tokens", type=_positive_float, help="train/finetune: token budget (run time and cost)")
    pk.add_argument("--json", action="store_true", help="machine-readable output (docs/json-schema.md)")

    ex = sub.add_parser("explain", help="a concept in plain words, with its numbers for your GPU and model")
    ex.add_argument("term", nargs="?", help="e.g. mfu, zero, bubble, ridge, nvlink, mig, fp8 (none: list the terms)")
    ex.add_argument("--model", help="show the numbers for this model too (catalog name, HF id or config.json)")
    ex.add_argument("--gpu", help="GPU for the numbers (default h100-sxm)")
    ex.add_argument("--list", action="store_true", help="list the terms")
    ex.add_argument("--json", action="store_true", help="machine-readable output")

    r = sub.add_parser("roofline", help="the model's operations on the GPU's roofline (table and plot)")
    r.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    r.add_argument("--gpu", required=True, help="GPU id or name")
    r.add_argument("--phase", choices=["prefill", "decode"], default="decode", help="default decode")
    r.add_argument("--batch", type=_positive_int, default=1, help="sequences (default 1)")
    r.add_argument("--seq", type=_positive_int, default=2048,
                   help="prefill: prompt tokens; decode: cached tokens per sequence (default 2048)")
    r.add_argument("--dtype", help="peak to use: bf16 (default), fp16, fp8, int8, tf32, fp32")
    r.add_argument("--profile", help="measured device profile (JSON)")
    r.add_argument("--plot", help="write a log-log roofline plot to FILE.png or FILE.svg")
    r.add_argument("--json", action="store_true", help="machine-readable output (docs/json-schema.md)")


def _add_measure(sub) -> None:
    """The measurement commands (torch / NVML, the `measure` extra): their options here, their work in measure/."""
    c = sub.add_parser("calibrate", help="measure this GPU: matmul TFLOP/s per dtype, memory and host bandwidth, "
                                         "launch overhead -> a device profile for --profile")
    c.add_argument("--device", help="cuda, cuda:N or cpu (default: the current CUDA GPU)")
    c.add_argument("--quick", action="store_true", help="fewer shapes and repetitions (seconds instead of minutes)")
    c.add_argument("--dtypes", help="comma list of fp32, tf32, bf16, fp16, fp8 (default: all the device supports)")
    c.add_argument("--save", nargs="?", const="", metavar="FILE",
                   help="write the device profile JSON (default file: gpuwise-profile-<gpu>.json)")
    c.add_argument("--json", action="store_true", help="machine-readable output")

    b = sub.add_parser("bench", help="benchmarks under torchrun: collectives (comm) or real training steps (train)")
    bs = b.add_subparsers(dest="bench", parser_class=_Parser, required=True)
    bc = bs.add_parser("comm", help="all-reduce, all-gather, reduce-scatter, all-to-all, send/recv: nccl-tests "
                                    "algbw/busbw over message sizes (run under torchrun)")
    bc.add_argument("--ops", help="comma list of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv "
                                  "(default: all)")
    bc.add_argument("--min-bytes", type=_positive_int, help="smallest message (default 8 KiB; quick: 8 KiB)")
    bc.add_argument("--max-bytes", type=_positive_int, help="largest message (default 1 GiB; quick: 4 MiB)")
    bc.add_argument("--iters", type=_positive_int, help="timed repetitions per size (default 20; quick: 5)")
    bc.add_argument("--warmup", type=_positive_int, help="untimed repetitions per size (default 5; quick: 2)")
    bc.add_argument("--quick", action="store_true", help="few sizes and repetitions")
    bc.add_argument("--device", help="cpu to use gloo on CPU (default: each rank's CUDA GPU, NCCL)")
    bc.add_argument("--save", nargs="?", const="", metavar="FILE",
                    help="write/merge the network section into a profile JSON (default gpuwise-network.json)")
    bc.add_argument("--json", action="store_true", help="machine-readable output")
    bt = bs.add_parser("train", help="real forward/backward/optimizer steps of MODEL with a layout, next to "
                                     "gpuwise's prediction (run under torchrun for more than one rank)")
    bt.add_argument("model", help="catalog name, Hugging Face id, or path to a config.json (or its folder)")
    bt.add_argument("--steps", type=_positive_int, default=10, help="timed steps (default 10)")
    bt.add_argument("--warmup-steps", type=_positive_int, default=3, help="untimed steps first (default 3)")
    bt.add_argument("--layers", type=_positive_int, help="build only this many layers (the prediction is made for "
                                                         "the same shrunk model, and scaled to the full one)")
    bt.add_argument("--seq", type=_positive_int, default=2048, help="tokens per sequence (default 2048)")
    bt.add_argument("--micro-batch", type=_positive_int, default=1, help="sequences per forward/backward per rank")
    bt.add_argument("--global-batch", type=_positive_int, help="sequences per optimizer step (default dp x micro)")
    bt.add_argument("--tp", type=_positive_int, default=1, help="tensor parallel degree (DeviceMesh + DTensor)")
    bt.add_argument("--sp", action="store_true", help="sequence parallelism with TP")
    bt.add_argument("--fsdp", choices=["full", "grad-op"],
                    help="FSDP2 fully_shard (full: reshard after forward; grad-op: keep params until backward)")
    bt.add_argument("--zero", type=int, choices=[0, 3], help="0 = DDP, 3 = FSDP2 full shard")
    bt.add_argument("--recompute", choices=["none", "full"], default="none", help="activation checkpointing")
    bt.add_argument("--precision", choices=["fp32", "bf16", "bf16-pure"], default="bf16",
                    help="bf16: mixed precision with fp32 master weights (default); fp32 runs GEMMs in TF32")
    bt.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    bt.add_argument("--plan", help="a plan JSON (`gpuwise plan --json`, the first plan) to take the layout from")
    bt.add_argument("--gpu", help="catalog GPU for the prediction (default: the GPU torch reports)")
    bt.add_argument("--profile", help="measured device profile (JSON) for the prediction")
    bt.add_argument("--device", help="cpu to run on CPU with gloo (default: each rank's CUDA GPU)")
    bt.add_argument("--json", action="store_true", help="machine-readable output")

    w = sub.add_parser("watch", help="live per-GPU view from NVML: utilization, memory, power, temperature, "
                                     "clocks, processes")
    w.add_argument("--interval", type=_positive_float, default=1.0, help="seconds between refreshes (default 1)")
    w.add_argument("--count", type=_positive_int, help="stop after this many refreshes (default: until Ctrl-C)")
    w.add_argument("--once", action="store_true", help="one snapshot, then exit (same as --count 1)")
    w.add_argument("--json", action="store_true", help="one JSON document per refresh (JSON lines)")


def _cmd_calibrate(args: argparse.Namespace) -> str:
    from .measure.calibrate import cli_main

    return cli_main(args)


def _cmd_bench(args: argparse.Namespace) -> str | None:
    if args.bench == "comm":
        from .measure.comm_bench import cli_main
    else:
        from .measure.train_bench import cli_main
    return cli_main(args)


def _cmd_serve(args: argparse.Namespace) -> None:
    from .serve.server import cli_main

    return cli_main(args)


def _cmd_watch(args: argparse.Namespace) -> str | None:
    from .measure.watch import cli_main

    return cli_main(args)


def _cmd_plan(args: argparse.Namespace) -> str:
    from .api import plan

    result = plan(args.model, gpu=args.gpu, num_gpus=args.num_gpus, seq=args.seq, global_batch=args.global_batch,
                  top=args.top, framework=args.framework, objective=args.objective, precision=args.precision,
                  tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, max_tp=args.max_tp, no_pp=args.no_pp,
                  reserve_gib=args.reserve_gib, tp_across_nodes=args.tp_across_nodes,
                  gpus_per_node=args.gpus_per_node, inter_node_gbps=args.inter_node_gbps, profile=args.profile)
    written = []
    if args.emit:
        if not result.plans:
            raise GpuwiseError(f"--emit: no plan to write ({result.why})")
        from .plan.recipe import write_recipes

        try:
            written = write_recipes(result, result.plans[0], args.emit)
        except OSError as exc:
            raise GpuwiseError(f"--emit: cannot write to '{args.emit}': {exc.strerror or exc}") from None
    if args.json:
        from .report.json_out import dumps, plan_to_dict

        doc = plan_to_dict(result)
        if args.emit:
            doc["emitted"] = [str(p) for p in written]
        return dumps(doc)
    from .report.text import render_plan

    out = render_plan(result)
    if written:
        out += f"\nLaunch recipe for #1 written to {args.emit}: " + ", ".join(p.name for p in written)
    return out


def _prices(text: str) -> dict[str, float]:
    from .catalog.gpus import get_gpu
    from .errors import InvalidArgument

    out = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, _, value = item.partition("=")
        try:
            usd = float(value)
        except ValueError:
            raise InvalidArgument(f"--price: '{item}' is not ID=USD") from None
        if not 0 < usd < 1e4:
            raise InvalidArgument(f"--price: {usd} USD per GPU-hour is not a price")
        base, _, profile = name.strip().partition(":")
        out[get_gpu(base).id + (":" + profile if profile else "")] = usd
    return out


def _cmd_explain(args: argparse.Namespace) -> str:
    from .plan import explain as ex

    if args.list or not args.term:
        if args.json:
            from .report.json_out import SCHEMA_VERSION, dumps

            return dumps({"schema_version": SCHEMA_VERSION, "command": "explain", "terms": list(ex.TERMS)})
        return ex.list_terms()
    e = ex.explain(args.term, model=args.model, gpu=args.gpu)
    if args.json:
        from .report.json_out import dumps

        return dumps(ex.to_dict(e))
    return ex.render(e)


def _cmd_pick(args: argparse.Namespace) -> str:
    from .api import pick
    from .plan.pick import resolve_gpu

    gpus = tuple(resolve_gpu(x.strip()) for x in args.gpus.split(",") if x.strip()) if args.gpus else None
    result = pick(args.model, task=args.task, gpus=gpus, max_gpus=args.max_gpus,
                  budget_usd_per_hour=args.budget_usd_per_hour, objective=args.objective, headroom=args.headroom,
                  mig=not args.no_mig, prices=_prices(args.price), top=args.top, weights=args.weights,
                  kv_dtype=args.kv_dtype, batch=args.batch, prompt_tokens=args.prompt_tokens,
                  output_tokens=args.output_tokens, engine=args.engine, seq=args.seq, global_batch=args.global_batch,
                  precision=args.precision, finetune=args.finetune, train_tokens=args.train_tokens)
    if args.json:
        from .report.json_out import dumps, pick_to_dict

        return dumps(pick_to_dict(result))
    from .report.text import render_pick

    return render_pick(result)


def _cmd_infer(args: argparse.Namespace) -> str:
    from .api import infer

    result = infer(args.model, gpu=args.gpu, num_gpus=args.num_gpus, weights=args.weights, kv_dtype=args.kv_dtype,
                   batch=args.batch, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                   samples=args.samples, engine=args.engine, profile=args.profile,
                   usd_per_gpu_hour=args.usd_per_gpu_hour)
    if args.json:
        from .report.json_out import dumps, infer_to_dict

        return dumps(infer_to_dict(result))
    from .report.text import render_infer

    return render_infer(result)


def _cmd_roofline(args: argparse.Namespace) -> str:
    from .api import roofline

    result = roofline(args.model, gpu=args.gpu, phase=args.phase, batch=args.batch, seq=args.seq, dtype=args.dtype,
                      profile=args.profile, plot=args.plot)
    if args.json:
        from .report.json_out import dumps, roofline_to_dict

        return dumps(roofline_to_dict(result))
    from .report.text import render_roofline

    return render_roofline(result)


def _train_options_from(args: argparse.Namespace) -> dict:
    """`gpuwise train`'s flags as TrainRequest fields (shared with `doctor`)."""
    offload = tuple(x.strip() for x in args.offload.split(",") if x.strip())
    global_batch = args.global_batch
    if global_batch is None:  # one micro-batch per data-parallel rank
        mp = args.tp * args.pp * args.cp
        global_batch = max(1, args.num_gpus // mp) * args.micro_batch if args.num_gpus % mp == 0 else args.micro_batch
    return dict(num_gpus=args.num_gpus, seq=args.seq, global_batch=global_batch,
                micro_batch=args.micro_batch, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep,
                sp=args.sp, zero=args.zero, fsdp=args.fsdp, shard_group=args.shard_group, schedule=args.schedule,
                pp_first_layers=args.pp_first_layers, pp_last_layers=args.pp_last_layers,
                recompute=args.recompute, optimizer=args.optimizer, precision=args.precision,
                framework=args.framework, finetune=args.finetune, lora_rank=args.lora_rank,
                lora_targets=args.lora_targets, offload=offload, flops_convention=args.flops_convention,
                attention=args.attention, tp_comm_overlap=args.tp_comm_overlap, gpus_per_node=args.gpus_per_node,
                inter_node_gbps=args.inter_node_gbps, profile=args.profile, train_tokens=args.train_tokens,
                usd_per_gpu_hour=args.usd_per_gpu_hour)


def _cmd_train(args: argparse.Namespace) -> str:
    from .api import train

    result = train(args.model, gpu=args.gpu, **_train_options_from(args))
    if args.json:
        from .report.json_out import dumps, train_to_dict

        return dumps(train_to_dict(result))
    from .report.text import render_train

    return render_train(result)


def _cmd_doctor(args: argparse.Namespace) -> str:
    from .api import doctor

    if args.task == "infer":
        result = doctor(args.model, gpu=args.gpu, oom_at_gib=args.oom_at_gib, task="infer", num_gpus=args.num_gpus,
                        weights=args.weights, kv_dtype=args.kv_dtype, context=args.context, batch=args.batch,
                        engine=args.engine)
    else:
        result = doctor(args.model, gpu=args.gpu, oom_at_gib=args.oom_at_gib, **_train_options_from(args))
    if args.json:
        from .report.json_out import doctor_to_dict, dumps

        return dumps(doctor_to_dict(result))
    from .report.text import render_doctor, render_doctor_infer

    return (render_doctor_infer if args.task == "infer" else render_doctor)(result)


def _cmd_fit(args: argparse.Namespace) -> str:
    from .api import fit

    result = fit(args.model, gpu=args.gpu, num_gpus=args.num_gpus, weights=args.weights, kv_dtype=args.kv_dtype,
                 context=args.context, batch=args.batch, engine=args.engine)
    if args.json:
        from .report.json_out import dumps, fit_to_dict

        return dumps(fit_to_dict(result))
    from .report.text import render_fit

    return render_fit(result)


def _cmd_models(args: argparse.Namespace) -> str:
    from .catalog.models import search_models

    entries = search_models(args.query)
    if args.json:
        from .report.json_out import SCHEMA_VERSION, dumps, model_entry_to_dict

        return dumps({"schema_version": SCHEMA_VERSION, "command": "models",
                      "models": [model_entry_to_dict(e) for e in entries]})
    if not entries:
        raise GpuwiseError(f"no catalog model matches '{args.query}'")
    from .report.text import render_models

    return render_models(entries)


def _cmd_gpus(args: argparse.Namespace) -> str:
    from .catalog.gpus import search_gpus

    found = search_gpus(args.query)
    if args.json:
        from .report.json_out import SCHEMA_VERSION, dumps, gpu_to_dict

        return dumps({"schema_version": SCHEMA_VERSION, "command": "gpus", "gpus": [gpu_to_dict(g) for g in found]})
    if not found:
        raise GpuwiseError(f"no catalog GPU matches '{args.query}'")
    from .report.text import render_gpus

    return render_gpus(found)


COMMANDS = {"fit": _cmd_fit, "train": _cmd_train, "infer": _cmd_infer, "roofline": _cmd_roofline, "plan": _cmd_plan,
            "doctor": _cmd_doctor, "pick": _cmd_pick,
            "explain": _cmd_explain, "calibrate": _cmd_calibrate, "bench": _cmd_bench, "watch": _cmd_watch,
            "serve": _cmd_serve,
            "models": _cmd_models, "gpus": _cmd_gpus}


_PARSER: argparse.ArgumentParser | None = None


def parser() -> argparse.ArgumentParser:
    """The CLI's parser, built once per process (the web API reads its options too)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = _build_parser()
    return _PARSER


def run(argv: Sequence[str]) -> str | None:
    """What `gpuwise ARGV` prints on stdout (without the final newline), or GpuwiseError with the one-line message
    it prints on stderr. The web API calls this, so its JSON is the CLI's, byte for byte."""
    args = parser().parse_args(list(argv))
    if args.command is None:
        raise UsageError("no command given (see gpuwise --help)")
    return COMMANDS[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser().parse_args(argv)
        if args.version:
            from .version import __version__

            print(__version__)
            return 0
        if args.command is None:
            parser().print_help()
            return EXIT_USAGE
        out = COMMANDS[args.command](args)
    except GpuwiseError as exc:
        sys.stderr.write(f"gpuwise: error: {exc}\n")
        return EXIT_USAGE
    if out is None:  # wrote its own output (a live view), or a torchrun rank other than 0
        return 0
    try:
        sys.stdout.write(out + "\n")
    except BrokenPipeError:  # `gpuwise models | head`
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
