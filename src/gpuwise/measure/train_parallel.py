"""`gpuwise bench train`'s layout applied with PyTorch's own APIs: a (dp, tp) DeviceMesh, tensor parallelism
(`parallelize_module`: column/row-wise linears, vocab-parallel embedding, SequenceParallel norms with --sp), FSDP2
`fully_shard` per block and at the root with a bf16 `MixedPrecisionPolicy`, and per-block activation checkpointing
(torchtitan's full, op and layer:N). DDP wraps the model later (train_loop.py), after the weights exist. torch imported lazily.
"""

from __future__ import annotations

from .torch_model import set_recompute
from .train_config import BenchConfig


def parallelize(torch, model, cfg: BenchConfig, dev) -> None:
    """Shard `model` (still on the meta device) as `cfg` says."""
    mesh = None
    if cfg.tp > 1 or cfg.sharding.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(dev.type, (cfg.dp, cfg.tp), mesh_dim_names=("dp", "tp"))
    if cfg.tp > 1:
        _tensor_parallel(torch, model, mesh["tp"], cfg)
    set_recompute(model, cfg.recompute)
    if cfg.sharding.startswith("fsdp"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if cfg.precision == "bf16" else MixedPrecisionPolicy())
        reshard = cfg.sharding == "fsdp-full"
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"], reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh["dp"], reshard_after_forward=reshard, mp_policy=mp)


def _tensor_parallel(torch, model, tp_mesh, cfg: BenchConfig) -> None:
    """torchtitan's Llama plan: q/k/v, gate/up column-wise, o/down row-wise, vocab-parallel embedding and head;
    with --sp the norms run on sequence shards and the linears' inputs are all-gathered along the sequence."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    spec = cfg.model.spec
    between = Shard(1) if cfg.sp else Replicate()
    top = {"embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
           "lm_head": ColwiseParallel(input_layouts=between, output_layouts=Replicate())}
    if cfg.sp:
        for name in ("norm", "embed_norm"):
            if hasattr(model, name):
                top[name] = SequenceParallel(use_local_output=True)
    parallelize_module(model, tp_mesh, top)
    if spec.tie_word_embeddings:  # both now Shard(0) over the vocabulary: tie the DTensors again
        model.lm_head.weight = model.embed.weight
    for block in model.blocks:
        plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
                "attn.o": RowwiseParallel(output_layouts=between), "mlp.up": ColwiseParallel(),
                "mlp.down": RowwiseParallel(output_layouts=between)}
        if spec.gated_mlp:
            plan["mlp.gate"] = ColwiseParallel()
        if cfg.sp:
            for name in ("attn_norm", "mlp_norm", "attn_post_norm", "mlp_post_norm"):
                if hasattr(block, name):
                    plan[name] = SequenceParallel(use_local_output=True)
            plan["attn"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
            plan["mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(block, tp_mesh, plan)
