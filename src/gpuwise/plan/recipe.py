"""Launch recipes for a chosen `gpuwise plan`: the torchrun line and the parallelism settings of real trainers.

`recipes(result, plan)` returns file name -> text; `write_recipes` writes them into a folder (`gpuwise plan --emit
DIR`). Always emitted: `launch.sh` (torchrun for the plan's framework), `torchtitan.toml`, `megatron.args`,
`ds_config.json` and `README.md`. Each names the plan it encodes (`describe()`), the predicted step time and MFU, and
the trainer version whose option names it follows; those names were checked against that version's source (see
docs/launch-recipes.md). Where a trainer runs the layout but not every detail of the plan (ZeRO-1 in torchtitan,
selective recompute in DeepSpeed ...) the file lists what differs; where it cannot run the layout at all (TP, PP or
CP under plain DeepSpeed ZeRO), `<trainer>.note.md` takes the file's place and says why.

Pure text generation: no torch, no trainer imported.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import __version__
from ..estimate.comm import topology
from ..estimate.parallel import Layout, stage_layers
from .search import Plan, PlanResult, PlanRequest, describe

GIB = 2**30

# The versions whose option names the files follow; where each name was checked is in docs/launch-recipes.md.
TORCHTITAN_VERSION = "torchtitan 0.2.2"
TORCHTITAN_SOURCE = ("torchtitan/config/job_config.py and torchtitan/distributed/pipeline_parallel.py of the "
                     "torchtitan 0.2.2 wheel (PyPI), the last release that reads TOML job files")
MEGATRON_VERSION = "Megatron-LM (megatron-core) 0.19.2"
MEGATRON_SOURCE = ("megatron/training/arguments.py and megatron/core/transformer/pipeline_parallel_layer_layout.py "
                   "of the megatron-core 0.19.2 wheel (PyPI); pretrain_gpt.py is in the Megatron-LM repository root")
DEEPSPEED_VERSION = "DeepSpeed 0.19.8"
DEEPSPEED_SOURCE = ("deepspeed/runtime/constants.py, runtime/zero/config.py, runtime/zero/offload_config.py, "
                    "runtime/precision_config.py and runtime/activation_checkpointing/config.py of deepspeed 0.19.8")
TORCHRUN_SOURCE = "torch.distributed.run (torchrun) of PyTorch 2.x"
RDZV_PORT = 29500

# torchtitan 0.2.2 model names and flavors (torchtitan/models/<name>/__init__.py) for catalog ids that match them.
TORCHTITAN_FLAVORS = {
    "llama-3-8b": ("llama3", "8B"), "llama-3.1-8b": ("llama3", "8B"),
    "llama-3-70b": ("llama3", "70B"), "llama-3.1-70b": ("llama3", "70B"), "llama-3.3-70b": ("llama3", "70B"),
    "llama-3.1-405b": ("llama3", "405B"),
    "qwen3-0.6b": ("qwen3", "0.6B"), "qwen3-1.7b": ("qwen3", "1.7B"), "qwen3-4b": ("qwen3", "4B"),
    "qwen3-8b": ("qwen3", "8B"), "qwen3-14b": ("qwen3", "14B"), "qwen3-32b": ("qwen3", "32B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"), "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "deepseek-v3": ("deepseek_v3", "671B"), "deepseek-r1": ("deepseek_v3", "671B"),
}


class Unsupported(Exception):
    """The trainer cannot run this layout at all; the message says why (it goes into `<trainer>.note.md`)."""


@dataclass(frozen=True)
class _Job:
    req: PlanRequest
    plan: Plan
    lay: Layout
    nodes: int
    gpus_per_node: int
    per_rank: int
    """Sequences per data-parallel rank per optimizer step."""
    microbatches: int
    """Micro-batches per data-parallel rank per step (pipeline micro-batches, or gradient-accumulation steps)."""
    offload: frozenset[str] = field(default_factory=frozenset)

    @property
    def spec(self):
        return self.req.model.spec


def _job(result: PlanResult, plan: Plan) -> _Job:
    req = result.request
    lay = plan.layout
    shard_group = getattr(plan, "shard_group", None)
    if shard_group is not None and lay.shard_group is None:
        lay = replace(lay, shard_group=shard_group)
    per_node = topology(req.gpu, num_gpus=req.num_gpus, gpus_per_node=req.gpus_per_node,
                        inter_node_gbps=req.inter_node_gbps).gpus_per_node
    per_rank = req.global_batch // lay.dp
    return _Job(req=req, plan=plan, lay=lay, nodes=math.ceil(req.num_gpus / per_node), gpus_per_node=per_node,
                per_rank=per_rank, microbatches=per_rank // plan.micro_batch,
                offload=frozenset(getattr(plan, "offload", ()) or ()))


def recipes(result: PlanResult, plan: Plan) -> dict[str, str]:
    """File name -> file text for the plan (a Plan from result.plans; result.request is the PlanRequest)."""
    job = _job(result, plan)
    files: dict[str, str] = {}
    caveats: dict[str, list[str]] = {}
    for trainer, build in (("torchtitan", _torchtitan_toml), ("megatron", _megatron_args),
                           ("deepspeed", _deepspeed_config)):
        try:
            name, text, differs = build(job)
        except Unsupported as e:
            name, text, differs = f"{trainer}.note.md", _note(job, trainer, str(e)), [f"not expressible: {e}"]
        files[name] = text
        caveats[name] = differs
    files["launch.sh"] = _launch_sh(job, files)
    files["README.md"] = _readme(job, files, caveats)
    return dict(sorted(files.items()))


def write_recipes(result: PlanResult, plan: Plan, directory: str | Path) -> list[Path]:
    """Create the directory if needed, write the files, return their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in recipes(result, plan).items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        if name.endswith(".sh"):
            path.chmod(0o755)
        paths.append(path)
    return paths


# --- shared pieces ------------------------------------------------------------------------------------------------

def _header(job: _Job, follows: str, source: str) -> list[str]:
    req, p = job.req, job.plan
    mfu = "n/a" if p.mfu is None else f"{100 * p.mfu:.1f}%"
    return [
        f"gpuwise {__version__} launch recipe for {req.model.id}" + (f" ({req.model.hf_id})" if req.model.hf_id else "")
        + f" on {req.num_gpus} x {req.gpu.id} ({_nodes_text(job)})",
        f"job: seq {req.seq}, global batch {req.global_batch} sequences, framework {req.framework}, "
        f"precision {req.precision}, optimizer {req.optimizer}",
        f"plan: {describe(p)}" + (f", offload {'+'.join(sorted(job.offload))}"
                                  if job.offload and "offload" not in describe(p) else ""),
        f"predicted: step {p.step_time_s:.3f} s, MFU {mfu}, {p.memory_bytes / GIB:.1f} GiB per GPU",
        f"follows: {follows} ({source})",
    ]


def _nodes_text(job: _Job) -> str:
    return f"{job.nodes} node{'s' if job.nodes > 1 else ''} x {job.gpus_per_node} GPUs"


def _commented(lines: list[str], prefix: str = "# ") -> str:
    return "".join(f"{prefix}{line}".rstrip() + "\n" for line in lines)


def _differs_block(differs: list[str], prefix: str = "# ") -> str:
    if not differs:
        return _commented(["differs from the plan: nothing known"], prefix)
    return _commented(["differs from the plan:"] + [f"  - {d}" for d in differs], prefix)


def _note(job: _Job, trainer: str, why: str) -> str:
    follows = {"torchtitan": TORCHTITAN_VERSION, "megatron": MEGATRON_VERSION, "deepspeed": DEEPSPEED_VERSION}[trainer]
    head = _header(job, follows, "no file written")
    if job.req.framework == trainer:
        advice = (f"The plan came from `--framework {trainer}`, whose search does not know this constraint yet: "
                  "take the next plan in the list that this trainer can run.")
    else:
        advice = ("Run the plan with a trainer whose file was emitted (see README.md), or ask `gpuwise plan` for a "
                  f"plan under `--framework {trainer}`.")
    return (f"# {trainer}: not emitted for this plan\n\n" + "\n".join(f"- {h}" for h in head)
            + f"\n\n{trainer} cannot run this layout: {why}\n\n" + advice + "\n")


def virtual_stage_layers(layout: Layout, num_layers: int) -> tuple[int, ...]:
    """Transformer layers on each model chunk, in the order both torchtitan and Megatron-LM number virtual stages:
    chunk c of pipeline rank r is stage c x pp + r. Middle ranks split their layers evenly over the vpp chunks; an
    uneven first (last) rank spreads its layers as evenly as it can, the extra ones away from the embedding (head)."""
    per_rank = stage_layers(layout, num_layers)
    v = layout.vpp
    chunks_of_rank = []
    for r, n in enumerate(per_rank):
        base, extra = divmod(n, v)
        counts = [base] * v
        order = range(v - 1, v - 1 - extra, -1) if r == 0 else range(extra)
        for c in order:
            counts[c] += 1
        chunks_of_rank.append(counts)
    return tuple(chunks_of_rank[s % layout.pp][s // layout.pp] for s in range(layout.pp * v))


# --- torchtitan ---------------------------------------------------------------------------------------------------

def torchtitan_split(num_stages: int, num_layers: int, input_weight: int, output_weight: int) -> tuple[int, ...] | None:
    """Transformer layers per stage as torchtitan 0.2.2 splits them (generate_llm_fqn_per_model_part in
    torchtitan/distributed/pipeline_parallel.py): the embedding counts as `input_weight` layers and the norm + output
    as `output_weight`, the effective layers go out evenly with the remainder on the first stages. None where
    torchtitan raises."""
    if num_stages == 1:
        return (num_layers,)
    effective = num_layers + input_weight + output_weight
    if num_stages > effective:
        return None
    per, extra = divmod(effective, num_stages)
    if per == 0 or input_weight > per or output_weight > per:
        return None
    out, used = [], 0
    for s in range(num_stages):
        n = per + (1 if s < extra else 0)
        if s == 0:
            n -= input_weight
        elif s == num_stages - 1:
            n -= output_weight
        n = max(0, min(n, num_layers - used))
        out.append(n)
        used += n
    return tuple(out) if used == num_layers else None


def _titan_pipeline(job: _Job) -> tuple[dict, list[str]]:
    lay, layers = job.lay, job.spec.num_layers
    keys: dict = {"pipeline_parallel_degree": lay.pp}
    if lay.pp == 1:
        return keys, []
    chunks = virtual_stage_layers(lay, layers)
    keys["pipeline_parallel_schedule"] = "Interleaved1F1B" if lay.vpp > 1 else "1F1B"
    # pipeline_parallel_{first,last}_stage_less_layers default to 1 in torchtitan: set them even for an even split.
    size = max(chunks)
    first_less, last_less = size - chunks[0], size - chunks[-1]
    stages = math.ceil((layers + first_less + last_less) / size)
    if stages == len(chunks) and torchtitan_split(stages, layers, first_less, last_less) == chunks:
        keys["pipeline_parallel_layers_per_stage"] = size
        keys["pipeline_parallel_first_stage_less_layers"] = first_less
        keys["pipeline_parallel_last_stage_less_layers"] = last_less
    else:
        parts, start = [], 0
        for s, n in enumerate(chunks):
            part = (["tok_embeddings"] if s == 0 else []) + [f"layers.{i}" for i in range(start, start + n)]
            parts.append(part + (["norm", "output"] if s == len(chunks) - 1 else []))
            start += n
        keys["module_fqns_per_model_part"] = parts
    keys["pipeline_parallel_microbatch_size"] = job.plan.micro_batch
    return keys, []


def _titan_data_parallel(job: _Job) -> tuple[dict, list[str]]:
    lay = job.lay
    dp, cp = lay.dp, lay.cp
    differs: list[str] = []
    sharding = lay.sharding
    if sharding == "ddp":
        if lay.tp * lay.pp * lay.cp > 1:
            raise Unsupported("torchtitan applies DDP only when nothing else is parallel (\"DDP has not supported "
                              "> 1D parallelism\" in models/llama3/infra/parallelize.py); use FSDP (--framework "
                              "torchtitan) for this layout")
        return {"data_parallel_replicate_degree": dp, "data_parallel_shard_degree": 1}, differs
    replicate, shard, reshard = 1, dp, "always"
    if sharding in ("fsdp-grad-op", "fsdp-no-reshard"):
        reshard = "never"
    elif sharding == "zero2":
        reshard = "never"
        differs.append("ZeRO-2 -> FSDP2 with fsdp_reshard_after_forward = \"never\": parameters are sharded between "
                       "steps too (ZeRO-2 keeps them whole), the same peak within a step")
    elif sharding == "zero1":
        reshard = "never"
        differs.append("ZeRO-1 -> FSDP2 with fsdp_reshard_after_forward = \"never\" (torchtitan has no ZeRO-1): "
                       "gradients and resting parameters are sharded too, so memory is at most the plan's")
    elif sharding == "hsdp":
        group = lay.shard_group or dp * cp
        if group % cp:
            raise Unsupported(f"HSDP shard group {group} is not a multiple of CP {cp}; torchtitan shards over "
                              "data_parallel_shard_degree x context_parallel_degree")
        shard, replicate = group // cp, dp * cp // group
    if lay.ep > 1 and (shard * cp) % lay.ep:
        raise Unsupported(f"EP {lay.ep} does not divide data_parallel_shard_degree x context_parallel_degree = "
                          f"{shard * cp} (torchtitan borrows expert-parallel ranks from the FSDP group)")
    return {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
            "fsdp_reshard_after_forward": reshard}, differs


def _titan_model(job: _Job) -> tuple[dict, list[str]]:
    m = job.req.model
    found = TORCHTITAN_FLAVORS.get(m.id)
    if found is None and m.entry is not None:
        found = TORCHTITAN_FLAVORS.get(m.entry.id)
    hf_name = (m.hf_id or m.id).split("/")[-1]
    if found is None:
        # A name torchtitan does not know fails at start-up ("TrainSpec ... is not registered") instead of
        # silently training its default llama3 debugmodel.
        return ({"name": f"SET-ME (torchtitan 0.2.2 has no built-in model for {m.hf_id or m.id})",
                 "hf_assets_path": f"./assets/hf/{hf_name}"},
                [f"torchtitan 0.2.2 has no built-in model matching {m.hf_id or m.id}: register a TrainSpec and set "
                 "[model] name/flavor"])
    return {"name": found[0], "flavor": found[1], "hf_assets_path": f"./assets/hf/{hf_name}"}, []


def _torchtitan_toml(job: _Job) -> tuple[str, str, list[str]]:
    lay, p, req = job.lay, job.plan, job.req
    differs: list[str] = []
    dp_keys, d = _titan_data_parallel(job)
    differs += d
    pp_keys, d = _titan_pipeline(job)
    differs += d
    model, d = _titan_model(job)
    differs += d

    parallelism = {**dp_keys, "tensor_parallel_degree": lay.tp, "enable_async_tensor_parallel": False, **pp_keys,
                   "context_parallel_degree": lay.cp, "expert_parallel_degree": lay.ep}
    if lay.ep > 1:
        # gpuwise splits routed experts over TP as well (Megatron-Core's default ETP = TP); torchtitan allows 1 or TP.
        parallelism["expert_tensor_parallel_degree"] = lay.tp

    training: dict = {}
    if lay.pp > 1:  # one pipeline step consumes the whole local batch in micro-batches: no gradient accumulation
        training["local_batch_size"] = job.per_rank
    else:  # gradient accumulation = global / (local x dp)
        training["local_batch_size"] = p.micro_batch
    training["global_batch_size"] = req.global_batch
    training["seq_len"] = req.seq
    if req.precision == "fp32":
        training["mixed_precision_param"] = "float32"
    else:
        training["mixed_precision_param"] = "bfloat16"
        if req.precision == "bf16-pure":
            training["dtype"] = "bfloat16"
        if req.precision == "fp16":
            differs.append("fp16 -> bfloat16: torchtitan 0.2.2 trains in bfloat16 or float32 only")
    training["mixed_precision_reduce"] = "float32"
    if job.offload & {"optimizer", "params"}:
        training["enable_cpu_offload"] = True
        if job.offload != {"optimizer", "params"}:
            differs.append("FSDP2's CPU offload moves parameters, gradients and optimizer states together and runs "
                           f"the optimizer step on the CPU; the plan offloads only {'+'.join(sorted(job.offload))}")
    if "activations" in job.offload:
        differs.append("activation offload is not expressed")

    ac: dict = {"mode": p.recompute}
    if p.recompute == "selective":
        ac["selective_ac_option"] = "op"
        differs.append("selective recompute -> torchtitan's per-op SAC (saves matmul and attention outputs, "
                       "recomputes every second matmul and the cheap ops); gpuwise prices Megatron's (recompute the "
                       "attention core only), so memory and recompute time differ somewhat")

    if req.precision == "fp8":
        model["converters"] = ["quantize.linear.float8"]
        if lay.ep > 1:
            differs.append("fp8 applies to nn.Linear only; routed experts (grouped GEMMs) stay in bfloat16")
    if req.optimizer != "adamw":
        differs.append(f"optimizer {req.optimizer} is not set here ([optimizer] name defaults to AdamW)")

    sections: list[tuple[str, dict]] = [
        ("job", {"description": f"gpuwise plan: {describe(p)}"}),
        ("model", model),
        ("training", training),
        ("parallelism", parallelism),
        ("activation_checkpoint", ac),
    ]
    if req.precision == "fp8":
        fsdp = parallelism.get("data_parallel_shard_degree", 1) * lay.cp > 1
        sections.append(("quantize.linear.float8", {"recipe_name": "tensorwise",
                                                    "enable_fsdp_float8_all_gather": fsdp,
                                                    "precompute_float8_dynamic_scale_for_fsdp": fsdp}))
    head = _header(job, TORCHTITAN_VERSION, TORCHTITAN_SOURCE)
    head += [f"run: torchrun ... -m torchtitan.train --job.config_file torchtitan.toml (see launch.sh)",
             "torchtitan 0.3.0 dropped TOML job files (--module/--config presets); pin torchtitan==0.2.2 for this file",
             "set [training] dataset/steps, [model] hf_assets_path and the optimizer to taste: gpuwise sets only what "
             "the plan decides"]
    body = "\n".join(_toml_section(name, values) for name, values in sections)
    return "torchtitan.toml", _commented(head) + _differs_block(differs) + "\n" + body, differs


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        if v and isinstance(v[0], (list, tuple)):
            return "[\n" + "".join(f"    {_toml_value(x)},\n" for x in v) + "]"
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def _toml_section(name: str, values: dict) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items())


# --- Megatron-LM --------------------------------------------------------------------------------------------------

def _megatron_pipeline(job: _Job) -> list[str]:
    lay, layers = job.lay, job.spec.num_layers
    flags = [f"--pipeline-model-parallel-size {lay.pp}"]
    if lay.pp == 1:
        return flags
    first, last, v = lay.pp_first_layers, lay.pp_last_layers, lay.vpp
    uneven = first is not None or last is not None
    if not uneven or all(n is None or n % v == 0 for n in (first, last)):
        if first is not None:
            flags.append(f"--decoder-first-pipeline-num-layers {first}")
        if last is not None:
            flags.append(f"--decoder-last-pipeline-num-layers {last}")
        if v > 1:
            flags.append(f"--num-virtual-stages-per-pipeline-rank {v}")
        return flags
    # Megatron needs the uneven first/last stage to divide by vpp; otherwise spell every chunk out:
    # E = embedding, t = transformer layer, L = loss, stages split by '|', in virtual-stage order.
    chunks = virtual_stage_layers(lay, layers)
    segs = [("E" if s == 0 else "") + (f"t*{n}" if n > 1 else "t" * n) + ("L" if s == len(chunks) - 1 else "")
            for s, n in enumerate(chunks)]
    flags.append(f"--pipeline-model-parallel-layout {shlex.quote(megatron_layout(segs))}")
    return flags


def megatron_layout(segments: list[str]) -> str:
    """Stage segments -> Megatron's layout string, runs of equal stages folded: ['Et', 't*2', 't*2', 'tL'] ->
    'Et|(t*2|)*2,tL' (PipelineParallelLayerLayout.parse_str_to_list unrolls '(x)*n' and 'c*n'; commas are cosmetic)."""
    out, i, last = [], 0, len(segments) - 1
    while i < last:
        j = i
        while j < last and segments[j] == segments[i]:
            j += 1
        out.append(f"({segments[i]}|)*{j - i}," if j - i > 1 else f"{segments[i]}|")
        i = j
    return "".join(out) + segments[last]


def _megatron_sharding(job: _Job) -> tuple[list[str], list[str]]:
    lay = job.lay
    if lay.dp * lay.cp == 1 and lay.sharding in ("zero1", "ddp"):
        return [], []
    s = lay.sharding
    overlap = ["--overlap-grad-reduce"]  # the step-time model hides the gradient reduce under the backward
    if s == "ddp":
        return overlap, []
    if s == "zero1":
        # the distributed optimizer; the step model overlaps its parameter all-gather with the next forward
        return ["--use-distributed-optimizer"] + overlap + ["--overlap-param-gather"], []
    fsdp = ["--use-megatron-fsdp", "--ckpt-format fsdp_dtensor"]  # validate_args requires this format with it
    if s == "zero2":
        return fsdp + ["--data-parallel-sharding-strategy optim_grads"], []
    if s in ("fsdp-grad-op", "fsdp-no-reshard"):
        return (fsdp + ["--data-parallel-sharding-strategy optim_grads"],
                [f"{s} -> Megatron-FSDP optim_grads (ZeRO-2): parameters stay whole between steps as well"])
    if s == "hsdp":
        group = lay.shard_group or lay.dp * lay.cp
        replicas = lay.dp * lay.cp // group
        return fsdp + ["--data-parallel-sharding-strategy optim_grads_params",
                       f"--num-distributed-optimizer-instances {replicas}"], []
    return fsdp + ["--data-parallel-sharding-strategy optim_grads_params"], []  # zero3, fsdp-full


def _megatron_model(job: _Job) -> tuple[list[str], list[str]]:
    spec, req = job.spec, job.req
    differs: list[str] = []
    f = [f"--num-layers {spec.num_layers}", f"--hidden-size {spec.hidden_size}",
         f"--num-attention-heads {spec.num_heads}"]
    if spec.intermediate_size:
        f.append(f"--ffn-hidden-size {spec.intermediate_size}")
    if spec.mla is not None:
        mla = spec.mla
        f.append("--multi-latent-attention")
        if mla.q_lora_rank is not None:
            f.append(f"--q-lora-rank {mla.q_lora_rank}")
        f += [f"--kv-lora-rank {mla.kv_lora_rank}", f"--qk-head-dim {mla.qk_nope_head_dim}",
              f"--qk-pos-emb-head-dim {mla.qk_rope_head_dim}", f"--v-head-dim {mla.v_head_dim}"]
    else:
        if spec.num_kv_heads != spec.num_heads:
            f += ["--group-query-attention", f"--num-query-groups {spec.num_kv_heads}"]
        if spec.head_dim * spec.num_heads != spec.hidden_size:
            f.append(f"--kv-channels {spec.head_dim}")
    max_pos = spec.max_position_embeddings or req.seq
    f += [f"--seq-length {req.seq}", f"--max-position-embeddings {max(max_pos, req.seq)}"]
    if spec.position == "rope":
        f.append("--position-embedding-type rope")
    elif spec.position == "learned":
        f.append("--position-embedding-type learned_absolute")
    else:
        differs.append(f"{spec.position} positions: Megatron-Core has no such position embedding")
    act = spec.activation.lower()
    if spec.gated_mlp and act in ("silu", "swish"):
        f.append("--swiglu")
    elif spec.gated_mlp or not act.startswith("gelu"):
        differs.append(f"activation {'gated ' if spec.gated_mlp else ''}{spec.activation}: not expressed "
                       "(Megatron's default GeLU MLP)")
    elif act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        differs.append(f"{spec.activation} is the tanh GeLU; Megatron's default is the exact one (--openai-gelu is "
                       "the tanh form)")
    f.append("--normalization " + ("RMSNorm" if spec.norm == "rmsnorm" else "LayerNorm"))
    biases = (spec.qkv_bias, spec.o_bias, spec.mlp_bias)
    if not any(biases):
        f.append("--disable-bias-linear")
    elif biases == (True, False, False):
        f += ["--disable-bias-linear", "--add-qkv-bias"]
    elif not all(biases):
        differs.append("this mix of linear biases is not expressed (Megatron: all or none, or QKV only)")
    if spec.qk_norm == "head":
        f.append("--qk-layernorm")
    elif spec.qk_norm != "none":
        differs.append(f"qk_norm {spec.qk_norm}: not expressed")
    if not spec.tie_word_embeddings:
        f.append("--untie-embeddings-and-output-weights")
    # Megatron's dropout defaults are 0.1; the model's own values:
    f += [f"--attention-dropout {spec.attention_dropout:g}", f"--hidden-dropout {spec.hidden_dropout:g}"]
    if spec.num_sliding_layers:
        differs.append("sliding-window layers: not expressed")
    if spec.moe is not None:
        moe = spec.moe
        f += [f"--num-experts {moe.num_experts}", f"--moe-router-topk {moe.top_k}",
              f"--moe-ffn-hidden-size {moe.expert_intermediate_size}"]
        if moe.shared_intermediate_size:
            f.append(f"--moe-shared-expert-intermediate-size {moe.shared_intermediate_size}")
        if not all(moe.moe_layers):
            f.append(f"--moe-layer-freq {shlex.quote(_run_length([int(x) for x in moe.moe_layers]))}")
        if job.lay.ep > 1:
            f.append("--moe-token-dispatcher-type alltoall")
    return f, differs


def _run_length(xs: list[int]) -> str:
    """[0, 0, 0, 1, 1] -> '[0]*3+[1]*2' (the Python list expression --moe-layer-freq evaluates)."""
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j < len(xs) and xs[j] == xs[i]:
            j += 1
        parts.append(f"[{xs[i]}]*{j - i}")
        i = j
    return "+".join(parts)


def _megatron_args(job: _Job) -> tuple[str, str, list[str]]:
    lay, p, req = job.lay, job.plan, job.req
    differs: list[str] = []
    par = [f"--tensor-model-parallel-size {lay.tp}"]
    if lay.sp and lay.tp > 1:
        par.append("--sequence-parallel")
    par += _megatron_pipeline(job)
    par.append(f"--context-parallel-size {lay.cp}")
    if lay.ep > 1:
        par += [f"--expert-model-parallel-size {lay.ep}", f"--expert-tensor-parallel-size {lay.tp}"]
    shard, d = _megatron_sharding(job)
    differs += d

    batch = [f"--micro-batch-size {p.micro_batch}", f"--global-batch-size {req.global_batch}"]
    recompute = {"none": [], "selective": ["--recompute-granularity selective"],
                 "full": ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]}
    precision = {"fp32": [], "bf16": ["--bf16"], "bf16-pure": ["--bf16"], "fp16": ["--fp16"],
                 "fp8": ["--bf16", "--fp8-format hybrid", "--fp8-recipe delayed"]}[req.precision]
    if req.precision == "bf16-pure":
        differs.append("bf16-pure -> --bf16: Megatron keeps fp32 main parameters (--main-params-dtype is fp32 or "
                       "fp16)")
    offload = []
    if "optimizer" in job.offload:
        offload = ["--optimizer-cpu-offload", "--optimizer-offload-fraction 1.0", "--use-precision-aware-optimizer"]
    if "params" in job.offload:
        differs.append("parameter offload: Megatron-LM has none")
    if "activations" in job.offload:
        differs.append("activation offload is not expressed")
    if req.optimizer not in ("adamw", "sgd"):
        differs.append(f"optimizer {req.optimizer}: Megatron offers adam (decoupled weight decay, i.e. AdamW), "
                       "sgd, muon ...; adam written")
    optimizer = [f"--optimizer {'sgd' if req.optimizer == 'sgd' else 'adam'}"]
    model, d = _megatron_model(job)
    differs += d

    groups = [("parallelism", par + shard + offload), ("batch", batch), ("recompute", recompute[p.recompute]),
              ("precision and optimizer", precision + optimizer), ("model shape (from the model's config)", model)]
    head = _header(job, MEGATRON_VERSION, MEGATRON_SOURCE)
    head += ["one flag per line; launch.sh reads them with shlex (comments allowed) and adds data, tokenizer and "
             "schedule flags",
             "not in gpuwise's model spec, set from config.json: --rotary-base (rope_theta), --norm-epsilon, "
             "--use-rope-scaling (Llama 3.1+)"]
    body = "\n".join(f"# {title}\n" + "".join(f"{line}\n" for line in lines) for title, lines in groups if lines)
    return "megatron.args", _commented(head) + _differs_block(differs) + "\n" + body, differs


# --- DeepSpeed ----------------------------------------------------------------------------------------------------

def _deepspeed_config(job: _Job) -> tuple[str, str, list[str]]:
    lay, p, req = job.lay, job.plan, job.req
    model_parallel = {"TP": lay.tp, "PP": lay.pp, "CP": lay.cp}
    bad = [f"{k} {v}" for k, v in model_parallel.items() if v > 1]
    if bad:
        raise Unsupported(f"{', '.join(bad)}: plain DeepSpeed ZeRO shards over data parallelism only (tensor, "
                          "pipeline and context parallelism need Megatron-DeepSpeed, a PipelineModule or "
                          "Ulysses-style sequence parallelism in the model code, which compute differently)")
    if lay.ep > 1:
        raise Unsupported(f"EP {lay.ep}: DeepSpeed-MoE's expert parallelism is set in the model code "
                          "(deepspeed.moe.layer.MoE(ep_size=...)), not in ds_config.json")
    differs: list[str] = []
    stage = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp-full": 3, "fsdp-grad-op": 2,
             "fsdp-no-reshard": 2, "hsdp": 3}[lay.sharding]
    if lay.sharding in ("fsdp-grad-op", "fsdp-no-reshard"):
        differs.append(f"{lay.sharding} -> ZeRO-2: parameters stay whole between steps as well")
    if lay.sharding == "hsdp":
        differs.append("HSDP -> ZeRO-3 over all ranks (DeepSpeed 0.19 removed MiCS; zero_hpz_partition_size "
                       "shards only a secondary copy of the parameters)")
    zero: dict = {"stage": stage}
    if stage:
        zero.update({"overlap_comm": True, "contiguous_gradients": True})
    if "optimizer" in job.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if "params" in job.offload:
        if stage == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
        else:
            differs.append("parameter offload needs ZeRO-3; not written")
    if "activations" in job.offload:
        differs.append("activation offload is not expressed")
    cfg: dict = {
        "train_batch_size": req.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": job.microbatches,
    }
    if req.precision in ("bf16", "bf16-pure", "fp8"):
        cfg["bf16"] = {"enabled": True}
        if req.precision == "bf16-pure":
            if stage:
                cfg["bf16"].update({"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True})
            else:
                differs.append("bf16-pure without ZeRO: DeepSpeed keeps fp32 master weights")
        if req.precision == "fp8":
            differs.append("fp8 -> bf16: DeepSpeed has no fp8 training switch (use Transformer Engine in the model)")
    elif req.precision == "fp16":
        cfg["fp16"] = {"enabled": True}
    cfg["zero_optimization"] = zero
    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False}
        differs.append("full recompute happens only where the model calls deepspeed.checkpointing.checkpoint "
                       "(or Hugging Face's gradient_checkpointing_enable()) on every block")
    elif p.recompute == "selective":
        differs.append("selective recompute: DeepSpeed has none; the model code must recompute the attention core "
                       "itself (or use full recompute, slower)")
    if req.optimizer not in ("adamw",):
        differs.append(f"optimizer {req.optimizer}: pass it to deepspeed.initialize; none is set here")
    head = _header(job, DEEPSPEED_VERSION, DEEPSPEED_SOURCE)
    # JSON has no comments: the header travels in a key DeepSpeed ignores (it reads only the keys it knows).
    doc = {"_gpuwise": head + ["differs from the plan: " + ("; ".join(differs) if differs else "nothing known")],
           **cfg}
    return "ds_config.json", json.dumps(doc, indent=2) + "\n", differs


# --- launch.sh and README -----------------------------------------------------------------------------------------

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
