"""The one change `gpuwise fit` names when a model does not fit (issue 21, item 13), found by memory alone so that the
answer stays as fast as `fit` itself (`gpuwise doctor --task infer` ranks every remedy by time per token).

The order keeps as much of the setup as it can, cheapest first:
1. the same GPUs with a smaller weight format: the most faithful of the engine's formats (its ladder: the
   checkpoint's own, FP8, 4-bit; llama.cpp's GGUF types) that is smaller than the one asked for and fits;
2. more GPUs of the same kind: the fewest that fit, in the format asked for or, when a smaller format needs fewer,
   in the most faithful of those (fewer GPUs first, then the more faithful format);
3. the smallest same-vendor GPU with more memory (the doctor's list) on which the model fits as asked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import GpuwiseError
from ..estimate.inference_memory import inference_memory
from ..estimate.train_memory import FRAGMENTATION_RISK
from ..units import GiB
from .fit import FitRequest, FitResult, _resolve_formats, _valid_gpu_counts, check_tensor_parallel
from .runnable import _formats, memory_engine


@dataclass(frozen=True)
class FitFix:
    """A remedy in `gpuwise doctor`'s shape, by memory only (no time: `step_time_s` and `slowdown` are None)."""

    name: str
    change: str
    options: dict
    memory_bytes: float
    capacity_bytes: float
    changes_job: bool
    note: str = ""
    fits: bool = True
    step_time_s: float | None = None
    slowdown: float | None = None

    @property
    def tight(self) -> bool:
        return self.memory_bytes * (1 + FRAGMENTATION_RISK) > self.capacity_bytes


def _memory(req: FitRequest, weights: str, n: int):
    """(memory per GPU, the engine's budget) for `req` with these weights on `n` GPUs; None if the engine cannot."""
    changed = replace(req, weights=weights, num_gpus=n, engine=memory_engine(req.engine))
    try:
        check_tensor_parallel(changed)
        w, _, kv, _ = _resolve_formats(changed)
    except GpuwiseError:
        return None
    est = inference_memory(req.model.spec, gpu_memory=req.gpu.memory_bytes, gpu_id=req.gpu.id, num_gpus=n, weights=w,
                           kv_dtype=kv, context=req.context, batch=req.batch, engine=changed.engine,
                           vllm=changed.vllm_options)
    return est, w


def fit_fix(r: FitResult) -> FitFix | None:
    """The cheapest change under which `r`'s model fits (see the module's order); None when it fits or none does."""
    if r.fits:
        return None
    req = replace(r.request, context=r.context)
    spec = req.model.spec
    current = r.weights
    size = current.weight_bytes(spec)
    smaller = [f for f in _formats(req.model, memory_engine(req.engine)) if f.weight_bytes(spec) < size]
    for fmt in smaller:
        got = _memory(req, fmt.name, req.num_gpus)
        if got is not None and got[0].fits:
            est, w = got
            return FitFix("weights", f"weights {current.name} -> {w.name}", {"weights": w.name},
                          est.memory.total, est.budget_bytes, False, "quantization: check quality")
    best = None
    for rank, fmt in enumerate([current, *smaller]):
        for n in _valid_gpu_counts(replace(req, num_gpus=1)):
            if n <= req.num_gpus or (best is not None and n >= best[0]):
                continue
            got = _memory(req, fmt.name, n)
            if got is not None and got[0].fits:
                best = (n, rank, fmt, got)
                break
    if best is not None:
        n, rank, fmt, (est, w) = best
        words = f"{req.num_gpus} -> {n} GPUs" + (f"; weights {current.name} -> {w.name}" if rank else "")
        options = {"num_gpus": n, **({"weights": w.name} if rank else {})}
        return FitFix("more-gpus", words, options, est.memory.total, est.budget_bytes, True,
                      "cost per hour grows with the GPU count")
    from .doctor import _bigger_gpus  # the doctor's list: same vendor, 5% more memory, smallest first

    for g in _bigger_gpus(req):
        got = _memory(replace(req, gpu=g), current.name, req.num_gpus)
        if got is not None and got[0].fits:
            est, _ = got
            return FitFix("bigger-gpu", f"{req.gpu.name} -> {g.name} ({g.memory_bytes / GiB:.0f} GiB)", {"gpu": g.id},
                          est.memory.total, est.budget_bytes, True)
    return None
