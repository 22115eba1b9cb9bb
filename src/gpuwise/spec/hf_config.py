"""Hugging Face `config.json` -> `ModelSpec`.

One small parser per `model_type`. When a key is absent, the value is the default of that family's
configuration class in transformers (v5.23, `models/<family>/configuration_<family>.py`), because
that is what `AutoModelForCausalLM.from_config` would build; `tests/spec/test_params_oracle.py`
checks this by building the real models on the meta device.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import ConfigError
from .model import FULL, SLIDING, MLASpec, MoESpec, ModelSpec

# Class defaults of transformers' configuration classes (v5.23) for the keys gpuwise reads.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                  hidden_act="silu", max_position_embeddings=2048),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                    sliding_window=4096, hidden_act="silu", max_position_embeddings=131072),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                    sliding_window=None, hidden_act="silu", max_position_embeddings=131072,
                    num_local_experts=8, num_experts_per_tok=2),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, tie_word_embeddings=False, hidden_act="silu",
                  max_position_embeddings=32768, use_sliding_window=False, sliding_window=4096,
                  max_window_layers=28),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, tie_word_embeddings=False, hidden_act="silu",
                      max_position_embeddings=32768, use_sliding_window=False, sliding_window=4096,
                      max_window_layers=28, num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
                      shared_expert_intermediate_size=5632, decoder_sparse_step=1, mlp_only_layers=[]),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, head_dim=128, tie_word_embeddings=False, attention_bias=False,
                  hidden_act="silu", max_position_embeddings=32768, use_sliding_window=False,
                  sliding_window=4096, max_window_layers=28),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, tie_word_embeddings=False,
                      attention_bias=False, hidden_act="silu", max_position_embeddings=32768,
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28, num_experts=128,
                      num_experts_per_tok=8, moe_intermediate_size=768, decoder_sparse_step=1, mlp_only_layers=[]),
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, tie_word_embeddings=True,
                  attention_bias=False, hidden_act="gelu_pytorch_tanh", max_position_embeddings=8192),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                   attention_bias=False, sliding_window=4096, max_position_embeddings=8192,
                   hidden_activation="gelu_pytorch_tanh"),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                        attention_bias=False, sliding_window=4096, max_position_embeddings=131072,
                        hidden_activation="gelu_pytorch_tanh", sliding_window_pattern=6),
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, tie_word_embeddings=False, sliding_window=None, hidden_act="silu",
                 max_position_embeddings=4096),
    "gpt2": dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024, n_inner=None,
                 tie_word_embeddings=True, activation_function="gelu_new"),
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, intermediate_size=24576, num_hidden_layers=44,
                     num_attention_heads=64, tie_word_embeddings=False, attention_bias=True, hidden_act="gelu",
                     max_position_embeddings=2048),
    "falcon": dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                   num_kv_heads=None, ffn_hidden_size=None, multi_query=True, new_decoder_architecture=False,
                   parallel_attn=True, bias=False, alibi=False, num_ln_in_parallel_attn=None,
                   tie_word_embeddings=True, max_position_embeddings=2048, activation="gelu"),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072,
                word_embed_proj_dim=None, enable_bias=True, do_layer_norm_before=True,
                _remove_final_layer_norm=False, layer_norm_elementwise_affine=True, tie_word_embeddings=True,
                max_position_embeddings=2048, activation_function="relu"),
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                        hidden_act="silu", max_position_embeddings=2048, n_routed_experts=64,
                        num_experts_per_tok=None, moe_intermediate_size=1407, n_shared_experts=2,
                        first_k_dense_replace=0, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                        qk_rope_head_dim=64, v_head_dim=128),
    "deepseek_v3": dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
                        num_attention_heads=128, tie_word_embeddings=False, attention_bias=False,
                        hidden_act="silu", max_position_embeddings=4096, n_routed_experts=256,
                        num_experts_per_tok=8, moe_intermediate_size=2048, n_shared_experts=1,
                        first_k_dense_replace=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                        qk_rope_head_dim=64, v_head_dim=128),
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, tie_word_embeddings=False, attention_bias=False, hidden_act="silu",
                  max_position_embeddings=2048),
    "bloom": dict(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, tie_word_embeddings=True),
}

SUPPORTED_FAMILIES: tuple[str, ...] = tuple(sorted(_DEFAULTS)) + ("gemma3",)

# Old names still found in config.json files on the Hub.
_ALIASES = {"RefinedWeb": "falcon", "RefinedWebModel": "falcon", "gemma3_text": "gemma3_text"}


class _Cfg:
    """Typed access to a config dict with the family's defaults and clear errors."""

    def __init__(self, raw: dict[str, Any], family: str) -> None:
        self.raw = raw
        self.family = family
        self.defaults = _DEFAULTS[family]

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.raw and self.raw[key] is not None:
            return self.raw[key]
        if key in self.raw:  # explicitly null in the file
            return None
        return self.defaults.get(key, default)

    def int(self, key: str, *fallback_keys: str, required: bool = True, minimum: int = 1) -> int | None:
        keys = (key, *fallback_keys)
        # A key present in the file wins over the class default of another spelling (BLOOM's n_embed).
        # An explicit null (DeepSeek-V2-Lite's q_lora_rank) means "none", not "the default".
        present = [k for k in keys if k in self.raw]
        value = self.raw[present[0]] if present else next(
            (self.defaults[k] for k in keys if self.defaults.get(k) is not None), None)
        if value is None:
            if required:
                raise ConfigError(f"config.json ({self.family}) has no '{key}'")
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config.json: '{key}' must be an integer, got {value!r}")
        if value < minimum:
            raise ConfigError(f"config.json: '{key}' must be >= {minimum}, got {value}")
        if value > 10**9:
            raise ConfigError(f"config.json: '{key}' = {value} is absurdly large")
        return value

    def bool(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"config.json: '{key}' must be true or false, got {value!r}")
        return value


def _dtype(cfg: _Cfg) -> str | None:
    value = cfg.raw.get("torch_dtype") or cfg.raw.get("dtype")
    return value if isinstance(value, str) else None


def _checkpoint_quant(raw: dict[str, Any]) -> str | None:
    q = raw.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or q.get("fmt") in ("e4m3", "e5m2"):
        return "fp8"
    return method or None


def _layer_types(cfg: _Cfg, n_layers: int, sliding_window: int | None) -> tuple[str, ...]:
    """Per-layer attention type, as transformers' cache decides it (cache_utils.get_layer_types_and_kwargs)."""
    explicit = cfg.raw.get("layer_types")
    if isinstance(explicit, list) and explicit:
        if len(explicit) != n_layers:
            raise ConfigError(f"config.json: layer_types has {len(explicit)} entries for {n_layers} layers")
        return tuple(SLIDING if str(t) in ("sliding_attention", "chunked_attention") else FULL for t in explicit)
    return tuple(SLIDING if sliding_window is not None else FULL for _ in range(n_layers))


def _head_dim(cfg: _Cfg, hidden: int, heads: int) -> int:
    explicit = cfg.int("head_dim", required=False)
    if explicit is not None:
        return explicit
    if hidden % heads:
        raise ConfigError(f"config.json: hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    return hidden // heads


def _common_llama_like(cfg: _Cfg, **overrides: Any) -> dict[str, Any]:
    """Fields shared by the Llama-style families (RMSNorm, gated MLP, RoPE, separate q/k/v/o)."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    kv = cfg.int("num_key_value_heads", required=False) or heads
    n_layers = cfg.int("num_hidden_layers")
    attn_bias = cfg.bool("attention_bias")
    fields: dict[str, Any] = dict(
        family=cfg.family,
        hidden_size=hidden,
        num_layers=n_layers,
        vocab_size=cfg.int("vocab_size"),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=_head_dim(cfg, hidden, heads),
        intermediate_size=cfg.int("intermediate_size"),
        gated_mlp=True,
        activation=str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu"),
        norm="rmsnorm",
        norm_bias=False,
        norms_per_layer=2,
        qkv_bias=attn_bias,
        o_bias=attn_bias,
        mlp_bias=cfg.bool("mlp_bias"),
        tie_word_embeddings=cfg.bool("tie_word_embeddings"),
        position="rope",
        max_position_embeddings=cfg.int("max_position_embeddings", required=False),
        torch_dtype=_dtype(cfg),
        checkpoint_quant=_checkpoint_quant(cfg.raw),
    )
    fields.update(overrides)
    return fields


def _sliding(cfg: _Cfg) -> int | None:
    return cfg.int("sliding_window", required=False)


def _llama(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg)
    return ModelSpec(**f, layer_types=_layer_types(cfg, f["num_layers"], None))


def _mistral(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False)
    window = _sliding(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_layer_types(cfg, f["num_layers"], window))


def _mixtral(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False)
    window = _sliding(cfg)
    n = f["num_layers"]
    moe = MoESpec(
        num_experts=cfg.int("num_local_experts"),
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=f["intermediate_size"],
        moe_layers=(True,) * n,
    )
    f["intermediate_size"] = 0
    return ModelSpec(**f, sliding_window=window, layer_types=_layer_types(cfg, n, window), moe=moe)


def _qwen_window(cfg: _Cfg) -> int | None:
    return _sliding(cfg) if cfg.bool("use_sliding_window") else None


def _qwen_layer_types(cfg: _Cfg, n: int, window: int | None, moe_rule: bool = False) -> tuple[str, ...]:
    if isinstance(cfg.raw.get("layer_types"), list):
        return _layer_types(cfg, n, window)
    mwl = cfg.int("max_window_layers", required=False, minimum=0) or 0
    if moe_rule:  # configuration_qwen2_moe.py: alternate layers below max_window_layers
        return tuple(
            SLIDING if ((i + 1) % 2 and i < mwl and cfg.bool("use_sliding_window")) else FULL for i in range(n)
        )
    return tuple(SLIDING if (window is not None and i >= mwl) else FULL for i in range(n))


def _qwen2(cfg: _Cfg) -> ModelSpec:
    # modeling_qwen2.py: q/k/v carry a bias, o_proj does not (hard-coded, not a config key).
    f = _common_llama_like(cfg, qkv_bias=True, o_bias=False, mlp_bias=False)
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_qwen_layer_types(cfg, f["num_layers"], window))


def _qwen_moe_layers(cfg: _Cfg, n: int, num_experts: int) -> tuple[bool, ...]:
    only_dense = set(cfg.get("mlp_only_layers") or [])
    step = cfg.int("decoder_sparse_step")
    return tuple((i not in only_dense) and num_experts > 0 and (i + 1) % step == 0 for i in range(n))


def _qwen2_moe(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, qkv_bias=True, o_bias=False, mlp_bias=False)
    n = f["num_layers"]
    experts = cfg.int("num_experts", minimum=0)
    shared = cfg.int("shared_expert_intermediate_size", minimum=0)
    moe = MoESpec(
        num_experts=experts,
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=cfg.int("moe_intermediate_size"),
        shared_intermediate_size=shared,
        shared_expert_gate=True,
        moe_layers=_qwen_moe_layers(cfg, n, experts),
    )
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_qwen_layer_types(cfg, n, window, moe_rule=True),
                     moe=moe)


def _qwen3(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, mlp_bias=False, qk_norm="head")
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_qwen_layer_types(cfg, f["num_layers"], window))


def _qwen3_moe(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, mlp_bias=False, qk_norm="head")
    n = f["num_layers"]
    experts = cfg.int("num_experts", minimum=0)
    moe = MoESpec(
        num_experts=experts,
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=cfg.int("moe_intermediate_size"),
        moe_layers=_qwen_moe_layers(cfg, n, experts),
    )
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_layer_types(cfg, n, window), moe=moe)


def _gemma(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, mlp_bias=False)
    return ModelSpec(**f, layer_types=_layer_types(cfg, f["num_layers"], None))


def _gemma2(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, mlp_bias=False, norms_per_layer=4)
    n = f["num_layers"]
    window = _sliding(cfg)
    if isinstance(cfg.raw.get("layer_types"), list):
        types = _layer_types(cfg, n, window)
    else:  # configuration_gemma2.py: even layers (0, 2, ...) use the sliding window
        types = tuple(SLIDING if (i + 1) % 2 else FULL for i in range(n))
    return ModelSpec(**f, sliding_window=window, layer_types=types)


def _gemma3_text(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, mlp_bias=False, norms_per_layer=4, qk_norm="head")
    n = f["num_layers"]
    window = _sliding(cfg)
    if isinstance(cfg.raw.get("layer_types"), list):
        types = _layer_types(cfg, n, window)
    else:  # configuration_gemma3.py: 5 sliding layers, then 1 global, repeated
        pattern = cfg.int("sliding_window_pattern")
        types = tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n))
    return ModelSpec(**f, sliding_window=window, layer_types=types)


def _phi3(cfg: _Cfg) -> ModelSpec:
    f = _common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False, fused_qkv=True)
    window = _sliding(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_layer_types(cfg, f["num_layers"], window))


def _olmo2(cfg: _Cfg) -> ModelSpec:
    # modeling_olmo2.py: q_norm/k_norm over all heads; norms after attention and after the MLP only.
    f = _common_llama_like(cfg, mlp_bias=False, qk_norm="full")
    return ModelSpec(**f, layer_types=_layer_types(cfg, f["num_layers"], None))


def _gpt_dims(cfg: _Cfg, hidden_key: str) -> tuple[int, int, int]:
    """(hidden, heads, layers) for the GPT-2/BLOOM spellings (n_embd/n_embed, n_head, n_layer)."""
    hidden = cfg.int(hidden_key, "hidden_size")
    heads = cfg.int("n_head", "num_attention_heads")
    n = cfg.int("n_layer", "num_hidden_layers")
    if hidden % heads:
        raise ConfigError(f"config.json: {hidden_key} {hidden} is not divisible by n_head {heads}")
    return hidden, heads, n


def _gpt2(cfg: _Cfg) -> ModelSpec:
    hidden, heads, n = _gpt_dims(cfg, "n_embd")
    positions = cfg.int("n_positions", "max_position_embeddings")
    return ModelSpec(
        family="gpt2", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=hidden // heads,
        intermediate_size=cfg.int("n_inner", required=False) or 4 * hidden, gated_mlp=False,
        activation=str(cfg.get("activation_function")), norm="layernorm", norm_bias=True, norms_per_layer=2,
        qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
        tie_word_embeddings=cfg.bool("tie_word_embeddings", True), position="learned",
        learned_positions=positions, max_position_embeddings=positions, layer_types=(FULL,) * n,
        torch_dtype=_dtype(cfg),
    )


def _gpt_neox(cfg: _Cfg) -> ModelSpec:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    n = cfg.int("num_hidden_layers")
    bias = cfg.bool("attention_bias", True)
    return ModelSpec(
        family="gpt_neox", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=_head_dim(cfg, hidden, heads), intermediate_size=cfg.int("intermediate_size"),
        gated_mlp=False, activation=str(cfg.get("hidden_act")), norm="layernorm", norm_bias=True,
        norms_per_layer=2, qkv_bias=bias, o_bias=bias, mlp_bias=True, fused_qkv=True,
        tie_word_embeddings=cfg.bool("tie_word_embeddings"), position="rope",
        max_position_embeddings=cfg.int("max_position_embeddings", required=False), layer_types=(FULL,) * n,
        torch_dtype=_dtype(cfg),
    )


def _falcon(cfg: _Cfg) -> ModelSpec:
    raw = dict(cfg.raw)
    # Very old Falcon configs (model_type RefinedWeb/RefinedWebModel) used n_head/n_layer/n_head_kv.
    for old, new in (("n_head", "num_attention_heads"), ("n_layer", "num_hidden_layers"),
                     ("n_head_kv", "num_kv_heads"), ("n_embed", "hidden_size")):
        if old in raw and new not in raw:
            raw[new] = raw[old]
    if raw.get("model_type") == "RefinedWeb":
        raw.setdefault("new_decoder_architecture", True)
    cfg = _Cfg(raw, "falcon")
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    n = cfg.int("num_hidden_layers")
    new_arch = cfg.bool("new_decoder_architecture")
    multi_query = cfg.bool("multi_query", True)
    if new_arch or not multi_query:
        kv = cfg.int("num_kv_heads", required=False) or heads
    else:
        kv = 1
    parallel = cfg.bool("parallel_attn", True)
    n_ln = cfg.int("num_ln_in_parallel_attn", required=False)
    if n_ln is None and new_arch:
        n_ln = 2
    norms = 2 if (not parallel or n_ln == 2) else 1
    bias = cfg.bool("bias")
    alibi = cfg.bool("alibi")
    return ModelSpec(
        family="falcon", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=kv, head_dim=_head_dim(cfg, hidden, heads),
        intermediate_size=cfg.int("ffn_hidden_size", required=False) or 4 * hidden, gated_mlp=False,
        activation=str(cfg.get("activation")), norm="layernorm", norm_bias=True, norms_per_layer=norms,
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, fused_qkv=True,
        tie_word_embeddings=cfg.bool("tie_word_embeddings", True), position="alibi" if alibi else "rope",
        max_position_embeddings=cfg.int("max_position_embeddings", required=False), layer_types=(FULL,) * n,
        torch_dtype=_dtype(cfg),
        # modeling_falcon.py broadcasts K/V to every query head before caching when new_decoder_architecture.
        hf_expands_kv_cache=new_arch and kv != heads,
    )


def _opt(cfg: _Cfg) -> ModelSpec:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    n = cfg.int("num_hidden_layers")
    proj = cfg.int("word_embed_proj_dim", required=False) or hidden
    bias = cfg.bool("enable_bias", True)
    max_pos = cfg.int("max_position_embeddings")
    final_norm = cfg.bool("do_layer_norm_before", True) and not cfg.bool("_remove_final_layer_norm")
    if not cfg.bool("layer_norm_elementwise_affine", True):
        raise ConfigError("config.json: OPT with layer_norm_elementwise_affine=false is not supported")
    return ModelSpec(
        family="opt", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=_head_dim(cfg, hidden, heads), intermediate_size=cfg.int("ffn_dim"),
        gated_mlp=False, activation=str(cfg.get("activation_function")), norm="layernorm", norm_bias=True,
        norms_per_layer=2, qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        tie_word_embeddings=cfg.bool("tie_word_embeddings", True), position="learned",
        learned_positions=max_pos + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2 rows
        final_norm=final_norm, embed_proj_dim=proj if proj != hidden else None,
        max_position_embeddings=max_pos, layer_types=(FULL,) * n, torch_dtype=_dtype(cfg),
    )


def _bloom(cfg: _Cfg) -> ModelSpec:
    hidden, heads, n = _gpt_dims(cfg, "n_embed")
    return ModelSpec(
        family="bloom", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=hidden // heads, intermediate_size=4 * hidden, gated_mlp=False,
        activation="gelu", norm="layernorm", norm_bias=True, norms_per_layer=2, qkv_bias=True, o_bias=True,
        mlp_bias=True, fused_qkv=True, tie_word_embeddings=cfg.bool("tie_word_embeddings", True),
        position="alibi", embedding_norm=True, max_position_embeddings=None, layer_types=(FULL,) * n,
        torch_dtype=_dtype(cfg),
    )


def _deepseek(cfg: _Cfg) -> ModelSpec:
    v3 = cfg.family == "deepseek_v3"
    f = _common_llama_like(cfg, mlp_bias=False if v3 else cfg.bool("mlp_bias"))
    n = f["num_layers"]
    mla = MLASpec(
        q_lora_rank=cfg.int("q_lora_rank", required=False),
        kv_lora_rank=cfg.int("kv_lora_rank"),
        qk_nope_head_dim=cfg.int("qk_nope_head_dim"),
        qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
        v_head_dim=cfg.int("v_head_dim"),
    )
    first_dense = cfg.int("first_k_dense_replace", required=False, minimum=0) or 0
    experts = cfg.int("n_routed_experts")
    top_k = cfg.int("num_experts_per_tok")
    moe = MoESpec(
        num_experts=experts,
        top_k=top_k,
        expert_intermediate_size=cfg.int("moe_intermediate_size"),
        shared_intermediate_size=(cfg.int("n_shared_experts", required=False, minimum=0) or 0)
        * cfg.int("moe_intermediate_size"),
        moe_layers=tuple(i >= first_dense for i in range(n)),
    )
    notes: tuple[str, ...] = ()
    if cfg.raw.get("num_nextn_predict_layers"):
        notes = ("multi-token-prediction layers are not counted (transformers does not instantiate them)",)
    # MLA: 'head_dim' in transformers' config is the rope dim; the attention uses MLASpec's dims.
    f["head_dim"] = mla.qk_head_dim
    return ModelSpec(**f, mla=mla, moe=moe, layer_types=(FULL,) * n, notes=notes)


_PARSERS: dict[str, Callable[[_Cfg], ModelSpec]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2, "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3, "qwen3_moe": _qwen3_moe, "gemma": _gemma, "gemma2": _gemma2, "gemma3_text": _gemma3_text,
    "phi3": _phi3, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "falcon": _falcon, "opt": _opt, "bloom": _bloom,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "olmo2": _olmo2,
}


def spec_from_hf_config(raw: Any) -> ModelSpec:
    """Parse a Hugging Face config dict into a `ModelSpec`; `ConfigError` (one line) on anything wrong."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json must hold a JSON object")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError("config.json has no 'model_type'")
    notes: tuple[str, ...] = ()
    if model_type == "gemma3":  # multimodal wrapper: the language model is text_config
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError("config.json: gemma3 config without a 'text_config' object")
        text = dict(text)
        text.setdefault("model_type", "gemma3_text")
        text.setdefault("torch_dtype", raw.get("torch_dtype") or raw.get("dtype"))
        raw = text
        model_type = "gemma3_text"
        notes = ("language model only: the vision tower and projector (~0.4B params) are not counted",)
    family = _ALIASES.get(model_type, model_type)
    parser = _PARSERS.get(family)
    if parser is None:
        raise ConfigError(
            f"unsupported model_type '{model_type}'; supported: {', '.join(SUPPORTED_FAMILIES)}"
        )
    try:
        spec = parser(_Cfg(raw, family))
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"config.json ({model_type}) is inconsistent: {exc}") from None
    from dataclasses import replace

    hidden_p, attn_p = _dropout(raw, family)
    return replace(spec, notes=spec.notes + notes, hidden_dropout=hidden_p, attention_dropout=attn_p)


# Dropout probabilities: config keys per meaning, and the class defaults where they are not 0
# (GPT2Config: resid/embd/attn_pdrop 0.1; OPTConfig: dropout 0.1).
_DROPOUT_KEYS = {"hidden": ("resid_pdrop", "hidden_dropout", "dropout"), "attention": ("attn_pdrop", "attention_dropout")}
_DROPOUT_DEFAULTS = {"gpt2": (0.1, 0.1), "opt": (0.1, 0.0)}


def _dropout(raw: dict[str, Any], family: str) -> tuple[float, float]:
    defaults = _DROPOUT_DEFAULTS.get(family, (0.0, 0.0))
    out = []
    for keys, default in zip(_DROPOUT_KEYS.values(), defaults):
        value = next((raw[k] for k in keys if isinstance(raw.get(k), (int, float)) and not isinstance(raw.get(k), bool)), default)
        if not 0.0 <= float(value) < 1.0:
            raise ConfigError(f"config.json: dropout probability {value} is outside [0, 1)")
        out.append(float(value))
    return out[0], out[1]
