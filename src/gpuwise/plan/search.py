"""`gpuwise plan`: search the parallel layouts of a training job and rank the ones that fit.

The space: tensor parallelism t (dividing the attention and key/value heads, inside a node unless allowed across),
pipeline parallelism p (even splits, or the first and last stage one or more layers short as Llama 3 405B), its
interleaving v (dividing the layers of a middle stage), context parallelism c, expert parallelism e (MoE), data
parallelism d = N / (t p c) dividing the global batch, the sharding of the framework, the micro-batch b (a divisor
of the sequences per data-parallel rank) and the recompute mode. Every candidate gets the memory model; the ones
that fit get the step-time model.

Pruning that never drops a candidate that could win (per layout class):
- memory grows with b (`in_flight x b = min(p, m) x b` is non-decreasing): the micro-batch scan stops at the first
  that does not fit;
- with objective `time` or `cost`, a recompute mode is skipped at a micro-batch where a cheaper one (none before
  selective before full) already fits: recomputation only adds work at the same layout and micro-batch.
`evaluated` counts the candidates whose memory was computed; `timed` those that also got a step time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..catalog.devices import default_profile, load_profile, network_overrides
from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..errors import InvalidArgument, require_positive_int
from ..estimate.comm import topology
from ..estimate.flops import step_flops
from ..estimate.parallel import Layout, divisors
from ..estimate.step_time import StepTime, gemm_dtype, step_time
from ..estimate.train_memory import train_memory

OBJECTIVES = ("time", "cost", "memory")
RECOMPUTE_ORDER = ("none", "selective", "full")
SHARDINGS_BY_FRAMEWORK = {
    "megatron": ("zero1",),  # the distributed optimizer
    "torchtitan": ("fsdp-full", "fsdp-grad-op"),
    "fsdp": ("fsdp-full", "fsdp-grad-op"),
    "deepspeed": ("zero1", "zero2", "zero3"),
}
GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    model: LoadedModel
    gpu: GPU
    num_gpus: int
    seq: int
    global_batch: int
    """Sequences per optimizer step."""
    top: int = 5
    framework: str = "megatron"
    objective: str = "time"
    precision: str = "bf16"
    optimizer: str = "adamw"
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    max_tp: int | None = None
    no_pp: bool = False
    reserve_gib: float = 0.0
    """Memory kept free on every GPU, on top of the model's own allowance."""
    tp_across_nodes: bool = False
    gpus_per_node: int | None = None
    inter_node_gbps: float | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        for name in ("num_gpus", "seq", "global_batch", "top"):
            require_positive_int("--" + name.replace("_", "-"), getattr(self, name), 1 << 24)
        for name in ("tp", "pp", "cp", "ep", "max_tp"):
            if getattr(self, name) is not None:
                require_positive_int("--" + name.replace("_", "-"), getattr(self, name), 1 << 16)
        if self.objective not in OBJECTIVES:
            raise InvalidArgument(f"--objective: unknown value '{self.objective}'; valid: {', '.join(OBJECTIVES)}")
        if self.framework not in SHARDINGS_BY_FRAMEWORK:
            raise InvalidArgument(f"--framework: unknown value '{self.framework}'; valid: "
                                  f"{', '.join(SHARDINGS_BY_FRAMEWORK)}")
        if self.no_pp and self.pp not in (None, 1):
            raise InvalidArgument(f"--no-pp and --pp {self.pp} both set: choose one")
        if not 0 <= self.reserve_gib < self.gpu.memory_bytes / GIB:
            raise InvalidArgument(f"--reserve-gib must be between 0 and the GPU's {self.gpu.memory_bytes / GIB:.0f} GiB")


@dataclass(frozen=True, slots=True)
class Plan:
    layout: Layout
    micro_batch: int
    recompute: str
    step: StepTime
    mfu: float | None
    memory_bytes: float
    """Peak memory per GPU (the memory model's total)."""

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s

    @property
    def bottleneck(self) -> str:
        """The largest part of the step besides the forward/backward compute itself."""
        parts = {k: v for k, v in self.step.breakdown.items() if k not in ("forward", "backward")}
        return max(parts, key=parts.get)


@dataclass(frozen=True)
class PlanResult:
    request: PlanRequest
    plans: tuple[Plan, ...]
    """Best first, at most `top`."""
    evaluated: int
    timed: int
    feasible: int
    search_time_s: float
    why: str
    """Why the best beats the runner-up, in one sentence (or why nothing fits)."""
    mfu_denominator: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _pp_splits(layers: int, pp: int) -> list[tuple[int | None, int | None]]:
    """(first, last) stage layer counts: even, or both ends d layers short of the middle stages."""
    if pp == 1:
        return [(None, None)]
    if pp > layers:
        return []
    if layers % pp == 0:
        return [(None, None)]
    per = -(-layers // pp)
    short = pp * per - layers
    if short % 2 == 0 and 0 < short // 2 < per and pp > 2:
        return [(per - short // 2, per - short // 2)]
    return []


def _tp_options(req: PlanRequest, per_node: int) -> list[int]:
    spec = req.model.spec
    if req.tp is not None:
        return [req.tp]
    out = []
    for t in divisors(req.num_gpus):
        if spec.num_heads % t or (spec.num_kv_heads % t and t % spec.num_kv_heads):
            continue
        if req.max_tp is not None and t > req.max_tp:
            continue
        if t > per_node and not req.tp_across_nodes:
            continue
        out.append(t)
    return out


def _cp_options(req: PlanRequest) -> list[int]:
    if req.cp is not None:
        return [req.cp]
    out, c = [1], 2
    while req.seq % (2 * c) == 0 and req.seq // c >= 2048 and c <= req.num_gpus:
        out.append(c)
        c *= 2
    return out


def _vpp_options(layers_middle: int, pp: int) -> list[int]:
    if pp == 1:
        return [1]
    return [v for v in divisors(layers_middle) if v <= 8 or v == layers_middle]


def plan(req: PlanRequest) -> PlanResult:
    t0 = time.perf_counter()
    spec = req.model.spec
    gpu = req.gpu
    n = req.num_gpus
    layers = spec.num_layers
    profile = load_profile(req.profile, gpu) if req.profile else default_profile(gpu)
    topo = topology(gpu, num_gpus=n, gpus_per_node=req.gpus_per_node, inter_node_gbps=req.inter_node_gbps,
                    overrides=network_overrides(req.profile))
    budget = gpu.memory_bytes - req.reserve_gib * GIB
    framework = req.framework
    dtype = gemm_dtype(gpu.peak_flops, req.precision)
    peak = gpu.peak_flops.get(dtype)
    flops = {rc: step_flops(spec, seq=req.seq, global_batch=req.global_batch, recompute=rc) for rc in RECOMPUTE_ORDER}
    moe = spec.moe is not None
    prune_recompute = req.objective in ("time", "cost")

    evaluated = timed = 0
    results: list[Plan] = []
    pps = [1] if req.no_pp else ([req.pp] if req.pp is not None else [p for p in divisors(n) if p <= layers])
    for tp in _tp_options(req, topo.gpus_per_node):
        for pp in pps:
            for first, last in _pp_splits(layers, pp):
                middle = (layers - (first or 0) - (last or 0)) // max(1, pp - (first is not None) - (last is not None))
                for vpp in _vpp_options(middle, pp):
                    for cp in _cp_options(req):
                        if n % (tp * pp * cp):
                            continue
                        dp = n // (tp * pp * cp)
                        if req.global_batch % dp:
                            continue
                        eps = [1]
                        if moe:
                            eps = [req.ep] if req.ep is not None else [
                                e for e in divisors(dp * cp) if spec.moe.num_experts % e == 0]
                        per_rank = req.global_batch // dp
                        for ep in eps:
                            for sharding in SHARDINGS_BY_FRAMEWORK[framework]:
                                if dp * cp == 1 and sharding != SHARDINGS_BY_FRAMEWORK[framework][0]:
                                    continue  # nothing to shard over: one variant is enough
                                layout = Layout(num_gpus=n, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, sp=tp > 1,
                                                sharding=sharding,
                                                schedule="interleaved" if vpp > 1 else "1f1b",
                                                pp_first_layers=first, pp_last_layers=last)
                                fits_at: dict[int, str] = {}
                                for rc in RECOMPUTE_ORDER:
                                    for mb in divisors(per_rank):
                                        if prune_recompute and mb in fits_at:
                                            continue
                                        m = per_rank // mb
                                        mem = train_memory(spec, layout, framework=framework, precision=req.precision,
                                                           optimizer=req.optimizer, seq=req.seq, micro_batch=mb,
                                                           num_microbatches=m, recompute=rc)
                                        evaluated += 1
                                        if mem.total > budget:
                                            break
                                        fits_at.setdefault(mb, rc)
                                        st = mem.states
                                        step = step_time(spec, layout, profile=profile, topo=topo, framework=framework,
                                                         precision=req.precision, seq=req.seq, micro_batch=mb,
                                                         num_microbatches=m, recompute=rc,
                                                         params_on_rank=st.params_on_rank,
                                                         trainable_params=st.trainable_params,
                                                         working_bytes=st.working_bytes_per_param,
                                                         grad_bytes=st.grad_bytes_per_param,
                                                         optimizer_bytes=st.optimizer + st.master_weights)
                                        timed += 1
                                        mfu = flops[rc].model / (step.step_time_s * n * peak) if peak else None
                                        results.append(Plan(layout, mb, rc, step, mfu, mem.total))
    key = (lambda p: p.memory_bytes) if req.objective == "memory" else (lambda p: p.step.step_time_s)
    results.sort(key=key)
    best = tuple(results[: req.top])
    return PlanResult(request=req, plans=best, evaluated=evaluated, timed=timed, feasible=len(results),
                      search_time_s=time.perf_counter() - t0, why=_why(best, req), mfu_denominator=peak)


def describe(p: Plan) -> str:
    lay = p.layout
    parts = [f"TP {lay.tp}", f"PP {lay.pp}" + (f"x{lay.vpp}" if lay.vpp > 1 else ""), f"CP {lay.cp}"]
    if lay.ep > 1:
        parts.append(f"EP {lay.ep}")
    parts += [f"DP {lay.dp} ({lay.sharding})", f"micro-batch {p.micro_batch}", f"recompute {p.recompute}"]
    return ", ".join(parts)


def _why(plans: tuple[Plan, ...], req: PlanRequest) -> str:
    if not plans:
        return (f"no layout fits in {req.gpu.memory_bytes / GIB:.0f} GiB per GPU"
                + (f" with {req.reserve_gib:g} GiB reserved" if req.reserve_gib else "")
                + "; see `gpuwise doctor` for remedies")
    if len(plans) == 1:
        return "the only layout that fits"
    a, b = plans[0], plans[1]
    if req.objective == "memory":
        return (f"it peaks at {a.memory_bytes / GIB:.1f} GiB per GPU against {b.memory_bytes / GIB:.1f} GiB for the "
                f"runner-up ({describe(b)})")
    diffs = {k: b.step.breakdown.get(k, 0.0) - v for k, v in a.step.breakdown.items()}
    cause = max(diffs, key=diffs.get)
    return (f"its step is {b.step_time_s - a.step_time_s:.3g} s shorter than the runner-up's ({describe(b)}), "
            f"mostly in {cause.replace('_', ' ')} ({a.step.breakdown[cause]:.3g} s vs "
            f"{b.step.breakdown.get(cause, 0.0):.3g} s)")
