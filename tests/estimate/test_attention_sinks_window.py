"""gpt-oss's attention in a training step: attention sinks cost cuDNN's backward a measured time per query row and
head (Transformer Engine runs sinks on cuDNN only: Megatron-Core), and a sliding-window layer's kernel runs every key
tile its band touches (`attention_kernels.band_work`)."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwise.catalog.attention_kernels import band_work, sink_backward_s
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.models import load_model
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate import step_time as st

PROFILE = default_profile(get_gpu("h100-sxm"))
SPEC = load_model("gpt-oss-120b").spec  # layer 0 slides over 128 keys, layer 1 attends to all
TOKENS = 2 * 4096  # two sequences of 4,096 tokens


def _block(spec, layer: int, framework: str, tp: int = 1):
    return st._block_time(PROFILE, spec, layer, tokens=TOKENS, seq_local=4096, cp=1, tp=tp, ep=8, dtype="bf16", e=2.0,
                          recompute="none", frozen_base=False, framework=framework)


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("tp", [1, 4])
def test_megatron_sinks_add_their_backward_time_per_row_and_head(layer, tp):
    plain = dataclasses.replace(SPEC, attention_sinks=False)
    with_sinks, without = _block(SPEC, layer, "megatron", tp), _block(plain, layer, "megatron", tp)
    rows = TOKENS * SPEC.num_heads / tp
    assert with_sinks.attention_backward - without.attention_backward == pytest.approx(sink_backward_s("cudnn", rows))
    assert with_sinks.attention_forward == without.attention_forward


def test_other_frameworks_do_not_run_sinks_on_cudnn():
    plain = dataclasses.replace(SPEC, attention_sinks=False)
    assert _block(SPEC, 1, "torchtitan").attention_backward == _block(plain, 1, "torchtitan").attention_backward


def test_a_window_layer_prices_the_tiles_its_band_touches():
    """The 128-key window computes about twice its kept pairs: the layer's attention forward, above the kernel's fixed
    cost, is the kept FLOPs x band_work at the window's kernel rate, not the kept FLOPs alone."""
    from gpuwise.catalog.attention_kernels import flash_tiles
    from gpuwise.estimate.kernels import attention_s
    from gpuwise.estimate.layer_ops import block_ops, keys_per_query

    assert SPEC.layer_types[0] == "sliding" and SPEC.sliding_window == 128
    ratio = band_work(128, 4096)
    assert ratio == pytest.approx(2.0, abs=0.02)
    ops = block_ops(SPEC, 0, tokens=TOKENS, keys=keys_per_query(SPEC, 0, 4096), tp=1, ep=8, style="fused")
    kept = attention_s(PROFILE, ops.attention_flops, ops.attention_io_elements * 2, backward=False, seq=128,
                       head_dim=64, tiles=flash_tiles(2, SPEC.num_heads, 4096))
    overhead = PROFILE.kernel_overhead_s
    sliding = _block(SPEC, 0, "megatron").attention_forward
    assert (sliding - overhead) / (kept - overhead) == pytest.approx(ratio, rel=1e-6)


def test_the_window_backward_and_prefill_price_the_band_too(monkeypatch):
    """The backward's 2.5x FLOPs and a prefill pass's kernel carry the same factor."""
    from gpuwise.catalog.attention_kernels import flash_tiles
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import engine_perf, forward_pass_s
    from gpuwise.estimate.kernels import attention_s
    from gpuwise.estimate.layer_ops import block_ops, keys_per_query

    ops = block_ops(SPEC, 0, tokens=TOKENS, keys=keys_per_query(SPEC, 0, 4096), tp=1, ep=8, style="fused")
    kept = attention_s(PROFILE, 2.5 * ops.attention_flops, 2 * ops.attention_io_elements * 2, backward=True, seq=128,
                       head_dim=64, tiles=flash_tiles(2, SPEC.num_heads, 4096))
    overhead = PROFILE.kernel_overhead_s
    plain = dataclasses.replace(SPEC, attention_sinks=False)  # the sinks' backward time aside
    sliding = _block(plain, 0, "megatron").attention_backward
    assert (sliding - overhead) / (kept - overhead) == pytest.approx(band_work(128, 4096), rel=1e-6)

    def prefill(spec) -> float:
        return forward_pass_s(spec, profile=PROFILE, topo=topology(PROFILE.gpu, num_gpus=1), engine=engine_perf("vllm"),
                              dtype="bf16", weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=8192,
                              sequences=1, context=8192, num_gpus=1, decode=False, logits_rows=1).attention_s

    # the window layers' kernels with the band's waste against the same pass priced at the kept pairs alone
    banded = prefill(SPEC)
    monkeypatch.setattr("gpuwise.estimate.infer_time.band_work", lambda window, context: 1.0)
    assert banded > prefill(SPEC) * 1.02


def test_sinks_under_a2a_context_parallelism_count_every_row_of_the_heads_on_the_rank():
    """All-to-all CP gives each rank the whole sequence and heads / (tp x cp): the sink rows are those."""
    plain = dataclasses.replace(SPEC, attention_sinks=False)
    kw = dict(tokens=4096, seq_local=2048, cp=2, tp=2, ep=8, dtype="bf16", e=2.0, recompute="none", frozen_base=False,
              framework="megatron", whole_sequence=True)
    with_sinks = st._block_time(PROFILE, SPEC, 1, **kw)
    without = st._block_time(PROFILE, plain, 1, **kw)
    rows = 2 * 4096 * SPEC.num_heads / (2 * 2)  # two sequences' 4,096 tokens, 64 heads / (tp 2 x cp 2)
    assert with_sinks.attention_backward - without.attention_backward == pytest.approx(sink_backward_s("cudnn", rows))


def test_megatron_refuses_sinks_under_p2p_context_parallelism_and_the_planner_plans_without_it():
    import gpuwise
    with pytest.raises(gpuwise.errors.InvalidArgument, match="--cp-comm-type a2a"):
        gpuwise.train("gpt-oss-20b", gpu="h100-sxm", num_gpus=8, cp=2, seq=8192, framework="megatron")
    gpuwise.train("gpt-oss-20b", gpu="h100-sxm", num_gpus=8, cp=2, seq=8192, framework="megatron",
                  cp_comm_type="a2a")
    r = gpuwise.plan("gpt-oss-20b", gpu="h100-sxm", num_gpus=16, seq=32768, global_batch=16, framework="megatron",
                     top=20)
    assert r.plans and all(p.layout.cp == 1 for p in r.plans)
