"""torchtitan 0.2.2 job file (TOML) for a plan."""

from __future__ import annotations

import json
import math

from ...estimate.pipeline import torchtitan_split, virtual_stage_layers
from ..planner import describe
from .common import (FP32_MOMENTS_NOTE, TORCHTITAN_FLAVORS, TORCHTITAN_SOURCE, TORCHTITAN_VERSION, Unsupported, _commented, _differs_block,
                     _header, _Job)


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
    borrowed = shard * cp * (lay.tp if lay.expert_tp == 1 else 1)  # with expert TP 1 the TP ranks lend theirs too
    if lay.ep > 1 and borrowed % lay.ep:
        raise Unsupported(f"EP {lay.ep} does not divide data_parallel_shard_degree x context_parallel_degree"
                          + (" x tensor_parallel_degree" if lay.expert_tp == 1 and lay.tp > 1 else "")
                          + f" = {borrowed} (torchtitan borrows expert-parallel ranks from the FSDP group)")
    if reshard == "always" and lay.pp > 1:
        # torchtitan's "default" does not reshard under pipelining (distributed/fsdp.py: `return not pp_enabled`),
        # which is what the plan's time and memory assume (estimate.job.pipeline_keeps_unsharded)
        reshard = "default"
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
    from ..train import model_problem

    if (problem := model_problem("torchtitan", job.spec)) is not None:
        raise Unsupported(problem)
    lay, p, req = job.lay, job.plan, job.req
    differs: list[str] = []
    dp_keys, d = _titan_data_parallel(job)
    differs += d
    pp_keys, d = _titan_pipeline(job)
    differs += d
    model, d = _titan_model(job)
    differs += d

    async_tp = req.tp_comm_overlap and lay.tp > 1  # the plan's TP collectives priced overlapped
    parallelism = {**dp_keys, "tensor_parallel_degree": lay.tp, "enable_async_tensor_parallel": async_tp, **pp_keys,
                   "context_parallel_degree": lay.cp, "expert_parallel_degree": lay.ep}
    if lay.ep > 1:
        # the plan's expert TP: TP (the experts split as the dense layers are) or 1; torchtitan allows those two
        parallelism["expert_tensor_parallel_degree"] = lay.expert_tp

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

    if req.precision == "nvfp4":
        differs.append(f"NVFP4: torchao's NVFP4 converter (NVFP4LinearConverter) came after {TORCHTITAN_VERSION}'s "
                       "TOML job files (torchtitan's Python configs, e.g. llama3_8b_first_85_pct_layers_nvfp4); this "
                       "file trains in bfloat16, slower and with more memory than the plan")
    if req.precision == "fp8":
        model["converters"] = ["quantize.linear.float8"]
        if lay.ep > 1:
            differs.append("fp8 applies to nn.Linear only; routed experts (grouped GEMMs) stay in bfloat16")
    if req.optimizer != "adamw":
        differs.append(f"optimizer {req.optimizer} is not set here ([optimizer] name defaults to AdamW)")
    if req.exp_avg_dtype or req.exp_avg_sq_dtype:
        differs.append(FP32_MOMENTS_NOTE)
    if req.sdpa_backend == "flash":
        differs.append(f"{TORCHTITAN_VERSION} asks SDPA for cuDNN attention first (no config key changes "
                       "it); the plan was priced with SDPA's FlashAttention-2 kernels (--sdpa-backend flash)")

    sections: list[tuple[str, dict]] = [
        ("job", {"description": f"gpuwise plan: {describe(p)}"}),
        ("model", model),
        ("training", training),
        ("parallelism", parallelism),
        ("activation_checkpoint", ac),
    ]
    if req.compile:  # what the plan was priced with: the blocks, and the loss where the plan is torchtitan's own
        components = ["model", "loss"] if req.framework == "torchtitan" else ["model"]
        sections.append(("compile", {"enable": True, "components": components}))
    if req.precision == "fp8":
        # fp8 all-gathers only where the plan was priced with them (--fp8-param-gather; bf16 gathers otherwise)
        fsdp = parallelism.get("data_parallel_shard_degree", 1) * lay.cp > 1 and req.fp8_param_gather
        # the recipe the plan was priced with (torchtitan's default rowwise unless told; tensorwise under fsdp)
        recipe = req.job().torchao_float8_recipe or "tensorwise"
        sections.append(("quantize.linear.float8", {"recipe_name": recipe,
                                                    "enable_fsdp_float8_all_gather": fsdp,
                                                    "precompute_float8_dynamic_scale_for_fsdp": fsdp}))
    head = _header(job, TORCHTITAN_VERSION, TORCHTITAN_SOURCE)
    head += ["run: torchrun ... -m torchtitan.train --job.config_file torchtitan.toml (see launch.sh)",
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
