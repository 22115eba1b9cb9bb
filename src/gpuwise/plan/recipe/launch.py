"""The torchrun launch script and the README of a recipe folder."""

from __future__ import annotations

from ...estimate.layout import Layout
from .common import (DEEPSPEED_SOURCE, DEEPSPEED_VERSION, MEGATRON_SOURCE, MEGATRON_VERSION, RDZV_PORT, TORCHRUN_SOURCE,
                     TORCHTITAN_SOURCE, TORCHTITAN_VERSION, _commented, _header, _Job, _nodes_text)


def _torchrun(job: _Job) -> str:
    if job.nodes == 1:
        return f"torchrun --standalone --nnodes 1 --nproc-per-node {job.gpus_per_node}"
    return (f"torchrun --nnodes {job.nodes} --nproc-per-node {job.gpus_per_node} --rdzv-backend c10d "
            f"--rdzv-endpoint \"$MASTER_ADDR:{RDZV_PORT}\" --rdzv-id \"${{RDZV_ID:-gpuwise}}\"")


def _fsdp_settings(job: _Job) -> list[str]:
    lay, req = job.lay, job.req
    reshard = lay.sharding not in ("fsdp-grad-op", "fsdp-no-reshard", "zero1", "zero2")
    dtype = {"fp32": "torch.float32"}.get(req.precision, "torch.bfloat16")
    lines = [
        "FSDP2 settings for your own training script (torch.distributed.fsdp.fully_shard, PyTorch 2.x):",
        f"  mesh = init_device_mesh('cuda', {_fsdp_mesh(lay)})",
        f"  fully_shard(each transformer block, then the model, mesh=mesh, reshard_after_forward={reshard},",
        f"              mp_policy=MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype=torch.float32)"
        + (", offload_policy=CPUOffloadPolicy()" if job.offload & {"optimizer", "params"} else "") + ")",
        f"  micro-batch {job.plan.micro_batch} sequences of {req.seq} tokens, {job.microbatches} gradient-"
        f"accumulation step(s) per optimizer step (global batch {req.global_batch})",
        f"  activation checkpointing: {job.plan.recompute}"
        + (" (checkpoint_wrapper on every block)" if job.plan.recompute == "full" else ""),
    ]
    if req.compile:
        lines.append("  torch.compile each transformer block (the plan was priced compiled; the loss stays eager)")
    if req.precision == "fp8":
        lines.append("  fp8: torchao's convert_to_float8_training (or Transformer Engine) on the linear layers")
    if lay.tp * lay.pp * lay.cp * lay.ep > 1:
        lines.append("  TP/PP/CP/EP > 1: plain FSDP cannot do these; see torchtitan.toml for a trainer that can")
    return lines


def _fsdp_mesh(lay: Layout) -> str:
    if lay.sharding == "hsdp":
        group = lay.shard_group or lay.dp * lay.cp
        return f"({lay.dp * lay.cp // group}, {group}), mesh_dim_names=('replicate', 'shard')"
    return f"({lay.dp * lay.cp},)"


def _launch_sh(job: _Job, files: dict[str, str]) -> str:
    req = job.req
    fw = req.framework
    follows = {"torchtitan": TORCHTITAN_VERSION, "megatron": MEGATRON_VERSION, "deepspeed": DEEPSPEED_VERSION,
               "fsdp": "PyTorch FSDP2"}[fw]
    head = _header(job, f"{follows} launched by torchrun", TORCHRUN_SOURCE)
    if job.nodes > 1:
        head.append(f"run this script on each of the {job.nodes} nodes, MASTER_ADDR set to the first node's address")
    if req.num_gpus % job.gpus_per_node:
        head.append(f"CAUTION: {req.num_gpus} GPUs do not fill {job.nodes} nodes of {job.gpus_per_node}: torchrun "
                    "starts the same number of processes on every node; adjust --nproc-per-node by hand")
    lines = ["#!/usr/bin/env bash", _commented(head).rstrip(), "set -euo pipefail", 'cd "$(dirname "$0")"']
    if job.nodes > 1:
        lines.append(': "${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}"')
    torchrun = _torchrun(job)
    own = {"torchtitan": "torchtitan.toml", "megatron": "megatron.args", "deepspeed": "ds_config.json"}.get(fw)
    if own is not None and own not in files:
        lines += [f"echo 'gpuwise: {fw} cannot run this plan; see {fw}.note.md' >&2", "exit 1"]
    elif fw == "torchtitan":
        lines.append(f"{torchrun} \\\n  -m torchtitan.train --job.config_file torchtitan.toml \"$@\"")
    elif fw == "megatron":
        if "--use-megatron-fsdp" in files["megatron.args"]:
            lines.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP asserts it is not 1 (validate_args)")
        else:  # validate_args asserts it is 1 with TP or CP > 1 before Blackwell; harmless otherwise
            lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1")
        lines += [
            ': "${MEGATRON_LM:?set MEGATRON_LM to a Megatron-LM checkout (it holds pretrain_gpt.py)}"',
            ': "${DATA_PATH:?set DATA_PATH to the preprocessed dataset prefix (tools/preprocess_data.py)}"',
            ': "${TRAIN_ITERS:?set TRAIN_ITERS}" "${LR:?set LR}"',
            f'TOKENIZER="${{TOKENIZER:-{req.model.hf_id or "SET-ME"}}}"',
            "mapfile -t ARGS < <(python3 -c 'import shlex, sys; "
            "print(\"\\n\".join(shlex.split(open(sys.argv[1]).read(), comments=True)))' megatron.args)",
            f"{torchrun} \\\n  \"$MEGATRON_LM/pretrain_gpt.py\" \"${{ARGS[@]}}\" \\\n"
            "  --tokenizer-type HuggingFaceTokenizer --tokenizer-model \"$TOKENIZER\" --data-path \"$DATA_PATH\" \\\n"
            "  --train-iters \"$TRAIN_ITERS\" --lr \"$LR\" \"$@\"",
        ]
    elif fw == "deepspeed":
        lines += [
            ': "${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your script; it calls deepspeed.add_config_arguments(parser) '
            'and deepspeed.initialize(args=args, ...)}"',
            f"{torchrun} \\\n  \"$TRAIN_SCRIPT\" --deepspeed --deepspeed_config ds_config.json \"$@\"",
        ]
    else:  # fsdp: the user's own script
        lines += [_commented(_fsdp_settings(job)).rstrip(),
                  ': "${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your FSDP2 training script}"',
                  f"{torchrun} \\\n  \"$TRAIN_SCRIPT\" \"$@\""]
    return "\n".join(lines) + "\n"


def _readme(job: _Job, files: dict[str, str], caveats: dict[str, list[str]]) -> str:
    req = job.req
    what = {
        "launch.sh": f"the torchrun command for --framework {req.framework} ({_nodes_text(job)})",
        "torchtitan.toml": f"a {TORCHTITAN_VERSION} job file: [parallelism], [activation_checkpoint], [training]",
        "megatron.args": f"{MEGATRON_VERSION} command-line flags for pretrain_gpt.py: parallelism, batch, recompute, "
                         "precision, model shape",
        "ds_config.json": f"a {DEEPSPEED_VERSION} config: ZeRO stage, offload, batch sizes, precision",
        "torchtitan.note.md": "why torchtitan cannot run this layout",
        "megatron.note.md": "why Megatron-LM cannot run this layout",
        "deepspeed.note.md": "why DeepSpeed cannot run this layout",
    }
    out = [f"# Launch recipe: {req.model.id} on {req.num_gpus} x {req.gpu.id}", ""]
    out += [f"- {h}" for h in _header(job, "see each file", "versions below")[:4]]
    out += ["", "## Files", ""]
    for name in sorted(files):
        if name != "README.md":
            out.append(f"- `{name}`: {what.get(name, '')}")
    out += ["", "## Versions followed", "",
            f"- {TORCHTITAN_VERSION}: {TORCHTITAN_SOURCE}",
            f"- {MEGATRON_VERSION}: {MEGATRON_SOURCE}",
            f"- {DEEPSPEED_VERSION}: {DEEPSPEED_SOURCE}",
            f"- launch: {TORCHRUN_SOURCE}",
            "", "## Caveats: what each trainer does differently from the plan", ""]
    for name, diffs in caveats.items():
        out.append(f"- `{name}`: " + ("; ".join(diffs) if diffs else "nothing known"))
    out += ["", "gpuwise writes only what the plan decides (degrees, batch, recompute, precision, model shape); data, "
            "tokenizer, learning rate and schedule are yours to set. The prediction is gpuwise's model, not a "
            "measurement: compare the first steps' time and memory with it.", ""]
    return "\n".join(out)
