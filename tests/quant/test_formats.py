"""Weight-format names and the per-weight storage of each format."""

from __future__ import annotations

import pytest

from gpuwise.catalog.models import entry_spec, find_entry, load_model
from gpuwise.errors import UnknownFormatError
from gpuwise.model.params import Tensor, param_counts, tensor_inventory
from gpuwise.quant.formats import default_weight_format, get_weight_format


@pytest.mark.parametrize(("alias", "canonical"), [
    ("f16", "fp16"), ("FP16", "fp16"), ("float16", "fp16"), ("bfloat16", "bf16"), ("BF16", "bf16"),
    ("fp32", "fp32"), ("float32", "fp32"), ("fp8", "fp8"), ("q4_k_m", "gguf:Q4_K_M"), ("Q4_K_M", "gguf:Q4_K_M"),
    ("q8_0", "gguf:Q8_0"), ("iq4_xs", "gguf:IQ4_XS"), ("gguf:f16", "gguf:F16"), ("nf4", "nf4"),
    ("nf4-dq", "nf4-dq"), ("gptq", "gptq-4bit-g128"), ("gptq-8bit", "gptq-8bit-g128"),
    ("gptq-4bit-g32", "gptq-4bit-g32"), ("awq", "awq-4bit-g128"), ("int8", "int8"), ("int4", "awq-4bit-g128"),
])
def test_aliases(alias: str, canonical: str) -> None:
    assert get_weight_format(alias).name == canonical


@pytest.mark.parametrize("bad", ["q4_k_x", "fp7", "", "gptq-5bit", "awq-g0"])
def test_unknown_formats_raise(bad: str) -> None:
    with pytest.raises(UnknownFormatError):
        get_weight_format(bad)


def test_float_formats_store_every_parameter_at_their_width() -> None:
    spec = entry_spec(find_entry("qwen3-8b"))
    n = param_counts(spec).total
    assert get_weight_format("bf16").weight_bytes(spec) == 2 * n
    assert get_weight_format("fp32").weight_bytes(spec) == 4 * n


def test_nf4_bits() -> None:
    t = Tensor("attn_q", 0, (4096, 4096))
    assert get_weight_format("nf4").matrix_bits(t) == 4.5
    assert get_weight_format("nf4-dq").matrix_bits(t) == pytest.approx(4 + 8 / 64 + 32 / (64 * 256))


def test_gptq_bits_include_scales_zeros_and_g_idx() -> None:
    t = Tensor("attn_q", 0, (4096, 4096))  # (out, in)
    assert get_weight_format("gptq").matrix_bits(t) == pytest.approx(4 + (16 + 4) / 128 + 32 / 4096)
    assert get_weight_format("awq").matrix_bits(t) == pytest.approx(4 + (16 + 4) / 128)


@pytest.mark.parametrize(("model", "total_size"), [
    # model.safetensors.index.json "total_size" of openai/gpt-oss-20b (quoted in several public copies of the file);
    # the 120b's tensor bytes as a public verification script asserts them for openai/gpt-oss-120b
    ("gpt-oss-20b", 13_761_264_768), ("gpt-oss-120b", 65_248_815_744),
])
def test_gpt_oss_mxfp4_checkpoints_are_byte_exact(model: str, total_size: int) -> None:
    """MXFP4 experts (4-bit elements + one 8-bit scale per 32) and everything else bf16, as the checkpoint stores
    them; the default format of a checkpoint whose quantization_config says mxfp4."""
    spec = load_model(model).spec
    fmt, why = default_weight_format(spec, "vllm")
    assert fmt.name == "mxfp4-experts" and "MXFP4" in why
    assert fmt.weight_bytes(spec) == total_size


def test_block_scaled_formats_count_their_scales() -> None:
    spec = load_model("llama-3.1-8b").spec
    matrices = sum(t.numel for t in tensor_inventory(spec) if t.is_matrix and t.role not in ("token_embd", "output"))
    rest = (param_counts(spec).total - matrices) * 2
    for name, bits in (("mxfp4", 4 + 8 / 32), ("nvfp4", 4 + 8 / 16), ("mxfp8", 8 + 8 / 32)):
        assert get_weight_format(name).weight_bytes(spec) == round(matrices * bits / 8 + rest)
