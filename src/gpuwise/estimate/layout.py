"""The parallel layout of a training job as a value: its degrees, its sharding and the divisor helpers.

The GPU count factors as N = tp x pp x cp x dp (data parallelism is derived, never typed). Sharding (ZeRO / FSDP)
spreads model states over the data-parallel x context-parallel ranks, or over a `shard_group` of them for HSDP.
Which layouts a model and a batch allow is decided in parallel.py; the pipeline's arithmetic is in pipeline.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# Shardings whose parameters can live in host memory between uses (ZeRO-Infinity offload_param, FSDP2
# CPUOffloadPolicy): the ones that shard the parameters and gather them per use.
PARAM_OFFLOAD_SHARDINGS = ("zero3", "fsdp-full", "hsdp")
Schedule = Literal["1f1b", "gpipe", "interleaved"]
"""Pipeline schedules: 1F1B (PipeDream-flush), GPipe (all forwards first), Megatron-LM's interleaved 1F1B."""
SCHEDULES: tuple[str, ...] = get_args(Schedule)


@dataclass(frozen=True, slots=True)
class Sharding:
    """What is sharded over the data-parallel (or HSDP shard) group."""

    name: str
    optimizer: bool
    """Optimizer states and fp32 master weights (ZeRO-1 and up)."""
    grads: bool
    """Gradients (ZeRO-2 and up)."""
    params: bool
    """Parameters at rest (ZeRO-3 / FSDP)."""
    keep_unsharded: bool = False
    """All-gathered 16-bit parameters kept from forward to backward (FSDP SHARD_GRAD_OP / no reshard)."""


SHARDINGS = {
    "ddp": Sharding("ddp", False, False, False),
    "zero1": Sharding("zero1", True, False, False),
    "zero2": Sharding("zero2", True, True, False),
    "zero3": Sharding("zero3", True, True, True),
    "fsdp-full": Sharding("fsdp-full", True, True, True),
    "fsdp-grad-op": Sharding("fsdp-grad-op", True, True, True, keep_unsharded=True),
    "fsdp-no-reshard": Sharding("fsdp-no-reshard", True, True, True, keep_unsharded=True),
    "hsdp": Sharding("hsdp", True, True, True),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Degrees of parallelism and sharding of one training job."""

    num_gpus: int
    tp: int = 1
    """Tensor parallel degree (Megatron-style column/row split of every block)."""
    pp: int = 1
    """Pipeline stages."""
    vpp: int = 1
    """Virtual stages (model chunks) per pipeline rank: the interleaved schedule when > 1."""
    cp: int = 1
    """Context parallel degree (the sequence split across ranks, K/V exchanged)."""
    ep: int = 1
    """Expert parallel degree: routed experts split over ranks folded from tp x cp x dp (Megatron-Core's MoE
    parallel folding, torchtitan's EP borrowing data-parallel, context-parallel and, with etp 1, TP ranks)."""
    etp: int | None = None
    """Expert tensor parallel degree (Megatron-Core --expert-tensor-parallel-size; default: tp)."""
    sp: bool = False
    """Sequence parallelism with TP (norms, dropout and their activations split along the sequence)."""
    sharding: str = "ddp"
    shard_group: int | None = None
    """HSDP: ranks that shard model states among themselves (replicated across groups)."""
    schedule: str = "1f1b"
    pp_first_layers: int | None = None
    """Layers on the first pipeline stage when it differs from the others (Megatron's
    --decoder-first-pipeline-num-layers; default: an even split)."""
    pp_last_layers: int | None = None
    """Layers on the last pipeline stage when it differs from the others (default: an even split)."""

    @property
    def expert_tp(self) -> int:
        """TP degree of the routed experts (their weights and GEMMs split over it)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same routed experts (the expert data-parallel group): tp x cp x dp / (ep x etp), as
        Megatron-Core's parallel folding and torchtitan's EP mesh fold ep x etp over the tp x cp x dp ranks, the
        ep x etp ranks of an expert group innermost (consecutive)."""
        return max(1, self.tp * self.cp * self.dp // (self.ep * self.expert_tp))

    @property
    def expert_shard_size(self) -> int:
        """Ranks that hold the same routed experts and shard their states: the expert data-parallel group within
        the dense shard group's reach."""
        if self.sharding == "ddp":
            return 1
        return max(1, self.shard_size * self.tp // (self.ep * self.expert_tp))

    @property
    def dp(self) -> int:
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def shard_size(self) -> int:
        """Ranks that model states are sharded over (1 when nothing is sharded): the data-parallel group with
        the context-parallel ranks, which hold the same weights (Megatron's distributed optimizer and DDP use
        the dp x cp group; torchtitan's FSDP mesh is dp_shard_cp)."""
        if self.sharding == "ddp":
            return 1
        if self.sharding == "hsdp":
            return self.shard_group or self.dp * self.cp
        return self.dp * self.cp

    @property
    def sharding_spec(self) -> Sharding:
        return SHARDINGS[self.sharding]


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def multiples_near(value: int, step: int) -> list[int]:
    """A few multiples of `step` around `value`, for error messages."""
    k = max(1, value // step)
    return [step * j for j in range(max(1, k - 2), k + 3)]


def nearby(value: int, valid: list[int]) -> str:
    """The valid values closest to `value`, for error messages."""
    near = sorted(sorted(valid, key=lambda v: (abs(v - value), v))[:5])
    return ", ".join(str(v) for v in near)
