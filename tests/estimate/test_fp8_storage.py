"""What fp8 training stores in fp8: Megatron's fp8 parameters (frozen or trained), the transposed copies Hopper
needs, the SwiGLU input (--activation-func-fp8-input-store) and fp8 dot-product attention's saved tensors."""

import pytest

import gpuwise
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.activations import layer_terms
from gpuwise.catalog.models import load_model

GiB = 2**30
LORA = dict(num_gpus=8, seq=4096, global_batch=8, micro_batch=1, precision="fp8", framework="megatron",
            finetune="lora", lora_targets="q,k,v,o")


def _params(gpu: str, **kw) -> float:
    return gpuwise.train("llama-3.1-8b", gpu=gpu, **LORA, **kw).memory.params


def test_fp8_parameters_store_a_frozen_base_in_one_byte_plus_hoppers_transpose():
    """TE's fp8_model_init holds only fp8 copies of its weights (the LoRA use TE names); Hopper's fp8 GEMMs take
    K-major operands only, so TE caches the transpose too; Blackwell's take either (non_tn_fp8_gemm_supported)."""
    from gpuwise.model.params import tensor_inventory

    spec = load_model("llama-3.1-8b").spec
    matrices = sum(t.numel for t in tensor_inventory(spec)
                   if t.is_matrix and t.role not in ("token_embd", "pos_embd", "output"))
    bf16_h100 = _params("h100-sxm")
    fp8_h100 = _params("h100-sxm", fp8_param_gather=True)
    fp8_b200 = _params("b200", fp8_param_gather=True)
    no_cache = _params("h100-sxm", fp8_param_gather=True, disable_parameter_transpose_cache=True)
    assert fp8_h100 == pytest.approx(bf16_h100)  # 1 + 1 B per block matrix element, as bf16's 2
    assert bf16_h100 - fp8_b200 == pytest.approx(matrices)  # 2 B -> 1 B; embeddings, norms, adapters unchanged
    assert no_cache == pytest.approx(fp8_b200)


def test_rocm_no_fp8_weight_transpose_cache_keeps_the_fp8_weight_and_drops_its_transpose():
    """ROCm Megatron-LM's --no-fp8-weight-transpose-cache (TE for ROCm's keep_fp8_weight_transpose_cache=False):
    without fp8 parameters the 1 B fp8 weight copy stays cached, the 1 B transpose goes, and each backward
    builds the transpose again."""
    from gpuwise.model.params import tensor_inventory

    spec = load_model("llama-3.1-8b").spec
    matrices = sum(t.numel for t in tensor_inventory(spec)
                   if t.is_matrix and t.role not in ("token_embd", "pos_embd", "output"))
    kw = dict(num_gpus=8, seq=4096, global_batch=16, micro_batch=1, precision="fp8", framework="megatron", tp=1,
              fsdp="full")
    cached = gpuwise.train("llama-3.1-8b", gpu="mi325x", **kw)
    rocm = gpuwise.train("llama-3.1-8b", gpu="mi325x", no_fp8_weight_transpose_cache=True, **kw)
    assert cached.memory.params - rocm.memory.params == pytest.approx(matrices)
    assert rocm.perf.step.breakdown["backward"] > cached.perf.step.breakdown["backward"]


def test_full_fp8_training_on_blackwell_caches_no_transpose():
    kw = dict(num_gpus=8, seq=4096, global_batch=8, micro_batch=1, precision="fp8", framework="megatron", tp=1)
    h100 = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", **kw).memory.params
    b200 = gpuwise.train("llama-3.1-8b", gpu="b200", **kw).memory.params
    assert b200 < h100


def test_fp8_input_store_halves_the_swiglu_input_and_fp8_attention_its_tensors():
    spec = load_model("llama-3.1-8b").spec
    i = spec.intermediate_size
    q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    base = layer_terms(spec, 0, framework="megatron", saved_input_bytes=1.0)
    act = layer_terms(spec, 0, framework="megatron", saved_input_bytes=1.0, fp8_saved=frozenset({"activation"}))
    dpa = layer_terms(spec, 0, framework="megatron", saved_input_bytes=1.0, fp8_saved=frozenset({"attention"}))
    assert base.split["mlp"] - act.split["mlp"] == pytest.approx(2 * i)  # gate and up outputs: 2 B -> 1 B
    assert base.split["qkv"] - dpa.split["qkv"] == pytest.approx(q + 2 * kv)
    # bf16 attention keeps its 16-bit output beside the projection's fp8 copy; fp8 attention's output is that copy
    assert base.split["attention_output"] == dpa.split["attention_output"] == pytest.approx(q)
    assert base.split["flash_output"] == pytest.approx(2 * q) and "flash_output" not in dpa.split


def test_the_stores_reach_the_memory_answer_and_its_caches():
    """Two jobs that differ only in these options must not share cached stage terms."""
    kw = dict(gpu="h100-sxm", **LORA, fp8_param_gather=True)
    plain = gpuwise.train("llama-3.1-8b", **kw).memory.activations_per_microbatch
    act = gpuwise.train("llama-3.1-8b", activation_func_fp8_input_store=True, **kw).memory.activations_per_microbatch
    both = gpuwise.train("llama-3.1-8b", activation_func_fp8_input_store=True, fp8_dot_product_attention=True,
                         **kw).memory.activations_per_microbatch
    assert plain > act > both


@pytest.mark.parametrize(("flag", "other", "why"), [
    ("activation_func_fp8_input_store", dict(precision="bf16", framework="torchtitan"), "needs --framework megatron"),
    ("fp8_dot_product_attention", dict(precision="bf16", framework="megatron"), "needs --precision fp8"),
    ("fp8_dot_product_attention", dict(precision="fp8", framework="torchtitan"), "needs --framework megatron"),
    ("disable_parameter_transpose_cache", dict(precision="fp8", framework="megatron"), "add --fp8-param-gather"),
    ("no_fp8_weight_transpose_cache", dict(precision="bf16", framework="megatron"), "needs --precision fp8"),
    ("no_fp8_weight_transpose_cache", dict(precision="fp8", framework="torchtitan"), "needs --framework megatron"),
])
def test_megatron_options_say_what_they_need(flag, other, why):
    with pytest.raises(InvalidArgument, match=why):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", **other, **{flag: True})


def test_the_rocm_transpose_flag_is_refused_on_nvidia_with_upstreams_spelling():
    with pytest.raises(InvalidArgument, match="disable-parameter-transpose-cache"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, precision="fp8", framework="megatron",
                      no_fp8_weight_transpose_cache=True)
    assert gpuwise.train("llama-3.1-8b", gpu="mi300x", num_gpus=8, precision="fp8", framework="megatron",
                         no_fp8_weight_transpose_cache=True).fits


def test_the_swiglu_fp8_store_works_in_bf16_too():
    """Megatron's fused bias-SwiGLU casts its saved input to fp8 whatever the training precision."""
    kw = dict(gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=8, micro_batch=1, framework="megatron", tp=1)
    plain = gpuwise.train("llama-3.1-8b", **kw).memory.activations_per_microbatch
    stored = gpuwise.train("llama-3.1-8b", activation_func_fp8_input_store=True, **kw).memory.activations_per_microbatch
    assert stored < plain


def test_doctor_keeps_its_remedies_when_megatron_options_are_on():
    """A remedy that moves the job off Megatron (more GPUs under FSDP, LoRA with the framework chosen again) drops
    the Megatron-only options instead of failing, so it is still offered."""
    from gpuwise.plan.doctor import doctor
    from gpuwise.plan.train import TrainRequest
    from gpuwise.catalog.gpus import get_gpu

    kw = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), num_gpus=8, seq=8192, global_batch=64,
              micro_batch=8, framework="megatron", precision="fp8")
    names = lambda r: sorted(x.name for x in r.remedies)  # noqa: E731
    assert names(doctor(TrainRequest(**kw, activation_func_fp8_input_store=True))) == names(doctor(TrainRequest(**kw)))


def test_fp8_backend_changes_what_is_stored_whatever_was_asked_before():
    """--fp8-backend te under hf keeps Transformer Engine's fp8 weight caches and fp8 linear inputs; torchao keeps
    neither. Asked in either order, each answer is the one a fresh process gives (the memory caches key on it)."""
    from gpuwise.estimate import activations, model_states, train_memory

    def clear():
        for cache in (activations._STAGE_TERMS, activations._PER_TOKEN, train_memory._STAGES,
                      model_states._STATES_CACHE):
            cache.clear()

    base = dict(gpu="h100-sxm", num_gpus=8, seq=8192, global_batch=8, micro_batch=1, precision="fp8", framework="hf")
    clear()
    fresh = {b: gpuwise.train("llama-3.1-8b", fp8_backend=b, **base).memory for b in ("te",)}
    clear()
    fresh["torchao"] = gpuwise.train("llama-3.1-8b", fp8_backend="torchao", **base).memory
    te, ao = fresh["te"], fresh["torchao"]
    assert te.params > ao.params and te.activations < ao.activations
    for first, second in (("te", "torchao"), ("torchao", "te")):
        clear()
        gpuwise.train("llama-3.1-8b", fp8_backend=first, **base)
        again = gpuwise.train("llama-3.1-8b", fp8_backend=second, **base).memory
        assert (again.params, again.activations, again.required) == (
            fresh[second].params, fresh[second].activations, fresh[second].required)
