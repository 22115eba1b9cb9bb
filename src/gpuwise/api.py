"""The Python API: one function per question, taking the same names the CLI takes.

    >>> import gpuwise
    >>> r = gpuwise.fit("llama-3.1-8b", gpu="rtx-4090", engine="llamacpp", weights="Q4_K_M")
    >>> r.fits, r.estimate.memory.total / 2**30

Each function's options are the fields of its request dataclass (named like the CLI's flags, `num_gpus` for
`--num-gpus`), with the request's defaults: FitRequest, TrainRequest, InferRequest, RooflineRequest, PlanRequest,
PickRequest, and DoctorOptions with TrainRequest or FitRequest. Model and GPU may be names or loaded objects.
"""

from __future__ import annotations

from .catalog.gpus import GPU
from .catalog.models import LoadedModel, load_model


def _model(model: str | LoadedModel) -> LoadedModel:
    return model if isinstance(model, LoadedModel) else load_model(model)


def _gpu(gpu: str | GPU, options: dict | None = None) -> GPU:
    """A GPU object, a catalog name, or one of its MIG slices as 'GPU:PROFILE' (as `pick --gpus` takes them); a
    `power_limit` (watts) taken out of `options` runs it under that board power limit (`--power-limit`)."""
    if not isinstance(gpu, GPU):
        from .catalog.mig import resolve_gpu

        gpu = resolve_gpu(gpu)
    power_limit = options.pop("power_limit", None) if options is not None else None
    if power_limit is None:
        return gpu
    from .catalog.power import with_power_limit

    return with_power_limit(gpu, power_limit)


def fit(model: str | LoadedModel, *, gpu: str | GPU, **options):
    """Inference memory per GPU for MODEL on GPU, and the limits around it (options: plan.fit.FitRequest)."""
    from .plan.fit import FitRequest
    from .plan.fit import fit as _fit

    return _fit(FitRequest(model=_model(model), gpu=_gpu(gpu, options), **options))


def train(model: str | LoadedModel, *, gpu: str | GPU, **options):
    """Training memory per GPU, FLOPs, step time and MFU (options: plan.train.TrainRequest: num_gpus, seq,
    global_batch, micro_batch, tp, pp, zero, fsdp, recompute ...)."""
    from .plan.train import TrainRequest
    from .plan.train import train as _train

    return _train(TrainRequest(model=_model(model), gpu=_gpu(gpu, options), **options))


def infer(model: str | LoadedModel, *, gpu: str | GPU, plot: str | None = None, **options):
    """Inference latency and throughput (options: plan.infer.InferRequest: num_gpus, weights, batch, prompt_tokens,
    output_tokens, samples, engine, profile, usd_per_gpu_hour, request_rate, max_concurrency, num_prompts,
    dataset_path, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, slo_ttft_ms, slo_tpot_ms);
    `plot`: also write latency against request rate (the knee where queueing starts) to this .png or .svg file."""
    from .plan.infer import InferRequest
    from .plan.infer import infer as _infer

    req = InferRequest(model=_model(model), gpu=_gpu(gpu, options), **options)
    result = _infer(req)
    if plot:
        from dataclasses import replace

        from .plan.infer import kernel_setup, serving_model
        from .plan.serve import rate_sweep
        from .report.plot import save_rate_sweep

        sweep_req = req if req.under_load else replace(req, request_rate=float("inf"))
        cost, load, _, _ = serving_model(sweep_req, kernel_setup(sweep_req))
        saturation, points = rate_sweep(cost, load)
        result = replace(result, plot=str(save_rate_sweep(result, saturation, points, plot)))
    return result


def roofline(model: str | LoadedModel, *, gpu: str | GPU, plot: str | None = None, **options):
    """The model's operations on the GPU's roofline (options: plan.roofline.RooflineRequest: phase, batch, seq,
    dtype, profile); `plot`: also write a log-log plot to this .png or .svg file (matplotlib)."""
    from .plan.roofline import RooflineRequest
    from .plan.roofline import roofline as _roofline

    result = _roofline(RooflineRequest(model=_model(model), gpu=_gpu(gpu, options), **options))
    if plot:
        from dataclasses import replace

        from .report.plot import save_roofline

        result = replace(result, plot=str(save_roofline(result, plot)))
    return result


def plan(model: str | LoadedModel, *, gpu: str | GPU, **options):
    """Search the parallel layouts of a training job (options: plan.planner.PlanRequest: num_gpus, seq,
    global_batch, top, framework, objective, tp, pp, cp, ep, max_tp, no_pp, reserve_gib ...)."""
    from .plan.planner import PlanRequest
    from .plan.planner import plan as _plan

    return _plan(PlanRequest(model=_model(model), gpu=_gpu(gpu, options), **options))


def doctor(model: str | LoadedModel, *, gpu: str | GPU, **options):
    """Remedies for a job that does not fit (options: plan.doctor.DoctorOptions, task and oom_at_gib, plus the
    job's: TrainRequest's for task 'train' (plan/doctor.py), FitRequest's for task 'infer' (plan/doctor_infer.py))."""
    from dataclasses import fields

    from .plan.doctor import DoctorOptions

    names = {f.name for f in fields(DoctorOptions)}
    how = DoctorOptions(**{k: v for k, v in options.items() if k in names})
    job = {k: v for k, v in options.items() if k not in names}
    if how.task == "infer":
        from .plan.doctor_infer import doctor_infer
        from .plan.fit import FitRequest

        return doctor_infer(FitRequest(model=_model(model), gpu=_gpu(gpu), **job), oom_at_gib=how.oom_at_gib)
    from .plan.doctor import doctor as _doctor
    from .plan.train import TrainRequest

    return _doctor(TrainRequest(model=_model(model), gpu=_gpu(gpu), **job), oom_at_gib=how.oom_at_gib)


def pick(model: str | LoadedModel, **options):
    """Rank GPU kinds and counts for a workload (options: plan.pick_request.PickRequest: task, gpus, max_gpus,
    budget_usd_per_hour, objective, headroom, prices; infer or train options). `gpus` may hold names ('h100-sxm',
    a MIG slice as 'h100-sxm:3g.40gb') or GPU objects."""
    from .plan.pick import pick as _pick
    from .plan.pick_request import PickRequest

    gpus = options.pop("gpus", None)
    if gpus is not None:
        from .catalog.mig import resolve_gpu

        gpus = tuple(g if isinstance(g, GPU) else resolve_gpu(g) for g in gpus)
    return _pick(PickRequest(model=_model(model), gpus=gpus, **options))
