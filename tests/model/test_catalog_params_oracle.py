"""Every catalog model: its real config.json built by transformers on the meta device has exactly
gpuwise's parameter count. Models above 100B parameters are marked slow (they still run in CI)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from gpuwise.catalog.models import catalog_entries, entry_config, entry_spec
from gpuwise.model.hf_config import spec_from_hf_config
from gpuwise.model.params import param_counts

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BIG = 100e9


def _oracle_count(config: dict) -> int:
    config = dict(config)
    model_type = config.pop("model_type")
    if model_type == "gemma3":  # multimodal: gpuwise counts the language model (Gemma3ForCausalLM)
        config = dict(config["text_config"])
        model_type = "gemma3_text"
        config.pop("model_type", None)
    if model_type == "kimi_k25":  # Kimi-K2.5's wrapper (remote code): its language model is Kimi K2's
        config = dict(config["text_config"])
        model_type = config.pop("model_type")
    if model_type == "kimi_k2":  # DeepSeek-V3's remote code under Kimi's model_type (not registered in transformers)
        model_type = "deepseek_v3"
    config.pop("quantization_config", None)  # fp8/mxfp4 checkpoints: count the architecture, not the quantizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **config)
        with torch.device("meta"):
            try:
                model = transformers.AutoModelForCausalLM.from_config(cfg)
            except ValueError:  # a vision-language wrapper (Qwen3.5): the whole model, its vision side left out below
                model = transformers.AutoModelForImageTextToText.from_config(cfg)
    return sum(p.numel() for n, p in model.named_parameters() if not any(v in n for v in VISION))


VISION = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "embed_vision", "embed_audio", "audio_tower")
"""Parameter names of the vision side of the catalog's vision-language models (gpuwise counts the language model)."""


def _params(entry) -> int:
    return param_counts(entry_spec(entry)).total


ENTRIES = list(catalog_entries())
CASES = [
    pytest.param(e, id=e.id, marks=[pytest.mark.slow] if _params(e) > BIG else [])
    for e in ENTRIES
]


@pytest.mark.parametrize("entry", CASES)
def test_catalog_model_param_count_equals_transformers(entry) -> None:
    assert _params(entry) == _oracle_count(entry_config(entry))


def test_catalog_covers_the_required_families() -> None:
    families = {e.family for e in ENTRIES}
    required = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                "phi3", "gpt2", "falcon", "deepseek_v3", "bloom"}
    assert required <= families
    assert len(ENTRIES) >= 40


VALIDATION_MODELS = sorted((Path(__file__).resolve().parents[2] / "validation" / "models").glob("*.json"))


def _validation_case(path):
    config = json.loads(path.read_text())
    big = param_counts(spec_from_hf_config(config)).total > BIG
    return pytest.param(path, config, id=path.stem, marks=[pytest.mark.slow] if big else [])


@pytest.mark.parametrize(("path", "config"), [_validation_case(p) for p in VALIDATION_MODELS])
def test_validation_model_configs_are_what_transformers_builds(path, config) -> None:
    """The configs that validation/ scores published runs with (custom shapes written in a transformers family's
    form, e.g. Megatron-LM's GPT-3-style test model as a Falcon config) are real configs of that family, and gpuwise
    counts the parameters transformers builds from them."""
    assert param_counts(spec_from_hf_config(config)).total == _oracle_count(config)
