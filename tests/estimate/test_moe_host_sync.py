"""The host wait of an eager dropless MoE layer (issue 18): Megatron-Core copies each MoE layer's routed token
counts to the host in every forward, and the device idles while the host catches up (`MOE_SYNC_GAP_S`, measured on
Megatron-Bridge's Qwen3-30B-A3B H100 profile). EP overlap and a whole-iteration CUDA graph remove it."""
from __future__ import annotations

import re

import pytest

import gpuwise
from gpuwise.catalog.models import load_model
from gpuwise.estimate.step_time import MOE_SYNC_GAP_S

KW = dict(gpu="h100-sxm", num_gpus=16, ep=16, seq=4096, global_batch=256, micro_batch=1, zero=1,
          framework="megatron", moe_token_dispatcher="flex")


def _step(model="qwen3-30b-a3b", **kw):
    return gpuwise.train(model, **{**KW, **kw}).perf.step


def _moe_layers(model: str) -> int:
    return sum(bool(x) for x in load_model(model).spec.moe.moe_layers)


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3"])
def test_each_moe_layer_waits_once_per_micro_batch_forward(model):
    """Only the MoE layers wait (DeepSeek-V3 begins with three dense blocks), once per micro-batch each."""
    step = _step(model)
    assert step.num_microbatches == 16
    expected = MOE_SYNC_GAP_S * _moe_layers(model) * step.num_microbatches
    assert step.breakdown["host_sync"] == pytest.approx(expected, rel=1e-9)
    assert step.step_time_s == pytest.approx(sum(step.breakdown.values()), rel=1e-9)


def test_a_grace_host_waits_longer_by_its_time_per_operation():
    """The gap is host latency: on a Grace-hosted GB200 it grows by Grace's time per host operation against the x86
    host it was measured on, which Transformer Engine issue #2053 times as one torch Linear forward's CPU time:
    37.08 us on GB200 against 13.48 us on an H100 DGX (Xeon 8480C). An x86-hosted B200 waits as the H100 did."""
    hopper, b200, gb200 = _step(), _step(gpu="b200"), _step(gpu="gb200")
    assert b200.breakdown["host_sync"] == pytest.approx(hopper.breakdown["host_sync"], rel=1e-9)
    ratio = gb200.breakdown["host_sync"] / b200.breakdown["host_sync"]
    assert ratio == pytest.approx(37.08 / 13.48, rel=0.01)
    notes = gpuwise.train("qwen3-30b-a3b", **{**KW, "gpu": "gb200"}).assumptions
    # 0.62 ms measured on x86 (MOE_SYNC_GAP_S) x 37.08 / 13.48 = 1.71 ms
    assert any(re.search(r"waits 1\.7\d ms", n) and "Grace" in n for n in notes)


def test_a_recomputed_forward_waits_again():
    plain, full = _step(), _step(recompute="full")
    assert full.breakdown["host_sync"] == pytest.approx(2 * plain.breakdown["host_sync"], rel=1e-9)


def test_ep_overlap_hides_the_wait():
    assert "host_sync" not in _step(moe_a2a_overlap=True).breakdown


@pytest.mark.parametrize("change", [dict(cuda_graph_scope="full_iteration"),
                                    dict(moe_pad_expert_input_to_capacity=True, moe_token_dispatcher="alltoall"),
                                    dict(moe_pad_expert_input_to_capacity=True, moe_token_dispatcher="alltoall",
                                         cuda_graph_scope="attn,moe")],
                         ids=["full-iteration-graph", "padded-experts", "padded-and-graphed-moe-layers"])
def test_static_shapes_remove_the_wait_and_nothing_else(change):
    eager, other = _step(**{k: v for k, v in change.items() if k == "moe_token_dispatcher"}), _step(**change)
    assert "host_sync" not in other.breakdown
    assert other.step_time_s == pytest.approx(eager.step_time_s - eager.breakdown["host_sync"], rel=1e-9)


def test_the_text_says_what_the_wait_is_and_what_removes_it():
    notes = gpuwise.train("qwen3-30b-a3b", **KW).assumptions
    assert any("waits 0.62 ms" in n and "--moe-a2a-overlap" in n for n in notes)
    assert not any("waits" in n for n in gpuwise.train("qwen3-30b-a3b", **KW, moe_a2a_overlap=True).assumptions)


def test_scoped_graphs_leave_the_wait():
    """Transformer Engine's scoped graphs (attn, moe_router, moe_preprocess) stop before the dispatcher's sync."""
    assert _step(cuda_graph_scope="attn,moe_router,moe_preprocess").breakdown["host_sync"] == \
        _step().breakdown["host_sync"]


def test_dense_models_and_other_frameworks_do_not_wait():
    assert "host_sync" not in gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096,
                                            framework="megatron").perf.step.breakdown
    assert "host_sync" not in gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, seq=4096,
                                            framework="torchtitan").perf.step.breakdown


@pytest.mark.parametrize("scope, match", [
    ("attn,graphs", "unknown scope 'graphs'"),
    ("full_iteration,attn", "cannot be combined"),
    (",", "no scope given"),
    ("attn,moe", "padded experts only"),
])
def test_bad_scopes_are_refused(scope, match):
    with pytest.raises(gpuwise.errors.InvalidArgument, match=match):
        _step(cuda_graph_scope=scope)


def test_the_scope_is_megatrons_option():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="Megatron-Core's CUDA graph option"):
        gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, seq=4096, framework="torchtitan",
                      cuda_graph_scope="full_iteration")


def test_padding_needs_routed_experts_and_megatron():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="needs --framework megatron"):
        _step(moe_pad_expert_input_to_capacity=True, framework="torchtitan", moe_token_dispatcher="alltoall", zero=None)
    with pytest.raises(gpuwise.errors.InvalidArgument, match="this model has none"):
        gpuwise.train("llama-3.1-8b", gpu="h100-sxm", framework="megatron", moe_pad_expert_input_to_capacity=True)


def test_the_doctor_keeps_its_framework_changing_remedies_with_cuda_graphs():
    """A remedy that moves the job off Megatron (LoRA through PEFT) leaves the CUDA graph scope behind instead of
    failing on it."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.plan.doctor import doctor
    from gpuwise.plan.train import TrainRequest

    argv = dict(model=load_model("llama-3.1-70b"), gpu=get_gpu("h100-sxm"), num_gpus=16, seq=4096, global_batch=64,
                tp=8, framework="megatron")
    plain = {r.name for r in doctor(TrainRequest(**argv)).remedies if r.fits}
    graphed = {r.name for r in doctor(TrainRequest(cuda_graph_scope="full_iteration", **argv)).remedies if r.fits}
    assert {"lora", "qlora", "more-gpus"} <= plain and graphed == plain


@pytest.mark.parametrize("change, match", [
    (dict(moe_a2a_overlap=True, ep=1), "needs expert parallelism"),
    (dict(moe_a2a_overlap=True, recompute="full"), "full recompute"),
    (dict(moe_a2a_overlap=True, num_gpus=32, pp=2, global_batch=256), "interleaved schedule"),
    (dict(cuda_graph_scope="attn,moe_router,moe_preprocess", recompute="full"), "whole-iteration graph"),
    (dict(cuda_graph_scope="moe_preprocess"), "add moe_router"),
    (dict(cuda_graph_scope="mlp"), "every layer of this model is MoE"),
])
def test_what_megatron_core_refuses_is_refused(change, match):
    """TransformerConfig's checks on EP overlap and CUDA graphs, said in one line each."""
    with pytest.raises(gpuwise.errors.InvalidArgument, match=match):
        _step(**change)


def test_the_planner_leaves_out_what_megatron_core_refuses():
    """With EP overlap asked for, no plan recomputes whole blocks or pipelines without interleaving."""
    r = gpuwise.plan("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, seq=4096, global_batch=256, framework="megatron",
                     moe_a2a_overlap=True, moe_token_dispatcher="flex", top=50)
    assert r.plans
    for p in r.plans:
        assert p.recompute != "full" and p.layout.ep > 1 and (p.layout.pp == 1 or p.layout.vpp > 1)


OSS = dict(gpu="h100-sxm", num_gpus=8, ep=8, seq=4096, global_batch=64, micro_batch=1, zero=1, framework="megatron",
           moe_token_dispatcher="alltoall")


def _oss(**kw):
    return gpuwise.train("gpt-oss-20b", **{**OSS, **kw}).perf.step


def test_gpt_oss_waits_again_for_its_glu_offset():
    """Megatron-Core's weighted_bias_quick_geglu_impl builds `torch.tensor(linear_offset, device=...)` in every
    forward outside Transformer Engine's op fuser, a copy that waits for the device (50.6 ms behind a 50 ms GPU sleep on
    a lent H200): two waits per MoE layer forward, three with the moe_act module recomputed; the op fuser leaves the
    token counts' one."""
    from gpuwise.estimate.step_time import moe_host_syncs
    once = MOE_SYNC_GAP_S * _moe_layers("gpt-oss-20b") * 8  # 8 micro-batches per rank
    assert _oss().breakdown["host_sync"] == pytest.approx(2 * once, rel=1e-9)
    act = _oss(recompute_granularity="selective", recompute_modules="moe_act")
    assert act.breakdown["host_sync"] == pytest.approx(3 * once, rel=1e-9)
    assert _oss(use_transformer_engine_op_fuser=True).breakdown["host_sync"] == pytest.approx(once, rel=1e-9)
    # padded experts remove the token counts' wait only
    padded = _oss(moe_pad_expert_input_to_capacity=True)
    assert padded.breakdown["host_sync"] == pytest.approx(once, rel=1e-9)
    assert "host_sync" not in _oss(moe_a2a_overlap=True).breakdown
    spec = load_model("qwen3-30b-a3b").spec  # no clamped GLU: the token counts only
    from gpuwise.estimate.job import TrainJob
    assert moe_host_syncs(spec, TrainJob(framework="megatron", recompute="selective:moe_act")) == (1, 0)


def test_gpt_oss_text_counts_its_waits():
    notes = gpuwise.train("gpt-oss-20b", **OSS).assumptions
    assert any("waits 2 x 0.62 ms" in n and "linear_offset" in n for n in notes)


def test_the_moe_recompute_module_waits_and_exchanges_again():
    """Megatron-Core's `moe` recompute module checkpoints the whole MoE layer (route, dispatch, experts, combine):
    its waits and its all-to-alls run again in the backward; `moe_act` reruns only the activation (no token wait)."""
    from gpuwise.estimate.job import TrainJob
    from gpuwise.estimate.step_time import moe_host_syncs
    oss, qwen = load_model("gpt-oss-20b").spec, load_model("qwen3-30b-a3b").spec
    assert moe_host_syncs(oss, TrainJob(framework="megatron", recompute="selective:moe")) == (2, 2)
    assert moe_host_syncs(qwen, TrainJob(framework="megatron", recompute="selective:moe")) == (1, 1)
    assert moe_host_syncs(qwen, TrainJob(framework="megatron", recompute="selective:moe_act")) == (1, 0)
    plain, moe = _step(moe_token_dispatcher="alltoall"), _step(moe_token_dispatcher="alltoall",
                                                                recompute_granularity="selective",
                                                                recompute_modules="moe")
    assert moe.breakdown["host_sync"] == pytest.approx(2 * plain.breakdown["host_sync"], rel=1e-9)
    assert moe.breakdown["ep_comm"] == pytest.approx(1.5 * plain.breakdown["ep_comm"], rel=1e-9)  # 4 + 2 exchanges


def test_a_graphed_moe_layer_holds_no_wait():
    """Padded experts graphed with scope moe: the layer replays as a CUDA graph, the GLU offset's wait included."""
    assert "host_sync" not in _oss(moe_pad_expert_input_to_capacity=True, cuda_graph_scope="attn,moe").breakdown
