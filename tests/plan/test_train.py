"""`gpuwise.train`: end-to-end requests, monotonicity and sharding properties (hypothesis), bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuwise
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument
from gpuwise.model.params import param_counts
from gpuwise.plan.train import TrainRequest, train

MODEL = load_model("llama-3.1-8b")
MOE = load_model("mixtral-8x7b")
H100 = get_gpu("h100-sxm")


def _run(**kw):
    kw.setdefault("seq", 2048)
    return train(TrainRequest(model=kw.pop("model", MODEL), gpu=kw.pop("gpu", H100), **kw))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 5), st.integers(0, 5), st.sampled_from(["zero3", "fsdp"]))
def test_more_gpus_never_raise_model_states_under_full_sharding(a, b, kind) -> None:
    small, large = sorted((2 ** a, 2 ** b))
    opts = {"zero": 3} if kind == "zero3" else {"fsdp": "full"}
    states = [_run(num_gpus=n, global_batch=n, **opts).memory.states.total for n in (small, large)]
    assert states[1] <= states[0]


@settings(max_examples=30, deadline=None)
@given(st.integers(7, 14), st.integers(7, 14), st.sampled_from(["megatron", "hf", "fsdp"]),
       st.sampled_from(["none", "selective", "full"]))
def test_longer_sequences_never_lower_activations(a, b, framework, recompute) -> None:
    short, long = sorted((2 ** a, 2 ** b))
    acts = [_run(seq=s, framework=framework, recompute=recompute).memory for s in (short, long)]
    assert acts[1].activations + acts[1].logits >= acts[0].activations + acts[0].logits


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.booleans(), st.sampled_from(["megatron", "hf", "torchtitan"]))
def test_recompute_full_le_selective_le_none(tp, sp, framework) -> None:
    acts = [_run(num_gpus=tp, tp=tp, sp=sp, seq=4096, framework=framework, recompute=r).memory.activations
            for r in ("full", "selective", "none")]
    assert acts[0] <= acts[1] <= acts[2]


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([2, 4, 8, 64]), st.sampled_from(["deepspeed", "megatron", "fsdp", "hf"]))
def test_higher_zero_stages_never_raise_model_states(n, framework) -> None:
    states = [_run(num_gpus=n, global_batch=n, zero=z, framework=framework).memory.states.total for z in range(4)]
    assert states == sorted(states, reverse=True)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_sequence_parallelism_never_raises_activations(tp) -> None:
    without = _run(num_gpus=tp, tp=tp, seq=4096).memory.activations
    assert _run(num_gpus=tp, tp=tp, sp=True, seq=4096).memory.activations < without


def test_largest_micro_batch_fits_and_the_next_does_not() -> None:
    r = _run(num_gpus=8, global_batch=128, micro_batch=1, fsdp="full", recompute="full", seq=4096)
    b = r.max_micro_batch
    assert b is not None and b < 16
    assert _run(num_gpus=8, global_batch=128, micro_batch=b, fsdp="full", recompute="full", seq=4096).fits
    nxt = next(x for x in range(b + 1, 17) if 16 % x == 0)
    assert not _run(num_gpus=8, global_batch=128, micro_batch=nxt, fsdp="full", recompute="full", seq=4096).fits


def test_first_pipeline_stage_is_the_peak_under_1f1b() -> None:
    r = _run(num_gpus=8, pp=8, global_batch=32, micro_batch=1, framework="megatron", seq=4096)
    assert r.memory.stage == 0 and r.memory.activation_in_flight == 8


def test_expert_parallelism_splits_the_experts() -> None:
    one = _run(model=MOE, num_gpus=8, global_batch=8, zero=1, framework="megatron")
    ep = _run(model=MOE, num_gpus=8, global_batch=8, zero=1, framework="megatron", ep=8)
    routed = param_counts(MOE.spec).routed_experts
    assert one.memory.states.params_on_rank - ep.memory.states.params_on_rank == pytest.approx(routed * 7 / 8)
    assert "ep_all_to_all" in ep.memory.buffer_parts


def test_context_parallelism_splits_activations() -> None:
    one = _run(num_gpus=2, global_batch=2, seq=8192, framework="megatron").memory.activations
    cp = _run(num_gpus=2, cp=2, seq=8192, framework="megatron").memory
    assert cp.activations == pytest.approx(one / 2, rel=0.01) and "cp_kv_exchange" in cp.buffer_parts


def test_hsdp_shards_over_the_group_only() -> None:
    full = _run(num_gpus=64, global_batch=64, fsdp="full").memory.states.total
    hsdp = _run(num_gpus=64, global_batch=64, fsdp="hybrid", shard_group=8).memory.states.total
    assert hsdp == pytest.approx(full * 8, rel=0.01)


def test_model_flops_are_the_same_whatever_the_layout_and_recompute_adds_hardware_flops() -> None:
    a = _run(num_gpus=8, global_batch=8)
    b = _run(num_gpus=8, tp=2, pp=2, global_batch=8, recompute="full")
    assert a.flops.model == b.flops.model and b.flops.hardware > b.flops.model


def test_api_takes_names() -> None:
    r = gpuwise.train("llama-3.2-1b", gpu="rtx-4090", seq=1024, optimizer="adamw-8bit", finetune="qlora")
    assert r.fits and r.framework == "hf"


BAD = [
    (dict(num_gpus=8, tp=3), "attention heads"),
    (dict(num_gpus=6, tp=4), "does not divide --num-gpus"),
    (dict(num_gpus=64, pp=64), "deeper than the model's 32 layers"),
    (dict(num_gpus=5, pp=5), "split 32 layers"),
    (dict(num_gpus=2, global_batch=2, micro_batch=4), "larger than the per-rank batch"),
    (dict(num_gpus=2, global_batch=3), "not a multiple of the data-parallel degree"),
    (dict(global_batch=6, micro_batch=4), "does not divide the per-rank batch"),
    (dict(num_gpus=8, ep=2, global_batch=8), "mixture-of-experts"),
    (dict(zero=3, fsdp="full"), "choose one"),
    (dict(num_gpus=8, fsdp="hybrid", shard_group=3, global_batch=8), "--shard-group 3 does not divide"),
    (dict(num_gpus=2, pp=2, vpp=3, global_batch=1), "--vpp 3"),
    (dict(num_gpus=4, cp=4, seq=1004, global_batch=1), "--cp 4"),
    (dict(offload=("params",)), "sharded parameters"),
    (dict(precision="int3"), "--precision"),
    (dict(micro_batch=0), "at least 1"),
]


@pytest.mark.parametrize(("kw", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_layouts_name_the_constraint(kw, message) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace("-", r"\-")):
        _run(**kw)


def test_mixtral_ep_must_divide_experts() -> None:
    with pytest.raises(InvalidArgument, match="number of experts"):
        _run(model=MOE, num_gpus=16, ep=16, global_batch=16)


@pytest.mark.parametrize(("kw", "message"), [
    (dict(pp_first_layers=4), "need pipeline parallelism"),
    (dict(num_gpus=4, pp=4, global_batch=4, schedule="interleaved"), "needs --vpp"),
    (dict(num_gpus=4, pp=4, vpp=2, global_batch=4, schedule="gpipe"), "interleaved schedule, not gpipe"),
])
def test_conflicting_pipeline_options(kw, message) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("-", r"\-")):
        _run(**kw)


def test_uneven_pipeline_stages() -> None:
    r = _run(num_gpus=4, pp=4, pp_first_layers=5, pp_last_layers=9, global_batch=8, framework="megatron")
    from gpuwise.estimate.pipeline import stage_layers

    assert stage_layers(r.layout, 32) == (5, 9, 9, 9)


def test_context_parallel_ranks_share_the_model_state_sharding() -> None:
    # Megatron's distributed optimizer and torchtitan's FSDP shard over dp x cp: CP must not undo ZeRO.
    flat = _run(num_gpus=8, global_batch=8, zero=1, framework="megatron", seq=8192).memory.states
    cp = _run(num_gpus=8, cp=4, global_batch=2, zero=1, framework="megatron", seq=8192).memory.states
    assert cp.optimizer == pytest.approx(flat.optimizer)


def test_param_offload_under_fsdp2_moves_the_fp32_shards_their_grads_and_the_optimizer() -> None:
    """FSDP2's CPUOffloadPolicy: parameters, gradients and the optimizer step on the host (no optimizer-only
    variant: asking for it alone is an error)."""
    on = _run(num_gpus=8, global_batch=8, fsdp="full").memory
    off = _run(num_gpus=8, global_batch=8, fsdp="full", offload=("params",))
    assert off.request.offload == ("params", "optimizer")
    assert off.memory.master_weights == off.memory.grads == off.memory.optimizer == 0
    assert off.memory.cpu == pytest.approx(on.master_weights + on.states.grads + on.optimizer)
    with pytest.raises(gpuwise.GpuwiseError, match="CPUOffloadPolicy"):
        _run(num_gpus=8, global_batch=8, fsdp="full", offload=("optimizer",))


def test_torchtitans_own_full_shard_offloads_like_fsdp_full() -> None:
    """Without --fsdp torchtitan shards with FSDP2 anyway: --offload params is CPUOffloadPolicy there too (torchtune
    is not under this rule: its CPUOffloadOptimizer offloads the optimizer alone)."""
    framework = "torchtitan"
    off = _run(num_gpus=8, global_batch=8, framework=framework, offload=("params",))
    told = _run(num_gpus=8, global_batch=8, framework=framework, fsdp="full", offload=("params",))
    assert off.request.offload == told.request.offload == ("params", "optimizer")
    assert off.memory.total == pytest.approx(told.memory.total)
    with pytest.raises(gpuwise.GpuwiseError, match="CPUOffloadPolicy"):
        _run(num_gpus=8, global_batch=8, framework=framework, offload=("optimizer",))


def test_torchtunes_cpu_offload_brings_the_optimizer_but_the_optimizer_may_go_alone() -> None:
    """torchtune's fsdp_cpu_offload is CPUOffloadPolicy (parameters, gradients and the optimizer step on the host);
    its CPUOffloadOptimizer offloads the optimizer alone."""
    both = _run(num_gpus=8, global_batch=8, framework="torchtune", offload=("params",))
    assert both.request.offload == ("params", "optimizer")
    assert both.memory.optimizer == 0 and both.memory.cpu > 0
    alone = _run(num_gpus=8, global_batch=8, framework="torchtune", offload=("optimizer",))
    assert alone.request.offload == ("optimizer",) and alone.memory.master_weights > 0


def test_gpipe_keeps_every_micro_batch_on_the_last_stage() -> None:
    kw = dict(num_gpus=4, pp=4, global_batch=16, seq=4096, framework="megatron")
    gpipe = _run(schedule="gpipe", **kw).memory
    assert gpipe.stage == 3 and gpipe.activation_in_flight == 16
    # 16 saved fp32 log-softmaxes (4 B per logit) plus Megatron's 2 B gradient, against one micro-batch's 4 + 2
    one = _run(schedule="gpipe", **{**kw, "global_batch": 1}).memory  # m = 1
    assert one.stage == 3 and gpipe.logits == pytest.approx(one.logits * (16 * 4 + 2) / 6)


def test_autocast_casts_are_gone_at_the_optimizer_step() -> None:
    # tiny activations: foreach AdamW's step (a temporary the size of one state) is the peak
    r = _run(seq=128, framework="hf", optimizer_impl="foreach")
    assert r.memory.moment == "optimizer-step"
    assert r.memory.params == 0 and r.memory.master_weights == 4 * r.params.total
    # the fused step holds no temporary: the end of the backward (every gradient, one block's working set) tops it,
    # and the casts saved for the backward are freed by then as well
    fused = _run(seq=128, framework="hf", optimizer_impl="fused").memory
    assert fused.moment == "backward" and fused.params == 0 and fused.grads == fused.states.grads
    assert fused.total < r.memory.total


def test_expert_parallel_buckets_hold_bf16_gradients() -> None:
    r = _run(model=MOE, num_gpus=8, ep=8, global_batch=8, zero=2, framework="deepspeed")
    assert r.memory.buffer_parts["reduce_bucket"] == 2 * 500_000_000


def test_sequence_parallelism_needs_the_tokens_per_cp_rank_to_divide_by_tp():
    with pytest.raises(InvalidArgument, match="--sp"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=2, tp=2, sp=True, seq=4095)
    gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=2, tp=2, sp=True, seq=4096)


def test_fsdp_reduce_scattered_gradients_are_reserved_but_not_required() -> None:
    """One micro-batch per step under FSDP: the backward starts without gradients, and their reduce-scattered shards
    come from the caching allocator's pool of another stream, so the reserved memory (the allowance) holds them
    while the fit test (`required`) does not."""
    fsdp = _run(num_gpus=8, global_batch=8, fsdp="full", framework="torchtitan", seq=8192).memory
    assert fsdp.moment == "backward" and fsdp.grads == 0
    assert fsdp.allocator >= fsdp.states.grads > 0
    assert fsdp.required == pytest.approx(fsdp.total - fsdp.allocator)
    one_gpu = _run(num_gpus=1, global_batch=1, framework="torchtitan", seq=8192).memory  # no reduce-scatter
    assert one_gpu.grads == 0 and one_gpu.allocator < one_gpu.states.grads


def test_torchtitan_and_torchtune_shard_with_fsdp_unless_told_otherwise() -> None:
    """torchtitan's data_parallel_shard_degree defaults to -1 and torchtune's distributed recipes always call
    shard_model: neither --fsdp nor --zero means FSDP full shard there (states per GPU an eighth of DDP's on 8 GPUs),
    while `--zero 0` asks for plain replication and the default PyTorch profile stays DDP."""
    from gpuwise.plan.doctor import _stronger_shardings

    for framework in ("torchtitan", "torchtune"):
        default = _run(num_gpus=8, framework=framework)
        assert default.layout.sharding == "fsdp-full"
        assert _run(num_gpus=8, framework=framework, fsdp="full").memory.total == default.memory.total
        ddp = _run(num_gpus=8, framework=framework, zero=0)
        assert ddp.layout.sharding == "ddp"
        assert ddp.memory.states.optimizer == pytest.approx(8 * default.memory.states.optimizer, rel=1e-6)
        assert _stronger_shardings(default.request, default.layout) == []  # the doctor does not offer it again
    assert _run(num_gpus=8).layout.sharding == "ddp"
    assert _run(num_gpus=8, framework="megatron").layout.sharding == "ddp"
    assert _run(num_gpus=1, framework="torchtitan").layout.sharding == "ddp"  # one rank: torchtitan applies no FSDP
    assert _run(num_gpus=8, tp=8, framework="torchtitan").layout.sharding == "ddp"


def test_sdpa_on_rocm_says_it_is_priced_at_the_ck_rate() -> None:
    """PyTorch's SDPA on ROCm runs AOTriton unless CK is asked for; gpuwise prices it at the flash-attn CK build's
    measured rate (devices.toml, CDNA 3) and says so, where on NVIDIA it names SDPA's backend."""
    import gpuwise

    amd = gpuwise.train("llama-3-8b", gpu="mi300x", num_gpus=8, fsdp="full", seq=8192, framework="torchtitan")
    assert any("AOTriton" in a and "optimistic" in a for a in amd.assumptions)
    nvidia = gpuwise.train("llama-3-8b", gpu="h100-sxm", num_gpus=8, fsdp="full", seq=8192, framework="torchtitan")
    assert not any("AOTriton" in a for a in nvidia.assumptions)
    assert any(a.startswith("attention: PyTorch SDPA's") for a in nvidia.assumptions)
