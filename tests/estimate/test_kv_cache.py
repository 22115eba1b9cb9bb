"""KV-cache bytes: worked numbers from the architectures (each computed by hand in the comment)."""

from __future__ import annotations

import pytest

from gpuwise.catalog.models import entry_spec, find_entry
from gpuwise.estimate.kv_cache import kv_bytes_per_token, kv_cache_bytes, state_bytes_per_sequence
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


def _meta_layer(model_type: str, **config):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg).model.layers


HYBRIDS = [
    ("qwen3_next", dict(num_hidden_layers=4, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, vocab_size=100, num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
                        full_attention_interval=2)),
    ("granitemoehybrid", dict(num_hidden_layers=3, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=100, layer_types=["mamba", "attention", "mamba"],
                              mamba_n_heads=4, mamba_d_state=8, mamba_n_groups=2, mamba_expand=1,
                              num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=32,
                              pad_token_id=0)),
    ("nemotron_h", dict(hybrid_override_pattern="M*-E", num_hidden_layers=4, hidden_size=64, intermediate_size=96,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=100, mamba_num_heads=4,
                        mamba_head_dim=16, ssm_state_size=8, n_groups=2, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, moe_shared_expert_intermediate_size=24)),
    ("qwen3_5_text", dict(num_hidden_layers=4, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=100, linear_num_key_heads=2,
                          linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
                          full_attention_interval=2)),
    ("falcon_h1", dict(num_hidden_layers=3, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=100, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_state=8,
                       mamba_n_groups=2)),
]
SSM_BYTES = {"nemotron_h": 4}  # NemotronHConfig.mamba_ssm_cache_dtype = "float32"; vLLM keeps the SSM state so


@pytest.mark.parametrize(("model_type", "config"), HYBRIDS, ids=[h[0] for h in HYBRIDS])
def test_recurrent_state_per_sequence_is_what_the_layers_keep(model_type: str, config: dict) -> None:
    """The state of each linear layer, from transformers' own layer dimensions: Gated DeltaNet keeps a
    head_k_dim x head_v_dim matrix per value head and the last kernel-1 inputs of its conv_dim-channel convolution
    (vLLM's gated_delta_net_state_shape); Mamba-2 a head_dim x ssm_state_size matrix per head and its convolution's
    window (mamba2_state_shape). Attention layers cache K/V per token only."""
    spec = spec_from_hf_config({"model_type": model_type, **config})
    expected = 0
    for layer in _meta_layer(model_type, **config):
        mixer = getattr(layer, "linear_attn", None) or getattr(layer, "mamba", None) or getattr(layer, "mixer", None)
        if mixer is None or not hasattr(mixer, "conv_dim"):
            continue  # attention, MLP or MoE
        if model_type in ("qwen3_next", "qwen3_5_text"):
            state = mixer.num_v_heads * mixer.head_k_dim * mixer.head_v_dim
        else:
            state = mixer.num_heads * mixer.head_dim * mixer.ssm_state_size
        expected += state * SSM_BYTES.get(model_type, 1) + mixer.conv_dim * (mixer.conv_kernel_size - 1)
    assert state_bytes_per_sequence(spec, bytes_per_element=1) == expected
    attention_layers = sum(1 for layer in _meta_layer(model_type, **config)
                           if any(hasattr(getattr(layer, name, None), "q_proj")
                                  for name in ("self_attn", "mixer")))
    assert attention_layers == spec.num_attention_layers
    assert kv_bytes_per_token(spec, 2) == attention_layers * 2 * spec.num_kv_heads * spec.head_dim * 2
    one = kv_cache_bytes(spec, context=1000, batch=1, bytes_per_element=2)
    assert kv_cache_bytes(spec, context=1000, batch=3, bytes_per_element=2) == 3 * one
    assert kv_cache_bytes(spec, context=2000, batch=1, bytes_per_element=2) - one == 1000 * kv_bytes_per_token(spec, 2)


def test_hybrid_models_fit_infer_and_train() -> None:
    import gpuwise

    r = gpuwise.fit("qwen3-next-80b-a3b-thinking", gpu="h100", num_gpus=4)
    assert r.fits and r.kv_cache_bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert gpuwise.infer("qwen3-next-80b-a3b-thinking", gpu="h100", num_gpus=4).tpot_s > 0
    assert gpuwise.train("qwen3-next-80b-a3b-thinking", gpu="h100", num_gpus=8, zero=3).perf.step.step_time_s > 0


def test_deepseek_sparse_attention_caches_its_indexer_keys() -> None:
    """DeepSeek-V3.2 in vLLM: the fp8_ds_mla latent (512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 656 B) and the
    indexer's key (128 fp8 + one fp32 scale = 132 B) per token and layer; vLLM's default cache for it is fp8_ds_mla.
    In bf16 the latent is (512 + 64) x 2 = 1,152 B; transformers decompresses it and keeps no indexer cache."""
    import gpuwise

    spec = spec_from_hf_config({"model_type": "deepseek_v32"})  # DeepseekV32Config's defaults: V3.2's shape
    assert kv_bytes_per_token(spec, 1, "vllm") == 61 * (656 + 132)
    assert kv_bytes_per_token(spec, 2, "vllm") == 61 * (1152 + 132)
    assert kv_bytes_per_token(spec, 2, "sglang") == 61 * (1152 + 132)
    assert kv_bytes_per_token(spec, 2, "hf") == 61 * 128 * (192 + 128) * 2
    v3 = spec_from_hf_config({"model_type": "deepseek_v3"})
    assert kv_bytes_per_token(v3, 1, "vllm") == 61 * 576  # plain fp8 MLA: no scales, no indexer
    r = gpuwise.fit(gpuwise.load_model("deepseek-r1"), gpu="h200", num_gpus=8)
    assert r.kv.name == "bf16"  # V3 keeps the model dtype


def test_glm5_caches_indexer_keys_only_where_a_layer_has_its_own_indexer() -> None:
    """GLM-5.2 (glm_moe_dsa with indexer_types 'shared'): a layer that reuses the previous layer's top-k has no
    indexer, so no indexer key in the cache; the latent is in every layer."""
    base = {"model_type": "glm_moe_dsa", "num_hidden_layers": 6, "first_k_dense_replace": 1}
    every = spec_from_hf_config(base)
    some = spec_from_hf_config({**base, "index_topk_pattern": "FSFSSF"})
    latent = 6 * (512 + 64) * 2
    key = 128 + 128 // 128 * 4  # fp8 key and one fp32 scale
    assert kv_bytes_per_token(every, 2, "vllm") == latent + 6 * key
    assert kv_bytes_per_token(some, 2, "vllm") == latent + 3 * key


def test_qwen35_keeps_its_recurrent_state_in_the_dtype_its_config_names() -> None:
    """Qwen3.5's config says mamba_ssm_dtype float32 and vLLM (Qwen3_5ForConditionalGenerationConfig) copies it into
    mamba_ssm_cache_dtype: the Gated DeltaNet state is fp32, its convolution window the model's 16 bits."""
    import json

    from gpuwise.catalog.models import MODELS_DIR, load_model

    spec = load_model("qwen3.5-27b").spec
    t = json.loads((MODELS_DIR / "qwen3.5-27b.json").read_text())["text_config"]
    assert t["mamba_ssm_dtype"] == "float32"
    heads, k, v = t["linear_num_value_heads"], t["linear_key_head_dim"], t["linear_value_head_dim"]
    conv = (2 * t["linear_num_key_heads"] * k + heads * v) * (t["linear_conv_kernel_dim"] - 1)
    linear_layers = sum(1 for x in t["layer_types"] if x == "linear_attention")
    assert state_bytes_per_sequence(spec) == linear_layers * (heads * k * v * 4 + conv * 2)
    nxt = load_model("qwen3-next-80b-a3b-thinking").spec  # no such key: the model's dtype
    assert nxt.linear.ssm_state_bytes is None


GEMMA4 = dict(num_hidden_layers=8, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, vocab_size=100, sliding_window=32, hidden_size_per_layer_input=0, attention_k_eq_v=True,
              global_head_dim=32, num_global_key_value_heads=1, num_kv_shared_layers=2)


def test_gemma4_caches_each_layer_in_its_own_shape_and_nothing_in_shared_layers() -> None:
    """Gemma 4's layers from transformers' own modules: a layer that reuses another's K/V caches nothing, the others
    2 x their KV heads x their head size per token (the keys serve as values in full layers, and both are cached);
    sliding layers hold at most the window."""
    spec = spec_from_hf_config({"model_type": "gemma4_text", **GEMMA4})
    per_token = window = 0
    for layer in _meta_layer("gemma4_text", **GEMMA4):
        attn = layer.self_attn
        if attn.is_kv_shared_layer:
            continue
        one = 2 * (attn.k_proj.out_features // attn.head_dim) * attn.head_dim * 2
        per_token += one
        window += one * (min(1000, 32) if attn.is_sliding else 1000)
    assert per_token > 0 and kv_bytes_per_token(spec, 2) == per_token
    assert kv_cache_bytes(spec, context=1000, batch=2, bytes_per_element=2) == 2 * window


def test_gemma4_answers_memory_and_says_it_is_not_timed() -> None:
    import gpuwise
    from gpuwise.errors import InvalidArgument

    spec_config = {"model_type": "gemma4_text", **GEMMA4}
    import json
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps(spec_config))
    assert gpuwise.fit(str(folder), gpu="h100").fits
    with pytest.raises(InvalidArgument, match="differ in attention shape"):
        gpuwise.infer(str(folder), gpu="h100")
