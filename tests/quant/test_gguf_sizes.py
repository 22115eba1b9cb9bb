"""Quantized weight sizes against published files.

Sizes are the repositories' file listings on huggingface.co (decimal GB, as the Hub prints them):
- GGUF Meta-Llama-3-8B-Instruct: bartowski/Meta-Llama-3-8B-Instruct-GGUF model card table
  (https://huggingface.co/bartowski/Meta-Llama-3-8B-Instruct-GGUF), e.g. "Q4_K_M | 4.92GB"; byte-exact
  listings in mradermacher/Meta-Llama-3-8B-Instruct-GGUF agree.
- GGUF Llama-3.1-70B-Instruct: bartowski/Meta-Llama-3.1-70B-Instruct-GGUF model card table
  ("Q4_K_M | 42.52GB"); same tensor shapes as Llama-3-70B.
- NF4 (double quant): unsloth/llama-3-8b-bnb-4bit model.safetensors 5.70 GB;
  unsloth/llama-3-70b-bnb-4bit shards sum 39.52 GB.
- GPTQ 4-bit g128: hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4 5.73 GB;
  TechxGenus/Meta-Llama-3-70B-Instruct-GPTQ model.safetensors 39.8 GB.
- AWQ 4-bit g128: hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4 5.73 GB; -70B- 39.77 GB.
- FP8: neuralmagic/Meta-Llama-3-8B-Instruct-FP8 9.08 GB; -70B- 72.66 GB.
- LLM.int8(): alokabhishek/Meta-Llama-3-8B-Instruct-bnb-8bit 9.09 GB.
A GGUF file also holds ~8 MB of metadata (tokenizer), which these tensor sums leave out.
"""

from __future__ import annotations

import pytest

from gpuwise.catalog.models import entry_spec, find_entry
from gpuwise.quant import gguf
from gpuwise.quant.formats import get_weight_format

GB = 1e9

PUBLISHED = {
    "llama-3-8b": {
        "Q8_0": 8.54, "Q6_K": 6.60, "Q5_K_M": 5.73, "Q5_K_S": 5.60, "Q4_K_M": 4.92, "Q4_K_S": 4.69,
        "IQ4_XS": 4.45, "Q3_K_L": 4.32, "Q3_K_M": 4.02, "Q3_K_S": 3.66, "IQ3_M": 3.78, "Q2_K": 3.18,
        "IQ2_M": 2.95, "IQ2_XS": 2.61,
        "nf4-dq": 5.70, "gptq": 5.73, "awq": 5.73, "fp8": 9.08, "int8": 9.09,
    },
    "llama-3-70b": {
        "Q8_0": 74.98, "Q6_K": 57.89, "Q5_K_M": 49.95, "Q4_K_M": 42.52, "Q4_0": 40.12,
        "nf4-dq": 39.52, "gptq": 39.8, "awq": 39.77, "fp8": 72.66,
    },
}
CASES = [(m, f, size) for m, table in PUBLISHED.items() for f, size in table.items()]


@pytest.mark.parametrize(("model", "fmt", "published_gb"), CASES, ids=[f"{m}-{f}" for m, f, _ in CASES])
def test_weight_size_within_5_percent_of_published_file(model: str, fmt: str, published_gb: float) -> None:
    spec = entry_spec(find_entry(model))
    predicted = get_weight_format(fmt).weight_bytes(spec) / GB
    assert predicted == pytest.approx(published_gb, rel=0.05)
    # In practice the match is much closer; keep it from drifting silently.
    assert predicted == pytest.approx(published_gb, rel=0.015)


@pytest.mark.parametrize(("block", "bits"), [("Q4_K", 4.5), ("Q6_K", 6.5625), ("Q8_0", 8.5), ("Q2_K", 2.625),
                                             ("IQ4_XS", 4.25), ("Q4_0", 4.5), ("Q5_K", 5.5), ("IQ2_XS", 2.3125)])
def test_block_bits_per_weight(block: str, bits: float) -> None:
    assert gguf.bits_per_weight(block) == bits


def test_use_more_bits_picks_half_of_32_layers() -> None:
    # first 4, last 4, and every third layer in between (llama-quant.cpp)
    picked = [i for i in range(32) if gguf.use_more_bits(i, 32)]
    assert picked[:5] == [0, 1, 2, 3, 6] and picked[-4:] == [28, 29, 30, 31]
    assert len(picked) == 16


def test_q4_k_m_mix_on_llama3_8b() -> None:
    spec = entry_spec(find_entry("llama-3-8b"))
    types = {(t.role, t.layer): gguf.tensor_type("Q4_K_M", t, spec) for t in gguf.gguf_tensors(spec)}
    assert types[("output", None)] == "Q6_K"
    assert types[("token_embd", None)] == "Q4_K"
    assert types[("attn_v", 0)] == "Q6_K" and types[("attn_v", 4)] == "Q4_K"
    assert types[("ffn_down", 6)] == "Q6_K" and types[("ffn_gate", 6)] == "Q4_K"
    assert types[("norm", 0)] == "F32"


def test_70b_attn_v_gets_q5_k() -> None:
    spec = entry_spec(find_entry("llama-3-70b"))
    t = next(t for t in gguf.gguf_tensors(spec) if t.role == "attn_v" and t.layer == 11)  # not a use_more_bits layer
    assert gguf.tensor_type("Q4_K_M", t, spec) == "Q5_K"


def test_tied_embeddings_take_the_output_type() -> None:
    spec = entry_spec(find_entry("llama-3.2-1b"))  # tie_word_embeddings: true
    t = next(t for t in gguf.gguf_tensors(spec) if t.role == "token_embd")
    assert gguf.tensor_type("Q4_K_M", t, spec) == "Q6_K"


def test_rows_not_divisible_by_256_fall_back() -> None:
    spec = entry_spec(find_entry("gpt2"))  # n_embd 768 = 3 x 256, but the MLP rows are 3072; wte rows 768
    from gpuwise.model.params import Tensor
    odd = Tensor("attn_q", 0, (64, 800))  # 800 % 256 != 0 and 800 % 32 == 0
    assert gguf.tensor_type("Q4_K_M", odd, spec) == "Q5_0"
    odder = Tensor("attn_q", 0, (64, 100))
    assert gguf.tensor_type("Q4_K_M", odder, spec) == "F16"
