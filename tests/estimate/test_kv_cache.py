"""KV-cache bytes: worked numbers from the architectures (each computed by hand in the comment)."""

from __future__ import annotations

import pytest

from gpuwise.catalog.models import entry_spec, find_entry
from gpuwise.estimate.kv_cache import kv_bytes_per_token, kv_cache_bytes
from gpuwise.model import spec_from_hf_config


def spec(name: str):
    return entry_spec(find_entry(name))


def test_llama3_8b_gqa_bf16() -> None:
    # 2 (K,V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes
    assert kv_bytes_per_token(spec("llama-3-8b"), 2) == 2 * 32 * 8 * 128 * 2 == 131072


def test_llama2_7b_mha_fp16() -> None:
    assert kv_bytes_per_token(spec("llama-2-7b"), 2) == 2 * 32 * 32 * 128 * 2 == 524288


def test_falcon_7b_mqa() -> None:
    # Falcon-7B: multi-query, one KV head of 64 for 71 query heads, 32 layers
    assert kv_bytes_per_token(spec("falcon-7b"), 2) == 2 * 32 * 1 * 64 * 2 == 8192


def test_fp8_kv_halves_bf16() -> None:
    s = spec("llama-3.1-70b")
    assert kv_bytes_per_token(s, 1) * 2 == kv_bytes_per_token(s, 2) == 2 * 80 * 8 * 128 * 2


def test_tensor_parallel_splits_kv_heads_and_replicates_beyond_them() -> None:
    s = spec("llama-3.1-70b")  # 8 KV heads
    assert kv_bytes_per_token(s, 2, tp=4) == 2 * 80 * 2 * 128 * 2
    assert kv_bytes_per_token(s, 2, tp=8) == 2 * 80 * 1 * 128 * 2
    assert kv_bytes_per_token(s, 2, tp=16) == 2 * 80 * 1 * 128 * 2  # one head replicated per rank


def test_mistral_sliding_window_caps_every_layer() -> None:
    s = spec("mistral-7b-v0.1")  # sliding_window 4096 on all 32 layers
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_bytes_per_token(s, 2) == per_token  # the per-token figure is before the cap
    assert kv_cache_bytes(s, context=8192, batch=1, bytes_per_element=2) == 4096 * per_token
    assert kv_cache_bytes(s, context=1000, batch=3, bytes_per_element=2) == 3 * 1000 * per_token


def test_gemma2_9b_alternating_local_global() -> None:
    s = spec("gemma-2-9b")  # 42 layers, 8 KV heads x 256, every other layer slides over 4096 tokens
    per_layer_token = 2 * 8 * 256 * 2
    assert kv_bytes_per_token(s, 2) == 42 * per_layer_token == 344064
    expected = (21 * 8192 + 21 * 4096) * per_layer_token
    assert kv_cache_bytes(s, context=8192, batch=1, bytes_per_element=2) == expected == 2113929216


def test_gemma3_five_local_one_global() -> None:
    s = spec("gemma-3-1b")  # 26 layers; layers 5, 11, 17, 23 are global
    assert s.num_sliding_layers == 22
    per_layer_token = 2 * s.num_kv_heads * s.head_dim * 2
    expected = (4 * 32768 + 22 * s.sliding_window) * per_layer_token
    assert kv_cache_bytes(s, context=32768, batch=1, bytes_per_element=2) == expected


def test_deepseek_v3_mla_latent_vs_transformers_decompressed() -> None:
    s = spec("deepseek-v3")
    # MLA engines: 61 layers x (512 latent + 64 rope key) x 2 bytes
    assert kv_bytes_per_token(s, 2, engine="vllm") == 61 * (512 + 64) * 2 == 70272
    # transformers caches per-head K (128 nope + 64 rope) and V (128): 61 x 128 x 320 x 2
    assert kv_bytes_per_token(s, 2, engine="hf") == 61 * 128 * (192 + 128) * 2 == 4997120
    # the latent is replicated, not split, across tensor-parallel ranks
    assert kv_bytes_per_token(s, 2, engine="vllm", tp=8) == 70272


def test_falcon_new_decoder_hf_caches_expanded_heads() -> None:
    cfg = dict(model_type="falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
               new_decoder_architecture=True, num_kv_heads=2)
    s = spec_from_hf_config(cfg)
    assert kv_bytes_per_token(s, 2, engine="vllm") == 2 * 2 * 2 * 16 * 2
    assert kv_bytes_per_token(s, 2, engine="hf") == 2 * 2 * 4 * 16 * 2


def test_paged_blocks_round_up() -> None:
    s = spec("llama-3-8b")
    assert kv_cache_bytes(s, context=17, batch=1, bytes_per_element=2, block_tokens=16) == 32 * 131072


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-8b", "deepseek-v3", "gemma-2-9b"])
def test_kv_grows_linearly_with_batch(name: str) -> None:
    s = spec(name)
    one = kv_cache_bytes(s, context=3000, batch=1, bytes_per_element=2)
    assert kv_cache_bytes(s, context=3000, batch=5, bytes_per_element=2) == 5 * one
