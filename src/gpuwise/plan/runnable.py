""""What can I run?": every catalog model that fits a set of GPUs with a usable context, in its best format, with its
decode speed (`gpuwise models --fits "2x rtx-3090"`).

For each model the formats an engine runs are tried from the most faithful down (llama.cpp: F16, Q8_0, Q6_K ...
IQ2_M; vLLM/SGLang: the checkpoint's own format, fp8, 4-bit AWQ; transformers: its dtype, LLM.int8(), NF4); the first
whose weights, KV cache for the usable context and engine overheads fit (`inference_memory`, the model behind
`gpuwise fit`) is the model's format. The list is ranked by parameters (the largest model first: what people mean by
"the best I can run") among those in formats of 4 bits per weight or more, then the ones that fit only below 4
bits (where quantization error becomes visible: llama.cpp's perplexity table rises steeply under Q4), each by
parameters and then by format size. Speed is the batch-1 decode rate of `gpuwise infer` (unknown where the
GPU's speed figures are), for the rows shown.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..catalog.devices import speed_figures_missing
from ..estimate import engines
from ..catalog.gpus import GPU, get_gpu, with_memory
from ..catalog.models import LoadedModel, catalog_entries, load_model, search_models
from ..errors import MAX_TOKENS, GpuwiseError, InvalidArgument, require_positive_int
from ..model.params import param_counts
from ..quant.formats import WeightFormat, default_weight_format, get_weight_format
from ..units import parse_size
from .fit import FitRequest, _resolve_formats, check_tensor_parallel
from .pick_request import ENGINE_VENDORS

FORMATS = {
    "llamacpp": ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M", "IQ3_M", "Q2_K", "IQ2_M"),
    "vllm": ("fp8", "awq"),
    "sglang": ("fp8", "awq"),
    "trtllm": ("fp8", "awq"),
    "hf": ("int8", "nf4"),
}
"""Formats tried after the checkpoint's own (vLLM, SGLang, transformers) or from the top (llama.cpp), most faithful
first: the GGUF ladder people download, llama.cpp's quality order (its `quantize --help` perplexity table); below
4 bits per weight a model is listed with the quality loss said."""
LOW_BITS = 4.0
DEFAULT_CONTEXT = 8192
"""Usable context by default: long enough for chat with a system prompt and some history or a short document."""


@dataclass(frozen=True, slots=True)
class Runnable:
    model: LoadedModel
    num_gpus: int
    """GPUs it runs on: all of them, or fewer where tensor parallelism cannot split the model that many ways."""
    params: int
    active_params: int | None
    """Per token, for MoE models (None: dense)."""
    weights: WeightFormat
    weight_bytes: int
    """On the GPUs in all."""
    bits_per_weight: float
    context: int
    max_context: int | None
    """Largest context that fits at batch 1; None beyond the first `top` rows (not computed)."""
    decode_tokens_per_s: float | None
    """Batch 1; None beyond the first `top` rows, or unknown (the GPU's speed figures are)."""
    note: str = ""


@dataclass(frozen=True, slots=True)
class RunnableResult:
    gpu: GPU
    num_gpus: int
    engine: str
    context: int
    runnable: tuple[Runnable, ...]
    """Ranked; the first `top` carry their largest context and speed."""
    top: int
    not_fitting: tuple[str, ...]
    """Catalog ids that fit in no format at the usable context."""
    speed_unknown: str | None
    """Why speeds are unknown (the GPU lacks the figures), else None."""
    search_time_s: float


def parse_gpus(text: str) -> tuple[GPU, int]:
    """'2x rtx-3090', '2 x RTX 3090', 'rtx-4090', '24GiB', '2x 24GiB' -> (GPU, count)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("--fits: name the GPUs, e.g. '2x rtx-3090', 'rtx-4090' or '24GiB'")
    m = re.fullmatch(r"\s*(?:(\d+)\s*[x*]\s*)?(.+?)\s*", text, flags=re.IGNORECASE)
    assert m is not None
    count = int(m.group(1)) if m.group(1) else 1
    require_positive_int("--fits: the GPU count", count, 1024)
    what = m.group(2)
    gpu = with_memory(None, what) if parse_size(what) is not None else get_gpu(what)
    return gpu, count


def _formats(model: LoadedModel, engine: str) -> list[WeightFormat]:
    """The formats to try, most faithful first: llama.cpp's ladder; else the checkpoint's own format, then those of
    the engine's list that are smaller than it (an FP8 or MXFP4 checkpoint is not offered in 16 bits)."""
    if engine == "llamacpp":
        return [get_weight_format(name) for name in FORMATS[engine]]
    own = default_weight_format(model.spec, engine)[0]
    size = own.weight_bytes(model.spec)
    return [own] + [f for f in map(get_weight_format, FORMATS[engine]) if f.weight_bytes(model.spec) < size]


def memory_engine(engine: str) -> str:
    """TensorRT-LLM's paged KV pool is modelled as vLLM's (plan/fit.py, TRTLLM_NOTE)."""
    return "vllm" if engine == "trtllm" else engine


def smallest_format(model: LoadedModel, engine: str) -> WeightFormat | None:
    """The engine's format with the smallest weights for this model (what is left when none fits)."""
    formats = _formats(model, engine)
    return min(formats, key=lambda f: f.weight_bytes(model.spec)) if formats else None


def most_faithful_format(model: LoadedModel, gpu: GPU, n: int, engine: str, *, context: int,
                         batch: int = 1, vllm_version: str | None = None) -> WeightFormat | None:
    """The first of the engine's formats (`_formats`) whose memory fits `batch` sequences of `context` tokens on `n`
    GPUs, None when none does (or the engine cannot run the model so): `pick` uses it where no --weights is given.
    `vllm_version`: the vLLM release whose memory rule sizes the pool (vLLM and TensorRT-LLM, whose pool is modelled
    as vLLM's); None: the newest checked."""
    from ..estimate.inference_memory import inference_memory

    version = vllm_version if memory_engine(engine) == "vllm" else None
    for fmt in _formats(model, engine):
        req = FitRequest(model=model, gpu=gpu, num_gpus=n, weights=fmt.name, engine=memory_engine(engine), context=context,
                         batch=batch, vllm_version=version)
        try:
            check_tensor_parallel(req)
            w, _, kv, _ = _resolve_formats(req)
        except GpuwiseError:
            return None
        if inference_memory(model.spec, gpu_memory=gpu.memory_bytes, gpu_id=gpu.id, num_gpus=n, weights=w,
                            kv_dtype=kv, context=context, batch=batch, engine=memory_engine(engine), vllm=req.vllm_options).fits:
            return w
    return None


def _usable_count(model: LoadedModel, gpu: GPU, n: int, engine: str) -> int | None:
    """The most of the `n` GPUs the engine can split the model over: tensor parallelism needs a degree that divides
    the heads (vLLM, SGLang), so a model may run on half of them, or one; None if on none."""
    while n >= 1:
        try:
            check_tensor_parallel(FitRequest(model=model, gpu=gpu, num_gpus=n, engine=memory_engine(engine)))
            return n
        except GpuwiseError:
            n //= 2
    return None


def _fitting(model: LoadedModel, gpu: GPU, n: int, engine: str, context: int) -> tuple[FitRequest, WeightFormat] | None:
    from ..estimate.inference_memory import inference_memory

    spec = model.spec
    ctx = min(context, spec.max_position_embeddings or context)
    used = _usable_count(model, gpu, n, engine)
    if used is None:
        return None
    def fitting(fmt: WeightFormat) -> tuple[FitRequest, WeightFormat] | None:
        req = FitRequest(model=model, gpu=gpu, num_gpus=used, weights=fmt.name, engine=memory_engine(engine), context=ctx)
        w, _, kv, _ = _resolve_formats(req)
        est = inference_memory(spec, gpu_memory=gpu.memory_bytes, gpu_id=gpu.id, num_gpus=used, weights=w,
                               kv_dtype=kv, context=ctx, batch=1, engine=memory_engine(engine), vllm=req.vllm_options)
        return (req, w) if est.fits else None

    formats = _formats(model, engine)
    try:
        # the smallest first: a model that does not fit even so (a 405B on two 24 GB cards) costs one estimate, not
        # one per rung of the ladder
        if fitting(formats[-1]) is None:  # the ladders end with their smallest format
            return None
        for fmt in formats:
            hit = fitting(fmt)
            if hit is not None:
                return hit
    except GpuwiseError:
        return None  # a format this engine cannot run for the model: not runnable here
    return None


def runnable(fits: str, *, engine: str = "llamacpp", context: int | None = None, top: int = 20,
             query: str | None = None, gpu_memory: str | None = None) -> RunnableResult:
    """Catalog models that run on `fits` GPUs with `context` tokens (default 8,192, or the model's maximum if smaller),
    best first; the first `top` with their decode speed. `gpu_memory`: each GPU has only this much free."""
    t0 = time.perf_counter()
    if engine not in FORMATS:
        raise InvalidArgument(f"--engine: unknown value '{engine}'; valid: {', '.join(FORMATS)}")
    context = DEFAULT_CONTEXT if context is None else context
    require_positive_int("--context", context, MAX_TOKENS)
    require_positive_int("--top", top, 1 << 16)
    gpu, n = parse_gpus(fits)
    if gpu_memory is not None:  # the same GPUs with only this much free each
        gpu = with_memory(gpu if gpu.segment != "custom" else None, gpu_memory)
    vendors = ENGINE_VENDORS.get(engine, ())
    if gpu.vendor and gpu.vendor not in vendors:
        raise InvalidArgument(f"{engine} does not run on {gpu.name} ({gpu.vendor}); use --engine llamacpp")
    found: list[tuple[LoadedModel, FitRequest, WeightFormat]] = []
    missing: list[str] = []
    for entry in (search_models(query) if query else catalog_entries()):
        model = load_model(entry.id)
        hit = _fitting(model, gpu, n, engine, context)
        if hit is None:
            missing.append(entry.id)
        else:
            found.append((model, *hit))
    # The largest model first, in formats of 4 bits per weight or more; the low-bit fits after them
    found.sort(key=lambda x: (_bits(x[0], x[2]) < LOW_BITS, -param_counts(x[0].spec).total,
                              -x[2].weight_bytes(x[0].spec)))
    unknown = speed_figures_missing(gpu)
    rows = [_row(model, req, w, detail=i < top, speed=unknown is None) for i, (model, req, w) in enumerate(found)]
    return RunnableResult(gpu=gpu, num_gpus=n, engine=engine, context=context, runnable=tuple(rows), top=top,
                          not_fitting=tuple(missing),
                          speed_unknown=f"{gpu.name}: its {unknown} is not known" if unknown else None,
                          search_time_s=time.perf_counter() - t0)


def _bits(model: LoadedModel, w: WeightFormat) -> float:
    return 8 * w.weight_bytes(model.spec) / param_counts(model.spec).total


def _largest_context(fits, lo: int, hi: int, engine: str) -> int:
    """fit's `_largest` over contexts, in llama.cpp's steps: it pads n_ctx to a multiple of `ctx_pad` (256), so memory
    is the same for every context in one step and the largest that fits is a multiple of it (or the model's maximum):
    a search over steps gives the same answer in fewer estimates."""
    from .fit import _largest

    pad = engines.LLAMACPP.ctx_pad if engine == "llamacpp" else 1
    if pad <= 1 or fits(hi):
        return _largest(fits, lo, hi)
    k = _largest(lambda k: fits(k * pad), -(-lo // pad), hi // pad)
    return k * pad if k * pad >= lo else lo - 1


def _row(model: LoadedModel, req: FitRequest, w: WeightFormat, *, detail: bool, speed: bool) -> Runnable:
    """One model's row; its largest context and decode speed only where `detail` (the rows shown)."""
    from ..estimate.inference_memory import inference_memory

    spec = model.spec
    counts = param_counts(spec)
    _, _, kv, _ = _resolve_formats(req)
    cap = spec.max_position_embeddings or (1 << 20)

    def fits(c: int) -> bool:
        return inference_memory(spec, gpu_memory=req.gpu.memory_bytes, gpu_id=req.gpu.id, num_gpus=req.num_gpus,
                                weights=w, kv_dtype=kv, context=c, batch=1, engine=memory_engine(req.engine),
                                vllm=req.vllm_options).fits

    tok_s = None
    notes = []
    if detail and speed:
        from .infer import InferRequest, infer

        try:
            r = infer(InferRequest(model=model, gpu=req.gpu, num_gpus=req.num_gpus, weights=w.name,
                                   engine=req.engine, prompt_tokens=min(512, req.context // 2), output_tokens=128))
            tok_s = 1.0 / r.tpot_s if r.tpot_s else None
        except GpuwiseError:  # a model whose layers gpuwise does not time (Falcon-H1, Gemma 4): its speed is unknown
            notes.append("speed not modelled for its layers")
    nbytes = w.weight_bytes(spec)
    bits = _bits(model, w)
    if bits < LOW_BITS:
        notes.append(f"{bits:.1f} bits per weight: expect a visible quality loss")
    note = "; ".join(notes)
    return Runnable(model=model, num_gpus=req.num_gpus, params=counts.total,
                    active_params=counts.active if spec.is_moe else None,
                    weights=w, weight_bytes=nbytes, bits_per_weight=bits, context=req.context,
                    max_context=_largest_context(fits, req.context, cap, req.engine) if detail else None,
                    decode_tokens_per_s=tok_s,
                    note=note)
