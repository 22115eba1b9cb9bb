"""The Python API: one function per question, taking the same names the CLI takes.

    >>> import gpuwise
    >>> r = gpuwise.fit("llama-3.1-8b", gpu="rtx-4090", engine="llamacpp", weights="Q4_K_M")
    >>> r.fits, r.estimate.memory.total / GiB
"""

from __future__ import annotations

from .catalog.gpus import GPU, get_gpu
from .catalog.models import LoadedModel, load_model
from .plan.fit import FitRequest, FitResult
from .plan.fit import fit as _fit
from .plan.train import TrainRequest, TrainResult
from .plan.train import train as _train


def fit(model: str | LoadedModel, *, gpu: str | GPU, num_gpus: int = 1, weights: str | None = None,
        kv_dtype: str | None = None, context: int | None = None, batch: int = 1,
        engine: str = "vllm") -> FitResult:
    """Inference memory per GPU for MODEL on GPU, and the limits around it (see plan/fit.py)."""
    m = model if isinstance(model, LoadedModel) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    return _fit(FitRequest(model=m, gpu=g, num_gpus=num_gpus, weights=weights, kv_dtype=kv_dtype,
                           context=context, batch=batch, engine=engine))


def train(model: str | LoadedModel, *, gpu: str | GPU, **options) -> TrainResult:
    """Training memory per GPU and FLOPs per step (options: the fields of plan.train.TrainRequest, named
    like the CLI flags: num_gpus, seq, global_batch, micro_batch, tp, pp, zero, fsdp, recompute ...)."""
    m = model if isinstance(model, LoadedModel) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    return _train(TrainRequest(model=m, gpu=g, **options))


def infer(model: str | LoadedModel, *, gpu: str | GPU, **options):
    """Inference latency and throughput (options: the fields of plan.infer.InferRequest: num_gpus, weights,
    batch, prompt_tokens, output_tokens, samples, engine, profile, usd_per_gpu_hour)."""
    from .plan.infer import InferRequest
    from .plan.infer import infer as _infer

    m = model if isinstance(model, LoadedModel) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    return _infer(InferRequest(model=m, gpu=g, **options))


def roofline(model: str | LoadedModel, *, gpu: str | GPU, phase: str = "decode", batch: int = 1, seq: int = 2048,
             dtype: str | None = None, profile: str | None = None, plot: str | None = None):
    """The model's operations on the GPU's roofline (see plan/roofline.py)."""
    from .plan.roofline import RooflineRequest
    from .plan.roofline import roofline as _roofline

    m = model if isinstance(model, LoadedModel) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    return _roofline(RooflineRequest(model=m, gpu=g, phase=phase, batch=batch, seq=seq, dtype=dtype, profile=profile,
                                     plot=plot))


def plan(model: str | LoadedModel, *, gpu: str | GPU, **options):
    """Search the parallel layouts of a training job (options: the fields of plan.planner.PlanRequest: num_gpus,
    seq, global_batch, top, framework, objective, tp, pp, cp, ep, max_tp, no_pp, reserve_gib ...)."""
    from .plan.planner import PlanRequest
    from .plan.planner import plan as _plan

    m = model if isinstance(model, LoadedModel) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    return _plan(PlanRequest(model=m, gpu=g, **options))


def doctor(model: str | LoadedModel, *, gpu: str | GPU, oom_at_gib: float | None = None, task: str = "train",
           **options):
    """Remedies for a job that does not fit: task 'train' takes `train`'s options (plan/doctor.py), task 'infer'
    takes `fit`'s (plan/doctor_infer.py)."""
    m = model if isinstance(model, LoadedModel) else load_model(model)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    if task == "infer":
        from .plan.doctor_infer import doctor_infer

        return doctor_infer(FitRequest(model=m, gpu=g, **options), oom_at_gib=oom_at_gib)
    from .plan.doctor import doctor as _doctor

    return _doctor(TrainRequest(model=m, gpu=g, **options), oom_at_gib=oom_at_gib)


def pick(model: str | LoadedModel, **options):
    """Rank GPU kinds and counts for a workload (options: the fields of plan.pick.PickRequest: task, gpus,
    max_gpus, budget_usd_per_hour, objective, headroom, prices; infer or train options)."""
    from .plan.pick import PickRequest
    from .plan.pick import pick as _pick

    m = model if isinstance(model, LoadedModel) else load_model(model)
    gpus = options.pop("gpus", None)
    if gpus is not None:
        from .plan.pick import resolve_gpu

        gpus = tuple(g if isinstance(g, GPU) else resolve_gpu(g) for g in gpus)
    return _pick(PickRequest(model=m, gpus=gpus, **options))
