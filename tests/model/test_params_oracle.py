"""Parameter counts against the real oracle: transformers models built on the meta device.

For each supported family, small configs that exercise its options (biases, tying, MQA/GQA, MoE layer
patterns, MLA with and without q LoRA, OPT's projection, Falcon's three layouts ...) are built with
`AutoModelForCausalLM.from_config` under `torch.device("meta")` (no weights, CPU only), and
`sum(p.numel() for p in model.parameters())` must equal gpuwise's count exactly. The catalog's real
configs are checked the same way in test_catalog_params_oracle.py.
"""

from __future__ import annotations

import pytest

from gpuwise.model import spec_from_hf_config
from gpuwise.model.params import param_counts

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=256)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
MLA = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
           first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
           v_head_dim=8, n_group=2, topk_group=1)

CASES: list[tuple[str, dict]] = [
    ("llama", {**TINY}),
    ("llama", {**TINY, "tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True}),
    ("llama", {**TINY, "num_key_value_heads": 1, "head_dim": 32}),
    ("llama", {k: v for k, v in TINY.items() if k != "num_key_value_heads"}),  # kv heads default = heads
    ("mistral", {**TINY, "sliding_window": 32}),
    ("mistral", {**TINY, "head_dim": 24, "sliding_window": None}),
    ("mixtral", {**TINY, "num_local_experts": 4, "num_experts_per_tok": 2}),
    ("qwen2", {**TINY}),
    ("qwen2", {**TINY, "tie_word_embeddings": True, "use_sliding_window": True, "sliding_window": 16,
               "max_window_layers": 1}),
    ("qwen2_moe", {**TINY, **MOE, "shared_expert_intermediate_size": 48}),
    ("qwen2_moe", {**TINY, **MOE, "shared_expert_intermediate_size": 48, "decoder_sparse_step": 2,
                   "mlp_only_layers": [2]}),
    ("qwen3", {**TINY, "head_dim": 32}),
    ("qwen3", {**TINY, "tie_word_embeddings": True, "attention_bias": True}),
    ("qwen3_moe", {**TINY, **MOE, "head_dim": 16}),
    ("qwen3_moe", {**TINY, **MOE, "mlp_only_layers": [0]}),
    ("gemma", {**TINY, "head_dim": 16}),
    ("gemma2", {**TINY, "head_dim": 16, "sliding_window": 32}),
    ("gemma3_text", {**TINY, "head_dim": 16, "sliding_window": 32}),
    ("phi3", {**TINY, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 1}),
    ("phi3", {**TINY, "num_key_value_heads": 4, "tie_word_embeddings": True, "pad_token_id": 0,
              "bos_token_id": 1, "eos_token_id": 1}),
    ("olmo2", {**TINY}),
    ("deepseek_v2", {**TINY, **MLA}),
    ("deepseek_v2", {**TINY, **MLA, "q_lora_rank": None, "n_shared_experts": 2, "first_k_dense_replace": 0}),
    ("deepseek_v3", {**TINY, **MLA}),
    ("deepseek_v3", {**TINY, **MLA, "q_lora_rank": None, "first_k_dense_replace": 2}),
    ("deepseek_v32", {**TINY, **MLA, "num_key_value_heads": 4, "index_n_heads": 4, "index_head_dim": 8,
                      "index_topk": 16}),
    # GLM-5: V3.2's MLA, indexer and MoE; GLM-5.2's layers that reuse the previous indexer have none of their own
    ("glm_moe_dsa", {**TINY, **MLA, "num_hidden_layers": 6, "num_key_value_heads": 4, "index_n_heads": 4,
                     "index_head_dim": 8}),
    ("glm_moe_dsa", {**TINY, **MLA, "num_hidden_layers": 6, "num_key_value_heads": 4, "index_n_heads": 4,
                     "index_head_dim": 8, "index_topk_freq": 2, "index_skip_topk_offset": 3}),
    ("glm_moe_dsa", {**TINY, **MLA, "num_hidden_layers": 6, "num_key_value_heads": 4, "index_n_heads": 4,
                     "index_head_dim": 8, "index_topk_pattern": "FSFSSF",
                     "mlp_layer_types": ["sparse", "dense", "sparse", "dense", "sparse", "sparse"]}),
    ("minimax_m2", {**TINY, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2}),
    ("minimax_m2", {**TINY, "head_dim": 24, "num_local_experts": 4, "num_experts_per_tok": 1,
                    "tie_word_embeddings": True}),
    ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=96)),
    ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=96, n_inner=80)),
    ("gpt_neox", {**TINY, "intermediate_size": 128}),
    ("gpt_neox", {**TINY, "attention_bias": False, "tie_word_embeddings": True}),
    ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128)),  # multi-query
    ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                    new_decoder_architecture=True, num_kv_heads=2, bias=False)),
    ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                    multi_query=False, parallel_attn=False, bias=True, alibi=True)),
    ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                    new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1,
                    ffn_hidden_size=96, tie_word_embeddings=False)),
    ("opt", dict(hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                 max_position_embeddings=96, word_embed_proj_dim=64)),
    ("opt", dict(hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                 max_position_embeddings=96, word_embed_proj_dim=32, do_layer_norm_before=False)),
    ("opt", dict(hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                 max_position_embeddings=96, enable_bias=False)),
    ("bloom", dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=128)),
    # gpt-oss: biases on attention, router and experts, a sink per head, alternating sliding/full layers
    ("gpt_oss", {**TINY, "intermediate_size": 48, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2}),
    ("gpt_oss", {**TINY, "intermediate_size": 48, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                 "attention_bias": False, "tie_word_embeddings": True, "layer_types": ["full_attention"] * 3}),
    ("granite", {**TINY}),
    ("ministral", {**TINY, "head_dim": 16}),
    ("olmo3", {**TINY}),
    ("olmo3", {**TINY, "layer_types": ["full_attention", "sliding_attention", "full_attention"]}),
    ("exaone4", {**TINY, "head_dim": 16}),
    ("seed_oss", {**TINY, "head_dim": 16}),
    ("seed_oss", {**TINY, "head_dim": 16, "attention_bias": False, "attention_out_bias": True}),
    ("glm4", {**TINY, "head_dim": 16, "pad_token_id": 0}),
    ("nemotron", {**TINY, "head_dim": 16}),
    ("nemotron", {**TINY, "mlp_bias": True, "attention_bias": True, "tie_word_embeddings": True}),
    ("apertus", {**TINY, "head_dim": 16}),
    ("glm4_moe", {**TINY, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}),
    ("glm4_moe", {**TINY, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "first_k_dense_replace": 0, "n_shared_experts": 2, "attention_bias": True, "use_qk_norm": True,
                  "head_dim": 32, "n_group": 1, "topk_group": 1}),
    ("llama4_text", {**TINY, "head_dim": 16, "num_local_experts": 4, "intermediate_size_mlp": 80, "pad_token_id": 0}),
    ("llama4_text", {**TINY, "head_dim": 16, "num_local_experts": 4, "intermediate_size_mlp": 80, "pad_token_id": 0,
                     "interleave_moe_layer_step": 2, "num_experts_per_tok": 2, "tie_word_embeddings": True}),
    # hybrids: Gated DeltaNet (Qwen3-Next) and Mamba-2 (Granite 4) layers beside full attention
    ("qwen3_next", {**TINY, "num_hidden_layers": 4, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "linear_num_key_heads": 2,
                    "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                    "full_attention_interval": 2}),
    ("qwen3_next", {**TINY, "num_hidden_layers": 4, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "linear_num_key_heads": 2,
                    "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 12,
                    "linear_conv_kernel_dim": 3, "mlp_only_layers": [1], "tie_word_embeddings": True}),
    ("granitemoehybrid", {**TINY, "layer_types": ["mamba", "attention", "mamba"], "mamba_n_heads": 4,
                          "mamba_d_state": 8, "mamba_n_groups": 2, "mamba_expand": 1, "num_local_experts": 4,
                          "num_experts_per_tok": 2, "shared_intermediate_size": 32}),
    ("granitemoehybrid", {**TINY, "layer_types": ["mamba", "attention", "attention"], "mamba_n_heads": 8,
                          "mamba_d_state": 8, "mamba_expand": 2, "num_local_experts": 0,
                          "shared_intermediate_size": 48, "mamba_conv_bias": False, "mamba_proj_bias": True}),
    ("nemotron_h", {**TINY, "hybrid_override_pattern": "M*-E", "num_hidden_layers": 4, "mamba_num_heads": 4,
                    "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2, "head_dim": 16, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 24}),
    # Nemotron 3 Super/Ultra: latent MoE, the routed experts between projections to and from moe_latent_size
    ("nemotron_h", {**TINY, "hybrid_override_pattern": "ME*E", "num_hidden_layers": 4, "mamba_num_heads": 4,
                    "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2, "head_dim": 16, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 24,
                    "moe_latent_size": 40, "mlp_bias": True}),
    ("nemotron_h", {**TINY, "hybrid_override_pattern": "M-M*-", "num_hidden_layers": 5, "mamba_num_heads": 8,
                    "mamba_head_dim": 8, "ssm_state_size": 4, "n_groups": 1, "use_conv_bias": False,
                    "use_bias": True, "mlp_bias": True, "attention_bias": True, "tie_word_embeddings": True}),
    # Falcon-H1: attention and a Mamba-2 mixer side by side in every layer
    ("falcon_h1", {**TINY, "mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_state": 8, "mamba_n_groups": 2}),
    ("falcon_h1", {**TINY, "mamba_d_ssm": None, "mamba_expand": 2, "mamba_n_heads": 8, "mamba_d_state": 8,
                   "mamba_rms_norm": True, "projectors_bias": True, "mamba_proj_bias": True, "mamba_conv_bias": False,
                   "attention_bias": True, "tie_word_embeddings": True, "head_dim": 32}),
    # Qwen3.5: Qwen3-Next's Gated DeltaNet and gated attention, a dense MLP or a MoE in every layer
    ("qwen3_5_text", {**TINY, "num_hidden_layers": 4, "head_dim": 16, "linear_num_key_heads": 2,
                      "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 12,
                      "full_attention_interval": 2, "attention_bias": True}),
    ("qwen3_5_moe_text", {**TINY, **MOE, "num_hidden_layers": 4, "head_dim": 16, "linear_num_key_heads": 2,
                          "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 12,
                          "shared_expert_intermediate_size": 24, "tie_word_embeddings": True}),
    ("ministral3", {**TINY, "head_dim": 16}),
    # Gemma 4: full-attention layers of their own shape, K = V, per-layer inputs, shared K/V, a MoE beside the MLP
    ("gemma4_text", {**TINY, "num_hidden_layers": 6, "head_dim": 16, "sliding_window": 32,
                     "hidden_size_per_layer_input": 0}),
    ("gemma4_text", {**TINY, "num_hidden_layers": 6, "head_dim": 16, "sliding_window": 32,
                     "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 100, "attention_k_eq_v": True,
                     "global_head_dim": 32, "num_global_key_value_heads": 1}),
    ("gemma4_text", {**TINY, "num_hidden_layers": 8, "head_dim": 16, "sliding_window": 32,
                     "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 100, "num_kv_shared_layers": 2,
                     "use_double_wide_mlp": True}),
    ("gemma4_text", {**TINY, "num_hidden_layers": 6, "head_dim": 16, "sliding_window": 32,
                     "hidden_size_per_layer_input": 0, "enable_moe_block": True, "num_experts": 4,
                     "top_k_experts": 2, "moe_intermediate_size": 24, "attention_k_eq_v": True,
                     "num_global_key_value_heads": 1, "global_head_dim": 32, "tie_word_embeddings": False,
                     "attention_bias": True}),
    ("smollm3", {**TINY, "no_rope_layer_interval": 2, "pad_token_id": 0}),
    ("smollm3", {**TINY, "tie_word_embeddings": False, "attention_bias": True, "pad_token_id": 0}),
]


def transformers_param_count(config: dict) -> int:
    """What transformers instantiates: parameters of the CausalLM built on the meta device."""
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("family", "overrides"), CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_param_count_equals_transformers(family: str, overrides: dict) -> None:
    config = {"model_type": family, **overrides}
    expected = transformers_param_count(config)
    assert param_counts(spec_from_hf_config(config)).total == expected


def test_moe_active_params_are_total_minus_skipped_experts() -> None:
    config = {"model_type": "mixtral", **TINY, "num_local_experts": 4, "num_experts_per_tok": 1}
    counts = param_counts(spec_from_hf_config(config))
    # Each MoE layer holds 4 experts of 3 * 64 * 96 weights; a token uses 1 of them.
    per_expert = 3 * 64 * 96
    assert counts.routed_experts == 3 * 4 * per_expert
    assert counts.total - counts.active == 3 * 3 * per_expert


def test_gemma3_multimodal_wrapper_counts_its_language_model() -> None:
    text = {**TINY, "head_dim": 16, "sliding_window": 32}
    wrapper = {"model_type": "gemma3", "text_config": text, "vision_config": {"hidden_size": 32}}
    spec = spec_from_hf_config(wrapper)
    assert spec.family == "gemma3_text"
    assert any("vision" in n for n in spec.notes)
    assert param_counts(spec).total == transformers_param_count({"model_type": "gemma3_text", **text})


@pytest.mark.parametrize(("wrapper", "text_type"), [("llama4", "llama4_text"), ("gemma3", "gemma3_text"),
                                                    ("mistral3", "mistral")])
def test_vision_language_configs_count_their_language_model(wrapper: str, text_type: str) -> None:
    """Llama 4, Gemma 3 and Mistral Small 3 ship one config with the language model under text_config: that is what
    is counted, the vision tower left out and said so."""
    text = {**TINY, "head_dim": 16, "pad_token_id": 0, "tie_word_embeddings": False}
    if text_type == "llama4_text":
        text.update(num_local_experts=4, intermediate_size_mlp=80)
    wrapped = spec_from_hf_config({"model_type": wrapper, "torch_dtype": "bfloat16", "text_config": dict(text),
                                   "tie_word_embeddings": False})
    alone = spec_from_hf_config({"model_type": text_type, **text})
    assert param_counts(wrapped).total == param_counts(alone).total == transformers_param_count(
        {"model_type": text_type, **text})
    assert wrapped.torch_dtype == "bfloat16" and any("vision tower" in n for n in wrapped.notes)


VISION = {"qwen2_vl": dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2),
          "qwen2_5_vl": dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2),
          "qwen3_vl": dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2,
                           deepstack_visual_indexes=[0]),
          "qwen3_vl_moe": dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2,
                               deepstack_visual_indexes=[0]),
          "llava": dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                        num_attention_heads=2, image_size=32, patch_size=16)}
_V = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=16)
VISION.update({"llava_next": dict(_V, model_type="clip_vision_model"),
               "llava_next_video": dict(_V, model_type="clip_vision_model"),
               "llava_onevision": dict(_V, model_type="siglip_vision_model"),
               "internvl": dict(_V, image_size=[32, 32], patch_size=[16, 16]),
               "paligemma": dict(_V, model_type="siglip_vision_model"),
               "idefics3": dict(_V), "smolvlm": dict(_V),
               "gemma4": dict(_V, head_dim=16),
               "qwen3_5": dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2),
               "qwen3_5_moe": dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2)})
_DELTA = dict(head_dim=16, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
              linear_key_head_dim=8, linear_value_head_dim=12, full_attention_interval=2)
VLM_TEXT = {
    "qwen2_vl": {**TINY},
    "qwen2_5_vl": {**TINY, "tie_word_embeddings": True},
    "qwen3_vl": {**TINY, "head_dim": 16},
    "qwen3_vl_moe": {**TINY, **MOE, "head_dim": 16},
    "llava": {**TINY, "model_type": "llama"},
    "llava_next": {**TINY, "model_type": "llama"},
    "llava_next_video": {**TINY},
    "llava_onevision": {**TINY},
    "internvl": {**TINY},
    "paligemma": {**TINY, "head_dim": 16},
    "idefics3": {**TINY},
    "smolvlm": {**TINY},
    "gemma4": {**TINY, "num_hidden_layers": 6, "head_dim": 16, "sliding_window": 32, "hidden_size_per_layer_input": 0},
    "qwen3_5": {**TINY, **_DELTA},
    "qwen3_5_moe": {**TINY, **_DELTA, **MOE, "shared_expert_intermediate_size": 24},
}


TIES = [(None, None), (None, True), (True, None), (False, True)]
"""(the wrapper's tie_word_embeddings, text_config's): the wrapper's flag, or its class default, decides; Qwen2-VL,
Qwen2.5-VL and the LLaVA family also tie when only text_config says so."""


@pytest.mark.parametrize("wrapper", list(VLM_TEXT))
@pytest.mark.parametrize(("top", "inner"), TIES)
def test_vision_language_models_count_their_language_model_exactly(wrapper: str, top, inner) -> None:
    """The language model (and LM head) of the real vision-language model built on the meta device: every parameter
    outside the vision tower and its projector."""
    import warnings

    text = dict(VLM_TEXT[wrapper])
    text.pop("tie_word_embeddings", None)
    if inner is not None:
        text["tie_word_embeddings"] = inner
    outer = {} if top is None else {"tie_word_embeddings": top}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(wrapper, text_config=dict(text), vision_config=dict(VISION[wrapper]),
                                                **outer)
        with torch.device("meta"):
            model = transformers.AutoModelForImageTextToText.from_config(cfg)
    vision = ("visual", "vision_tower", "multi_modal_projector", "vision_model", "connector", "image_newline",
              "embed_vision", "embed_audio", "audio_tower")
    expected = sum(p.numel() for n, p in model.named_parameters() if not any(v in n for v in vision))
    spec = spec_from_hf_config({"model_type": wrapper, "text_config": text, **outer})
    assert param_counts(spec).total == expected and any("vision tower" in n for n in spec.notes)


def test_older_qwen_vl_configs_carry_the_language_model_at_the_top_level() -> None:
    flat = spec_from_hf_config({"model_type": "qwen2_5_vl", **TINY, "vision_config": VISION["qwen2_5_vl"]})
    nested = spec_from_hf_config({"model_type": "qwen2_5_vl", "text_config": dict(TINY)})
    assert param_counts(flat).total == param_counts(nested).total and flat.qkv_bias
