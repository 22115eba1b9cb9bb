"""KV cache bytes, exact from the architecture.

Per token and layer a standard attention layer caches K and V: 2 x kv_heads x head_dim elements
(GQA/MQA shrink kv_heads). MLA layers (DeepSeek-V2/V3) cache, in MLA-aware engines (vLLM, SGLang,
llama.cpp), one compressed latent of kv_lora_rank plus the shared RoPE key of qk_rope_head_dim; Hugging
Face transformers caches the decompressed per-head K (qk_nope + qk_rope) and V (v_head_dim) instead.
Sliding-window layers hold at most `sliding_window` tokens.

Worked numbers (tests/estimate/test_kv_cache.py): Llama-3-8B in bf16 = 2 x 32 layers x 8 heads x 128
x 2 bytes = 131,072 B per token; DeepSeek-V3 latent in bf16 = 61 x (512 + 64) x 2 = 70,272 B per token.
"""

from __future__ import annotations

import math

from ..model.spec import LINEAR, NONE, SLIDING, ModelSpec

MLA_LATENT_ENGINES = frozenset({"vllm", "llamacpp", "sglang", "trtllm"})


def kv_elements_per_token_per_layer(spec: ModelSpec, engine: str = "vllm", tp: int = 1, layer: int = 0) -> int:
    """Cached elements one token adds to one layer (`layer`: which, where the shape varies by layer, as in Gemma 4)
    on one GPU (tensor-parallel degree `tp`)."""
    mla = spec.mla
    if mla is not None:
        if engine in MLA_LATENT_ENGINES:
            # The latent is not split by head: every TP rank holds all of it (vLLM's MLA backend).
            return mla.kv_lora_rank + mla.qk_rope_head_dim
        heads = math.ceil(spec.num_heads / tp)
        return heads * (mla.qk_head_dim + mla.v_head_dim)
    layer_kv_heads, head_dim = spec.kv_dims(layer)
    kv_heads = spec.num_heads if (engine == "hf" and spec.hf_expands_kv_cache) else layer_kv_heads
    # With tp > kv_heads, engines replicate KV heads so that each rank holds at least one.
    per_rank = math.ceil(kv_heads / tp)
    return 2 * per_rank * head_dim


INDEXER_QUANT_BLOCK = 128
"""DeepSeek-V3.2's indexer keys are cached in fp8 with one fp32 scale per 128 elements (vLLM's indexer cache of
index_head_dim + index_head_dim / 128 x 4 bytes; lightllm's Deepseek3_2MemoryManager likewise)."""


def kv_bytes_per_token_per_layer(spec: ModelSpec, bytes_per_element: float, engine: str = "vllm",
                                 tp: int = 1, layer: int = 0) -> float:
    """Bytes one token adds to one attention layer on one GPU: K/V (or the MLA latent) at `bytes_per_element`, and for
    DeepSeek Sparse Attention in MLA-aware engines the indexer's fp8 key, and with an fp8 cache in vLLM its fp8_ds_mla
    layout (one fp32 scale per 128 latent elements, the RoPE key kept in bf16: 656 B for DeepSeek-V3.2)."""
    out = kv_elements_per_token_per_layer(spec, engine, tp, layer) * bytes_per_element
    mla = spec.mla
    if mla is not None and mla.index_head_dim and engine in MLA_LATENT_ENGINES:
        # the indexer keys of the layers that have an indexer, spread evenly over the layers (GLM-5.2's shared layers
        # keep none): the sum over all layers is exact
        out += (mla.index_head_dim + mla.index_head_dim // INDEXER_QUANT_BLOCK * 4) * mla.indexer_share
        if engine == "vllm" and bytes_per_element == 1:
            out += mla.kv_lora_rank // INDEXER_QUANT_BLOCK * 4 + mla.qk_rope_head_dim * (2 - 1)
    return out


def kv_bytes_per_token(spec: ModelSpec, bytes_per_element: float, engine: str = "vllm", tp: int = 1) -> float:
    """Bytes one more cached token adds across the attention layers, before any sliding-window cap (per GPU)."""
    if not (spec.layer_kv or spec.kv_shared_layers):
        return spec.num_attention_layers * kv_bytes_per_token_per_layer(spec, bytes_per_element, engine, tp)
    return sum(kv_bytes_per_token_per_layer(spec, bytes_per_element, engine, tp, i) for i in range(spec.num_layers)
               if spec.caches_kv(i))


STATE_BYTES_PER_ELEMENT = 2.0
"""The recurrent state of hybrid models' linear layers, held in the model's 16-bit dtype: vLLM's mamba_cache_dtype and
mamba_ssm_cache_dtype default to "auto" (the model dtype) whatever --kv-cache-dtype says; transformers' cache too."""


def layer_state_bytes(spec: ModelSpec, tp: int = 1, bytes_per_element: float = STATE_BYTES_PER_ELEMENT) -> float:
    """Bytes of recurrent state (and convolution window) one sequence holds in one linear layer on one GPU (heads
    split over TP); 0 for a model without one."""
    lm = spec.linear
    if lm is None:
        return 0.0
    ssm_bytes = lm.ssm_state_bytes if lm.ssm_state_bytes is not None else bytes_per_element
    return (lm.ssm_elements * ssm_bytes + lm.conv_elements * bytes_per_element) / tp


def state_bytes_per_sequence(spec: ModelSpec, tp: int = 1, layers: range | None = None,
                             bytes_per_element: float = STATE_BYTES_PER_ELEMENT) -> float:
    """Bytes of recurrent state one sequence holds on one GPU (hybrid models' linear layers; heads split over TP)."""
    if spec.linear is None:
        return 0.0
    idx = layers if layers is not None else range(spec.num_layers)
    n = sum(1 for i in idx if spec.has_linear_mixer(i))
    return n * layer_state_bytes(spec, tp, bytes_per_element)


def cached_tokens(spec: ModelSpec, layer_type: str, context: int, block_tokens: int = 1) -> int:
    """Tokens a layer holds for one sequence of `context` tokens (sliding layers cap at the window; linear layers
    hold none: their state is `state_bytes_per_sequence`)."""
    if layer_type in (LINEAR, NONE):
        return 0
    n = context
    if layer_type == SLIDING and spec.sliding_window is not None:
        n = min(context, spec.sliding_window)
    if block_tokens > 1:  # paged caches allocate whole blocks
        n = math.ceil(n / block_tokens) * block_tokens
    return n


def kv_cache_bytes(
    spec: ModelSpec,
    *,
    context: int,
    batch: int,
    bytes_per_element: float,
    engine: str = "vllm",
    tp: int = 1,
    block_tokens: int = 1,
    layers: range | None = None,
) -> float:
    """KV cache bytes on one GPU for `batch` sequences of `context` tokens (optionally some layers only), with the
    recurrent state of hybrid models' linear layers."""
    idx = layers if layers is not None else range(spec.num_layers)
    held = {t: cached_tokens(spec, t, context, block_tokens) for t in ("full", SLIDING, LINEAR, NONE)}
    if spec.layer_kv or spec.kv_shared_layers:  # Gemma 4: each layer its own shape, shared layers nothing
        kv = sum(held[spec.layer_types[i]] * kv_bytes_per_token_per_layer(spec, bytes_per_element, engine, tp, i)
                 for i in idx if spec.caches_kv(i))
        return batch * (kv + state_bytes_per_sequence(spec, tp, idx))
    per_layer = kv_bytes_per_token_per_layer(spec, bytes_per_element, engine, tp)
    tokens = sum(held[spec.layer_types[i]] for i in idx)
    return batch * (tokens * per_layer + state_bytes_per_sequence(spec, tp, idx))
