"""Step-time details that the validation rows depend on: unfused attention, FSDP without resharding, interleaved
pipelines with uneven end stages, pipeline hops across nodes; and the grouped evaluation (distinct stages and
block kinds) against a stage-by-stage one."""

from __future__ import annotations

from dataclasses import replace

import pytest

import gpuwise
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.activations import korthikanti_layer_bytes
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.parallel import validate_layout
from gpuwise.estimate.train_memory import _stage_memory, layout_memory, train_memory

GPT_22B = "validation/models/gpt-22b.json"


def _gpt22b(**kw):
    opts = dict(gpu="a100-sxm-80gb", num_gpus=8, tp=8, seq=2048, global_batch=4, micro_batch=4, recompute="none",
                precision="fp16", framework="megatron")
    opts.update(kw)
    return gpuwise.train(GPT_22B, **opts)


def test_unfused_attention_costs_time_and_the_score_memory():
    flash, unfused = _gpt22b(), _gpt22b(attention="unfused")
    # Unfused attention streams the a x s^2 scores through softmax and dropout: slower forward and backward.
    assert unfused.perf.step.breakdown["forward"] > 1.05 * flash.perf.step.breakdown["forward"]
    assert unfused.perf.step.breakdown["backward"] > 1.05 * flash.perf.step.breakdown["backward"]
    # Memory: the difference is the Korthikanti score term 5 a s / h per layer (softmax 2 B, dropout mask 1 B and
    # output 2 B per score), times 48 layers.
    s, b, h, a, t = 2048, 4, 6144, 64, 8
    score_term = korthikanti_layer_bytes(s, b, h, a, t=t) - korthikanti_layer_bytes(s, b, h, a, t=t, recompute="selective")
    extra = unfused.memory.activations - flash.memory.activations
    assert extra == pytest.approx(48 * score_term, rel=0.02)


def test_selective_recompute_with_unfused_attention_recomputes_the_scores():
    r = _gpt22b(attention="unfused", recompute="selective", sp=True)
    f = _gpt22b(recompute="selective", sp=True)
    assert r.perf.step.breakdown["recompute"] > 3 * f.perf.step.breakdown["recompute"]


def test_attention_option_is_validated():
    with pytest.raises(InvalidArgument, match="--attention"):
        _gpt22b(attention="sdpa")


def _405b(**kw):
    opts = dict(gpu="h100-sxm", num_gpus=1024, tp=8, sp=True, pp=16, seq=8192, global_batch=256, micro_batch=1,
                precision="bf16", framework="megatron", pp_first_layers=7, pp_last_layers=7)
    opts.update(kw)
    return gpuwise.train("llama-3.1-405b", **opts)


def test_fsdp_without_resharding_gathers_once_per_step():
    full, grad_op = _405b(fsdp="full").perf.step, _405b(fsdp="grad-op").perf.step
    assert grad_op.num_microbatches == 32
    assert grad_op.breakdown["dp_comm"] < full.breakdown["dp_comm"] / 4


def test_interleaving_with_uneven_end_stages_as_llama3():
    plain = _405b(fsdp="grad-op").perf.step
    inter = _405b(fsdp="grad-op", vpp=8).perf.step
    assert plain.bubble_fraction == pytest.approx(15 / (32 + 15))
    assert inter.bubble_fraction == pytest.approx((15 / 8) / (32 + 15 / 8))
    # v chunks per rank: v times the pipeline sends, all waited for without Megatron's overlapped p2p
    assert inter.breakdown["pp_comm"] == pytest.approx(8 * plain.breakdown["pp_comm"], rel=1e-6)


def test_megatron_interleaving_can_overlap_pipeline_sends_with_the_next_chunk():
    """--overlap-p2p-communication (Megatron's overlap_p2p_comm): each send/recv runs beside the next chunk's
    compute, so only what exceeds a chunk's forward or backward shows, plus the slowdown of overlapped NCCL kernels;
    a slower network can only add to it, and never beyond waiting for every send."""
    kw = dict(fsdp="grad-op", vpp=8)
    for gbps in (400, 25, 2):
        over = _405b(inter_node_gbps=gbps, overlap_p2p_communication=True, **kw).perf.step
        waited = _405b(inter_node_gbps=gbps, **kw).perf.step
        assert over.breakdown["pp_comm"] < waited.breakdown["pp_comm"]
        assert over.step_time_s < waited.step_time_s
    fast, slow = (_405b(inter_node_gbps=g, overlap_p2p_communication=True, **kw).perf.step for g in (400, 2))
    assert fast.breakdown["pp_comm"] < slow.breakdown["pp_comm"]
    # 400 Gb/s: a 8192 x 16384 bf16 activation (256 MiB over TP 8's sequence shards: 32 MiB) takes ~0.8 ms, far less
    # than a one-layer chunk's forward: only the overlap slowdown (OVERLAP_SLOWDOWN of the send) is left
    assert fast.breakdown["pp_comm"] < 0.25 * _405b(**kw).perf.step.breakdown["pp_comm"]
    # other frameworks' interleaved schedules (torchtitan's) still wait for each send
    assert _405b(framework="torchtitan", overlap_p2p_communication=True, **kw).perf.step.breakdown["pp_comm"] == \
        pytest.approx(_405b(framework="torchtitan", **kw).perf.step.breakdown["pp_comm"])


def test_two_stage_interleaving_with_both_end_counts_given():
    """Megatron-Bridge's DeepSeek-V3 on 256 GB300: PP 2 x VP 8 over 61 layers, layout 'Et*4|(t*4|)*14tmL' (32 + 29
    layers): no middle stage, so no even-chunk rule; without the counts the even split still needs vpp to divide."""
    spec = load_model("deepseek-v3").spec
    ok = Layout(num_gpus=256, pp=2, vpp=8, ep=32, schedule="interleaved", pp_first_layers=32, pp_last_layers=29)
    validate_layout(ok, spec, seq=4096, global_batch=4096, micro_batch=1)
    llama = load_model("llama-3.1-8b").spec  # 32 layers: 16 per stage when split evenly
    even = Layout(num_gpus=8, pp=2, vpp=3, schedule="interleaved")
    with pytest.raises(InvalidArgument, match="vpp"):
        validate_layout(even, llama, seq=4096, global_batch=8, micro_batch=1)
    validate_layout(replace(even, pp_first_layers=18, pp_last_layers=14), llama, seq=4096, global_batch=8,
                    micro_batch=1)


def test_interleaving_still_needs_even_middle_chunks():
    spec = load_model("llama-3.1-405b").spec
    layout = Layout(num_gpus=1024, tp=8, pp=16, vpp=3, schedule="interleaved", pp_first_layers=7, pp_last_layers=7)
    with pytest.raises(InvalidArgument, match="vpp"):
        validate_layout(layout, spec, seq=8192, global_batch=256, micro_batch=1)


def test_pipeline_hops_pay_the_network_once_the_pipeline_leaves_the_node():
    common = dict(gpu="h100-sxm", num_gpus=8, tp=2, pp=4, seq=4096, global_batch=16, micro_batch=1,
                  framework="megatron")
    inside = gpuwise.train("llama-3.1-8b", gpus_per_node=8, **common).perf.step
    across = gpuwise.train("llama-3.1-8b", gpus_per_node=4, **common).perf.step
    assert across.breakdown["pp_comm"] > 5 * inside.breakdown["pp_comm"]


@pytest.mark.parametrize("model, layout", [
    ("llama-3.1-8b", Layout(num_gpus=64, tp=2, pp=8, sharding="zero1")),
    ("llama-3.1-405b", Layout(num_gpus=1024, tp=8, pp=16, vpp=8, schedule="interleaved", pp_first_layers=7,
                              pp_last_layers=7, sharding="fsdp-grad-op")),
    ("llama-3.1-8b", Layout(num_gpus=16, pp=4, schedule="gpipe", pp_first_layers=5, pp_last_layers=9)),
    ("deepseek-v3", Layout(num_gpus=64, pp=4, pp_first_layers=16, pp_last_layers=15, ep=8, sharding="zero1")),
    ("gemma-2-9b", Layout(num_gpus=6, pp=6)),  # sliding and full layers alternate: stages start on either
])
def test_distinct_stages_give_the_same_peak_as_every_stage(model, layout):
    spec = load_model(model).spec
    # The same layout without interleaving first: the stages' memory is cached for both (only the micro-batches
    # in flight differ), which must not leak one's schedule into the other.
    job, kw = TrainJob(framework="megatron", seq=4096), dict(micro_batch=1, num_microbatches=8)
    train_memory(spec, replace(layout, vpp=1, schedule="1f1b"), job, **kw)
    every = max((_stage_memory(spec, layout, s, job, **kw) for s in range(layout.pp)), key=lambda m: m.total)
    grouped = train_memory(spec, layout, job, **kw)
    assert grouped.total == pytest.approx(every.total, rel=1e-12)
    assert grouped.stage == every.stage


@pytest.mark.parametrize("offload", [frozenset(), frozenset({"optimizer"}), frozenset({"optimizer", "params"}),
                                     frozenset({"activations"})])
@pytest.mark.parametrize("layout", [
    Layout(num_gpus=64, tp=2, pp=4, sp=True, sharding="zero3"),
    Layout(num_gpus=64, pp=8, vpp=2, schedule="interleaved", cp=2, sharding="hsdp", shard_group=2),
    Layout(num_gpus=8, sharding="ddp"),
])
def test_the_planners_peak_is_the_breakdowns_total(layout, offload):
    # The planner reads `peak` (no objects built); `gpuwise train` reads `at`: the same total and stage, exactly.
    spec = load_model("llama-3.1-8b").spec
    for framework in ("megatron", "fsdp", "deepspeed"):
        lm = layout_memory(spec, layout, TrainJob(framework=framework, seq=4096, offload=offload))
        for mb in (1, 2, 8):
            for rc in ("none", "selective", "full"):
                total, stage, _ = lm.peak(mb, 16, rc)
                mem = lm.at(mb, 16, rc)
                assert mem.total == total and mem.stage == stage.index
