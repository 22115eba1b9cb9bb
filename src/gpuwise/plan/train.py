"""`gpuwise train`: memory per GPU and FLOPs per step of a training or fine-tuning job, and whether it fits.

One request (model, GPU, layout, batch, precision, optimizer ...) gives one `TrainResult`: the per-GPU memory
breakdown on the most loaded rank, model and hardware FLOPs per step, the verdict, and the largest micro-batch
that fits. The performance model (step time, MFU) builds on the same request and result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog.devices import DeviceProfile, default_profile, load_profile, network_overrides, rental_price
from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..errors import InvalidArgument, require_positive_int, require_positive_number
from ..estimate.activations import RECOMPUTE
from ..estimate.comm import Topology, topology
from ..estimate.step_time import StepTime, gemm_dtype, step_time
from ..estimate.flops import CONVENTIONS, StepFlops, step_flops
from ..estimate.model_states import FINETUNE, FRAMEWORKS, OPTIMIZERS, PRECISIONS, lora_targets
from ..estimate.parallel import PARAM_OFFLOAD_SHARDINGS, SCHEDULES, Layout, divisors, validate_layout
from ..model.params import ParamCounts, param_counts
from ..estimate.train_memory import FRAGMENTATION_RISK, TrainMemory, train_memory
from ..memo import remember

FSDP_MODES = {"full": "fsdp-full", "grad-op": "fsdp-grad-op", "no-reshard": "fsdp-no-reshard", "hybrid": "hsdp"}
ZERO_STAGES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}
OFFLOAD = ("optimizer", "params", "activations")
# Upper bounds far beyond any real job, so that absurd input gets an error rather than a long search.
LIMITS = {"num_gpus": 1 << 20, "seq": 1 << 24, "global_batch": 1 << 24, "micro_batch": 1 << 24, "tp": 1 << 16,
          "pp": 1 << 16, "vpp": 1 << 10, "cp": 1 << 16, "ep": 1 << 16, "lora_rank": 1 << 16}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainRequest:
    """A training job: the CLI's `gpuwise train` options, one field each."""

    model: LoadedModel
    gpu: GPU
    num_gpus: int = 1
    seq: int = 4096
    """Tokens per sequence."""
    global_batch: int = 1
    """Sequences per optimizer step over all data-parallel ranks."""
    micro_batch: int = 1
    """Sequences per forward/backward on one rank."""
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int | None = None
    fsdp: str | None = None
    """full | grad-op | no-reshard | hybrid (HSDP, with shard_group)."""
    shard_group: int | None = None
    schedule: str | None = None
    """gpipe | 1f1b | interleaved; default 1f1b, interleaved when vpp > 1."""
    pp_first_layers: int | None = None
    pp_last_layers: int | None = None
    recompute: str = "none"
    optimizer: str = "adamw"
    precision: str = "bf16"
    framework: str | None = None
    """None: derived from the other options (see `choose_framework`)."""
    finetune: str = "full"
    lora_rank: int = 16
    lora_targets: str = "all-linear"
    offload: tuple[str, ...] = ()
    flops_convention: str = "causal"
    attention: str = "flash"
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives overlapped with the split GEMMs (Megatron-LM --tp-comm-overlap)."""
    """flash (fused kernel, no score matrix: FlashAttention / cuDNN / SDPA) or unfused (scores, softmax and dropout
    in memory: Megatron-LM before --use-flash-attn, eager attention)."""
    gpus_per_node: int | None = None
    """None: 8 (an HGX/DGX server), or the job's GPU count when smaller."""
    inter_node_gbps: float | None = None
    """Per-GPU NIC line rate across nodes; None: the default for the GPU's generation (data/devices.toml)."""
    profile: str | None = None
    """A measured device profile (JSON) overriding the default efficiencies."""
    train_tokens: float | None = None
    """Token budget of the whole run, for its time, GPU-hours, cost and energy."""
    usd_per_gpu_hour: float | None = None
    """None: the catalog's on-demand rental price for this GPU (unknown if it has none)."""

    def __post_init__(self) -> None:
        for name, maximum in LIMITS.items():
            require_positive_int("--" + name.replace("_", "-"), getattr(self, name), maximum)
        if self.gpus_per_node is not None:
            require_positive_int("--gpus-per-node", self.gpus_per_node, 1 << 10)
        for name, value, hi in (("--inter-node-gbps", self.inter_node_gbps, 1e5),
                                ("--train-tokens", self.train_tokens, 1e16),
                                ("--usd-per-gpu-hour", self.usd_per_gpu_hour, 1e4)):
            if value is not None:
                require_positive_number(name, value, hi)
        for name, value, valid in (("--recompute", self.recompute, RECOMPUTE), ("--optimizer", self.optimizer, OPTIMIZERS),
                                   ("--precision", self.precision, PRECISIONS), ("--finetune", self.finetune, FINETUNE),
                                   ("--flops-convention", self.flops_convention, CONVENTIONS),
                                   ("--attention", self.attention, ATTENTION)):
            if value not in valid:
                raise InvalidArgument(f"{name}: unknown value '{value}'; valid: {', '.join(valid)}")
        if self.framework is not None and self.framework not in FRAMEWORKS:
            raise InvalidArgument(f"--framework: unknown value '{self.framework}'; valid: {', '.join(FRAMEWORKS)}")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise InvalidArgument(f"--schedule: unknown value '{self.schedule}'; valid: {', '.join(SCHEDULES)}")
        if self.zero is not None and self.fsdp is not None:
            raise InvalidArgument("--zero and --fsdp both set: choose one sharding (--zero 3 is FSDP full shard)")
        if self.zero is not None and self.zero not in ZERO_STAGES:
            raise InvalidArgument(f"--zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.fsdp is not None and self.fsdp not in FSDP_MODES:
            raise InvalidArgument(f"--fsdp: unknown mode '{self.fsdp}'; valid: {', '.join(FSDP_MODES)}")
        bad = [o for o in self.offload if o not in OFFLOAD]
        if bad:
            raise InvalidArgument(f"--offload: unknown target '{bad[0]}'; valid: {', '.join(OFFLOAD)}")
        if "params" in self.offload and self.sharding not in PARAM_OFFLOAD_SHARDINGS:
            raise InvalidArgument("--offload params needs sharded parameters (--zero 3 or --fsdp full/hybrid)")
        if "activations" in self.offload and self.recompute == "full":
            raise InvalidArgument("--offload activations and --recompute full both set: choose one")
        if self.finetune == "qlora" and self.precision in ("fp32", "fp8"):
            raise InvalidArgument(f"--finetune qlora computes in bf16/fp16 over an NF4 base; --precision "
                                  f"{self.precision} does not apply")
        if self.finetune != "full":
            lora_targets(self.lora_targets)
        spec = self.model.spec
        if spec.position == "learned" and spec.learned_positions and self.seq > spec.max_position_embeddings:
            raise InvalidArgument(f"--seq {self.seq} is longer than the model's {spec.max_position_embeddings} "
                                  f"learned positions")

    @property
    def sharding(self) -> str:
        if self.fsdp is not None:
            return FSDP_MODES[self.fsdp]
        return ZERO_STAGES[self.zero or 0]

    def layout(self) -> Layout:
        schedule = self.schedule or ("interleaved" if self.vpp > 1 else "1f1b")
        return Layout(num_gpus=self.num_gpus, tp=self.tp, pp=self.pp, vpp=self.vpp, cp=self.cp, ep=self.ep,
                      sp=self.sp, sharding=self.sharding, shard_group=self.shard_group, schedule=schedule,
                      pp_first_layers=self.pp_first_layers, pp_last_layers=self.pp_last_layers)


def choose_framework(req: TrainRequest) -> tuple[str, str]:
    """The implementation profile, and why (when --framework is not given)."""
    if req.framework is not None:
        return req.framework, "as requested"
    if req.finetune != "full":
        return "hf", "LoRA/QLoRA fine-tuning is usually transformers + PEFT"
    if req.fsdp is not None:
        return "fsdp", "--fsdp given: PyTorch FSDP2"
    if req.zero is not None:
        return "deepspeed", "--zero given: DeepSpeed ZeRO"
    if max(req.tp, req.pp, req.cp, req.ep) > 1:
        return "megatron", "model parallelism given: Megatron-LM"
    return "fsdp", "default: PyTorch-native training (FSDP2 / DDP) with flash attention"


@dataclass(slots=True, kw_only=True)  # not frozen: built per configuration (cheaper)
class TrainPerf:
    """Predicted speed, cost and energy of the job (the performance model on top of the memory model)."""

    step: StepTime
    profile: DeviceProfile
    topology: Topology
    peak_dtype: str
    peak_flops_per_gpu: float | None
    """The MFU/HFU denominator: dense peak of the GEMM dtype on one GPU (None: unknown)."""
    mfu: float | None
    hfu: float | None
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    train_tokens: float | None
    train_time_s: float | None
    gpu_hours: float | None
    usd_per_gpu_hour: float | None
    usd_source: str
    cost_usd: float | None
    energy_kwh: float | None
    """At TDP for every GPU over the run: an upper-bound estimate (GPUs rarely sit at TDP)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainResult:
    request: TrainRequest
    framework: str
    framework_reason: str
    layout: Layout
    params: ParamCounts
    memory: TrainMemory
    flops: StepFlops
    num_microbatches: int
    """Micro-batches per rank per step (gradient accumulation x pipeline)."""
    max_micro_batch: int | None
    """Largest micro-batch dividing the per-rank batch that fits; None if even 1 does not."""
    perf: TrainPerf
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.request.gpu.memory_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.request.gpu.memory_bytes - self.memory.total

    @property
    def tight(self) -> bool:
        """Fits, but within the fragmentation GMLake measured on average (FRAGMENTATION_RISK)."""
        return self.fits and self.memory.total * (1 + FRAGMENTATION_RISK) > self.request.gpu.memory_bytes


def _memory(req: TrainRequest, framework: str, layout: Layout, micro_batch: int) -> TrainMemory:
    per_rank = req.global_batch // layout.dp
    return train_memory(req.model.spec, layout, framework=framework, precision=req.precision,
                        optimizer=req.optimizer, seq=req.seq, micro_batch=micro_batch,
                        num_microbatches=per_rank // micro_batch, recompute=req.recompute, finetune=req.finetune,
                        lora_rank=req.lora_rank, lora_targets=req.lora_targets, offload=frozenset(req.offload),
                        flash=req.attention == "flash")


def train(req: TrainRequest) -> TrainResult:
    spec = req.model.spec
    layout = req.layout()
    validate_layout(layout, spec, seq=req.seq, global_batch=req.global_batch, micro_batch=req.micro_batch)
    framework, why = choose_framework(req)
    memory = _memory(req, framework, layout, req.micro_batch)
    per_rank = req.global_batch // layout.dp
    best = None
    # Memory grows with the micro-batch: scan the divisors upward until one does not fit.
    for b in divisors(per_rank):
        if _memory(req, framework, layout, b).total > req.gpu.memory_bytes:
            break
        best = b
    flops = step_flops(spec, seq=req.seq, global_batch=req.global_batch, convention=req.flops_convention,
                       recompute=req.recompute, frozen_base=req.finetune in ("lora", "qlora"))
    perf = _perf(req, framework, layout, memory, flops)
    return TrainResult(request=req, framework=framework, framework_reason=why, layout=layout,
                       params=param_counts(spec), memory=memory, flops=flops,
                       num_microbatches=per_rank // req.micro_batch, max_micro_batch=best, perf=perf,
                       assumptions=_assumptions(req, framework, layout, memory))


def device_profile(gpu: GPU, path: str | None) -> DeviceProfile:
    return load_profile(path, gpu) if path else default_profile(gpu)


ATTENTION = ("flash", "unfused")
_TOPOLOGIES: dict = {}


def _topology(req: TrainRequest) -> Topology:
    """The request's network (cached: the planner asks for the same one for every layout)."""
    key = (id(req.gpu), req.num_gpus, req.gpus_per_node, req.inter_node_gbps, req.profile)
    hit = _TOPOLOGIES.get(key)
    if hit is not None:
        return hit[0]
    return remember(_TOPOLOGIES, key, topology(req.gpu, num_gpus=req.num_gpus, gpus_per_node=req.gpus_per_node,
                                               inter_node_gbps=req.inter_node_gbps,
                                               overrides=network_overrides(req.profile)), req.gpu)


def _perf(req: TrainRequest, framework: str, layout: Layout, memory: TrainMemory, flops: StepFlops) -> TrainPerf:
    profile = device_profile(req.gpu, req.profile)
    topo = _topology(req)
    st = memory.states
    per_rank = req.global_batch // layout.dp
    step = step_time(req.model.spec, layout, profile=profile, topo=topo, framework=framework, precision=req.precision,
                     seq=req.seq, micro_batch=req.micro_batch, num_microbatches=per_rank // req.micro_batch,
                     recompute=req.recompute, params_on_rank=st.params_on_rank,
                     trainable_params=st.trainable_params, working_bytes=st.working_bytes_per_param,
                     grad_bytes=st.grad_bytes_per_param, optimizer_bytes=st.optimizer + st.master_weights,
                     frozen_base=req.finetune != "full", offload=frozenset(req.offload), attention=req.attention,
                     tp_overlap=req.tp_comm_overlap, host_bytes=st.cpu)
    t = step.step_time_s
    dtype = gemm_dtype(req.gpu.peak_flops, req.precision)
    peak = req.gpu.peak_flops.get(dtype)
    n = req.num_gpus
    mfu = flops.model / (t * n * peak) if peak else None
    hfu = flops.hardware / (t * n * peak) if peak else None
    tokens_per_s = flops.tokens / t
    price, price_source = (req.usd_per_gpu_hour, "as given") if req.usd_per_gpu_hour else rental_price(req.gpu)
    run_s = req.train_tokens / tokens_per_s if req.train_tokens else None
    gpu_hours = run_s * n / 3600 if run_s is not None else None
    cost = gpu_hours * price if (gpu_hours is not None and price is not None) else None
    energy = gpu_hours * req.gpu.tdp_w / 1000 if (gpu_hours is not None and req.gpu.tdp_w) else None
    return TrainPerf(step=step, profile=profile, topology=topo, peak_dtype=dtype, peak_flops_per_gpu=peak, mfu=mfu,
                     hfu=hfu, tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / n,
                     train_tokens=req.train_tokens, train_time_s=run_s, gpu_hours=gpu_hours, usd_per_gpu_hour=price,
                     usd_source=price_source, cost_usd=cost, energy_kwh=energy)



def _assumptions(req: TrainRequest, framework: str, layout: Layout, mem: TrainMemory) -> tuple[str, ...]:
    out = [f"framework profile '{framework}'; peak at the {mem.moment.replace('-', ' ')} on pipeline stage "
           f"{mem.stage} of {layout.pp} (rank 0 of that stage's data-parallel group; all its ranks are alike)"]
    if req.attention == "flash":
        out.append("activations with flash attention (no materialized scores); gradients counted in full "
                   "(as from the second micro-batch of accumulation on)")
    else:
        out.append("unfused attention: the softmax output (and dropout mask and output) of every head is saved, "
                   "a x s^2 per sequence; gradients counted in full (as from the second micro-batch on)")
    if framework == "hf" and req.finetune == "full" and req.precision in ("bf16", "fp16", "fp8"):
        out.append("mixed precision as torch.autocast: fp32 weights (master) plus cached 16-bit casts (params)")
    if req.finetune != "full":
        out.append(f"LoRA rank {req.lora_rank} on {req.lora_targets}, adapters in fp32 (PEFT's default), "
                   f"frozen base in {'NF4 with double quantization' if req.finetune == 'qlora' else 'the compute dtype'}")
    if req.recompute == "selective" and framework != "megatron" and req.attention == "flash":
        out.append("selective recompute = attention core only; with flash attention it saves nothing more "
                   "(torchtitan's op-level SAC is not modelled)")
    if layout.sp and layout.tp == 1:
        out.append("--sp without tensor parallelism has no effect")
    peaks = req.gpu.peak_flops
    if req.precision in ("bf16", "bf16-pure") and "bf16" not in peaks:
        out.append(f"{req.gpu.name} has no bf16 tensor cores: bf16 runs emulated (slow); fp16 is the usual choice")
    if req.precision == "fp8" and "fp8" not in peaks:
        out.append(f"{req.gpu.name} has no fp8 tensor cores")
    out.append("runtime = CUDA context 0.5 GiB + cuBLAS workspace + NCCL buffers; allocator allowance 5% "
               "(Megatron-LM's estimate)")
    return tuple(out)
