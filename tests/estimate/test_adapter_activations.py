"""LoRA / QLoRA activation mechanisms: the adapters' own input copies and the fp32 stream of a kbit-upcast QLoRA."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.estimate.activations import stage_activations
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.model_states import adapter_input_bytes, model_states
from gpuwise.errors import InvalidArgument
from gpuwise.model.params import param_counts
from gpuwise.plan.train import TrainRequest

SPEC = load_model("llama-3.1-8b").spec
KW = dict(micro_batch=2, num_microbatches=1)


def _job(**kw) -> TrainJob:
    return TrainJob(**{"framework": "hf", "seq": 1024, "finetune": "lora", **kw})


@pytest.mark.parametrize(("kw", "expected"), [
    (dict(precision="bf16-pure"), 0.0),  # lora_A reads the very tensor the frozen matrix reads
    (dict(precision="bf16-pure", lora_dropout=0.05), 3.0),  # its dropped-out 16-bit copy and a 1-byte mask
    (dict(precision="bf16"), 2.0),  # autocast: fp32 adapters, each call casts its input back to 16 bits
    (dict(precision="bf16", lora_dropout=0.1), 3.0),
    (dict(framework="torchtune", precision="bf16-pure"), 0.0),
    (dict(finetune="full"), 0.0),
])
def test_bytes_each_adapter_keeps_of_its_input(kw, expected) -> None:
    assert adapter_input_bytes(_job(**kw)) == expected


def test_adapter_copies_add_their_inputs_once_per_adapted_matrix() -> None:
    shared = stage_activations(SPEC, Layout(num_gpus=1), 0, _job(precision="bf16-pure", lora_targets="q,v"), **KW)
    copied = stage_activations(SPEC, Layout(num_gpus=1), 0,
                               _job(precision="bf16-pure", lora_targets="q,v", lora_dropout=0.1), **KW)
    h, tokens = SPEC.hidden_size, 2 * 1024
    # q and v read the same norm output: kept once when shared; two 3-byte copies when each adapter has its own
    assert copied.layers - shared.layers == pytest.approx(SPEC.num_layers * tokens * (2 * 3 * h - 2 * h))


def test_kbit_upcast_keeps_the_checkpointed_stream_in_fp32() -> None:
    job = _job(finetune="qlora", precision="bf16", recompute="full")
    plain = stage_activations(SPEC, Layout(num_gpus=1), 0, job, **KW)
    upcast = stage_activations(SPEC, Layout(num_gpus=1), 0, replace(job, kbit_upcast=True), **KW)
    assert upcast.layers == pytest.approx(2 * plain.layers)  # each block's fp32 input instead of its bf16 one


def test_kbit_upcast_under_fp16_keeps_embeddings_and_head_in_fp32() -> None:
    job = _job(finetune="qlora", precision="fp16")
    plain = model_states(SPEC, Layout(num_gpus=1), 0, job).params
    upcast = model_states(SPEC, Layout(num_gpus=1), 0, replace(job, kbit_upcast=True)).params
    counts = param_counts(SPEC)
    unquantized = counts.embedding + counts.lm_head
    assert upcast - plain == pytest.approx(2 * unquantized, rel=0.01)  # + norms: a few thousand parameters
    assert upcast - plain >= 2 * unquantized


@pytest.mark.parametrize(("kw", "expected"), [
    (dict(finetune="qlora", framework="hf"), True),
    (dict(finetune="qlora", framework="hf", kbit_upcast=False), False),
    (dict(finetune="qlora", framework="torchtune"), False),
    (dict(finetune="lora", framework="hf"), False),
])
def test_kbit_upcast_is_peft_s_qlora_only(kw, expected) -> None:
    req = TrainRequest(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), **kw)
    assert req.job.kbit_upcast is expected


@pytest.mark.parametrize("p", [1.0, -0.1, float("nan")])
def test_lora_dropout_is_a_probability(p) -> None:
    with pytest.raises(InvalidArgument):
        _job(lora_dropout=p)


def test_a_frozen_megatron_matrix_keeps_no_input_as_in_transformer_engine():
    """TE's Linear saves its input only when its weight needs a gradient (backward_needs_input): under LoRA on
    attention only, Megatron's frozen MLP matrices keep no inputs, so a micro-batch holds less than full training."""
    import gpuwise

    kw = dict(gpu="h100-sxm", framework="megatron", seq=4096, recompute="none")
    full = gpuwise.train("llama-3.1-8b", **kw).memory.activations_per_microbatch
    lora = gpuwise.train("llama-3.1-8b", finetune="lora", lora_targets="q,k,v,o", **kw).memory.activations_per_microbatch
    assert lora < 0.95 * full


def test_megatron_lora_on_a_fused_matrix_keeps_one_input_copy():
    """Megatron fuses q, k, v into linear_qkv and gate, up into linear_fc1; its LoRA wraps the fused module, so one
    dropped-out input copy serves q, k and v (PEFT on separate nn.Linear modules keeps one per matrix)."""
    from gpuwise.estimate.model_states import adapter_inputs_per_token

    h = SPEC.hidden_size
    per = adapter_input_bytes(_job(framework="megatron", precision="bf16", lora_dropout=0.1))
    assert per == 3.0
    mg = adapter_inputs_per_token(SPEC, 0, _job(framework="megatron", precision="bf16", lora_dropout=0.1,
                                                lora_targets="q,k,v,o"))
    hf = adapter_inputs_per_token(SPEC, 0, _job(precision="bf16-pure", lora_dropout=0.1, lora_targets="q,k,v,o"))
    assert mg == pytest.approx(per * 2 * h)  # linear_qkv and linear_proj
    assert hf == pytest.approx(per * 4 * h)  # q, k, v, o
    mlp = adapter_inputs_per_token(SPEC, 0, _job(framework="megatron", precision="bf16", lora_dropout=0.1,
                                                 lora_targets="gate,up,down"))
    assert mlp == pytest.approx(per * (h + SPEC.intermediate_size))  # linear_fc1 (h) and linear_fc2 (its width)


def test_a_frozen_megatron_fc2_keeps_no_input():
    """The fused SwiGLU keeps fc1's output for its own backward either way; fc2's input (the SwiGLU output) is kept
    only for fc2's weight gradient, so LoRA on attention alone saves exactly that width per token."""
    from gpuwise.estimate.activations import layer_terms

    trained = layer_terms(SPEC, 0, framework="megatron", e=2.0)
    frozen = layer_terms(SPEC, 0, framework="megatron", e=2.0, frozen=frozenset("qkvo"))
    assert trained.split["mlp"] - frozen.split["mlp"] == pytest.approx(2.0 * SPEC.intermediate_size)
