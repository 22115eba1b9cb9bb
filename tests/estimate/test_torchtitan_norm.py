"""torchtitan's model.norm_type: the eager RMSNorm keeps its fp32 upcast and the normalized tensor, the fused and the
compiled norms (fused_rmsnorm, torchtitan's 2024 Llama configs; compiled_rmsnorm) only the input and the fp32 rstd."""

from __future__ import annotations

import pytest

from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument
from gpuwise.plan.train import TrainRequest, train


def _llama13b(**kw):
    return TrainRequest(model=load_model("llama-2-13b"), gpu=get_gpu("a100-sxm-80gb"), num_gpus=64, fsdp="full",
                        seq=4096, global_batch=128, micro_batch=2, recompute="none", framework="torchtitan", **kw)


@pytest.mark.parametrize("norm", ["fused_rmsnorm", "compiled_rmsnorm"])
def test_a_fused_norm_keeps_four_bytes_per_element_less(norm: str) -> None:
    """Two norms a block, each 4 B per element less (the fp32 upcast, 4 B, and the 16-bit normalized tensor, 2 B,
    against the 16-bit input, 2 B), over 2 x 4,096 tokens and 40 blocks of width 5,120."""
    spec = load_model("llama-2-13b").spec
    eager = train(_llama13b()).memory.activations
    fused = train(_llama13b(norm_type=norm)).memory.activations
    assert eager - fused == pytest.approx(2 * 4 * spec.hidden_size * 2 * 4096 * spec.num_layers, rel=1e-6)


def test_under_compile_the_norm_type_changes_nothing() -> None:
    compiled = train(_llama13b(compile=True)).memory.activations
    assert train(_llama13b(compile=True, norm_type="fused_rmsnorm")).memory.activations == pytest.approx(compiled)


def test_the_2024_torchtitan_13b_run_fits_with_its_fused_norm() -> None:
    """torchtitan's docs/performance.md (April 2024): Llama 2 13B, 64 A100 80GB, FSDP2, local batch 2 x 4,096, no
    activation checkpointing ran at 2,162 tokens/s per GPU; its llama2_13b.toml set norm_type = "fused_rmsnorm"."""
    assert not train(_llama13b()).fits
    assert train(_llama13b(norm_type="fused_rmsnorm")).fits


def test_norm_type_is_torchtitan_s_option() -> None:
    with pytest.raises(InvalidArgument, match="model.norm_type"):
        TrainRequest(model=load_model("llama-2-13b"), gpu=get_gpu("a100-sxm-80gb"), framework="megatron",
                     norm_type="fused_rmsnorm")
