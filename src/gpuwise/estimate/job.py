"""A training job: what every training estimator needs besides the model, the layout and the batch.

`TrainJob` is a frozen value: the memory model (`train_memory`, `layout_memory`, `model_states`, activations), the
step-time model (`step_time`) and the FLOP count (`job_flops`) all take `(spec, layout, job, ...)`, and use it as
(part of) their cache key. `gpuwise train`, the planner, `doctor`, `pick` and the tracker each build one from their
request and pass it down, so that a plan and the `train` run of the same layout evaluate the same job.

The vocabularies are `Literal` types: argparse's choices, the request checks and the docs read the same tuples
(`FRAMEWORKS`, `PRECISIONS`, ...). A field's default here is the default of the matching option of `gpuwise train`
(plan/train.py reads it with `job_default`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..errors import InvalidArgument
from ..fields import field_default

Framework = Literal["megatron", "torchtitan", "fsdp", "hf", "deepspeed"]
"""Implementation profiles: Megatron-LM / Megatron-Core, torchtitan, PyTorch FSDP2 or DDP, transformers (+ PEFT),
DeepSpeed ZeRO (docs/training-memory.md)."""
Precision = Literal["fp32", "bf16", "fp16", "bf16-pure", "fp8"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "adafactor", "none"]
Recompute = Literal["none", "selective", "full"]
Finetune = Literal["full", "lora", "qlora"]
Attention = Literal["flash", "unfused"]
FlopsConvention = Literal["causal", "full"]
OffloadTarget = Literal["optimizer", "params", "activations"]

FRAMEWORKS: tuple[str, ...] = get_args(Framework)
PRECISIONS: tuple[str, ...] = get_args(Precision)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
RECOMPUTE: tuple[str, ...] = get_args(Recompute)
"""Cheapest in time first: recomputation only adds work (the planner's pruning relies on the order)."""
FINETUNE: tuple[str, ...] = get_args(Finetune)
ATTENTION: tuple[str, ...] = get_args(Attention)
CONVENTIONS: tuple[str, ...] = get_args(FlopsConvention)
OFFLOAD_TARGETS: tuple[str, ...] = get_args(OffloadTarget)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainJob:
    """What is trained and how, independent of the parallel layout and the batch."""

    framework: Framework
    """Implementation profile whose memory layout and kernels are modelled (resolved: never None here)."""
    precision: Precision = "bf16"
    """bf16/fp16: mixed precision with fp32 master weights; bf16-pure: bf16 weights and optimizer states;
    fp8: the framework's bf16 layout with fp8 GEMMs (Transformer Engine)."""
    optimizer: Optimizer = "adamw"
    """AdamW, 8-bit AdamW (bitsandbytes), SGD with momentum, Adafactor, or none (no optimizer states)."""
    seq: int = 4096
    """Tokens per sequence."""
    recompute: Recompute = "none"
    """Activation checkpointing: none, selective (the attention core) or full (every block's forward again)."""
    finetune: Finetune = "full"
    """full: every weight trained; lora/qlora: adapters on a frozen base (qlora: an NF4 base)."""
    lora_rank: int = 16
    """LoRA rank."""
    lora_targets: str = "all-linear"
    """all-linear (PEFT's option) or a comma list of q,k,v,o,gate,up,down."""
    offload: frozenset[OffloadTarget] = frozenset()
    """States kept in host memory: optimizer (ZeRO-Offload), params (ZeRO-Infinity / FSDP2 CPUOffloadPolicy),
    activations."""
    attention: Attention = "flash"
    """flash (fused kernel, no score matrix: FlashAttention / cuDNN / SDPA) or unfused (scores, softmax and dropout
    in memory: Megatron-LM before --use-flash-attn, eager attention)."""
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives overlapped with the split GEMMs (Megatron-LM --tp-comm-overlap)."""
    flops_convention: FlopsConvention = "causal"
    """Attention FLOPs: causal (half the score matrix) or full (what FlopCounterMode counts)."""

    def __post_init__(self) -> None:
        for name, value, valid in (("--framework", self.framework, FRAMEWORKS), ("--precision", self.precision, PRECISIONS),
                                   ("--optimizer", self.optimizer, OPTIMIZERS), ("--recompute", self.recompute, RECOMPUTE),
                                   ("--finetune", self.finetune, FINETUNE), ("--attention", self.attention, ATTENTION),
                                   ("--flops-convention", self.flops_convention, CONVENTIONS)):
            if value not in valid:
                raise InvalidArgument(f"{name}: unknown value '{value}'; valid: {', '.join(valid)}")
        bad = sorted(o for o in self.offload if o not in OFFLOAD_TARGETS)
        if bad:
            raise InvalidArgument(f"--offload: unknown target '{bad[0]}'; valid: {', '.join(OFFLOAD_TARGETS)}")

    @property
    def element_bytes(self) -> float:
        """Bytes of one activation (and 16-bit working) element: 4 under fp32, else 2 (fp8 training keeps its
        activations and working weights in bf16; only the GEMM inputs are cast to fp8)."""
        return 4.0 if self.precision == "fp32" else 2.0

    @property
    def frozen_base(self) -> bool:
        """LoRA / QLoRA: the base weights get no gradients (no weight-gradient GEMMs, no optimizer states)."""
        return self.finetune != "full"

    @property
    def flash(self) -> bool:
        return self.attention == "flash"


def job_default(name: str) -> object:
    """The default of `TrainJob.<name>`: the one place a training option's default is written."""
    return field_default(TrainJob, name)
