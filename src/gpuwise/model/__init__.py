"""Model spec: the architecture of a transformer, parsed from a Hugging Face config.json."""

from .hf_config import SUPPORTED_FAMILIES, spec_from_hf_config
from .spec import FULL, SLIDING, MLASpec, ModelSpec, MoESpec

__all__ = ["FULL", "SLIDING", "MLASpec", "MoESpec", "ModelSpec", "SUPPORTED_FAMILIES", "spec_from_hf_config"]
