"""compressed-tensors checkpoints (Kimi K2.5's routed experts in symmetric int4, one 16-bit scale per 32 weights):
the format is read from quantization_config, and its bytes are the element bits plus the scales, on the tensors the
`ignore` list leaves quantized."""

from __future__ import annotations

import copy
import json

import pytest

from gpuwise.catalog.models import MODELS_DIR, load_model
from gpuwise.model.hf_fields import checkpoint_quant
from gpuwise.model.params import tensor_inventory
from gpuwise.quant.formats import default_weight_format, get_weight_format

KIMI = json.loads((MODELS_DIR / "kimi-k2.5.json").read_text())
QUANT = KIMI["text_config"]["quantization_config"]


def test_kimi_k25_ships_int4_routed_experts_only():
    assert checkpoint_quant({"quantization_config": QUANT}) == "int4-sym-g32-experts"
    spec = load_model("kimi-k2.5").spec
    fmt, why = default_weight_format(spec, "vllm")
    assert fmt.name == "int4-sym-g32-experts" and "compressed-tensors" in why
    routed = sum(t.numel for t in tensor_inventory(spec) if t.role.endswith("_exps"))
    rest = sum(t.numel for t in tensor_inventory(spec) if not t.role.endswith("_exps"))
    assert fmt.weight_bytes(spec) == pytest.approx(routed * (4 + 16 / 32) / 8 + rest * 2, rel=1e-9)


def test_what_the_ignore_list_and_the_scheme_decide():
    every_linear = dict(QUANT, ignore=["lm_head"])
    assert checkpoint_quant({"quantization_config": every_linear}) == "int4-sym-g32"
    asym = copy.deepcopy(QUANT)
    asym["config_groups"]["group_0"]["weights"]["symmetric"] = False
    assert checkpoint_quant({"quantization_config": asym}) == "compressed-tensors"  # not modelled: named as is
    int8 = copy.deepcopy(QUANT)
    int8["config_groups"]["group_0"]["weights"].update(num_bits=8, group_size=128)
    assert checkpoint_quant({"quantization_config": int8}) == "int8-sym-g128-experts"
    bad = dict(QUANT, ignore=["re:(unclosed"])
    assert checkpoint_quant({"quantization_config": bad}) == "int4-sym-g32"  # a broken pattern ignores nothing


def test_the_format_by_name():
    f = get_weight_format("int4-sym-g32")
    assert f.kind == "int-sym" and f.bits == 4 and f.group_size == 32 and not f.experts_only
    assert get_weight_format("INT4-SYM-G32-EXPERTS").experts_only


def test_a_hostile_ignore_pattern_is_not_run():
    """A pattern whose quantified group holds a quantifier could backtrack for hours on a module name: skipped."""
    import time

    t = time.perf_counter()
    hostile = dict(QUANT, ignore=["re:(.*a)*" + "b" * 10, "re:(x+)+y", 7, None])
    assert checkpoint_quant({"quantization_config": hostile}) == "int4-sym-g32"
    assert time.perf_counter() - t < 0.5
