"""Training memory per GPU: model states + activations + buffers + runtime, at the peak rank and moment.

The peak moment is the start of a backward pass with every in-flight micro-batch's activations saved, the
gradients allocated in full (they are from the second micro-batch of gradient accumulation on) and, on the
last pipeline stage, the logits and loss gradients alive. The optimizer step is the other candidate (model
states, gradients and the optimizer's temporaries, no activations); the larger of the two is reported. Every
pipeline stage is evaluated and the largest reported, with its stage index; with 1F1B that is the first
stage (it holds p micro-batches), unless the last stage's logits outweigh it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.model import ModelSpec
from .activations import stage_activations
from .engines import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from .model_states import ModelStates, model_states, stage_tensors
from .layer_ops import distinct_stages
from .parallel import Layout, stage_layers

# Caching-allocator allowance on top of the allocated peak: Megatron-LM's theoretical_memory_usage.py adds 5%
# ("buffer for optimizer and miscellaneous temporaries"). GMLake (Guo et al., ASPLOS 2024) measured 15% average
# fragmentation (up to 33%) across eight LLM trainings with recompute / offload / ZeRO: configurations within
# that margin of the card are reported as tight.
ALLOCATOR_FRACTION = 0.05
FRAGMENTATION_RISK = 0.15
# DeepSpeed ZeRO defaults (deepspeed/runtime/zero/config.py), in elements.
DEEPSPEED_REDUCE_BUCKET = 500_000_000
DEEPSPEED_PREFETCH_BUCKET = 50_000_000
# NCCL's communicator buffers: NCCL_BUFFSIZE 4 MiB per channel and peer direction; budget 32 channels x 2.
NCCL_BUFFER_BYTES = 32 * 2 * 4 * 2**20


@dataclass(slots=True)  # not frozen: built per configuration, and frozen __init__ costs 3x
class TrainMemory:
    """Bytes on the reported GPU, by named part; `total` is what nvidia-smi would show at the peak."""

    params: float
    master_weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    buffers: float
    runtime: float
    allocator: float
    stage: int
    """Pipeline stage of the reported rank (0 = first)."""
    moment: str
    """'backward' (start of a backward pass) or 'optimizer-step'."""
    cpu: float
    """Host memory for offloaded states on this rank."""
    states: ModelStates
    buffer_parts: dict
    activation_in_flight: float

    @property
    def total(self) -> float:
        return (self.params + self.master_weights + self.grads + self.optimizer + self.activations + self.logits
                + self.buffers + self.runtime + self.allocator)

    def as_dict(self) -> dict[str, float]:
        keys = ("params", "master_weights", "grads", "optimizer", "activations", "logits", "buffers", "runtime",
                "allocator")
        out = {k: round(getattr(self, k)) for k in keys}
        out["total"] = round(self.total)
        return out


def _buffers(spec: ModelSpec, layout: Layout, states: ModelStates, stage: int, *, framework: str, e: float,
             tokens: float, unit_params: float) -> dict[str, float]:
    """Communication and prefetch buffers on one rank at the backward peak."""
    out: dict[str, float] = {}
    sh = layout.sharding_spec
    grad_bytes = states.grad_bytes_per_param
    frozen_units = states.trainable_params < 0.5 * states.params_on_rank  # LoRA: the blocks' weights are frozen
    if layout.dp > 1 and not sh.params:
        if framework == "deepspeed" and layout.sharding != "ddp":
            out["reduce_bucket"] = min(DEEPSPEED_REDUCE_BUCKET, states.trainable_params) * grad_bytes
        elif framework in ("hf", "fsdp", "torchtitan") and layout.sharding == "ddp":
            # torch DDP copies gradients into its buckets (gradient_as_bucket_view=False by default).
            out["ddp_buckets"] = states.grads
    if sh.params and layout.shard_size > 1:
        w = states.working_bytes_per_param
        if framework == "deepspeed":
            out["param_gather"] = 2 * min(unit_params, DEEPSPEED_PREFETCH_BUCKET) * w + unit_params * w
            out["reduce_bucket"] = min(DEEPSPEED_REDUCE_BUCKET, unit_params) * grad_bytes
        elif not sh.keep_unsharded:
            # FSDP2: the block in use and the one prefetched (one ahead, forward and backward), unsharded.
            out["param_gather"] = 2 * unit_params * w
        if not frozen_units:  # the block's unsharded gradients in the compute dtype, and the copy reduce-scattered
            out["grad_reduce_scatter"] = unit_params * (w + grad_bytes)
    h = spec.hidden_size
    if layout.tp > 1 and layout.sp:
        out["sp_all_gather"] = e * tokens * h  # the sequence-gathered input of the QKV / MLP matmuls
    if layout.pp > 1:
        out["pp_send_recv"] = 2 * e * tokens * h / (layout.tp if layout.sp else 1)
    if layout.cp > 1:
        kv = (spec.mla.kv_lora_rank if spec.mla else 2 * spec.num_kv_heads * spec.head_dim)
        out["cp_kv_exchange"] = 2 * e * tokens * kv / layout.tp  # the chunk being sent and the one received
    if layout.ep > 1 and spec.moe is not None:
        out["ep_all_to_all"] = 2 * spec.moe.top_k * e * tokens * h  # dispatch send and receive buffers
    return out


def train_memory(spec: ModelSpec, layout: Layout, *, framework: str, precision: str, optimizer: str, seq: int,
                 micro_batch: int, num_microbatches: int, recompute: str = "none", finetune: str = "full",
                 lora_rank: int = 16, lora_targets: str = "all-linear", offload: frozenset[str] = frozenset(),
                 flash: bool = True) -> TrainMemory:
    """Memory on the most loaded GPU (every distinct pipeline stage evaluated).

    Stages holding the same kinds of blocks, neither first nor last, differ only in the micro-batches in flight,
    which never grow with the stage index: the first of them is the largest, the others are skipped.
    """
    best: TrainMemory | None = None
    for stage in distinct_stages(spec, stage_layers(layout, spec.num_layers)):
        mem = _stage_memory(spec, layout, stage, framework=framework, precision=precision, optimizer=optimizer,
                            seq=seq, micro_batch=micro_batch, num_microbatches=num_microbatches, recompute=recompute,
                            finetune=finetune, lora_rank=lora_rank, lora_targets=lora_targets, offload=offload,
                            flash=flash)
        if best is None or mem.total > best.total:
            best = mem
    assert best is not None
    return best


def _stage_memory(spec: ModelSpec, layout: Layout, stage: int, *, framework: str, precision: str, optimizer: str,
                  seq: int, micro_batch: int, num_microbatches: int, recompute: str, finetune: str, lora_rank: int,
                  lora_targets: str, offload: frozenset[str], flash: bool) -> TrainMemory:
    states = model_states(spec, layout, stage, framework=framework, precision=precision, optimizer=optimizer,
                          finetune=finetune, lora_rank=lora_rank, lora_targets_spec=lora_targets, offload=offload)
    act = stage_activations(spec, layout, stage, framework=framework, precision=precision, seq=seq,
                            micro_batch=micro_batch, num_microbatches=num_microbatches, recompute=recompute,
                            offload_activations="activations" in offload, flash=flash)
    e = 4.0 if precision == "fp32" else 2.0
    tokens = micro_batch * seq / layout.cp
    # FSDP units (torchtitan's wrapping): each block, the token embedding, and the final norm + LM head.
    held = stage_tensors(spec, layout, stage)
    unit = max(states.layer_params, held.embedding, held.head)
    parts = _buffers(spec, layout, states, stage, framework=framework, e=e, tokens=tokens, unit_params=unit)
    buffers = sum(parts.values())
    runtime = CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + (NCCL_BUFFER_BYTES if layout.num_gpus > 1 else 0)
    backward = states.total + act.total + act.logits + buffers
    # Optimizer step: torch's foreach AdamW / SGD allocate an fp32 temporary per parameter (hf, fsdp,
    # torchtitan); Megatron's and DeepSpeed's fused optimizers update in place.
    temp = 0.0
    if optimizer != "none" and framework in ("hf", "fsdp", "torchtitan") and "optimizer" not in offload:
        shard = layout.shard_size if layout.sharding_spec.optimizer else 1
        temp = 4 * states.trainable_params / shard
    step = states.total - states.transient_params + temp + parts.get("ddp_buckets", 0.0)
    moment = "backward" if backward >= step else "optimizer-step"
    activations = act.total if moment == "backward" else 0.0
    logits = act.logits if moment == "backward" else 0.0
    buffers = buffers if moment == "backward" else temp + parts.get("ddp_buckets", 0.0)
    allocated = (backward if moment == "backward" else step)
    params = states.params if moment == "backward" else states.params - states.transient_params
    return TrainMemory(params=params, master_weights=states.master_weights, grads=states.grads,
                       optimizer=states.optimizer, activations=activations, logits=logits, buffers=buffers,
                       runtime=runtime, allocator=ALLOCATOR_FRACTION * allocated, stage=stage, moment=moment,
                       cpu=states.cpu, states=states, buffer_parts=parts, activation_in_flight=act.in_flight)
