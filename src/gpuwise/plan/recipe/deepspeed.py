"""DeepSpeed 0.19.8 JSON config for a plan."""

from __future__ import annotations

import json

from .common import DEEPSPEED_SOURCE, DEEPSPEED_VERSION, FP32_MOMENTS_NOTE, Unsupported, _header, _Job


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
    if job.req.exp_avg_dtype or job.req.exp_avg_sq_dtype:
        differs.append(FP32_MOMENTS_NOTE)
    if job.req.compile:
        differs.append("torch.compile is not written (DeepSpeed's \"compile\" section is left to you); the plan was "
                       "priced compiled")
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
