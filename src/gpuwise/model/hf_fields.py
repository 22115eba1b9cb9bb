"""Reading a config.json's fields: typed access with the family's class defaults, and the fields most families share
(dtype, checkpoint quantization, per-layer attention types, head size, the Llama-style block)."""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigError
from .hf_defaults import CLASS_DEFAULTS
from .spec import FULL, SLIDING


_LAYERS, _WIDTH, _HEADS = 1024, 1 << 17, 4096
DIMENSION_BOUNDS: dict[str, int] = {
    # Layers: the deepest published decoder-only LLMs have 126 (Llama 3.1 405B) to 160 (some 1T MoEs); 1,024 is six
    # times that, and keeps every per-layer estimate fast (a config with 10^6 layers took 30 s and 2 GB).
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), _LAYERS),
    # Widths: the widest hidden size published is 25,600 (PaLM 540B: 18,432; Falcon 180B: 14,848); 131,072 is 5x.
    **dict.fromkeys(("hidden_size", "n_embd", "n_embed", "d_model", "word_embed_proj_dim"), _WIDTH),
    # FFN widths: 4-5x the hidden size, and MoE experts far narrower.
    **dict.fromkeys(("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", "moe_intermediate_size",
                     "shared_expert_intermediate_size", "intermediate_size_mlp",
                     "moe_shared_expert_intermediate_size", "shared_intermediate_size"), 4 * _WIDTH),
    # Heads and head sizes: 128 query heads at most in published models (DeepSeek-V3), heads of 64-256.
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "index_n_heads",
                     "linear_num_key_heads", "linear_num_value_heads", "mamba_num_heads", "mamba_n_heads"), _HEADS),
    **dict.fromkeys(("head_dim", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "index_head_dim",
                     "linear_key_head_dim", "linear_value_head_dim", "mamba_head_dim", "mamba_d_head"), 8192),
    # Vocabularies: 262,208 (Gemma 3) is the largest published; 16.7M is 64 times it.
    "vocab_size": 1 << 24,
    # Experts: 512 routed experts (Qwen3-Next) is the most published; 16,384 is 32 times it.
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"), 1 << 14),
}
"""Largest value accepted per config key, each far above any published model: a typo or a hostile file (10^9 layers)
is refused in one line instead of costing minutes and gigabytes. Positions and windows keep the generic 10^9."""


class Cfg:
    """Typed access to a config dict with the family's defaults and clear errors."""

    def __init__(self, raw: dict[str, Any], family: str) -> None:
        self.raw = raw
        self.family = family
        self.defaults = CLASS_DEFAULTS[family]

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
        bound = DIMENSION_BOUNDS.get(present[0] if present else key, 10**9)
        if value > bound:
            raise ConfigError(f"config.json: '{key}' = {value:,} is beyond any real model (at most {bound:,}: "
                              "gpuwise.model.hf_fields.DIMENSION_BOUNDS)")
        return value

    def bool(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"config.json: '{key}' must be true or false, got {value!r}")
        return value


def dtype(cfg: Cfg) -> str | None:
    value = cfg.raw.get("torch_dtype") or cfg.raw.get("dtype")
    return value if isinstance(value, str) else None


def checkpoint_quant(raw: dict[str, Any]) -> str | None:
    q = raw.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or q.get("fmt") in ("e4m3", "e5m2"):
        return "fp8"
    if method == "compressed-tensors":
        return _compressed_tensors(q) or method
    return method or None


# Module names as DeepSeek-style checkpoints spell them, one per kind of linear layer: which of them a
# compressed-tensors `ignore` list leaves unquantized decides whether only the routed experts are quantized.
_CT_PROBES = {"attention": "model.layers.1.self_attn.q_proj", "shared": "model.layers.1.mlp.shared_experts.gate_proj",
              "dense": "model.layers.0.mlp.gate_proj", "routed": "model.layers.1.mlp.experts.0.gate_proj"}


_NESTED_QUANTIFIER = re.compile(r"\([^)]*[*+{][^)]*\)\s*[*+{?]")


def _compressed_tensors(q: dict) -> str | None:
    """compressed-tensors' one weight scheme, as a gpuwise format name: symmetric grouped int4/int8 ("int4-sym-g32",
    "-experts" when its `ignore` list keeps attention, shared experts and dense MLPs unquantized); None otherwise."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        return None
    w = next(iter(groups.values()), {})
    w = w.get("weights") if isinstance(w, dict) else None
    if not isinstance(w, dict) or w.get("type") != "int" or w.get("strategy") != "group" or not w.get("symmetric"):
        return None
    bits, group = w.get("num_bits"), w.get("group_size")
    if bits not in (4, 8) or not isinstance(group, int) or isinstance(group, bool) or not 0 < group < 10_000:
        return None
    raw_ignore = q.get("ignore")
    ignore = [x for x in raw_ignore[:1000] if isinstance(x, str) and len(x) <= 200] if isinstance(raw_ignore, list) else []

    def ignored(name: str) -> bool:
        for pat in ignore:
            if pat == name:
                return True
            # a pattern from a file: skipped when a quantified group holds a quantifier (catastrophic backtracking)
            if not pat.startswith("re:") or _NESTED_QUANTIFIER.search(pat):
                continue
            try:
                if re.fullmatch(pat[3:], name):
                    return True
            except re.error:
                continue
        return False

    kept = {kind: ignored(name) for kind, name in _CT_PROBES.items()}
    experts = kept["attention"] and kept["shared"] and kept["dense"] and not kept["routed"]
    return f"int{bits}-sym-g{group}" + ("-experts" if experts else "")


def layer_types(cfg: Cfg, n_layers: int, sliding_window: int | None) -> tuple[str, ...]:
    """Per-layer attention type, as transformers' cache decides it (cache_utils.get_layer_types_and_kwargs)."""
    explicit = cfg.raw.get("layer_types")
    if isinstance(explicit, list) and explicit:
        if len(explicit) != n_layers:
            raise ConfigError(f"config.json: layer_types has {len(explicit)} entries for {n_layers} layers")
        return tuple(SLIDING if str(t) in ("sliding_attention", "chunked_attention") else FULL for t in explicit)
    return tuple(SLIDING if sliding_window is not None else FULL for _ in range(n_layers))


def head_dim(cfg: Cfg, hidden: int, heads: int) -> int:
    explicit = cfg.int("head_dim", required=False)
    if explicit is not None:
        return explicit
    if hidden % heads:
        raise ConfigError(f"config.json: hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    return hidden // heads


def common_llama_like(cfg: Cfg, **overrides: Any) -> dict[str, Any]:
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
        head_dim=head_dim(cfg, hidden, heads),
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
        torch_dtype=dtype(cfg),
        checkpoint_quant=checkpoint_quant(cfg.raw),
    )
    fields.update(overrides)
    return fields


def sliding(cfg: Cfg) -> int | None:
    return cfg.int("sliding_window", required=False)

