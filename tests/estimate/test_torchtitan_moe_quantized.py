"""torchtitan's quantized recipes leave an MoE's routed experts in 16 bits (`job.routed_experts_16bit`): its float8,
MXFP8 and NVFP4 converters swap Linear modules only, and the grouped experts' own converter is opt-in. Megatron-Core
(Transformer Engine) quantizes the experts' GEMMs as it does the others'."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.estimate import step_time as st


def _experts(framework: str, dtype: str, tokens: int = 32768) -> float:
    """Forward seconds of one Qwen3-30B-A3B block's experts on one H100 of EP 8 (32,768 tokens: 2,048 per expert)."""
    spec = load_model("qwen3-30b-a3b").spec
    return st._block_time(default_profile(get_gpu("h100-sxm")), spec, 0, tokens=tokens, seq_local=4096, cp=1, tp=1,
                          ep=8, dtype=dtype, e=2.0, recompute="none", frozen_base=False,
                          framework=framework).expert_forward


def test_torchtitan_float8_prices_the_routed_experts_as_bf16():
    assert _experts("torchtitan", "fp8") == pytest.approx(_experts("torchtitan", "bf16"), rel=1e-9)


def test_megatron_fp8_quantizes_the_routed_experts():
    """fp8 GEMMs at 2,048 tokens per expert gain on their casts; at 256 per expert (4,096 tokens) the casts cost
    more than the GEMMs gain."""
    assert _experts("megatron", "fp8") < 0.9 * _experts("megatron", "bf16")
    assert _experts("megatron", "fp8", tokens=4096) > _experts("megatron", "bf16", tokens=4096)


def test_torchtitan_float8_moe_says_its_experts_stay_bf16():
    r = gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=64, micro_batch=1,
                      framework="torchtitan", compile=True, fsdp="full", ep=8, precision="fp8")
    assert any("routed experts in bf16" in a for a in r.assumptions)
