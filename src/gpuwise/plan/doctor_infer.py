"""`gpuwise doctor --task infer`: what to change when a model does not fit for inference.

Remedies, each the same request with one thing changed and costed by `gpuwise fit` (memory) and `gpuwise infer`
(time per output token): smaller weights (the engine's quantized formats), a quantized KV cache, a shorter
context, a smaller batch, more GPUs (tensor parallel or llama.cpp's split), a bigger GPU. Then the fastest fitting
combination of weights and KV cache on the same GPUs. Ranked as the training doctor ranks (plan/doctor.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..errors import GpuwiseError, require_positive_number
from ..estimate.train_memory import FRAGMENTATION_RISK
from ..units import GiB
from .doctor import Diagnosis, Remedy, _bigger_gpus, headline
from .fit import FitRequest, fit
from .infer import InferRequest, infer

OUTPUT_TOKENS = 128  # decode length the time per token is taken at (the context's last 128 tokens)
WEIGHTS = {"llamacpp": ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K"),
           "hf": ("bf16", "int8", "nf4"), "vllm": ("bf16", "fp8", "int8", "awq"), "trtllm": ("bf16", "fp8", "int8",
                                                                                            "awq")}
KV = {"llamacpp": ("q8_0", "q4_0"), "hf": (), "vllm": ("fp8",), "trtllm": ("fp8",)}
WEIGHTS["sglang"], KV["sglang"] = WEIGHTS["vllm"], KV["vllm"]  # SGLang serves the formats vLLM does


@dataclass(frozen=True)
class InferDoctorResult(Diagnosis):
    request: FitRequest
    capacity_bytes: float
    """What the engine may use (vLLM: gpu_memory_utilization x the card; see plan/fit.py)."""
    predicted_bytes: float
    observed_bytes: float | None
    offset_bytes: float
    tpot_s: float
    remedies: tuple[Remedy, ...]
    combination: Remedy | None
    verdict: str

    @property
    def fix(self) -> Remedy | None:
        """The one change `gpuwise fit` names when the model does not fit (see plan.doctor.headline)."""
        return None if self.fits else headline(self.remedies, self.combination)


def _tpot(req: FitRequest, context: int) -> float | None:
    """Time per output token; None for a model whose layers are not timed (Falcon-H1's parallel hybrid, Gemma 4): its
    remedies are then ranked by memory alone, their speed said to be unknown."""
    spec = req.model.spec
    if spec.parallel_hybrid or spec.varying_attention:
        return None
    r = infer(InferRequest(model=req.model, gpu=req.gpu, num_gpus=req.num_gpus, weights=req.weights,
                           kv_dtype=req.kv_dtype, batch=req.batch, prompt_tokens=max(1, context - OUTPUT_TOKENS),
                           output_tokens=min(OUTPUT_TOKENS, context), engine=req.engine))
    return r.tpot_s


def doctor_infer(req: FitRequest, *, oom_at_gib: float | None = None) -> InferDoctorResult:
    base = fit(req)
    predicted = base.estimate.memory.total
    observed = None
    if oom_at_gib is not None:
        require_positive_number("--oom-at-gib", oom_at_gib, 1e6)
        observed = oom_at_gib * GiB
    offset = max(0.0, observed - predicted) if observed is not None else 0.0
    t0 = _tpot(req, base.context)
    req = replace(req, context=base.context)

    def remedy(name: str, change: str, changes_job: bool = False, note: str = "", **options) -> Remedy | None:
        new = replace(req, **options)
        try:
            r = fit(new)
            t = _tpot(new, r.context)
        except GpuwiseError:
            return None
        mem = r.estimate.memory.total + offset
        shown = {k: (v.id if hasattr(v, "peak_flops") else v) for k, v in options.items()}
        cap = r.estimate.budget_bytes  # the engine's budget (vLLM: gpu_memory_utilization of the card)
        slowdown = t / t0 - 1 if (t is not None and t0) else None
        return Remedy(name, change, shown, mem, t, slowdown, mem <= cap, changes_job, cap, note)

    found = [x for x in _single_changes(req, base, remedy) if x is not None
             and (x.memory_bytes < predicted + offset - 1 or x.name == "bigger-gpu")]
    def rank(x: Remedy) -> tuple:
        if not x.fits:  # the most memory saved first
            return (True, x.changes_job, x.changes_hardware, -x.saved_bytes(predicted + offset))
        # the least slowdown first; untimed, the smallest change (least memory given up) first
        return (False, x.changes_job, x.changes_hardware,
                x.slowdown if x.slowdown is not None else x.saved_bytes(predicted + offset))

    ranked = sorted(found, key=rank)
    combo = None
    for w, kv in itertools.product((None,) + _smaller_weights(req, base), (None,) + KV[req.engine]):
        changes = {k: v for k, v in (("weights", w), ("kv_dtype", kv)) if v is not None}
        if not changes:
            continue
        r = remedy("combination", "; ".join(f"{k.replace('_', '-')} {v}" for k, v in changes.items()), **changes)
        if r is not None and r.fits and (combo is None or (r.step_time_s is not None
                                                           and r.step_time_s < combo.step_time_s)):
            combo = r  # untimed: the first that fits, the most faithful formats coming first
    if combo is None and not base.fits:
        combo = _more_gpus_combination(req, base, remedy)
    needed, cap = predicted + offset, base.estimate.budget_bytes
    if needed <= cap:
        tight = " (tight)" if needed * (1 + FRAGMENTATION_RISK) > cap else ""
        verdict = f"fits: {needed / GiB:.1f} of the {cap / GiB:.1f} GiB {req.engine} uses{tight}"
    else:
        verdict = (f"does not fit: needs {needed / GiB:.1f} GiB on {req.gpu.name} ({cap / GiB:.1f} GiB usable by "
                   f"{req.engine})")
        best = headline(ranked, combo)
        how = "least slowdown that fits" if t0 is not None else "the most faithful change that fits (speed unknown)"
        verdict += (f"; {'with other hardware' if best.changes_hardware else 'on these GPUs'}, {how}: "
                    f"{best.change}" if best is not None else "; no single remedy fits")
    return InferDoctorResult(request=req, capacity_bytes=cap, predicted_bytes=predicted, observed_bytes=observed,
                             offset_bytes=offset, tpot_s=t0, remedies=tuple(ranked), combination=combo,
                             verdict=verdict)


def _more_gpus_combination(req: FitRequest, base, remedy) -> Remedy | None:
    """With nothing fitting on these GPUs: 2, 4 or 8 times as many of them, each with the weight formats that take
    less memory; at the first count where any fits, the one with the shortest time per token."""
    for k in (2, 4, 8):
        found = []
        for w in (None,) + _smaller_weights(req, base):
            changes = {"num_gpus": req.num_gpus * k, **({"weights": w} if w else {})}
            words = f"{req.num_gpus} -> {req.num_gpus * k} GPUs" + (f"; weights {base.weights.name} -> {w}" if w else "")
            r = remedy("combination", words, True, note="cost per hour grows with the GPU count", **changes)
            if r is not None and r.fits:
                found.append(r)
        if found:
            return min(found, key=lambda r: r.step_time_s if r.step_time_s is not None else 0.0)
    return None


def _smaller_weights(req: FitRequest, base) -> tuple[str, ...]:
    """The engine's weight formats that take less memory than the current one."""
    out = []
    for name in WEIGHTS[req.engine]:
        if name.lower() == base.weights.name.lower():
            continue
        try:
            r = fit(replace(req, weights=name))
        except GpuwiseError:
            continue
        if r.estimate.memory.total < base.estimate.memory.total:
            out.append(name)
    return tuple(out)


def _single_changes(req: FitRequest, base, remedy):
    for w in _smaller_weights(req, base):
        yield remedy("weights", f"weights {base.weights.name} -> {w}", note="quantization: check quality", weights=w)
    for kv in KV[req.engine]:
        yield remedy("kv-cache", f"KV cache {base.kv.name} -> {kv}", kv_dtype=kv)
    context = req.context
    for _ in range(3):
        context //= 2
        if context < 256:
            break
        r = remedy("context", f"context {req.context} -> {context} tokens", True, context=context)
        if r is not None:
            yield r
            if r.fits:
                break
    batch = req.batch
    while batch > 1:
        batch //= 2
        r = remedy("batch", f"batch {req.batch} -> {batch} sequences", True, batch=batch)
        if r is not None:
            yield r
            if r.fits:
                break
    if base.fits:
        return  # the hardware is enough: no more or bigger GPUs to suggest
    for k in (2, 4, 8):
        r = remedy("more-gpus", f"{req.num_gpus} -> {req.num_gpus * k} GPUs", True, num_gpus=req.num_gpus * k,
                   note="cost per hour grows with the GPU count")
        if r is not None:
            yield r
            if r.fits:
                break
    last = None
    for g in _bigger_gpus(replace(req, gpu=req.gpu)):
        last = remedy("bigger-gpu", f"{req.gpu.name} -> {g.name} ({g.memory_bytes / GiB:.0f} GiB)", True, gpu=g)
        if last is not None and last.fits:
            break
    if last is not None:
        yield last
