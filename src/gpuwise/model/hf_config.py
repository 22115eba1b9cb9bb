"""Hugging Face `config.json` -> `ModelSpec`.

One small parser per `model_type`. When a key is absent, the value is the default of that family's
configuration class in transformers (v5.23, `models/<family>/configuration_<family>.py`), because
that is what `AutoModelForCausalLM.from_config` would build; `tests/model/test_params_oracle.py`
checks this by building the real models on the meta device.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .hf_defaults import CLASS_DEFAULTS
from .hf_families import PARSERS
from .hf_fields import Cfg
from .spec import ModelSpec

MULTIMODAL_WRAPPERS: dict[str, tuple[str, str, bool]] = {
    "gemma3": ("gemma3_text", "~0.4B params", True),
    "gemma4": ("gemma4_text", "~0.2-0.6B params (vision, audio)", True),
    "llama4": ("llama4_text", "~0.9B params", False),
    "mistral3": ("mistral", "~0.4B params", True),
    "qwen2_vl": ("qwen2_vl_text", "~0.7B params", False),
    "qwen2_5_vl": ("qwen2_5_vl_text", "~0.7B params", False),
    "qwen3_vl": ("qwen3_vl_text", "~0.4-0.6B params", False),
    "qwen3_vl_moe": ("qwen3_vl_moe_text", "~0.6B params", False),
    "qwen3_5": ("qwen3_5_text", "~0.4-0.6B params", False),
    "kimi_k25": ("kimi_k2", "~0.4B params (MoonViT)", False),
    "qwen3_5_moe": ("qwen3_5_moe_text", "~0.4-0.6B params", False),
    "llava": ("llama", "~0.3-0.6B params", False),
    "llava_next": ("llama", "~0.3-0.6B params", False),
    "llava_next_video": ("llama", "~0.3-0.6B params", False),
    "llava_onevision": ("qwen2", "~0.4B params", False),
    "internvl": ("qwen2", "~0.3B (InternViT-300M) to ~6B params", True),
    "paligemma": ("gemma", "~0.4B params", True),
    "idefics3": ("llama", "~0.4B params", False),
    "smolvlm": ("llama", "~0.1-0.4B params", False),
}
FLAT_TEXT_WRAPPERS = frozenset({"qwen2_vl", "qwen2_5_vl"})
TEXT_TIE_FORWARDED = frozenset({"qwen2_vl", "qwen2_5_vl", "llava", "llava_next_video",
                                "llava_onevision"})
"""Wrappers that also tie when only text_config says so (their configs forward a pre-v5 text_config flag)."""
"""Wrappers whose older config.json files carry the language model's keys at the top level (no text_config)."""
"""Vision-language configs whose language model is their `text_config`: (its default model_type, the size of what is
left out, the wrapper class's tie_word_embeddings default). The wrapper's own tie_word_embeddings decides whether the
LM head is tied, whatever text_config says (checked on the meta device: tests/model/test_params_oracle.py)."""

SUPPORTED_FAMILIES: tuple[str, ...] = tuple(sorted(CLASS_DEFAULTS)) + tuple(MULTIMODAL_WRAPPERS) + ("kimi_k2",)

# Old names still found in config.json files on the Hub.
_ALIASES = {"RefinedWeb": "falcon", "RefinedWebModel": "falcon", "gemma3_text": "gemma3_text",
            # Kimi K2 ships DeepSeek-V3's remote code under its own model_type (architectures DeepseekV3ForCausalLM)
            "kimi_k2": "deepseek_v3"}


def spec_from_hf_config(raw: Any) -> ModelSpec:
    """Parse a Hugging Face config dict into a `ModelSpec`; `ConfigError` (one line) on anything wrong."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json must hold a JSON object")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError("config.json has no 'model_type'")
    notes: tuple[str, ...] = ()
    wrapper = None
    if model_type in MULTIMODAL_WRAPPERS:  # the language model is text_config
        text_type, tower, tie_default = MULTIMODAL_WRAPPERS[model_type]
        text = raw.get("text_config")
        if not isinstance(text, dict) and model_type in FLAT_TEXT_WRAPPERS:
            text = {k: v for k, v in raw.items() if k not in ("vision_config", "model_type", "text_config")}
        if not isinstance(text, dict):
            raise ConfigError(f"config.json: {model_type} config without a 'text_config' object")
        text = dict(text)
        tie = raw.get("tie_word_embeddings", tie_default)  # the wrapper's flag ties
        if not tie and model_type in TEXT_TIE_FORWARDED and text.get("tie_word_embeddings") is True:
            tie = True
        text["tie_word_embeddings"] = tie
        text.setdefault("model_type", text_type)
        text.setdefault("torch_dtype", raw.get("torch_dtype") or raw.get("dtype"))
        if "quantization_config" in raw:
            text.setdefault("quantization_config", raw["quantization_config"])
        raw, wrapper = text, model_type
        model_type = str(text["model_type"])
        notes = (f"language model only: the vision tower and projector ({tower}) are not counted",)
    family = _ALIASES.get(model_type, model_type)
    parser = PARSERS.get(family)
    if parser is None:
        raise ConfigError(
            f"unsupported model_type '{model_type}'; supported: {', '.join(SUPPORTED_FAMILIES)}"
        )
    try:
        spec = parser(Cfg(raw, family))
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"config.json ({model_type}) is inconsistent: {exc}") from None
    from dataclasses import replace

    hidden_p, attn_p = _dropout(raw, family)
    return replace(spec, notes=spec.notes + notes, hidden_dropout=hidden_p, attention_dropout=attn_p, wrapper=wrapper)


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
