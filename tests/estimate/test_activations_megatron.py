"""Megatron profile: Korthikanti et al. 2022's per-layer activation formulas, term by term, with worked numbers.

GPT-3 175B (s = 2048, h = 12288, a = 96, b = 1, t = 8): 5as/h = 80, so per layer
no parallelism sbh x 114, TP sbh x (10 + 24/8 + 80/8) = 23, TP + SP sbh x (34/8 + 80/8) = 14.25,
TP + SP + selective sbh x 34/8 = 4.25, full recompute 2 sbh (sbh = 2048 x 12288 = 25,165,824).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.estimate.activations import korthikanti_layer_bytes, layer_terms, stage_activations
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.pipeline import in_flight_microbatches
from gpuwise.model import spec_from_hf_config

S, H, A, T = 2048, 12288, 96, 8
SBH = 25_165_824

WORKED = [
    (dict(t=1), 114 * SBH),
    (dict(t=T), 23 * SBH),
    (dict(t=T, sp=True), 14.25 * SBH),
    (dict(t=T, sp=True, recompute="selective"), 4.25 * SBH),
    (dict(t=T, recompute="selective"), 13 * SBH),
    (dict(t=1, recompute="full"), 2 * SBH),
    (dict(t=T, sp=True, recompute="full"), 2 * SBH / T),
]


@pytest.mark.parametrize(("kwargs", "expected"), WORKED, ids=[str(k) for k, _ in WORKED])
def test_korthikanti_worked_numbers(kwargs, expected) -> None:
    assert korthikanti_layer_bytes(S, 1, H, A, **kwargs) == pytest.approx(expected)


def _gpt3() -> object:
    # GPT-3 175B as a GPT-2-style config: LayerNorm, GeLU MLP of 4h, dropout 0.1 everywhere.
    return spec_from_hf_config({"model_type": "gpt2", "n_embd": H, "n_head": A, "n_layer": 96, "n_positions": 2048,
                                "vocab_size": 51200, "activation_function": "gelu"})


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_generalized_terms_reduce_to_the_paper_for_gpt(tp, sp, recompute) -> None:
    terms = layer_terms(_gpt3(), 0, framework="megatron", e=2.0, flash=False)
    keys = 0 if recompute == "selective" else S
    per_layer = S * terms.per_token(tp, sp and tp > 1, keys)
    assert per_layer == pytest.approx(korthikanti_layer_bytes(S, 1, H, A, t=tp, sp=sp and tp > 1,
                                                              recompute=recompute))


def test_the_paper_terms_one_by_one() -> None:
    terms = layer_terms(_gpt3(), 0, framework="megatron", e=2.0, flash=False)
    # replicated under TP: two LayerNorm inputs (4), QKV and MLP inputs (4), two dropout masks (2) = 10 sbh
    assert {k: v / H for k, v in terms.replicated.items()} == {"norm_inputs": 4, "linear_inputs": 4, "dropout_masks": 2}
    # split: Q and K (4), V (2), output projection input (2), GeLU input and output (8 + 8) = 24 sbh
    split = {k: v / H for k, v in terms.split.items()}
    assert split == {"qkv": 6, "attention_output": 2, "mlp": 16}
    # scores: softmax output (2), dropout mask (1) and output (2) per head and key = 5 a s^2 b
    assert terms.score_per_key == 5 * A


def test_flash_attention_keeps_softmax_statistics_instead_of_scores() -> None:
    spec = _gpt3()
    flash = layer_terms(spec, 0, framework="megatron", e=2.0, flash=True)
    assert flash.score_per_key == 0 and flash.split["softmax_stats"] == 4 * A


def test_full_recompute_stores_the_layer_input_and_rebuilds_one_layer() -> None:
    spec = _gpt3()
    job, kw = TrainJob(framework="megatron", seq=S, attention="unfused"), dict(micro_batch=1, num_microbatches=1)
    act = stage_activations(spec, Layout(num_gpus=1), 0, replace(job, recompute="full"), **kw)
    assert act.layers == pytest.approx(96 * 2 * SBH)
    none = stage_activations(spec, Layout(num_gpus=1), 0, job, **kw)
    assert act.recompute_working - none.recompute_working == pytest.approx(none.layers / 96)


def test_a_materialized_softmax_backward_holds_two_score_gradients() -> None:
    # The softmax's backward takes its output's gradient and writes its input's: two a x s x s tensors of the
    # activation dtype at once (16-bit in Megatron's fused kernel), with or without recompute; none with flash.
    spec = _gpt3()
    job, kw = TrainJob(framework="megatron", seq=S, attention="unfused"), dict(micro_batch=1, num_microbatches=1)
    for mode in ("none", "full"):
        act = stage_activations(spec, Layout(num_gpus=1), 0, replace(job, recompute=mode), **kw)
        rebuilt = act.largest_layer if mode == "full" else 0.0
        assert act.recompute_working - rebuilt == pytest.approx(2 * 2 * A * S * S)
    flash = stage_activations(spec, Layout(num_gpus=1), 0, replace(job, attention="flash"), **kw)
    assert flash.recompute_working == 0


@pytest.mark.parametrize(("p", "v", "m", "stage", "expected"), [
    (4, 1, 8, 0, 4), (4, 1, 8, 3, 1), (4, 1, 2, 0, 2),        # 1F1B: min(p - i, m)
    (4, 5, 16, 0, 4 + 3 / 5), (8, 2, 64, 0, 8 + 7 / 2),       # interleaved: p (1 + (p - 1) / (p v))
])
def test_in_flight_micro_batches_per_schedule(p, v, m, stage, expected) -> None:
    layout = Layout(num_gpus=p, pp=p, vpp=v, schedule="interleaved" if v > 1 else "1f1b")
    assert in_flight_microbatches(layout, stage, m) == pytest.approx(expected)
    assert in_flight_microbatches(Layout(num_gpus=p, pp=p, schedule="gpipe"), stage, m) == m
