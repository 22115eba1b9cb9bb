"""Parallel layout of a training job: degrees, sharding, pipeline stages, and their validation.

The GPU count factors as N = tp x pp x cp x dp (data parallel is derived, never typed). Expert parallelism
is carved out of data parallelism, as in Megatron-LM and torchtitan (ep divides dp; experts are split over
ep, the dense layers stay replicated over it). Sharding (ZeRO / FSDP) spreads model states over the
data-parallel group, or over a `shard_group` of it for HSDP.

Every check raises `InvalidArgument` with one line naming the constraint and the valid values nearby.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import InvalidArgument, require_positive_int
from ..model.spec import ModelSpec

# Shardings whose parameters can live in host memory between uses (ZeRO-Infinity offload_param, FSDP2
# CPUOffloadPolicy): the ones that shard the parameters and gather them per use.
PARAM_OFFLOAD_SHARDINGS = ("zero3", "fsdp-full", "hsdp")
SHARDING = ("ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-no-reshard", "hsdp")
SCHEDULES = ("1f1b", "gpipe", "interleaved")


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
    """Expert parallel degree (routed experts split across ranks)."""
    sp: bool = False
    """Sequence parallelism with TP (norms, dropout and their activations split along the sequence)."""
    sharding: str = "ddp"
    shard_group: int | None = None
    """HSDP: ranks that shard model states among themselves (replicated across groups)."""
    schedule: str = "1f1b"
    pp_first_layers: int | None = None
    """Layers on the first pipeline stage when it differs from the others (Megatron's
    --decoder-first-pipeline-num-layers); None for an even split."""
    pp_last_layers: int | None = None

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


def _multiples_near(value: int, step: int) -> list[int]:
    k = max(1, value // step)
    return [step * j for j in range(max(1, k - 2), k + 3)]


def _nearby(value: int, valid: list[int]) -> str:
    """The valid values closest to `value`, for error messages."""
    near = sorted(sorted(valid, key=lambda v: (abs(v - value), v))[:5])
    return ", ".join(str(v) for v in near)


def _require_divides(name: str, degree: int, what: str, total: int) -> None:
    if total % degree:
        raise InvalidArgument(f"--{name} {degree} does not divide {what} ({total}); valid --{name} values nearby: "
                              f"{_nearby(degree, divisors(total))}")


def validate_layout(layout: Layout, spec: ModelSpec, *, seq: int, global_batch: int, micro_batch: int) -> None:
    """Check every constraint of the layout against the model and the batch (InvalidArgument on the first)."""
    for name in ("num_gpus", "tp", "pp", "vpp", "cp", "ep"):
        require_positive_int("--" + name.replace("_", "-"), getattr(layout, name), 1 << 20)
    if layout.sharding not in SHARDINGS:
        raise InvalidArgument(f"unknown sharding '{layout.sharding}'; valid: {', '.join(SHARDINGS)}")
    if layout.schedule not in SCHEDULES:
        raise InvalidArgument(f"unknown pipeline schedule '{layout.schedule}'; valid: {', '.join(SCHEDULES)}")
    _require_divides("tp", layout.tp, "the number of attention heads", spec.num_heads)
    if spec.mla is None:
        _require_divides("tp", layout.tp, "the number of key/value heads", spec.num_kv_heads)
    if layout.tp > 1 and spec.intermediate_size:
        _require_divides("tp", layout.tp, "the MLP width", spec.intermediate_size)
    if layout.pp > spec.num_layers:
        raise InvalidArgument(f"--pp {layout.pp} is deeper than the model's {spec.num_layers} layers; "
                              f"valid --pp values nearby: {_nearby(layout.pp, divisors(spec.num_layers))}")
    if layout.pp == 1 and (layout.pp_first_layers is not None or layout.pp_last_layers is not None):
        raise InvalidArgument("--pp-first-layers/--pp-last-layers need pipeline parallelism (--pp > 1)")
    if layout.schedule == "interleaved" and layout.vpp == 1:
        raise InvalidArgument("the interleaved schedule needs --vpp > 1 (model chunks per pipeline rank)")
    if layout.vpp > 1 and layout.schedule != "interleaved":
        raise InvalidArgument(f"--vpp {layout.vpp} runs the interleaved schedule, not {layout.schedule}")
    stage_layers(layout, spec.num_layers)  # raises on uneven splits
    if layout.vpp > 1:
        if layout.pp == 1:
            raise InvalidArgument("--vpp needs pipeline parallelism (--pp > 1)")
        # The middle stages split into v equal chunks; the first and last stages may hold other counts (Megatron-LM's
        # --pipeline-model-parallel-layout; Llama 3 405B's first chunk holds only the embedding, its last only
        # the head), which the step model charges as they are.
        per_stage = max(stage_layers(layout, spec.num_layers)[1:-1] or (spec.num_layers // layout.pp,))
        _require_divides("vpp", layout.vpp, "the layers per (middle) pipeline stage", per_stage)
    model_parallel = layout.tp * layout.pp * layout.cp
    if layout.num_gpus % model_parallel:
        valid = _multiples_near(layout.num_gpus, model_parallel)
        raise InvalidArgument(
            f"tp x pp x cp = {layout.tp} x {layout.pp} x {layout.cp} = {model_parallel} does not divide "
            f"--num-gpus {layout.num_gpus}; GPU counts that work: {_nearby(layout.num_gpus, valid)}")
    if layout.cp > 1 and seq % (2 * layout.cp):
        valid = [c for c in divisors(seq) if seq % (2 * c) == 0]
        raise InvalidArgument(f"--cp {layout.cp}: the sequence ({seq}) must split into 2 x cp equal chunks "
                              f"(load-balanced causal attention); valid --cp values nearby: {_nearby(layout.cp, valid)}")
    dp = layout.dp
    if layout.ep > 1:
        if not spec.is_moe:
            raise InvalidArgument("--ep needs a mixture-of-experts model; this one is dense")
        assert spec.moe is not None
        _require_divides("ep", layout.ep, "the number of experts", spec.moe.num_experts)
        _require_divides("ep", layout.ep, "the data-parallel degree num_gpus / (tp x pp x cp)", dp)
    if layout.sharding == "hsdp":
        if layout.shard_group is None:
            raise InvalidArgument("HSDP (--fsdp hybrid) needs --shard-group K: the ranks that shard model states")
        _require_divides("shard-group", layout.shard_group, "the data-parallel x context-parallel degree", dp * layout.cp)
    elif layout.shard_group is not None:
        raise InvalidArgument("--shard-group only applies to --fsdp hybrid")
    if global_batch % dp:
        raise InvalidArgument(f"--global-batch {global_batch} is not a multiple of the data-parallel degree {dp}; "
                              f"valid batches nearby: {_nearby(global_batch, _multiples_near(global_batch, dp))}")
    per_rank = global_batch // dp
    if micro_batch > per_rank:
        raise InvalidArgument(f"--micro-batch {micro_batch} is larger than the per-rank batch "
                              f"global-batch / dp = {global_batch} / {dp} = {per_rank}")
    if per_rank % micro_batch:
        raise InvalidArgument(f"--micro-batch {micro_batch} does not divide the per-rank batch {per_rank}; "
                              f"valid micro-batches nearby: {_nearby(micro_batch, divisors(per_rank))}")


def stage_layers(layout: Layout, num_layers: int) -> tuple[int, ...]:
    """Transformer layers on each pipeline stage (first stage first)."""
    if layout.pp == 1:
        return (num_layers,)
    return _stage_layers(layout.pp, layout.pp_first_layers, layout.pp_last_layers, num_layers)


@lru_cache(maxsize=4096)
def _stage_layers(pp: int, first: int | None, last: int | None, num_layers: int) -> tuple[int, ...]:
    fixed = (first or 0) + (last or 0)
    middle_stages = pp - (first is not None) - (last is not None)
    rest = num_layers - fixed
    if rest < 0 or (middle_stages == 0 and rest != 0) or (middle_stages and rest % middle_stages):
        hint = "" if first or last else "; or set --pp-first-layers/--pp-last-layers for an uneven split"
        raise InvalidArgument(
            f"--pp {pp} does not split {num_layers} layers evenly (first={first}, last={last}){hint}; "
            f"valid --pp values nearby: {_nearby(pp, divisors(num_layers))}")
    per = rest // middle_stages if middle_stages else 0
    if middle_stages and per < 1:
        raise InvalidArgument(f"--pp {pp}: the middle stages would hold no layers")
    stages = [per] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return tuple(stages)


def in_flight_microbatches(layout: Layout, stage: int, num_microbatches: int) -> float:
    """Micro-batches whose activations a pipeline stage holds at its peak, in units of the stage's full layers.

    GPipe runs every forward before any backward: all m. 1F1B (PipeDream-flush, Narayanan et al. 2021):
    stage i (0-based) holds min(p - i, m). Interleaved with v chunks per rank (Megatron-LM): the first stage
    warms up with (p - 1) x 2 + (v - 1) x p + 1 chunk-micro-batches of L / (p v) layers, i.e. p + (p - 1) / v
    stage-micro-batches: the factor 1 + (p - 1) / (p v) of Korthikanti et al. 2022 and Megatron-LM's
    theoretical_memory_usage.py.
    """
    p, m = layout.pp, num_microbatches
    if p == 1:
        return 1.0
    if layout.schedule == "gpipe":
        return float(m)
    if layout.vpp > 1 or layout.schedule == "interleaved":
        v = layout.vpp
        chunks = min(m * v, (p - stage - 1) * 2 + (v - 1) * p + 1)
        return chunks / v
    return float(min(p - stage, m))


def bubble_fraction(pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Idle share of a pipeline step: (p-1)/v idle micro-batch slots out of m + (p-1)/v; (p-1)/(m+p-1) for 1F1B
    and GPipe (Narayanan et al. 2021, section 2.2)."""
    idle = (pp - 1) / vpp
    return idle / (num_microbatches + idle)
