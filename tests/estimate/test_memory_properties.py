"""Properties the training-memory model must keep for every framework and checkpointing mode (issue 17).

Memory never falls when the micro-batch, the sequence or the model grows; sharding never raises the per-GPU model
states; checkpointing never raises activations (every mode keeps at most what `none` keeps, and checkpointing more
blocks keeps less).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuwise

DSV2_LITE = str(Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "deepseek-v2-lite.json")  # MoE + MLA
FRAMEWORKS = ["megatron", "torchtitan", "fsdp", "torchtune", "hf", "unsloth", "deepspeed"]
MODES = ["none", "selective", "full", "op", "layer:2", "layer:3", "block:4", "uniform:2", "selective:mlp",
         "selective:core_attn+mla_up_proj+moe"]
MODELS = ["llama-3.2-1b", "qwen3-8b", DSV2_LITE, "gemma-2b"]
jobs = st.fixed_dictionaries({
    "framework": st.sampled_from(FRAMEWORKS), "recompute": st.sampled_from(MODES), "compile": st.booleans(),
    "fused_loss": st.booleans(), "loss_chunks": st.sampled_from([1, 8]),
    "precision": st.sampled_from(["bf16", "bf16-pure", "fp8"]),
})


def _train(model: str, **kw):
    return gpuwise.train(model, gpu="h100-sxm", **kw)


@settings(max_examples=40, deadline=None)
@given(jobs, st.sampled_from(MODELS), st.sampled_from([1, 2, 4]), st.sampled_from([2, 3, 4]))
def test_memory_never_falls_when_the_micro_batch_grows(job, model, mb, factor) -> None:
    kw = dict(num_gpus=8, fsdp="full", seq=1024, **job)
    if job["framework"] == "megatron":
        kw.pop("fsdp")
    # Two micro-batches per step on both sides: going down to one would free the gradients at the backward's start
    # (test_one_microbatch_starts_its_backward_without_gradients), a real fall.
    small = _train(model, micro_batch=mb, global_batch=16 * mb, **kw).memory
    big = _train(model, micro_batch=mb * factor, global_batch=16 * mb * factor, **kw).memory
    assert big.total >= small.total and big.required >= small.required


@settings(max_examples=30, deadline=None)
@given(jobs, st.sampled_from(MODELS))
def test_one_microbatch_starts_its_backward_without_gradients(job, model) -> None:
    """One micro-batch per step (no accumulation): the frameworks that free gradients at zero_grad hold none when
    the backward starts; Megatron's and DeepSpeed's persistent buffers always do. Measured on an H100:
    benchmarks/results/h100-sxm/train-llama-3.1-8b-8layers-s8192-mb1*.json."""
    kw = dict(num_gpus=8, seq=1024, micro_batch=1, **job)
    if job["framework"] != "megatron":
        kw["fsdp"] = "full"
    one = _train(model, global_batch=8, **kw).memory
    two = _train(model, global_batch=16, **kw).memory
    assert two.grads == two.states.grads
    assert one.required <= two.required
    if job["framework"] in ("megatron", "deepspeed") or one.moment != "backward":
        assert one.grads == one.states.grads
        return
    assert one.moments["backward_peak"] < two.moments["backward_peak"]
    if one.grads == one.states.grads:  # its end: every gradient, one block's working set, activations and logits freed
        assert one.logits == 0 and one.activations <= two.activations + two.logits
    else:  # its start (the loss's backward, or the first block rebuilt with the output layer's gradients only)
        assert one.activations + one.logits <= two.activations + two.logits


@settings(max_examples=40, deadline=None)
@given(jobs, st.sampled_from(MODELS), st.integers(8, 12), st.integers(1, 3))
def test_memory_never_falls_when_the_sequence_grows(job, model, log_seq, steps) -> None:
    kw = dict(num_gpus=1, micro_batch=1, **job)
    short = _train(model, seq=2 ** log_seq, **kw).memory
    long = _train(model, seq=2 ** (log_seq + steps), **kw).memory
    assert long.total >= short.total and long.activations_per_microbatch >= short.activations_per_microbatch


@settings(max_examples=25, deadline=None)
@given(jobs, st.sampled_from([("llama-3.2-1b", "llama-3.2-3b"), ("llama-3.2-3b", "llama-3.1-8b"),
                              ("qwen3-8b", "qwen3-32b"), ("llama-3.1-8b", "llama-3.1-70b")]))
def test_memory_never_falls_when_the_model_grows(job, pair) -> None:
    small, big = (_train(m, num_gpus=8, fsdp="full", seq=2048, micro_batch=1, **job).memory for m in pair)
    assert big.total >= small.total


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(FRAMEWORKS), st.sampled_from(MODELS), st.sampled_from([2, 8, 64]))
def test_sharding_never_raises_per_gpu_states(framework, model, n) -> None:
    def states(**kw):
        s = _train(model, num_gpus=n, framework=framework, seq=1024, **kw).memory.states
        return s.total

    ladder = [states(zero=0), states(zero=1), states(zero=2), states(zero=3)]
    assert ladder == sorted(ladder, reverse=True)
    assert states(fsdp="full") <= states(fsdp="grad-op") <= states(zero=0)
    more = _train(model, num_gpus=2 * n, framework=framework, seq=1024, fsdp="full").memory.states.total
    assert more <= states(fsdp="full")


@settings(max_examples=40, deadline=None)
@given(jobs, st.sampled_from(MODELS), st.sampled_from([1, 2]), st.booleans())
def test_checkpointing_never_raises_activations(job, model, tp, sp) -> None:
    job = {k: v for k, v in job.items() if k != "recompute"}
    kw = dict(num_gpus=tp, tp=tp, sp=sp, seq=2048, micro_batch=2, **job)
    if model == "gemma-2b" and tp > 1:  # one KV head: no TP split
        kw.update(num_gpus=1, tp=1)

    def act(mode: str) -> float:  # what one micro-batch's blocks keep, and the peak's activations with the working set
        m = _train(model, recompute=mode, **kw).memory
        return m.activations_per_microbatch

    def peak_act(mode: str) -> float:
        return _train(model, recompute=mode, **kw).memory.moments["end_of_forward"]

    none = act("none")
    for mode in MODES[1:]:
        assert act(mode) <= none * (1 + 1e-9), mode
        assert peak_act(mode) <= peak_act("none") * (1 + 1e-9), mode
    # checkpointing more blocks keeps less: every block (full) <= every 2nd <= every 3rd; the first 4 blocks < none
    assert act("full") <= act("layer:2") <= act("layer:3") <= none
    assert act("full") <= act("block:4") <= none


def test_checkpointing_modes_order_the_peak_too() -> None:
    """The whole peak, not only the saved part: per-op selective sits between full and none (torchtitan, Llama 3.1
    8B, 8 x H100, 2 x 8192 tokens per GPU)."""
    kw = dict(gpu="h100-sxm", num_gpus=8, fsdp="full", seq=8192, micro_batch=2, framework="torchtitan")
    peak = {m: gpuwise.train("llama-3.1-8b", recompute=m, **kw).memory.total for m in ("none", "op", "full")}
    assert peak["full"] < peak["op"] < peak["none"]


@pytest.mark.parametrize("spelling, mode", [
    (dict(framework="torchtitan", ac="op"), "op"),
    (dict(framework="torchtitan", ac="selective"), "op"),
    (dict(framework="torchtitan", recompute="selective"), "op"),
    (dict(framework="torchtitan", ac="layer:2"), "layer:2"),
    (dict(framework="torchtitan", ac="layer:1"), "full"),
    (dict(framework="megatron", recompute_granularity="selective"), "selective"),
    (dict(framework="megatron", recompute_granularity="full"), "full"),
    (dict(framework="megatron", recompute_granularity="full", recompute_method="uniform", recompute_num_layers=2),
     "uniform:2"),
    (dict(framework="megatron", recompute_granularity="full", recompute_method="block", recompute_num_layers=3),
     "block:3"),
    (dict(framework="megatron", recompute_granularity="selective", recompute_modules="mlp,core_attn"),
     "selective:core_attn+mlp"),
    (dict(framework="megatron", recompute_granularity="selective", recompute_modules="core_attn"), "selective"),
    (dict(framework="hf", gradient_checkpointing=True), "full"),
    (dict(framework="hf", finetune="qlora"), "full"),
    (dict(framework="hf", finetune="lora"), "full"),
    (dict(framework="hf"), "none"),
    (dict(framework="unsloth", finetune="qlora"), "full"),
    (dict(framework="torchtune", finetune="lora"), "none"),
])
def test_each_framework_spelling_resolves_to_its_mode(spelling, mode) -> None:
    r = gpuwise.train("llama-3.2-1b", gpu="h100-sxm", **spelling)
    assert r.request.job.recompute == mode


@pytest.mark.parametrize("kw, message", [
    (dict(ac="op", recompute="full"), "both set"),
    (dict(ac="op", gradient_checkpointing=True), "both set"),
    (dict(ac="sometimes"), "--ac: unknown mode"),
    (dict(recompute="layer:0"), "unknown mode"),
    (dict(recompute="block"), "unknown mode"),
    (dict(recompute_method="block"), "need --recompute-granularity"),
    (dict(recompute_granularity="selective", recompute_method="block"), "full only"),
    (dict(optimizer_in_backward=True, global_batch=4), "one micro-batch per step"),
    (dict(recompute_modules="mlp"), "--recompute-granularity"),
    (dict(recompute_granularity="full", recompute_modules="mlp"), "selective only"),
    (dict(recompute="selective:attn"), "unknown module"),
    (dict(loss_chunks=0), "--loss-chunks"),
])
def test_conflicting_or_unknown_checkpointing_options_are_one_clear_error(kw, message) -> None:
    with pytest.raises(gpuwise.GpuwiseError, match=message):
        gpuwise.train("llama-3.2-1b", gpu="h100-sxm", **kw)
