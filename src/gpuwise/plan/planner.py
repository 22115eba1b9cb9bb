"""`gpuwise plan`: search the parallel layouts of a training job and rank the ones that fit.

The space: tensor parallelism t (dividing the attention and key/value heads, inside a node unless allowed across),
pipeline parallelism p (even splits, or the first and last stage one or more layers short as Llama 3 405B), its
interleaving v (dividing the layers of a middle stage), context parallelism c, expert parallelism e (MoE), data
parallelism d = N / (t p c) dividing the global batch, the sharding of the framework (with HSDP shard groups for
torchtitan and FSDP, `_shard_groups`), the micro-batch b (a divisor of the sequences per data-parallel rank), the
recompute mode and CPU offload (optimizer states, and parameters where the sharding shards them). Every candidate
gets the memory model; the ones that fit get the step-time model.

Pruning that never drops a candidate that could win (per layout class):
- memory grows with b (`in_flight x b = min(p, m) x b` is non-decreasing): the micro-batch scan of each recompute
  and offload variant stops at the first that does not fit;
- with objective `time` or `cost`, a variant is skipped at a micro-batch where a variant that dominates it already
  fits: one with a cheaper or equal recompute mode (none before selective before full: recomputation only adds
  work) and a subset of its offload, or any variant without offload (offload is taken to cost more than any
  recompute mode: the PCIe transfers and the host's optimizer step; see `_dominated`). So offload is tried only
  where nothing fits on the GPU alone; with objective `memory` every variant is evaluated.
`evaluated` counts the candidates whose memory was computed; `timed` those that also got a step time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, get_args

from ..catalog.devices import DeviceProfile
from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..errors import MAX_TOKENS, InvalidArgument, require_positive_int, require_positive_number
from ..estimate.comm import Topology
from ..estimate.flops import gemm_dtype, job_flops, utilization
from ..estimate.job import (FSDP2_OFFLOAD_ALL, OFFLOADABLE_OPTIMIZERS, RECOMPUTE, AttnImplementation, Fp8Backend,
                            FlexBackend, Float8Recipe, MoeDispatcher, Optimizer, Precision, SdpaBackend, StateDtype,
                            TrainJob, fp8_transpose_cached, job_default)
from ..estimate.layout import PARAM_OFFLOAD_SHARDINGS, Layout, divisors, multiples_near, nearby
from ..estimate.model_states import ModelStates
from ..estimate.parallel import (cp_splits, ep_fits, hsdp_holds_experts, sinks_cp_problem, sp_splits, tp_conflict,
                                 valid_tp_degrees)
from ..estimate.pipeline import pp_splits
from ..estimate.recompute import framework_mode, recompute_plan
from ..estimate.step_time import StepTime, step_time
from ..estimate.train_memory import layout_memory, required_bytes
from ..model.spec import LINEAR
from ..units import GiB
from .cluster import cluster
from .train import (DELAY_WGRAD_NEEDS_OVERLAP, TrainRequest, cuda_graph_scopes, megatron_option_problem,
                    megatron_overlap_problem, nvfp4_shape_problem, recipe_problem)

Objective = Literal["time", "cost", "memory"]
PlanFramework = Literal["megatron", "torchtitan", "fsdp", "deepspeed"]
"""The trainers the planner searches for (transformers + PEFT has no layouts to search)."""
COMPILING_FRAMEWORKS: tuple[str, ...] = ("torchtitan", "fsdp")
"""Planner frameworks whose runs torch.compile (`--compile`): torchtitan's compile.enable, a PyTorch FSDP script's
torch.compile; Megatron and DeepSpeed plans keep their own kernels."""
OBJECTIVES: tuple[str, ...] = get_args(Objective)
SHARDINGS_BY_FRAMEWORK = {
    "megatron": ("zero1",),  # the distributed optimizer
    "torchtitan": ("fsdp-full", "fsdp-grad-op"),
    "fsdp": ("fsdp-full", "fsdp-grad-op"),
    "deepspeed": ("zero1", "zero2", "zero3"),
}
OFFLOADS = ((), ("optimizer",), ("optimizer", "params"))
"""Offload variants, cheapest first (plan/train.py's --offload targets; activations are left to recompute)."""
HSDP_FRAMEWORKS = ("torchtitan", "fsdp")
HSDP_DOUBLINGS = 3
"""HSDP shard groups tried beyond one node's data-parallel ranks (see `_shard_groups`)."""
MIN_CP_TOKENS = 2048
"""Context parallelism is searched only while each rank keeps at least this many tokens of the sequence."""
# DeepSpeed's ZeRO engine is data parallel (its TP, pipeline and Ulysses paths are other engines): the search
# keeps TP = PP = CP = 1 for it unless a degree is fixed.
DATA_PARALLEL_ONLY = frozenset({"deepspeed"})
TRAIN_SHARDING = {"ddp": dict(zero=0), "zero1": dict(zero=1), "zero2": dict(zero=2), "zero3": dict(zero=3),
                  "fsdp-full": dict(fsdp="full"), "fsdp-grad-op": dict(fsdp="grad-op"), "hsdp": dict(fsdp="hybrid")}
"""How `gpuwise train` names each sharding the search produces."""


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """A search over the parallel layouts of a training job: the options of `gpuwise plan` (those it shares with
    `gpuwise train` documented there, `DOCS_FROM`)."""

    DOCS_FROM = (TrainRequest,)

    model: LoadedModel
    gpu: GPU
    num_gpus: int
    """GPUs in the job."""
    seq: int
    """Tokens per sequence."""
    global_batch: int
    """Sequences per optimizer step."""
    top: int = 5
    """Plans to show."""
    framework: PlanFramework = "megatron"
    """Trainer whose shardings and memory profile to use."""
    objective: Objective = "time"
    """Rank by step time, cost (the same order at a fixed GPU count) or memory per GPU."""
    precision: Precision = job_default("precision")
    optimizer: Optimizer = job_default("optimizer")
    tp: int | None = None
    """Fix the tensor-parallel degree."""
    pp: int | None = None
    """Fix the pipeline-parallel degree."""
    cp: int | None = None
    """Fix the context-parallel degree."""
    ep: int | None = None
    """Fix the expert-parallel degree."""
    max_tp: int | None = None
    """Largest tensor-parallel degree to consider."""
    no_pp: bool = False
    """No pipeline parallelism."""
    no_hsdp: bool = False
    """Leave HSDP shard groups out of the search (torchtitan and FSDP)."""
    no_offload: bool = False
    """Leave CPU offload out of the search."""
    reserve_gib: float = 0.0
    """Memory to keep free on every GPU (GiB), on top of the model's own allowance."""
    tp_across_nodes: bool = False
    """Allow tensor parallelism across nodes."""
    gpus_per_node: int | None = None
    inter_node_gbps: float | None = None
    profile: str | None = None
    sdpa_backend: SdpaBackend | None = None
    attn_implementation: AttnImplementation | None = None
    compile: bool = job_default("compile")
    exp_avg_dtype: StateDtype | None = None
    exp_avg_sq_dtype: StateDtype | None = None
    moe_token_dispatcher: MoeDispatcher = job_default("moe_token_dispatcher")
    moe_flex_dispatcher_backend: FlexBackend | None = None
    """Megatron-Core --moe-flex-dispatcher-backend under --moe-token-dispatcher flex: deepep (DeepEP's normal
    kernels; Megatron-Core's default) or hybridep (DeepEP's HybridEP); across nodes each is priced at its own
    measured rate (data/devices.toml [network.ep_dispatch])."""
    moe_a2a_overlap: bool = job_default("moe_a2a_overlap")
    delay_wgrad_compute: bool = job_default("delay_wgrad_compute")
    moe_pad_expert_input_to_capacity: bool = job_default("moe_pad_expert_input_to_capacity")
    moe_permute_fusion: bool = job_default("moe_permute_fusion")
    use_transformer_engine_op_fuser: bool = job_default("use_transformer_engine_op_fuser")
    num_layers_at_start_in_bf16: int = job_default("num_layers_at_start_in_bf16")
    num_layers_at_end_in_bf16: int = job_default("num_layers_at_end_in_bf16")
    cuda_graph_scope: str | None = None
    """Megatron-Core --cuda-graph-scope the plans run with (as `gpuwise train --cuda-graph-scope`)."""
    fp8_backend: Fp8Backend | None = None
    float8_recipe: Float8Recipe | None = None
    """torchao's float8 recipe under --precision fp8: tensorwise (one scale per tensor; torchao's default, and
    torchtitan's until 2026-04-27: its TP then all-gathers fp8, and only it all-gathers fp8 weights under FSDP), rowwise
    (torchtitan's default and only float8 recipe since, beside rowwise_with_gw_hp): 16-bit TP collectives. Default:
    rowwise under torchtitan, tensorwise under fsdp and torchtune. Its GEMMs and casts are priced as tensorwise's."""
    tp_comm_overlap: bool = job_default("tp_comm_overlap")
    fp8_param_gather: bool = job_default("fp8_param_gather")
    grad_reduce_in_fp32: bool = job_default("grad_reduce_in_fp32")
    _graphs: frozenset[str] = field(init=False, repr=False, compare=False, default=frozenset())

    def __post_init__(self) -> None:
        for name in ("num_gpus", "seq", "global_batch", "top"):
            require_positive_int("--" + name.replace("_", "-"), getattr(self, name), MAX_TOKENS)
        for name in ("tp", "pp", "cp", "ep", "max_tp"):
            if getattr(self, name) is not None:
                require_positive_int("--" + name.replace("_", "-"), getattr(self, name), 1 << 16)
        if self.objective not in OBJECTIVES:
            raise InvalidArgument(f"--objective: unknown value '{self.objective}'; valid: {', '.join(OBJECTIVES)}")
        if self.framework not in SHARDINGS_BY_FRAMEWORK:
            raise InvalidArgument(f"--framework: unknown value '{self.framework}'; valid: "
                                  f"{', '.join(SHARDINGS_BY_FRAMEWORK)}")
        if self.compile and self.framework not in COMPILING_FRAMEWORKS:
            raise InvalidArgument("--compile is torch.compile of a PyTorch-native trainer "
                                  f"({', '.join(COMPILING_FRAMEWORKS)}); {self.framework} plans are priced with its "
                                  "own fused kernels")
        spec = self.model.spec
        object.__setattr__(self, "_graphs", cuda_graph_scopes(self.cuda_graph_scope, framework=self.framework,
                                                              spec=spec, padded=self.moe_pad_expert_input_to_capacity))
        for name in ("moe_pad_expert_input_to_capacity", "moe_permute_fusion", "use_transformer_engine_op_fuser"):
            if getattr(self, name) and (problem := megatron_option_problem(name, self.framework, self.precision,
                                                                            False)):
                raise InvalidArgument(problem)
        if (problem := recipe_problem(
                self.framework, spec=spec, gpu=self.gpu, precision=self.precision, tp=self.tp or 1,
                fp8_backend=self.fp8_backend,
                bf16_layers=(self.num_layers_at_start_in_bf16, self.num_layers_at_end_in_bf16),
                sdpa_backend=self.sdpa_backend, optimizer=self.optimizer, compile=self.compile,
                tp_comm_overlap=self.tp_comm_overlap, fp8_param_gather=self.fp8_param_gather,
                grad_reduce_in_fp32=self.grad_reduce_in_fp32, moe_a2a_overlap=self.moe_a2a_overlap,
                moe_token_dispatcher=self.moe_token_dispatcher, pad=self.moe_pad_expert_input_to_capacity,
                moment_dtypes=(self.exp_avg_dtype, self.exp_avg_sq_dtype),
                permute_fusion=self.moe_permute_fusion, attn_implementation=self.attn_implementation)) is not None:
            raise InvalidArgument(problem)
        if self.moe_a2a_overlap and self.ep == 1:
            raise InvalidArgument("--moe-a2a-overlap needs expert parallelism: --ep > 1")
        if self.delay_wgrad_compute and not self.moe_a2a_overlap:
            raise InvalidArgument(DELAY_WGRAD_NEEDS_OVERLAP)
        if self.no_pp and self.pp not in (None, 1):
            raise InvalidArgument(f"--no-pp and --pp {self.pp} both set: choose one")
        if self.gpus_per_node is not None:
            require_positive_int("--gpus-per-node", self.gpus_per_node, 1 << 10)
        if self.inter_node_gbps is not None:
            require_positive_number("--inter-node-gbps", self.inter_node_gbps, 1e5)
        if not 0 <= self.reserve_gib < self.gpu.memory_bytes / GiB:
            raise InvalidArgument(f"--reserve-gib must be between 0 and the GPU's {self.gpu.memory_bytes / GiB:.0f} GiB")
        self._check_fixed_degrees()
        self.job()  # the training options are valid

    def _check_fixed_degrees(self) -> None:
        """A degree fixed with --tp/--pp/--cp/--ep that no layout can have is the request's error, said as such
        (issue 21, item 16: an impossible --pp was reported as a batch that does not split)."""
        spec = self.model.spec
        if self.tp is not None and (conflict := tp_conflict(spec, self.tp)) is not None:
            what, total = conflict
            raise InvalidArgument(f"--tp {self.tp} does not divide {what} ({total}); valid --tp values nearby: "
                                  f"{nearby(self.tp, valid_tp_degrees(spec, max(self.tp, total)) or [1])}")
        if self.pp is not None and self.pp > spec.num_layers:
            raise InvalidArgument(f"--pp {self.pp} is deeper than the model's {spec.num_layers} layers; valid --pp "
                                  f"values nearby: {nearby(self.pp, divisors(spec.num_layers))}")
        fixed = (self.tp or 1) * (self.pp or 1) * (self.cp or 1)
        if self.num_gpus % fixed:
            raise InvalidArgument(
                f"tp x pp x cp = {self.tp or 1} x {self.pp or 1} x {self.cp or 1} = {fixed} does not divide "
                f"--num-gpus {self.num_gpus}; GPU counts that work: "
                f"{nearby(self.num_gpus, multiples_near(self.num_gpus, fixed))}")
        if self.cp is not None and not cp_splits(self.seq, self.cp):
            valid = [c for c in divisors(self.seq) if cp_splits(self.seq, c)]
            raise InvalidArgument(f"--cp {self.cp}: the sequence ({self.seq}) must split into 2 x cp equal chunks; "
                                  f"valid --cp values nearby: {nearby(self.cp, valid)}")
        if self.ep is not None and self.ep > 1:
            if not spec.is_moe or spec.moe is None:
                raise InvalidArgument("--ep needs a mixture-of-experts model; this one is dense")
            if spec.moe.num_experts % self.ep:
                raise InvalidArgument(f"--ep {self.ep} does not divide the number of experts ({spec.moe.num_experts})"
                                      f"; valid --ep values nearby: {nearby(self.ep, divisors(spec.moe.num_experts))}")

    def job(self, recompute: str = "none", offload: tuple[str, ...] = ()) -> TrainJob:
        """The training job the search evaluates with this recompute mode and offload: what `gpuwise train
        --framework F` builds for the same options (see `Plan.train_options`)."""
        return TrainJob(framework=self.framework, precision=self.precision, optimizer=self.optimizer, seq=self.seq,
                        recompute=framework_mode(recompute, self.framework), offload=frozenset(offload),
                        fp8_transpose_cache=fp8_transpose_cached(self.gpu.architecture),
                        sdpa_backend=self.sdpa_backend, attn_implementation=self.attn_implementation,
                        compile=self.compile, fp8_backend=self.fp8_backend, float8_recipe=self.float8_recipe,
                        compile_loss=self.compile and self.framework == "torchtitan",
                        exp_avg_dtype=self.exp_avg_dtype, exp_avg_sq_dtype=self.exp_avg_sq_dtype,
                        moe_token_dispatcher=self.moe_token_dispatcher, moe_a2a_overlap=self.moe_a2a_overlap,
                        moe_flex_dispatcher_backend=self.moe_flex_dispatcher_backend,
                        delay_wgrad_compute=self.delay_wgrad_compute,
                        moe_pad_expert_input_to_capacity=self.moe_pad_expert_input_to_capacity,
                        moe_permute_fusion=self.moe_permute_fusion, cuda_graph_scope=self._graphs,
                        num_layers_at_start_in_bf16=self.num_layers_at_start_in_bf16,
                        num_layers_at_end_in_bf16=self.num_layers_at_end_in_bf16,
                        use_transformer_engine_op_fuser=self.use_transformer_engine_op_fuser,
                        tp_comm_overlap=self.tp_comm_overlap, fp8_param_gather=self.fp8_param_gather,
                        grad_reduce_in_fp32=self.grad_reduce_in_fp32)


@dataclass(frozen=True, slots=True)
class Plan:
    layout: Layout
    micro_batch: int
    recompute: str
    step: StepTime
    mfu: float | None
    memory_bytes: float
    """Peak memory per GPU (the memory model's total)."""
    offload: tuple[str, ...] = ()
    """States kept in host memory (`gpuwise train --offload`): () or optimizer[, params]."""

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s

    def train_options(self, req: PlanRequest) -> dict:
        """The `gpuwise train` options (TrainRequest fields, model and GPU aside) that evaluate this plan: the same
        layout, batch and job, so `train` reports this plan's memory and step time."""
        lay = self.layout
        out: dict = dict(num_gpus=lay.num_gpus, seq=req.seq, global_batch=req.global_batch,
                         micro_batch=self.micro_batch, tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, ep=lay.ep,
                         etp=lay.etp, sp=lay.sp, pp_first_layers=lay.pp_first_layers, pp_last_layers=lay.pp_last_layers,
                         schedule=None if lay.schedule == ("interleaved" if lay.vpp > 1 else "1f1b") else lay.schedule,
                         recompute=self.recompute, offload=tuple(self.offload),
                         optimizer=req.optimizer, precision=req.precision, framework=req.framework,
                         gpus_per_node=req.gpus_per_node, inter_node_gbps=req.inter_node_gbps, profile=req.profile,
                         sdpa_backend=req.sdpa_backend, attn_implementation=req.attn_implementation,
                         compile=req.compile, exp_avg_dtype=req.exp_avg_dtype,
                         exp_avg_sq_dtype=req.exp_avg_sq_dtype, moe_token_dispatcher=req.moe_token_dispatcher,
                         moe_flex_dispatcher_backend=req.moe_flex_dispatcher_backend,
                         moe_a2a_overlap=req.moe_a2a_overlap, delay_wgrad_compute=req.delay_wgrad_compute,
                         moe_pad_expert_input_to_capacity=req.moe_pad_expert_input_to_capacity,
                         moe_permute_fusion=req.moe_permute_fusion, cuda_graph_scope=req.cuda_graph_scope,
                         num_layers_at_start_in_bf16=req.num_layers_at_start_in_bf16,
                         num_layers_at_end_in_bf16=req.num_layers_at_end_in_bf16,
                         use_transformer_engine_op_fuser=req.use_transformer_engine_op_fuser,
                         fp8_backend=req.fp8_backend, float8_recipe=req.float8_recipe,
                         tp_comm_overlap=req.tp_comm_overlap,
                         fp8_param_gather=req.fp8_param_gather, grad_reduce_in_fp32=req.grad_reduce_in_fp32)
        out.update(TRAIN_SHARDING[lay.sharding])
        if lay.sharding == "hsdp":
            out["shard_group"] = lay.shard_group
        return out

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


def _tp_options(req: PlanRequest, per_node: int) -> list[int]:
    spec = req.model.spec
    if req.tp is not None:
        return [req.tp]
    if req.framework in DATA_PARALLEL_ONLY:
        return [1]
    limit = min(req.max_tp or req.num_gpus, req.num_gpus if req.tp_across_nodes else per_node)
    out = [t for t in valid_tp_degrees(spec, limit) if req.num_gpus % t == 0]
    if req.precision == "nvfp4" and req.framework == "torchtitan":  # torchao's kernels: local dims % 128
        out = [t for t in out if nvfp4_shape_problem(spec, t) is None]
    return out


def _cp_options(req: PlanRequest) -> list[int]:
    if req.cp is not None:
        return [req.cp]
    if req.framework in DATA_PARALLEL_ONLY or LINEAR in req.model.spec.layer_types \
            or sinks_cp_problem(req.model.spec, req.framework, 2, None):  # the planner's CP is p2p
        return [1]  # (a hybrid's recurrent layers: context parallelism over them is not modelled)
    out, c = [1], 2
    while cp_splits(req.seq, c) and req.seq // c >= MIN_CP_TOKENS and c <= req.num_gpus:
        out.append(c)
        c *= 2
    return out


def _vpp_options(layers_middle: int, pp: int, ends: tuple[int | None, int | None] = (None, None), *,
                 every_chunk_a_layer: bool = False) -> list[int]:
    """Model chunks per pipeline rank: the divisors of the middle stages' layers (up to 8, or one layer per chunk);
    two stages of uneven sizes have no middle stage, and their chunks need only hold a layer each (Megatron-LM's
    layout string spreads them: `estimate.pipeline.virtual_stage_layers`). Megatron-LM runs chunks of the end
    stages with no layer (only the embedding or the head); torchtitan builds an optimizer per chunk and fails on
    one without parameters (`every_chunk_a_layer`: no more chunks than the shorter end stage has layers)."""
    if pp == 1:
        return [1]
    short = min((n for n in ends if n is not None), default=None)
    if layers_middle == 0:
        return [v for v in (1, 2, 4, 8) if short is None or v <= short]
    out = [v for v in divisors(layers_middle) if v <= 8 or v == layers_middle]
    return [v for v in out if short is None or v <= short] if every_chunk_a_layer else out


def _expert_options(req: PlanRequest, tp: int, dp: int, cp: int) -> list[tuple[int, int | None]]:
    """(EP, expert TP) pairs of a layout: EP dividing the experts, with the experts split over TP as the dense
    layers are (expert TP None: Megatron-Core's default, EP folds over the dp x cp ranks) or, with TP > 1, whole on
    each TP rank (expert TP 1: EP folds over the tp x cp x dp ranks, as NVIDIA's DeepSeek-V3 recipes run TP 2 with
    EP 64; torchtitan allows the same two)."""
    spec = req.model.spec
    if spec.moe is None or not spec.is_moe:
        return [(1, None)]
    titan = req.framework == "torchtitan"
    fused = req.use_transformer_engine_op_fuser  # TE's fused grouped MLP runs without expert TP (Megatron-Core's check)
    candidates = [req.ep] if req.ep is not None else divisors(tp * dp * cp)
    out: list[tuple[int, int | None]] = []
    for e in candidates:
        # torchtitan's ParallelDims also asserts that EP spans whole CP groups (and, with expert TP 1, TP x CP groups)
        if ep_fits(spec, e, dp, cp) and not (titan and e % cp) and not (fused and tp > 1):
            out.append((e, None))
        if tp > 1 and (e > 1 or fused) and ep_fits(spec, e, tp * dp, cp) and not (titan and e % (tp * cp)):
            out.append((e, 1))
    return out


def _shard_groups(req: PlanRequest, tp: int, pp: int, ranks: int, per_node: int) -> list[int]:
    """HSDP shard groups over the `ranks` = dp x cp ranks that hold the same weights: the ranks one node holds
    (the group's stride is tp x pp, so a node holds per_node / (tp pp) of them and their gathers stay on NVLink;
    at least 2), then up to `HSDP_DOUBLINGS` doublings; each divides `ranks` and is short of it (sharding over
    all of them is FSDP's full shard, already in the search)."""
    if req.no_hsdp or req.framework not in HSDP_FRAMEWORKS:
        return []
    node = max(2, per_node // (tp * pp))
    return [g for g in (node << k for k in range(HSDP_DOUBLINGS + 1)) if g < ranks and ranks % g == 0]


def _layouts(req: PlanRequest, per_node: int) -> Iterator[Layout]:
    """Every layout of the search space, in search order (TP, PP and its split, VPP, CP, EP, sharding)."""
    spec = req.model.spec
    n, layers = req.num_gpus, spec.num_layers
    shardings = SHARDINGS_BY_FRAMEWORK[req.framework]
    pps = [1] if req.no_pp else ([req.pp] if req.pp is not None else [p for p in divisors(n) if p <= layers])
    if req.framework in DATA_PARALLEL_ONLY and req.pp is None:
        pps = [1]
    for tp in _tp_options(req, per_node):
        for pp in pps:
            for first, last in pp_splits(layers, pp):
                middle = (layers - (first or 0) - (last or 0)) // max(1, pp - (first is not None) - (last is not None))
                for vpp in _vpp_options(middle, pp, (first, last), every_chunk_a_layer=req.framework == "torchtitan"):
                    for cp in _cp_options(req):
                        if n % (tp * pp * cp) or not sp_splits(req.seq, cp, tp):  # SP is on with TP
                            continue
                        dp = n // (tp * pp * cp)
                        if req.global_batch % dp:
                            continue
                        eps = _expert_options(req, tp, dp, cp)
                        # nothing to shard over: one variant is enough
                        variants = [(sh, None) for sh in (shardings if dp * cp > 1 else shardings[:1])]
                        variants += [("hsdp", g) for g in _shard_groups(req, tp, pp, dp * cp, per_node)]
                        for ep, etp in eps:
                            for sharding, group in variants:
                                if group is not None and not hsdp_holds_experts(group, ep):
                                    continue
                                yield Layout(num_gpus=n, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, sp=tp > 1,
                                             sharding=sharding, shard_group=group,
                                             schedule="interleaved" if vpp > 1 else "1f1b",
                                             pp_first_layers=first, pp_last_layers=last)


def _offloads(req: PlanRequest, layout: Layout) -> tuple[tuple[str, ...], ...]:
    """The offload variants of a layout, cheapest first: none; the optimizer states (with an optimizer to
    offload); also the parameters, where the sharding shards them."""
    if req.no_offload or req.optimizer not in OFFLOADABLE_OPTIMIZERS:
        return OFFLOADS[:1]
    if req.framework in FSDP2_OFFLOAD_ALL and layout.sharding != "ddp":
        # CPUOffloadPolicy moves parameters, gradients and states together (where parameters are sharded)
        return (OFFLOADS[0], OFFLOADS[2]) if layout.sharding in PARAM_OFFLOAD_SHARDINGS else OFFLOADS[:1]
    return OFFLOADS if layout.sharding in PARAM_OFFLOAD_SHARDINGS else OFFLOADS[:2]


def _dominated(fits: list[tuple[tuple[str, ...], int]], offload: tuple[str, ...], rc: int) -> bool:
    """Whether a variant that fits at this micro-batch is never slower than (offload, recompute index rc): one
    without offload when this one offloads, or one with a subset of its offload and no more recomputation."""
    return any((off_fit == () and offload != ()) or (set(off_fit) <= set(offload) and rc_fit <= rc)
               for off_fit, rc_fit in fits)


@dataclass(slots=True)
class _Search:
    """The fixed inputs of one search and its running counts."""

    req: PlanRequest
    profile: DeviceProfile
    topo: Topology
    budget: float
    peak: float | None
    jobs: dict[tuple[tuple[str, ...], str], TrainJob]
    """The job of each (offload, recompute) variant (built once)."""
    model_flops: dict[str, float]
    """Model FLOPs per step by recompute mode (the MFU numerator)."""
    evaluated: int = 0
    timed: int = 0

    def layout(self, layout: Layout, results: list[Plan]) -> None:
        """Every (offload, recompute, micro-batch) of one layout, pruned (see the module docstring); the ones that
        fit go to `results`. The memory model of each offload variant is built once (`layout_memory`) and asked
        for the peak of each micro-batch and recompute mode."""
        req = self.req
        per_rank = req.global_batch // layout.dp
        mbs = divisors(per_rank)
        prune = req.objective in ("time", "cost")
        hybrid = req.model.spec.hybrid
        fits_at: dict[int, list[tuple[tuple[str, ...], int]]] = {}  # micro-batch -> fitting (offload, recompute)
        for offload in _offloads(req, layout):
            if prune and offload and all(mb in fits_at and _dominated(fits_at[mb], offload, 0) for mb in mbs):
                continue  # nothing left to evaluate: spare building its memory model
            mem_model = layout_memory(req.model.spec, layout, self.jobs[offload, "none"])
            for i, rc in enumerate(RECOMPUTE):
                if megatron_overlap_problem(self.jobs[offload, rc], layout) is not None:
                    continue  # a layout and recompute Megatron-Core refuses with this job's EP overlap or graphs
                if hybrid and recompute_plan(self.jobs[offload, rc].recompute).kind == "op":
                    continue  # torchtitan's per-op policy has nothing for a hybrid's recurrent layers
                for mb in mbs:
                    if prune and mb in fits_at and _dominated(fits_at[mb], offload, i):
                        continue
                    m = per_rank // mb
                    total, stage, allocator = mem_model.peak(mb, m, rc)
                    self.evaluated += 1
                    if required_bytes(total, stage, allocator) > self.budget:
                        break
                    fits_at.setdefault(mb, []).append((offload, i))
                    results.append(self._timed(layout, mb, m, rc, offload, total, stage.states))

    def _timed(self, layout: Layout, mb: int, m: int, rc: str, offload: tuple[str, ...], memory_bytes: float,
               st: ModelStates) -> Plan:
        """The step time of a candidate that fits: `step_time` on the job `gpuwise train` builds for the plan's
        options (plan/train.py), with the states of the memory model's peak rank, as there."""
        step = step_time(self.req.model.spec, layout, self.jobs[offload, rc], profile=self.profile, topo=self.topo,
                         micro_batch=mb, num_microbatches=m, states=st)
        self.timed += 1
        mfu = utilization(self.model_flops[rc], step.step_time_s, layout.num_gpus, self.peak)
        return Plan(layout, mb, rc, step, mfu, memory_bytes, offload)


def plan(req: PlanRequest) -> PlanResult:
    t0 = time.perf_counter()
    spec = req.model.spec
    gpu = req.gpu
    profile, topo = cluster(gpu, num_gpus=req.num_gpus, gpus_per_node=req.gpus_per_node,
                            inter_node_gbps=req.inter_node_gbps, profile=req.profile)
    peak = gpu.peak_flops.get(gemm_dtype(gpu.peak_flops, req.precision))
    jobs = {(off, rc): req.job(rc, off) for off in OFFLOADS if not off or req.optimizer in OFFLOADABLE_OPTIMIZERS
            for rc in RECOMPUTE}
    flops = {rc: job_flops(spec, jobs[(), rc], global_batch=req.global_batch).model for rc in RECOMPUTE}
    search = _Search(req, profile, topo, gpu.memory_bytes - req.reserve_gib * GiB, peak, jobs, flops)
    results: list[Plan] = []
    for layout in _layouts(req, topo.gpus_per_node):
        search.layout(layout, results)
    key = (lambda p: p.memory_bytes) if req.objective == "memory" else (lambda p: p.step.step_time_s)
    results.sort(key=key)
    best = tuple(results[: req.top])
    return PlanResult(request=req, plans=best, evaluated=search.evaluated, timed=search.timed,
                      feasible=len(results), search_time_s=time.perf_counter() - t0,
                      why=_why(best, req, search.evaluated),
                      mfu_denominator=peak)


def describe(p: Plan) -> str:
    lay = p.layout
    parts = [f"TP {lay.tp}", f"PP {lay.pp}" + (f"x{lay.vpp}" if lay.vpp > 1 else ""), f"CP {lay.cp}"]
    if lay.ep > 1:
        parts.append(f"EP {lay.ep}" + (f" (expert TP {lay.expert_tp})" if lay.expert_tp != lay.tp else ""))
    sharding = lay.sharding + (f", shard group {lay.shard_group}" if lay.shard_group else "")
    parts += [f"DP {lay.dp} ({sharding})", f"micro-batch {p.micro_batch}", f"recompute {p.recompute}"]
    if p.offload:
        parts.append("offload " + " + ".join(p.offload))
    return ", ".join(parts)


def _why(plans: tuple[Plan, ...], req: PlanRequest, evaluated: int) -> str:
    if not plans and not evaluated:  # not memory: no layout of this trainer can split the batch over the GPUs
        only_dp = " (DeepSpeed's ZeRO engine is data parallel only)" if req.framework == "deepspeed" else ""
        return (f"no {req.framework} layout on {req.num_gpus} GPUs splits the global batch of {req.global_batch} "
                f"sequences over its data-parallel ranks{only_dp}: each rank needs at least one sequence; use a "
                "larger batch, fewer GPUs or fixed model-parallel degrees")
    if not plans:
        return (f"no layout fits in {req.gpu.memory_bytes / GiB:.0f} GiB per GPU"
                + (f" with {req.reserve_gib:g} GiB reserved" if req.reserve_gib else "")
                + "; see `gpuwise doctor` for remedies")
    if len(plans) == 1:
        return "the only layout that fits"
    a, b = plans[0], plans[1]
    if req.objective == "memory":
        return (f"it peaks at {a.memory_bytes / GiB:.1f} GiB per GPU against {b.memory_bytes / GiB:.1f} GiB for the "
                f"runner-up ({describe(b)})")
    diffs = {k: b.step.breakdown.get(k, 0.0) - v for k, v in a.step.breakdown.items()}
    cause = max(diffs, key=diffs.get)
    return (f"its step is {b.step_time_s - a.step_time_s:.3g} s shorter than the runner-up's ({describe(b)}), "
            f"mostly in {cause.replace('_', ' ')} ({a.step.breakdown[cause]:.3g} s vs "
            f"{b.step.breakdown.get(cause, 0.0):.3g} s)")
