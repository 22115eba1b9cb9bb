"""The per-block GGUF sizes (each kind of block typed once, quant/formats.py `_gguf_by_layer`) equal the sum over
every tensor typed one by one (`tensor_bytes`), for dense, MoE, MLA, sliding-window and hybrid models and for every
rung of the llama.cpp ladder: the shortcut may not change a byte."""

from __future__ import annotations

import pytest

from gpuwise.catalog.models import load_model
from gpuwise.quant.formats import get_weight_format, tensor_bytes, weight_bytes_by_layer

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "tests/fixtures/configs/deepseek-v2-lite.json", "gemma-2-9b", "gpt-oss-20b",
          "qwen3-next-80b-a3b-thinking", "falcon-7b", "phi-3-mini-4k"]
TYPES = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "IQ4_XS", "Q3_K_M", "IQ3_M", "IQ3_XS", "Q2_K", "IQ2_M"]


@pytest.mark.parametrize("model", MODELS)
def test_blocks_typed_once_give_the_bytes_of_every_tensor_typed(model):
    spec = load_model(model).spec
    for ftype in TYPES:
        fmt = get_weight_format(ftype)
        pre, layers, post = weight_bytes_by_layer(fmt, spec)
        per_layer = [0.0] * spec.num_layers
        edges = 0.0
        for t, b in tensor_bytes(fmt, spec):
            if t.layer is None:
                edges += b
            else:
                per_layer[t.layer] += b
        assert list(layers) == per_layer, ftype
        assert pre + post == edges, ftype
        assert fmt.weight_bytes(spec) == round(sum(b for _, b in tensor_bytes(fmt, spec))), ftype


@pytest.mark.parametrize("model", MODELS)
def test_matrix_bytes_per_param_is_the_per_tensor_ratio(model):
    """What the speed models charge per weight read: the per-block shortcut equals the per-tensor sum."""
    from gpuwise.quant.formats import matrix_bytes_per_param

    spec = load_model(model).spec
    for name in [*TYPES, "bf16", "fp8", "awq"]:
        fmt = get_weight_format(name)
        pairs = [(t.numel, b) for t, b in tensor_bytes(fmt, spec)
                 if t.is_matrix and t.role not in ("token_embd", "pos_embd")]
        want = sum(b for _, b in pairs) / sum(n for n, _ in pairs)
        assert matrix_bytes_per_param(fmt, spec) == pytest.approx(want, rel=1e-12), name
