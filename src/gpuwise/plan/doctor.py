"""`gpuwise doctor`: what to change when a training job does not fit (or ran out of memory).

Each remedy is the same request with one thing changed, costed by the same memory and step-time models as
`gpuwise train`: smaller micro-batch with gradient accumulation, activation checkpointing (selective, full),
mixed precision from fp32, fp8, an 8-bit optimizer, a stronger ZeRO/FSDP sharding, CPU offload, LoRA/QLoRA,
a shorter context, more GPUs, a bigger GPU. Then the combination of the knobs that keep the job and the hardware
as they are (micro-batch, recompute, sharding, optimizer, offload) that fits with the shortest step.

An observed OOM (`oom_at_gib`: what the job held plus what it asked for when it failed) that is above the
prediction is carried into every remedy as an offset: the model's savings apply, the unexplained part stays.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Literal, get_args

from ..catalog.gpus import GPU, all_gpus
from ..errors import GpuwiseError, InvalidArgument, require_positive_number
from ..estimate.job import OFFLOADABLE_OPTIMIZERS, STATE_DTYPE_BYTES
from ..estimate.layout import PARAM_OFFLOAD_SHARDINGS, divisors
from ..estimate.parallel import cp_splits
from ..estimate.recompute import recompute_plan
from ..estimate.train_memory import FRAGMENTATION_RISK
from ..units import GiB, MiB
from .train import (MEGATRON_OPTIONS, TrainRequest, TrainResult, bf16_layers_problem, megatron_option_problem,
                    model_problem, train)

RECOMPUTE_LADDER = ("none", "selective", "full")
ZERO_LADDER = (0, 1, 2, 3)
HEADROOM_NOTE = FRAGMENTATION_RISK  # GMLake (ASPLOS 2024): 15% average fragmentation
SAME_TIME = 0.02
"""Step times within 2% of each other count as a tie: far below the speed model's own error (14-19% median on the
held-out runs, docs/validation.md), so the tie goes to the more common remedy rather than to noise."""
COMMONNESS = ("micro_batch", "recompute", "fsdp", "zero", "grad_reduce_in_fp32", "optimizer", "fp8_transpose_cache",
              "offload")
"""Same-job knobs from the most to the least used: gradient accumulation and activation checkpointing are on in the
default recipes of torchtitan, Megatron-LM, PEFT/TRL and torchtune; FSDP/ZeRO sharding next; Megatron's gradients
in bf16 (Megatron-Bridge's and NeMo's performance recipes, MLPerf's NeMo runs); an 8-bit optimizer
(bitsandbytes) is a fine-tuning habit rarely seen in pre-training recipes; dropping Transformer Engine's fp8
transpose cache is a memory flag of AMD's and NVIDIA's own recipes for large models; CPU offload is the last
resort."""
KNOB_OF = {"no_fp8_weight_transpose_cache": "fp8_transpose_cache", "disable_parameter_transpose_cache":
           "fp8_transpose_cache", "fp8_param_gather": "fp8_transpose_cache", "exp_avg_dtype": "optimizer",
           "exp_avg_sq_dtype": "optimizer"}
"""Options that together make one knob of COMMONNESS."""


Task = Literal["train", "infer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DoctorOptions:
    """What `gpuwise doctor` takes besides the job: the job is `gpuwise train`'s options, or with --task infer
    `gpuwise fit`'s."""

    task: Task = "train"
    """train (a training job: train's options) or infer (serving: fit's --weights --kv-dtype --context --batch
    --engine)."""
    oom_at_gib: float | None = None
    """Memory the job held when it ran out (allocated + the failed request, GiB), if observed."""

    def __post_init__(self) -> None:
        if self.task not in get_args(Task):
            raise InvalidArgument(f"--task: unknown value '{self.task}'; valid: {', '.join(get_args(Task))}")
        if self.oom_at_gib is not None:
            require_positive_number("--oom-at-gib", self.oom_at_gib, 1e6)
            if self.oom_at_gib < 0.5:  # below a CUDA context: not what an OOM message reports
                raise InvalidArgument(f"--oom-at-gib {self.oom_at_gib:g}: an out-of-memory error reports the GiB "
                                      "the job held plus what it asked for, at least a CUDA context's 0.5")


@dataclass(frozen=True)
class Remedy:
    name: str
    """Short id: micro-batch, recompute, precision, optimizer, gradients, fp8-cache, sharding, offload, lora, qlora,
    context, more-gpus, bigger-gpu, combination."""
    change: str
    """What changes, in words."""
    options: dict
    """The TrainRequest fields that change (gpu as its id)."""
    memory_bytes: float
    """Predicted peak per GPU, with the observed offset added."""
    step_time_s: float
    slowdown: float
    """Step time relative to the original job, minus 1 (negative: faster)."""
    fits: bool
    changes_job: bool
    """True when the remedy changes what is trained or the hardware (LoRA, context, GPUs)."""
    capacity_bytes: float = 0.0
    """Memory of the GPU the remedy runs on."""
    note: str = ""

    @property
    def tight(self) -> bool:
        """Fits, but within the fragmentation allocators are often measured to add (HEADROOM_NOTE)."""
        return self.fits and self.memory_bytes * (1 + HEADROOM_NOTE) > self.capacity_bytes

    def saved_bytes(self, before: float) -> float:
        return before - self.memory_bytes

    @property
    def changes_hardware(self) -> bool:
        """More GPUs or another GPU: faster or roomier by spending more, the last thing to propose."""
        return bool({"gpu", "num_gpus"} & set(self.options))


def headline(remedies, combination: Remedy | None) -> Remedy | None:
    """The change a "does not fit" answer names: the combination when one fits, else the fastest single change that
    fits on the same hardware, else the fastest that fits on other hardware."""
    if combination is not None:
        return combination
    fitting = [r for r in remedies if r.fits]
    same = [r for r in fitting if not r.changes_hardware]
    return _fastest(same or fitting) if fitting else None


class Diagnosis:
    """What both doctors' results share: the memory needed (prediction + observed offset) against capacity."""

    predicted_bytes: float
    offset_bytes: float
    capacity_bytes: float

    @property
    def needed_bytes(self) -> float:
        return self.predicted_bytes + self.offset_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class DoctorResult(Diagnosis):
    request: TrainRequest
    base: TrainResult
    capacity_bytes: float
    predicted_bytes: float
    observed_bytes: float | None
    offset_bytes: float
    remedies: tuple[Remedy, ...]
    """Ranked: those that fit first (least slowdown first; same job before changed job), then the rest (most
    memory saved first)."""
    combination: Remedy | None
    """The fastest mix of same-job knobs that fits (ties within SAME_TIME go to the more common knobs); None when none
    does."""
    roomy: Remedy | None = None
    """When the combination is tight (within the fragmentation allocators often add), the fastest mix that fits with
    that room to spare, on the same hardware; None otherwise or when none does."""
    verdict: str = ""

    @property
    def fix(self) -> Remedy | None:
        """The one change `gpuwise train` names when the job does not fit (see `headline`)."""
        return None if self.fits else headline(self.remedies, self.combination)


def doctor(req: TrainRequest, *, oom_at_gib: float | None = None) -> DoctorResult:
    base = train(req)
    framework = base.framework
    req = replace(req, framework=framework)  # keep the implementation profile fixed across remedies
    capacity = req.gpu.memory_bytes
    predicted = base.memory.total
    observed = None
    if oom_at_gib is not None:
        require_positive_number("--oom-at-gib", oom_at_gib, 1e6)
        observed = oom_at_gib * GiB
    offset = max(0.0, observed - predicted) if observed is not None else 0.0
    t0 = base.perf.step.step_time_s

    def remedy(name: str, change: str, changes_job: bool = False, note: str = "", **options) -> Remedy | None:
        try:
            changed = _changed(req, **options)
            r = train(changed)
        except GpuwiseError:
            return None  # not a valid job with this change (e.g. a batch that no longer divides)
        mem = r.memory.total + offset
        shown = {k: (v.id if isinstance(v, GPU) else v) for k, v in options.items()}
        # what moving frameworks changes besides (`_changed`): the Megatron options it leaves behind, torchtitan's
        # float8 compiled, the new framework's fp8 kernels
        shown |= {k: getattr(changed, k) for k in (*MEGATRON_OPTIONS, *MEGATRON_SETTINGS, "compile", "fp8_backend")
                  if k not in options and getattr(changed, k) != getattr(req, k)}
        if r.memory.cpu > 0:
            note = "; ".join(w for w in (note, f"{r.memory.cpu / GiB:.1f} GiB of host memory per GPU") if w)
        # fits as `gpuwise train` says it does: what must be allocated (the allocator's allowance is headroom it
        # takes when there is room), plus the observed offset
        return Remedy(name, change, shown, mem, r.perf.step.step_time_s, r.perf.step.step_time_s / t0 - 1,
                      r.memory.required + offset <= r.request.gpu.memory_bytes, changes_job,
                      r.request.gpu.memory_bytes, note)

    found = [x for x in _single_changes(req, base, remedy) if x is not None
             and (x.memory_bytes < predicted + offset - 0.5 * MiB or x.name == "bigger-gpu")]
    ranked = sorted(found, key=lambda x: (not x.fits, x.changes_job, x.changes_hardware,
                                          x.slowdown if x.fits else -x.saved_bytes(predicted + offset)))
    combo, roomy = _combination(req, base, remedy)
    return DoctorResult(request=req, base=base, capacity_bytes=capacity, predicted_bytes=predicted,
                        observed_bytes=observed, offset_bytes=offset, remedies=tuple(ranked), combination=combo,
                        roomy=roomy, verdict=_verdict(req, base.memory.required + offset, capacity, ranked, combo,
                                                      roomy))


def _stronger_recompute(mode: str) -> list[str]:
    """The ladder's modes that keep fewer activations than `mode` (none < selective, op, layer:N, block:K < full)."""
    kind = recompute_plan(mode).kind
    rank = {"none": 0, "full": 2, "uniform": 2}.get(kind, 1)
    return [rc for rc in RECOMPUTE_LADDER if {"none": 0, "selective": 1, "full": 2}[rc] > rank]


def _single_changes(req: TrainRequest, base: TrainResult, remedy):
    lay = base.layout
    per_rank = req.global_batch // lay.dp
    if req.micro_batch > 1:
        smaller = [b for b in divisors(per_rank) if b < req.micro_batch]
        fitting = [b for b in smaller if base.max_micro_batch and b <= base.max_micro_batch]
        b = max(fitting) if fitting else 1
        yield remedy("micro-batch", f"micro-batch {req.micro_batch} -> {b}, gradient accumulation x"
                     f"{per_rank // b} (same global batch)", micro_batch=b)
    current = req.job.recompute
    for rc in _stronger_recompute(current):
        yield remedy("recompute", f"activation checkpointing {current} -> {rc}", recompute=rc)
    if req.precision == "fp32":
        yield remedy("precision", "fp32 -> bf16 mixed precision (fp32 master weights)", precision="bf16")
    if req.precision in ("bf16", "fp16") and req.gpu.peak("fp8") and req.finetune != "qlora":
        yield remedy("precision", f"{req.precision} -> fp8 matmuls (Transformer Engine)", precision="fp8",
                     note="changes numerics: validate loss curves")
    for variant in _optimizer_variants(req):
        label = variant.pop("_label")
        yield remedy("optimizer", label, **variant, **({"note": "changes numerics: validate loss curves"}
                                                       if "exp_avg_dtype" in variant else {}))
    if _bf16_gradients_apply(req):
        yield remedy("gradients", BF16_GRADIENTS_LABEL, grad_reduce_in_fp32=False,
                     note="changes numerics: validate loss curves")
    fp8_cache = _fp8_transpose_drop(req)
    if fp8_cache is not None:
        yield remedy("fp8-cache", fp8_cache.pop("_label"), **fp8_cache)
    for sharding in _stronger_shardings(req, lay):
        yield remedy("sharding", sharding.pop("_label"), **sharding)
    yield from _offloads(req, base, remedy)
    if req.finetune == "full":
        # torchtune has LoRA recipes of its own; other frameworks' adapters run on transformers + PEFT, sharded as
        # before (torchtitan's own FSDP2 full shard becomes --fsdp full there, not plain replication)
        keep = {"framework": "torchtune"} if req.framework == "torchtune" else \
            {"framework": None, **({"fsdp": "full"} if req._sharded_by_default else {})}
        for mode in ("lora", "qlora"):
            if mode == "qlora" and req.precision in ("fp32", "fp8"):
                continue
            yield remedy(mode, f"full fine-tuning -> {mode.upper()} (rank {req.lora_rank}, {req.lora_targets})",
                         changes_job=True, note="trains adapters only: for fine-tuning, not pre-training",
                         finetune=mode, optimizer="adamw" if req.optimizer == "adamw-8bit" else req.optimizer, **keep)
    seq = req.seq
    for _ in range(3):
        seq //= 2
        if seq < 256 or not cp_splits(seq, lay.cp):
            break
        r = remedy("context", f"sequence length {req.seq} -> {seq} (same sequences per step, fewer tokens)", changes_job=True, seq=seq)
        if r is not None:
            yield r
            if r.fits:
                break
    yield from _more_gpus(req, base, remedy)
    yield from _bigger_gpu(req, remedy)


BF16_GRADIENTS_LABEL = ("gradients in bf16 (Megatron-Core grad_reduce_in_fp32=False, as NeMo's performance recipes "
                        "and MLPerf's NeMo runs set)")
"""The doctor's remedy for Megatron's fp32 gradient buffer (`TrainJob.grad_reduce_in_fp32`): 2 bytes per trained
parameter instead of 4."""


def _bf16_gradients_apply(req: TrainRequest) -> bool:
    """Megatron keeps fp32 gradient buffers by default under 16-bit and fp8 training; bf16 ones are an option."""
    return req.framework == "megatron" and req.grad_reduce_in_fp32 and req.finetune == "full" \
        and req.precision in ("bf16", "fp8", "nvfp4")  # (fp16 and bf16-pure keep 16-bit gradients already)


def _fp8_transpose_drop(req: TrainRequest) -> dict | None:
    """Transformer Engine caches each fp8 weight's transpose (1 B per block-matrix element) on GPUs whose fp8 GEMMs
    need K-major operands; ROCm Megatron-LM can rebuild it in each backward (--no-fp8-weight-transpose-cache),
    Megatron-LM with fp8 parameters too (--fp8-param-gather --disable-parameter-transpose-cache)."""
    job = req.job
    if not (job.te_fp8 and job.framework == "megatron" and job.fp8_transpose_cache):
        return None
    if req.gpu.vendor == "amd":
        return dict(no_fp8_weight_transpose_cache=True, _label="fp8 weight transposes rebuilt in each backward "
                    "(ROCm Megatron-LM --no-fp8-weight-transpose-cache)")
    return dict(fp8_param_gather=True, disable_parameter_transpose_cache=True, _label="fp8 parameters, transposes "
                "rebuilt in each backward (--fp8-param-gather --disable-parameter-transpose-cache)")


def _optimizer_variants(req: TrainRequest) -> list[dict]:
    """Smaller optimizer states for the same job: bitsandbytes' 8-bit AdamW, or, under Megatron (which has no 8-bit
    AdamW), its precision-aware optimizer with bf16 moments (Megatron-LM's MoE recipes set it)."""
    if req.optimizer != "adamw" or req.finetune != "full":
        return []
    if req.framework != "megatron":
        return [dict(optimizer="adamw-8bit", optimizer_impl=None, _label="AdamW -> 8-bit AdamW (bitsandbytes)")]
    narrower = {k: "bf16" for k in ("exp_avg_dtype", "exp_avg_sq_dtype")
                if STATE_DTYPE_BYTES[getattr(req, k) or "fp32"] > STATE_DTYPE_BYTES["bf16"]}
    if req.precision == "fp32" or not narrower:
        return []
    # the precision-aware optimizer runs on Megatron's distributed optimizer (--zero 1)
    dist_opt = {"zero": 1} if req.sharding == "ddp" else {}
    return [dict(**narrower, **dist_opt, _label="AdamW's moments in bf16 (Megatron's precision-aware optimizer: "
                 "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as Megatron-LM's DeepSeek-V3 and Qwen3-235B "
                 "recipes set" + (", on its distributed optimizer" if dist_opt else "") + ")")]


MEGATRON_SETTINGS = {"exp_avg_dtype": None, "exp_avg_sq_dtype": None, "cuda_graph_scope": None,
                     "moe_a2a_overlap": False, "delay_wgrad_compute": False, "moe_token_dispatcher": "alltoall",
                     "grad_reduce_in_fp32": True}
"""Megatron-Core's valued options (precision-aware AdamW, CUDA graphs, expert dispatch and overlap, bf16 gradient
buffers) and their unset values: a remedy keeps them while the job stays Megatron's."""


BF16_LAYER_OPTIONS = ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
"""Layers kept in bf16 under fp8 or NVFP4: a remedy keeps them where its job still runs a quantized recipe that takes
them (Megatron-Core's fp8 or NVFP4, torchtitan's NVFP4)."""


def _changed(req: TrainRequest, **options) -> TrainRequest:
    """`req` with a remedy's changes, leaving behind the Megatron options the changed job cannot take (a remedy that
    moves to another framework, leaves it to be chosen, or changes the precision)."""
    moved = "framework" in options and options["framework"] != req.framework
    # the new framework's own fp8 kernels (Transformer Engine's or torchao's): asked for one, it may refuse the other
    fp8 = {"fp8_backend": None} if req.fp8_backend is not None and "fp8_backend" not in options and (
        moved or options.get("precision", req.precision) != "fp8") else {}
    if req.float8_recipe is not None and "float8_recipe" not in options and (
            moved or options.get("precision", req.precision) != "fp8"):
        fp8["float8_recipe"] = None  # torchao's recipe, which the new framework or precision may not run
    bf16_layers = {k: 0 for k in BF16_LAYER_OPTIONS if k not in options}  # restored below where the new job takes them
    changed = replace(req, **{k: False for k in MEGATRON_OPTIONS}, **MEGATRON_SETTINGS, **fp8, **bf16_layers,
                      **{k: v for k, v in options.items() if k not in MEGATRON_OPTIONS and k not in MEGATRON_SETTINGS})
    wanted = {k: getattr(req, k) for k in MEGATRON_OPTIONS} | {k: v for k, v in options.items() if k in MEGATRON_OPTIONS}
    keep: dict = {k: True for k, on in wanted.items() if on and not megatron_option_problem(
        k, changed.framework, changed.precision, changed.fp8_param_gather, changed.gpu.vendor)}
    if changed.framework == "megatron":  # the moment dtypes are AdamW's
        keep |= {k: v for k, unset in MEGATRON_SETTINGS.items() if (v := options.get(k, getattr(req, k))) != unset
                 and (changed.optimizer == "adamw" or not k.startswith("exp_avg"))}
    start, end = (getattr(req, k) for k in BF16_LAYER_OPTIONS)
    if bf16_layers and (start or end) and bf16_layers_problem(
            start, end, precision=changed.precision, framework=changed.framework,
            num_layers=changed.model.spec.num_layers) is None:  # the changed job still keeps those layers in bf16
        keep |= dict(zip(BF16_LAYER_OPTIONS, (start, end)))
    if moved and changed.precision == "fp8" and changed.framework == "torchtitan" and "compile" not in options:
        keep["compile"] = True  # torchtitan's float8 runs compiled (eager torchao casts cost more than fp8 saves)
    return replace(changed, **keep) if keep else changed


def _stronger_shardings(req: TrainRequest, lay) -> list[dict]:
    if lay.dp * lay.cp == 1 or lay.sharding == "fsdp-full":
        return []
    if req.fsdp is not None:
        return [] if req.fsdp == "full" else [dict(fsdp="full", _label=f"FSDP {req.fsdp} -> full shard")]
    if base_zero(req) is not None and req.framework in ("deepspeed", "megatron"):
        stages = [z for z in ZERO_LADDER if z > base_zero(req)]
        if req.framework == "megatron":
            stages = [z for z in stages if z == 1] or []  # Megatron: the distributed optimizer; beyond it, FSDP
        return [dict(zero=z, _label=f"ZeRO {base_zero(req)} -> {z}") for z in stages]
    return [dict(fsdp="full", zero=None, _label="DDP -> FSDP full shard (ZeRO-3)")]  # --zero 0 asked for DDP


def base_zero(req: TrainRequest) -> int | None:
    if req.fsdp is not None:
        return None
    return req.zero or 0


def _offloads(req: TrainRequest, base: TrainResult, remedy):
    if req.optimizer not in OFFLOADABLE_OPTIMIZERS:
        return
    if "optimizer" not in req.offload:
        yield remedy("offload", "optimizer states -> CPU memory (ZeRO-Offload)", offload=req.offload + ("optimizer",))
    if "params" not in req.offload and base.layout.sharding in PARAM_OFFLOAD_SHARDINGS:
        yield remedy("offload", "parameters and optimizer -> CPU memory (ZeRO-Infinity style)",
                     offload=tuple(dict.fromkeys(req.offload + ("optimizer", "params"))))


def _more_gpu_options(req: TrainRequest, base: TrainResult) -> list[tuple[int, dict]]:
    """(factor, request changes) for 2, 4 and 8 times the GPUs as data parallelism with sharded states."""
    lay = base.layout
    sharded = {} if lay.sharding in PARAM_OFFLOAD_SHARDINGS else (
        dict(zero=3) if req.framework == "deepspeed" else dict(fsdp="full", zero=None, framework=(
            req.framework if req.framework != "megatron" else
            "torchtitan" if model_problem("torchtitan", req.model.spec) is None else "fsdp")))
    out = []
    for k in (2, 4, 8):
        if req.global_batch % (lay.dp * k):
            break
        per_rank = req.global_batch // (lay.dp * k)
        mb = max(b for b in divisors(per_rank) if b <= req.micro_batch)
        out.append((k, dict(num_gpus=req.num_gpus * k, micro_batch=mb, **sharded)))
    return out


def _more_gpus(req: TrainRequest, base: TrainResult, remedy):
    for k, changes in _more_gpu_options(req, base):
        r = remedy("more-gpus", f"{req.num_gpus} -> {changes['num_gpus']} GPUs (data parallel x{k}, states sharded "
                   "over them), same global batch", changes_job=True,
                   note="cost per step grows with the GPU count", **changes)
        if r is not None:
            yield r
            if r.fits:
                return


def _bigger_gpus(req: TrainRequest) -> list[GPU]:
    """Same-vendor catalog GPUs with more memory (5% or more) and bf16 tensor cores, smallest first."""
    return sorted((g for g in all_gpus() if g.vendor == req.gpu.vendor and g.memory_bytes > 1.05 * req.gpu.memory_bytes
                   and g.peak("bf16")), key=lambda g: (g.memory_bytes, -(g.peak("bf16") or 0)))


def _bigger_gpu(req: TrainRequest, remedy):
    """The smallest bigger GPU on which the job fits as it is (or the biggest, if none does)."""
    last = None
    for g in _bigger_gpus(req):
        last = remedy("bigger-gpu", f"{req.gpu.name} -> {g.name} ({g.memory_bytes / GiB:.0f} GiB)",
                      changes_job=True, gpu=g)
        if last is not None and last.fits:
            break
    if last is not None:
        yield last


def _combination(req: TrainRequest, base: TrainResult, remedy) -> tuple[Remedy | None, Remedy | None]:
    """Search the same-job knobs together (micro-batch, recompute, sharding, optimizer, offload); the fitting mix
    with the shortest predicted step (ties to the more common knobs), and when that one is tight the fastest with
    room. On the same GPUs first; if nothing fits there, with 2, 4, 8 times the GPUs, then on the bigger GPUs, and
    the first hardware that admits a fitting mix is reported."""
    found = _knob_search(req, base, remedy, {}, False, req)
    if found:
        return _best(found)
    for _, changes in _more_gpu_options(req, base):
        try:
            wider = train(_changed(req, **changes))
        except GpuwiseError:
            continue
        found = _knob_search(_changed(req, **changes), wider, remedy, changes, True, req)
        if found:
            return _best(found)
    for g in _bigger_gpus(req):
        found = _knob_search(replace(req, gpu=g), base, remedy, {"gpu": g}, True, req)
        if found:
            return _best(found)
    return None, None


def _rarity(options: dict) -> int:
    """How uncommon a mix of knobs is: the sum of each changed knob's place in COMMONNESS (1 = most common)."""
    knobs = {KNOB_OF.get(k, k) for k in options}
    return sum(COMMONNESS.index(k) + 1 for k in knobs if k in COMMONNESS)


def _fastest(found: list[Remedy]) -> Remedy:
    """The fastest, a tie (within SAME_TIME) going to the more common knobs, then to the smaller footprint; where
    times are unknown (untimed models), the first in the order given."""
    if any(r.step_time_s is None for r in found):
        return found[0]
    t = min(r.step_time_s for r in found) * (1 + SAME_TIME)
    return min((r for r in found if r.step_time_s <= t), key=lambda r: (_rarity(r.options), r.step_time_s,
                                                                         r.memory_bytes))


def _best(found: list[Remedy]) -> tuple[Remedy, Remedy | None]:
    best = _fastest(found)
    roomy = [r for r in found if not r.tight]
    return best, (_fastest(roomy) if best.tight and roomy else None)


def _knob_search(req: TrainRequest, base: TrainResult, remedy, hardware: dict, changes_job: bool,
                 original: TrainRequest) -> list[Remedy]:
    """Every mix of the same-job knobs that fits on this hardware."""
    lay = base.layout
    per_rank = req.global_batch // lay.dp
    mbs = [b for b in divisors(per_rank) if b <= req.micro_batch]
    rcs = [req.job.recompute, *_stronger_recompute(req.job.recompute)]
    shardings = [dict()] + [{k: v for k, v in s.items() if k != "_label"} for s in _stronger_shardings(req, lay)]
    optimizers = [dict()] + [{k: v for k, v in o.items() if k != "_label"} for o in _optimizer_variants(req)]
    offloads = [req.offload]
    if "optimizer" not in req.offload and req.optimizer in OFFLOADABLE_OPTIMIZERS:
        offloads.append(req.offload + ("optimizer",))
    drop = _fp8_transpose_drop(req)
    fp8_caches = [dict()] + ([{k: v for k, v in drop.items() if k != "_label"}] if drop else [])
    grads = [dict()] + ([{"grad_reduce_in_fp32": False}] if _bf16_gradients_apply(req) else [])
    found = []
    for mb, rc, sh, opt, off, fc, gr in itertools.product(reversed(mbs), rcs, shardings, optimizers, offloads,
                                                          fp8_caches, grads):
        changes = {k: v for k, v in dict(micro_batch=mb, recompute=rc, offload=off).items()
                   if (req.job.recompute if k == "recompute" else getattr(req, k)) != v}
        changes.update(opt)  # bitsandbytes' 8-bit AdamW has no torch.optim impl: the variant clears it
        if changes.get("optimizer_impl", "") is None and req.optimizer_impl is None:
            del changes["optimizer_impl"]
        changes.update(sh)
        changes.update(fc)
        changes.update(gr)
        if not changes and not hardware:
            continue
        r = remedy("combination", _describe(original, {**hardware, **changes}), changes_job, **{**hardware, **changes})
        if r is not None and r.fits:
            found.append(r)
    return found


def _describe(req: TrainRequest, changes: dict) -> str:
    """The changes from the original request, in words (unchanged values left out)."""
    words = []
    if "gpu" in changes:
        words.append(f"{changes['gpu'].name} instead of {req.gpu.name}")
    if "num_gpus" in changes:
        words.append(f"{req.num_gpus} -> {changes['num_gpus']} GPUs")
    def current(k: str):
        return req.job.recompute if k == "recompute" else getattr(req, k)

    for k, v in changes.items():
        if k in ("gpu", "num_gpus") or current(k) == v:
            continue
        if k == "optimizer_impl" and v is None:  # follows the optimizer change (only AdamW and SGD have one)
            continue
        if k == "exp_avg_sq_dtype" and changes.get("exp_avg_dtype") == v != current("exp_avg_dtype"):
            continue  # said with the first moment
        if k == "exp_avg_dtype":
            both = changes.get("exp_avg_sq_dtype") == v != current("exp_avg_sq_dtype")
            words.append(f"AdamW moments in {v}" if both else f"exp-avg-dtype {v}")
        elif k == "offload":
            words.append("offload " + (", ".join(v) or "none"))
        elif k == "grad_reduce_in_fp32":
            words.append("gradients in " + ("fp32" if v else "bf16"))
        elif k in ("zero", "fsdp", "framework"):
            if v is not None:
                words.append(f"{k} {v}")
        elif v is True:  # a flag turned on
            words.append("--" + k.replace("_", "-"))
        else:
            words.append(f"{k.replace('_', '-')} {current(k)} -> {v}")
    return "; ".join(words)


def _verdict(req: TrainRequest, needed: float, capacity: float, ranked: list[Remedy], combo: Remedy | None,
             roomy: Remedy | None = None) -> str:
    gib = GiB
    if needed <= capacity:
        left = capacity - needed
        tight = " (tight: within the allocator's usual fragmentation)" if needed * (1 + HEADROOM_NOTE) > capacity else ""
        return f"fits: {needed / gib:.1f} of {capacity / gib:.1f} GiB, {left / gib:.1f} GiB free{tight}"
    short = needed - capacity
    head = f"does not fit: needs {needed / gib:.1f} GiB on {req.gpu.name} ({capacity / gib:.1f} GiB), {short / gib:.1f} GiB short"
    def said(r: Remedy) -> str:
        tight = ", tight" if r.tight else ""
        return f"{r.change} ({r.memory_bytes / gib:.1f} GiB{tight}, step {r.slowdown:+.0%})"

    if combo is not None:
        where = "with other hardware" if combo.changes_job else "on the same GPUs"
        out = f"{head}; least slowdown that fits {where}: {said(combo)}"
        if roomy is not None:
            out += f"; with {HEADROOM_NOTE:.0%} to spare: {said(roomy)}"
        # never headline a remedy slower than another that fits on the same hardware: name the faster one that
        # changes what is trained (LoRA, a shorter context); more or bigger GPUs are faster by buying time
        faster = next((r for r in sorted(ranked, key=lambda r: r.step_time_s) if r.fits and r.changes_job
                       and not r.changes_hardware and r.step_time_s < combo.step_time_s * (1 - SAME_TIME)), None)
        if faster is not None:
            out += f"; faster if the job may change: {said(faster)}"
        return out
    other = headline(ranked, None)
    if other is not None:
        where = "with other hardware" if other.changes_hardware else "on these GPUs"
        return f"{head}; no same-job setting fits; the fastest change that does {where}: {said(other)}"
    return f"{head}; no single remedy fits: more or bigger GPUs with the settings above combined"
