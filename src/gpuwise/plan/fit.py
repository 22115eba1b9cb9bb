"""`gpuwise fit`: will this model fit on this GPU for inference, and what are the limits?

Beyond the yes/no for the requested setup it searches, with the same memory model: the largest
context at the requested batch, the largest batch at the requested context, the fewest GPUs of this
kind, and the smallest MIG slice that fits (where the GPU has MIG).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..dtypes import DType, get_dtype, kv_dtype, torch_dtype_to_name
from ..errors import MAX_TOKENS, InvalidArgument, require_positive_int
from ..estimate import engines
from ..estimate.engines import DEFAULT_CONTEXT, Engine  # noqa: F401 (DEFAULT_CONTEXT: the context help)
from ..estimate.inference_memory import InferenceMemory, VLLMOptions, inference_memory
from ..estimate.kv_cache import kv_bytes_per_token
from ..model.params import ParamCounts, param_counts
from ..quant.formats import WeightFormat, default_weight_format, get_weight_format, to_gguf
from ..units import GiB

MAX_CONTEXT_SEARCH = MAX_TOKENS  # beyond any model's context today
MAX_BATCH_SEARCH = 1 << 20
TP_SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_GPUS_SEARCH = 64



def require_scheduler_limits(max_num_seqs: int | None, max_num_batched_tokens: int | None) -> None:
    """The engines' scheduler knobs (vLLM's --max-num-seqs and --max-num-batched-tokens), as `fit` and `infer` take
    them: whole numbers from 1 up to `MAX_TOKENS`, or None for the engine's default."""
    for name, v in (("--max-num-seqs", max_num_seqs), ("--max-num-batched-tokens", max_num_batched_tokens)):
        if v is not None:
            require_positive_int(name, v, MAX_TOKENS)


def require_vllm_version(text: str | None) -> None:
    """--vllm-version: a version gpuwise models (0.10, the V1 engine, and later), or None for the newest."""
    if text is None:
        return
    try:
        version = engines.vllm_version(text)
    except ValueError as exc:
        raise InvalidArgument(f"--vllm-version: {exc}") from None
    if version < engines.VLLM_OLDEST:
        raise InvalidArgument(f"--vllm-version {text}: vLLM before 0.10 (the V0 engine) sized its KV pool by other "
                              "rules, which gpuwise does not model")


@dataclass(frozen=True, slots=True, kw_only=True)
class FitRequest:
    """Inference memory of a model on GPUs: the options of `gpuwise fit`."""

    model: LoadedModel
    gpu: GPU
    num_gpus: int = 1
    """GPUs to split over (vLLM: tensor parallel; transformers and llama.cpp: layers split)."""
    weights: str | None = None
    """Weight format: a dtype or quantization (bf16, fp16, fp8, int8, nf4, nf4-dq, gptq, awq, Q4_K_M, Q8_0 ...;
    default: what the engine loads for this checkpoint)."""
    kv_dtype: str | None = None
    """KV cache type: fp16, bf16, fp8, or llama.cpp's q8_0/q4_0 (default: the model's compute dtype, llama.cpp
    f16)."""
    context: int | None = None
    """Tokens per sequence, prompt + output (default {DEFAULT_CONTEXT}, or the model's maximum when shorter)."""
    batch: int = 1
    """Concurrent sequences."""
    engine: Engine = "vllm"
    """Inference engine whose memory layout is modelled (TensorRT-LLM's as vLLM's: see TRTLLM_NOTE)."""
    gpu_memory_utilization: float | None = None
    """vLLM --gpu-memory-utilization: share of the GPU's memory (as CUDA reports it) for weights, activations and the
    KV pool (default 0.9)."""
    max_num_seqs: int | None = None
    """vLLM --max-num-seqs: sequences per step, sizing the sampler's warm-up (default: vLLM's for the GPU)."""
    max_num_batched_tokens: int | None = None
    """vLLM --max-num-batched-tokens: tokens per step, sizing the profiling forward pass (default: vLLM's for the
    GPU)."""

    vllm_version: str | None = None
    """vLLM version whose memory rule applies, e.g. 0.11.0 (default: the newest checked, 0.19; 0.10 and later)."""
    mem_fraction_static: float | None = None
    """SGLang --mem-fraction-static: share of the memory free at start for weights and the KV pool (default:
    SGLang's rule for the GPU's size and TP)."""
    enable_dp_attention: bool = False
    """MoE over several GPUs: data-parallel attention (SGLang --enable-dp-attention; vLLM --data-parallel-size N
    --enable-expert-parallel): each GPU keeps the attention and dense weights whole and the KV cache of its own
    requests, the routed experts are spread over the GPUs."""

    @property
    def vllm_options(self) -> VLLMOptions:
        return VLLMOptions(gpu_memory_utilization=self.gpu_memory_utilization, max_num_seqs=self.max_num_seqs,
                           max_num_batched_tokens=self.max_num_batched_tokens,
                           version=engines.vllm_version(self.vllm_version),
                           mem_fraction_static=self.mem_fraction_static, dp_attention=self.enable_dp_attention)

    def __post_init__(self) -> None:
        require_positive_int("--num-gpus", self.num_gpus, 4096)
        require_positive_int("--batch", self.batch, MAX_BATCH_SEARCH)
        if self.context is not None:
            require_positive_int("--context", self.context, MAX_CONTEXT_SEARCH)
        if self.engine not in engines.SERVING_ENGINES:
            raise InvalidArgument(f"unknown engine '{self.engine}'; use one of: {', '.join(engines.SERVING_ENGINES)}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise InvalidArgument(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        require_scheduler_limits(self.max_num_seqs, self.max_num_batched_tokens)
        require_vllm_version(self.vllm_version)
        knobs = [n for n, v in (("--vllm-version", self.vllm_version),
                                ("--gpu-memory-utilization", self.gpu_memory_utilization),
                                ("--max-num-seqs", self.max_num_seqs),
                                ("--max-num-batched-tokens", self.max_num_batched_tokens)) if v is not None]
        if self.enable_dp_attention:
            if self.engine not in engines.PAGED_TP_ENGINES:
                raise InvalidArgument(f"--enable-dp-attention is SGLang's and vLLM's layout; the engine is {self.engine}")
            if self.model.spec.moe is None:
                raise InvalidArgument("--enable-dp-attention applies to mixture-of-experts models (the experts are "
                                      "what the GPUs share)")
            if self.num_gpus < 2:
                raise InvalidArgument("--enable-dp-attention needs --num-gpus 2 or more")
        if self.mem_fraction_static is not None:
            if not 0 < self.mem_fraction_static < 1:
                raise InvalidArgument(f"--mem-fraction-static must be in (0, 1), got {self.mem_fraction_static}")
            if self.engine != "sglang":
                raise InvalidArgument(f"--mem-fraction-static is SGLang's option, and the engine is {self.engine}")
        if knobs and self.engine not in ("vllm", "trtllm"):
            raise InvalidArgument(f"{', '.join(knobs)}: vLLM's option{'s' if len(knobs) > 1 else ''}, and the engine "
                                  f"is {self.engine}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    request: FitRequest
    weights: WeightFormat
    weights_reason: str
    kv: DType
    kv_reason: str
    context: int
    context_reason: str
    params: ParamCounts
    kv_cache_bytes_per_token: float
    estimate: InferenceMemory
    max_context: int
    max_context_limited_by: str
    max_batch: int
    min_gpus: int | None
    min_mig_profile: str | None
    """Smallest MIG slice that fits; None when none fits or the GPU has no MIG."""
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return self.estimate.fits


def _resolve_formats(req: FitRequest) -> tuple[WeightFormat, str, DType, str]:
    spec = req.model.spec
    if req.weights is None:
        w, w_reason = default_weight_format(spec, req.engine)
    else:
        w, w_reason = get_weight_format(req.weights), "as requested"
        if req.engine == "llamacpp":
            w = to_gguf(w)
    if req.engine == "llamacpp" and not w.is_gguf:
        raise InvalidArgument(
            f"llama.cpp runs GGUF files: use a GGUF type such as Q4_K_M, Q8_0 or F16, not '{req.weights}'")
    if req.engine == "hf" and w.is_gguf:
        raise InvalidArgument("transformers dequantizes GGUF files to 16 bits on load; use --engine llamacpp "
                              "(or vllm), or --weights bf16")
    if req.engine == "vllm" and w.kind == "bnb" and w.bits == 8:
        raise InvalidArgument("vLLM does not serve LLM.int8() (bitsandbytes 8-bit) weights; use fp8 or gptq-8bit")
    if req.kv_dtype is not None:
        kv = kv_dtype(req.kv_dtype)
        kv_reason = "as requested"
        gguf_kv = kv.name.startswith(("q", "iq"))
        if req.engine != "llamacpp" and gguf_kv:
            raise InvalidArgument(f"KV type {kv.name} is llama.cpp's (-ctk/-ctv); with {req.engine} use fp16, bf16 or fp8")
        if req.engine == "llamacpp" and kv.name.startswith("fp8"):
            raise InvalidArgument("llama.cpp has no fp8 KV cache; use f16, q8_0 or q4_0")
        if req.engine == "hf" and kv.name.startswith("fp8"):
            raise InvalidArgument("transformers' default cache has no fp8 mode; use --engine vllm for an fp8 KV cache")
    elif req.engine == "llamacpp":
        kv, kv_reason = get_dtype("fp16"), "llama.cpp default (-ctk f16 -ctv f16)"
    elif req.engine == "vllm" and spec.mla is not None and spec.mla.index_head_dim:
        kv, kv_reason = get_dtype("fp8"), ("vLLM's default for DeepSeek Sparse Attention: its fp8_ds_mla cache (fp8 "
                                           "latent with fp32 scales, bf16 RoPE key; vllm-project/recipes DeepSeek-V3_2)")
    else:
        native = torch_dtype_to_name(spec.torch_dtype)
        if w.kind == "float" and w.bits == 32 and req.engine == "hf":
            kv, kv_reason = get_dtype("fp32"), "the model runs in fp32"
        elif native == "bf16" or w.name == "bf16":
            kv, kv_reason = get_dtype("bf16"), "the model's compute dtype (bf16)"
        else:
            kv, kv_reason = get_dtype("fp16"), "the model's compute dtype (fp16)"
    return w, w_reason, kv, kv_reason


def _default_context(req: FitRequest) -> tuple[int, str]:
    max_pos = req.model.spec.max_position_embeddings
    if req.context is not None:
        return req.context, "as requested"
    if max_pos is not None and max_pos < engines.DEFAULT_CONTEXT:
        return max_pos, f"the model's maximum ({max_pos:,}), below gpuwise's default {engines.DEFAULT_CONTEXT:,}"
    return engines.DEFAULT_CONTEXT, (f"gpuwise default {engines.DEFAULT_CONTEXT:,} (a realistic runtime context; "
                                     "pass --context for another)")


def _largest(predicate, lo: int, hi: int) -> int:
    """Largest n in [lo, hi] with predicate(n) true, assuming it is monotone (true then false); lo-1 if none."""
    if not predicate(lo):
        return lo - 1
    if predicate(hi):
        return hi
    # Exponential probe keeps evaluations cheap when the answer is small.
    good, step = lo, 1
    while good + step < hi and predicate(good + step):
        good += step
        step *= 2
    bad = min(good + step, hi)
    while bad - good > 1:
        mid = (good + bad) // 2
        if predicate(mid):
            good = mid
        else:
            bad = mid
    return good


def _valid_gpu_counts(req: FitRequest) -> list[int]:
    from ..estimate.parallel import serving_tp_conflict  # local: the layout rules load the pipeline module

    spec = req.model.spec
    if req.engine in engines.PAGED_TP_ENGINES:
        return [tp for tp in TP_SIZES if serving_tp_conflict(spec, tp) is None]
    return list(range(1, min(spec.num_layers, MAX_GPUS_SEARCH) + 1))


def check_tensor_parallel(req: FitRequest) -> None:
    from ..estimate.parallel import serving_tp_conflict

    spec = req.model.spec
    paged = req.engine in engines.PAGED_TP_ENGINES
    conflict = serving_tp_conflict(spec, req.num_gpus) if paged and req.num_gpus > 1 else None
    if conflict is not None:
        valid = ", ".join(str(n) for n in _valid_gpu_counts(req))
        name = "vLLM" if req.engine == "vllm" else "SGLang"
        raise InvalidArgument(f"{name} tensor parallelism needs {conflict}; valid: {valid}")
    if not paged and req.num_gpus > spec.num_layers:
        raise InvalidArgument(f"--num-gpus {req.num_gpus} exceeds the {spec.num_layers} layers to split across GPUs")


TRTLLM_NOTE = ("TensorRT-LLM's memory modelled as vLLM's (a paged KV pool pre-allocated from a share of the card); "
               "TensorRT-LLM sizes it as free_gpu_memory_fraction 0.9 of the memory left after loading, so its real "
               "pool is larger by about a tenth of the weights and activations")


def fit(req: FitRequest) -> FitResult:
    if req.engine == "trtllm":  # the same paged pool as vLLM's, with TensorRT-LLM's own refusals
        if (req.weights or "").lower().startswith("q"):
            raise InvalidArgument("TensorRT-LLM does not run GGUF files; use bf16, fp8, int8 or int4-awq/gptq weights")
        r = fit(replace(req, engine="vllm"))
        return replace(r, request=req, assumptions=(*r.assumptions, TRTLLM_NOTE))
    spec = req.model.spec
    check_tensor_parallel(req)
    w, w_reason, kv, kv_reason = _resolve_formats(req)
    context, context_reason = _default_context(req)

    def estimate(*, context: int = context, batch: int = req.batch, num_gpus: int = req.num_gpus,
                 gpu_memory: int = req.gpu.memory_bytes) -> InferenceMemory:
        return inference_memory(spec, gpu_memory=gpu_memory, gpu_id=req.gpu.id, num_gpus=num_gpus, weights=w,
                                kv_dtype=kv, context=context, batch=batch, engine=req.engine, vllm=req.vllm_options)

    est = estimate()
    max_pos = spec.max_position_embeddings
    cap = max_pos if max_pos else MAX_CONTEXT_SEARCH
    max_ctx = _largest(lambda c: estimate(context=c).fits, 1, cap)
    limited_by = "model maximum" if (max_pos and max_ctx == max_pos) else "memory"
    max_batch = _largest(lambda b: estimate(batch=b).fits, 1, MAX_BATCH_SEARCH)
    min_gpus = next((n for n in _valid_gpu_counts(req) if estimate(num_gpus=n).fits), None)
    min_mig = None
    for prof in sorted(req.gpu.mig_profiles, key=lambda p: (p.memory_gb, p.compute_fraction)):
        if estimate(num_gpus=1, gpu_memory=prof.memory_bytes).fits:
            min_mig = prof.name
            break

    assumptions = [
        f"weights {w.name}: {w_reason}",
        f"KV cache {kv.name}: {kv_reason}",
        f"context {context:,} tokens per sequence (prompt + output): {context_reason}",
        f"GPU memory {req.gpu.memory_bytes / GiB:.2f} GiB ({req.gpu.memory_bytes_source})",
    ]
    if max_pos and context > max_pos:
        assumptions.append(f"context exceeds the model's trained maximum ({max_pos:,}); it needs RoPE scaling")
    if req.engine == "hf":
        assumptions.append("transformers prefills the whole context at once; layers split evenly across GPUs "
                           "(accelerate device_map)")
    if req.engine == "vllm":
        util = est.details["gpu_memory_utilization"]
        assumptions.append(f"vLLM reserves gpu_memory_utilization={util:g} of memory; the rest of that budget becomes "
                           f"the KV pool, so nvidia-smi shows ~{util:.0%} used whatever the model")
    if req.engine == "sglang":
        assumptions.append(f"SGLang keeps mem_fraction_static={est.details['mem_fraction_static']} of the memory free "
                           "at start for weights and the KV pool; the rest is for activations and CUDA graphs")
    if req.engine == "llamacpp":
        assumptions.append("llama.cpp keeps token embeddings in host memory; flash attention on; micro-batch 512")
    if req.gpu.mig_profiles and req.num_gpus == 1:
        assumptions.append("smallest MIG slice that fits: slice memory taken as the GB in the profile name, read as "
                           "GiB")
    assumptions.extend(spec.notes)

    return FitResult(
        request=req, weights=w, weights_reason=w_reason, kv=kv, kv_reason=kv_reason, context=context,
        context_reason=context_reason, params=param_counts(spec),
        kv_cache_bytes_per_token=kv_bytes_per_token(spec, kv.bytes, req.engine, 1),
        estimate=est, max_context=max_ctx, max_context_limited_by=limited_by, max_batch=max_batch,
        min_gpus=min_gpus, min_mig_profile=min_mig, assumptions=tuple(assumptions),
    )
