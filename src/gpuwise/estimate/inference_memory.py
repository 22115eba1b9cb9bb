"""Inference memory per GPU: weights + KV cache + activation workspace + runtime overhead, per engine.

- `hf` (transformers `generate`, multi-GPU via accelerate's device_map: layers split across GPUs):
  the whole prompt is prefilled at once, so the activation workspace grows with the context.
- `vllm` (tensor parallel over `num_gpus`): vLLM reserves `gpu_memory_utilization` of total memory,
  profiles a forward pass of `max_num_batched_tokens` tokens (chunked prefill), and fills the rest with
  a paged KV pool (blocks of 16 tokens). It fits when that pool holds `batch` sequences of `context`.
- `llamacpp` (GGUF, layer split across GPUs; token embeddings stay in host memory): the compute buffer
  is sized for a 512-token micro-batch; layers that do not fit run on the CPU (`gpu_layers`).

All numbers are bytes on the most loaded GPU. Constants and their sources: `engines.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..dtypes import DType
from ..model.spec import ModelSpec
from ..quant.formats import WeightFormat, tensor_bytes, weight_bytes_by_layer
from . import engines
from .kv_cache import kv_cache_bytes


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights: float
    kv_cache: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.overhead


@dataclass(frozen=True, slots=True)
class InferenceMemory:
    memory: MemoryBreakdown
    """Per GPU, on the most loaded GPU."""
    budget_bytes: float
    """What the engine may use on that GPU (vLLM: gpu_memory_utilization x total, + the CUDA context)."""
    details: dict = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.budget_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.budget_bytes - self.memory.total


def _act_bytes(w: WeightFormat) -> int:
    """Activation element size: the compute dtype (fp32 models compute in fp32, quantized ones in 16 bits)."""
    return 4 if (w.kind == "float" and w.bits == 32) else 2


def _ffn_width(spec: ModelSpec) -> int:
    """Widest FFN intermediate a token produces (MoE: top-k experts plus shared)."""
    widths = [spec.intermediate_size]
    if spec.moe is not None:
        widths.append(spec.moe.top_k * spec.moe.expert_intermediate_size + spec.moe.shared_intermediate_size)
    return max(widths)


def _layer_temporaries_per_token(spec: ModelSpec, tp: int) -> float:
    """Elements alive at once in one block per token: residual + normed input, Q/K/V, gate/up/act (one
    layer at a time: inference frees each layer's temporaries before the next)."""
    q = spec.num_heads * spec.head_dim
    kv = spec.num_kv_heads * spec.head_dim
    return 2 * spec.hidden_size + (q + 2 * kv) / tp + 3 * _ffn_width(spec) / tp


def _split_layers(n_layers: int, n_gpus: int) -> list[range]:
    """Even layer split, as accelerate's 'balanced' device map and llama.cpp's default split do."""
    base, extra = divmod(n_layers, n_gpus)
    out, start = [], 0
    for g in range(n_gpus):
        size = base + (1 if g < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class VLLMOptions:
    """vLLM's memory knobs as given (None: vLLM's default)."""

    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    version: tuple[int, int] = engines.VLLM_NEWEST
    mem_fraction_static: float | None = None
    """SGLang's share of the memory free at start for weights + KV pool (default: its rule for the GPU)."""
    dp_attention: bool = False
    """Data-parallel attention for a MoE: every GPU holds the attention and dense weights whole and the KV of its
    own requests (all heads); the routed experts are spread over the GPUs."""


def _weights_per_gpu(spec: ModelSpec, w: WeightFormat, n: int, dp_attention: bool) -> float:
    """Weight bytes on each of `n` GPUs: all split over tensor parallelism, or (DP attention) the routed experts
    split and the rest whole."""
    if not (dp_attention and spec.moe is not None and n > 1):
        return w.weight_bytes(spec) / n
    routed = sum(b for t, b in tensor_bytes(w, spec) if t.experts > 1 or t.role.endswith("_exps"))
    return w.weight_bytes(spec) - routed + routed / n


def _vllm(spec: ModelSpec, gpu_memory: int, gpu_id: str, tp: int, w: WeightFormat, kv: DType,
          context: int, batch: int, opts: VLLMOptions | None = None) -> InferenceMemory:
    v = engines.VLLM
    opts = opts or VLLMOptions()
    util = opts.gpu_memory_utilization or v.gpu_memory_utilization
    n = tp
    dp = opts.dp_attention and spec.moe is not None and n > 1
    weights = _weights_per_gpu(spec, w, n, dp)
    if dp:  # each GPU: its share of the sequences, all heads
        tp, batch = 1, math.ceil(batch / n)
    kv_bytes = kv_cache_bytes(spec, context=context, batch=batch, bytes_per_element=kv.bytes, engine="vllm",
                              tp=tp, block_tokens=v.block_size)
    d_seqs, d_tokens = v.scheduler_limits(gpu_memory, gpu_id)
    max_seqs, max_tokens = opts.max_num_seqs or d_seqs, opts.max_num_batched_tokens or d_tokens
    # the profiling run's peak: a forward pass of the token budget, or the sampler warm-up over max_num_seqs rows
    forward = max_tokens * _act_bytes(w) * _layer_temporaries_per_token(spec, tp)
    sampler = v.sampler_copies(opts.version) * max_seqs * spec.vocab_size * 4
    act = max(forward, sampler)
    non_torch = v.non_torch(n, opts.version)
    cuda_total = gpu_memory - engines.CUDA_RESERVED_BYTES
    overhead = non_torch + engines.CUDA_CONTEXT_BYTES
    budget = util * cuda_total + engines.CUDA_CONTEXT_BYTES  # the context sits outside
    pool = budget - weights - act - overhead
    per_seq = kv_cache_bytes(spec, context=context, batch=1, bytes_per_element=kv.bytes, engine="vllm", tp=tp,
                             block_tokens=v.block_size)
    details = {
        "tensor_parallel": tp,
        "dp_attention": dp,
        "gpu_memory_utilization": util,
        "cuda_total_bytes": cuda_total,
        "activation_peak_bytes": act,
        "non_torch_bytes": non_torch,
        "block_size": v.block_size,
        "max_num_seqs": max_seqs,
        "max_num_batched_tokens": max_tokens,
        "kv_pool_bytes": max(pool, 0.0),
        "kv_pool_tokens": _pool_tokens(spec, pool, kv, tp, "vllm", v.block_size),
        "max_concurrent_sequences": (max(int(pool // per_seq), 0) * (n if dp else 1)) if per_seq > 0 else None,
    }
    return InferenceMemory(MemoryBreakdown(weights, kv_bytes, act, overhead), budget, details)


def _pool_tokens(spec: ModelSpec, pool: float, kv: DType, tp: int, engine: str, block: int) -> int:
    """Tokens a pool of `pool` bytes holds (whole blocks of `block` tokens), as the engine's startup log counts them."""
    from .kv_cache import kv_bytes_per_token

    per_token = kv_bytes_per_token(spec, kv.bytes, engine, tp)
    return max(int(pool // (per_token * block)) * block, 0) if per_token > 0 else 0


def _sglang(spec: ModelSpec, gpu_memory: int, tp: int, w: WeightFormat, kv: DType, context: int, batch: int,
            opts: VLLMOptions | None = None) -> InferenceMemory:
    g = engines.SGLANG
    opts = opts or VLLMOptions()
    frac = opts.mem_fraction_static or g.mem_fraction_static(gpu_memory, tp)
    n = tp
    dp = opts.dp_attention and spec.moe is not None and n > 1
    weights = _weights_per_gpu(spec, w, n, dp)
    if dp:
        tp, batch = 1, math.ceil(batch / n)
    kv_bytes = kv_cache_bytes(spec, context=context, batch=batch, bytes_per_element=kv.bytes, engine="sglang", tp=tp)
    start_free = gpu_memory - engines.CUDA_RESERVED_BYTES - engines.CUDA_CONTEXT_BYTES
    pool = frac * start_free - weights
    rest = (1 - frac) * start_free  # activations, CUDA graphs: SGLang's reserve, not part of the pool
    per_seq = kv_cache_bytes(spec, context=context, batch=1, bytes_per_element=kv.bytes, engine="sglang", tp=tp)
    details = {
        "tensor_parallel": tp,
        "dp_attention": dp,
        "mem_fraction_static": frac,
        "kv_pool_bytes": max(pool, 0.0),
        "kv_pool_tokens": _pool_tokens(spec, pool, kv, tp, "sglang", 1),
        "max_concurrent_sequences": (max(int(pool // per_seq), 0) * (n if dp else 1)) if per_seq > 0 else None,
        "chunked_prefill_size": g.chunked_prefill_size(gpu_memory),
    }
    budget = frac * start_free + engines.CUDA_CONTEXT_BYTES
    return InferenceMemory(MemoryBreakdown(weights, kv_bytes, 0.0, engines.CUDA_CONTEXT_BYTES), budget,
                           dict(details, reserve_bytes=rest))


def _hf(spec: ModelSpec, gpu_memory: int, n_gpus: int, w: WeightFormat, kv: DType, context: int,
        batch: int) -> InferenceMemory:
    pre, layers, post = weight_bytes_by_layer(w, spec)
    splits = _split_layers(spec.num_layers, n_gpus)
    act_b = _act_bytes(w)
    worst: MemoryBreakdown | None = None
    for g, rng in enumerate(splits):
        weights = sum(layers[i] for i in rng) + (pre if g == 0 else 0.0) + (post if g == n_gpus - 1 else 0.0)
        kv_b = kv_cache_bytes(spec, context=context, batch=batch, bytes_per_element=kv.bytes, engine="hf",
                              layers=rng)
        # Prefill of the whole context at once, plus the last position's logits (fp32 + 16-bit copy).
        act = batch * context * act_b * _layer_temporaries_per_token(spec, 1)
        if g == n_gpus - 1:
            act += batch * spec.vocab_size * 6
        overhead = engines.CUDA_CONTEXT_BYTES + engines.CUBLAS_WORKSPACE_BYTES
        m = MemoryBreakdown(weights, kv_b, act, overhead)
        if worst is None or m.total > worst.total:
            worst = m
    assert worst is not None
    return InferenceMemory(worst, float(gpu_memory), {"layer_split": [len(r) for r in splits]})


def _llamacpp(spec: ModelSpec, gpu_memory: int, n_gpus: int, w: WeightFormat, kv: DType, context: int,
              batch: int) -> InferenceMemory:
    lc = engines.LLAMACPP
    pre, layers, post = weight_bytes_by_layer(w, spec)
    n_ctx = math.ceil(batch * context / lc.ctx_pad) * lc.ctx_pad  # one context shared by `batch` sequences
    splits = _split_layers(spec.num_layers, n_gpus)
    by_type: dict[str, float] = {}  # one layer's cache depends only on its attention type
    per_layer_kv = [by_type[t] if t in by_type else by_type.setdefault(t, kv_cache_bytes(
        spec, context=n_ctx, batch=1, bytes_per_element=kv.bytes, engine="llamacpp", layers=range(i, i + 1)))
        for i, t in enumerate(spec.layer_types)]
    attn_scratch = lc.n_ubatch * n_ctx * (2 if lc.flash_attention else 4 * spec.num_heads)
    logits = lc.n_ubatch * spec.vocab_size * 4
    worst: MemoryBreakdown | None = None
    for g, rng in enumerate(splits):
        last = g == n_gpus - 1
        weights = sum(layers[i] for i in rng) + (post if last else 0.0)
        kv_b = sum(per_layer_kv[i] for i in rng)
        act = max(attn_scratch * (lc.sched_copies if n_gpus > 1 else 1), logits if last else 0.0)
        m = MemoryBreakdown(weights, kv_b, act, engines.GGML_CUDA_CONTEXT_BYTES)
        if worst is None or m.total > worst.total:
            worst = m
    assert worst is not None
    # How many layers fit on the GPUs when not all do (-ngl): fill by bytes, output head last.
    capacity = n_gpus * gpu_memory - n_gpus * engines.GGML_CUDA_CONTEXT_BYTES - attn_scratch - logits
    used, gpu_layers = 0.0, 0
    for i in range(spec.num_layers):
        need = layers[i] + per_layer_kv[i]
        if used + need > capacity:
            break
        used += need
        gpu_layers += 1
    details = {
        "layer_split": [len(r) for r in splits],
        "n_ctx": n_ctx,
        "n_ubatch": lc.n_ubatch,
        "flash_attention": lc.flash_attention,
        "token_embedding_in_host_memory_bytes": pre,
        "gpu_layers": gpu_layers if gpu_layers < spec.num_layers else spec.num_layers,
        "cpu_layers": spec.num_layers - gpu_layers,
    }
    return InferenceMemory(worst, float(gpu_memory), details)


def inference_memory(spec: ModelSpec, *, gpu_memory: int, gpu_id: str = "", num_gpus: int = 1,
                     weights: WeightFormat, kv_dtype: DType, context: int, batch: int,
                     engine: str, vllm: VLLMOptions | None = None) -> InferenceMemory:
    """Memory on the most loaded of `num_gpus` GPUs of `gpu_memory` bytes each."""
    if engine == "vllm":
        return _vllm(spec, gpu_memory, gpu_id, num_gpus, weights, kv_dtype, context, batch, vllm)
    if engine == "sglang":
        return _sglang(spec, gpu_memory, num_gpus, weights, kv_dtype, context, batch, vllm)
    if engine == "hf":
        return _hf(spec, gpu_memory, num_gpus, weights, kv_dtype, context, batch)
    if engine == "llamacpp":
        return _llamacpp(spec, gpu_memory, num_gpus, weights, kv_dtype, context, batch)
    raise ValueError(f"unknown engine {engine!r}")
