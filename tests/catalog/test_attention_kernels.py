"""The attention kernels' sequence-length curves (catalog/data/attention_kernels.toml) and how step time uses them."""

import pytest

from gpuwise.catalog.attention_kernels import FAMILIES, shape, tile_factor, tiles_over_curves
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.kernels import attention_s

LENGTHS = (128, 512, 1024, 1500, 2048, 4096, 8192, 16384, 65536, 1 << 20)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("backward", [False, True])
def test_causal_throughput_never_falls_as_the_sequence_grows(family, backward):
    """What training and prefill run (causal): rising to the 16k plateau. (cuDNN's non-causal curves peak at 2k-8k
    in the paper, a few percent above their 16k values.)"""
    values = [shape(family, s, backward=backward) for s in LENGTHS]
    assert all(0 < v <= 1.0 + 1e-9 for v in values)
    assert values == sorted(values)
    assert shape(family, 16384, backward=backward) == pytest.approx(1.0)
    assert all(0 < shape(family, s, backward=backward, causal=False) < 1.05 for s in LENGTHS)


def test_the_curves_are_the_papers_bars():
    """FlashAttention-3 paper Fig. 5-6 (H100, head dim 128): FA2 causal forward 191 at 512 of 335 at 16k; FA3 backward
    316 at 512 of 561 at 16k; a causal backward takes the forward's causal / non-causal ratio."""
    assert shape("fa2", 512, backward=False) == pytest.approx(191 / 335)
    assert shape("fa3", 512, backward=True, causal=False) == pytest.approx(316 / 561)
    ratio_512, ratio_16k = 191 / 309, 335 / 370
    assert shape("fa2", 512, backward=True) == pytest.approx(214 * ratio_512 / (322 * ratio_16k))
    # halfway in log2 between 1k and 2k
    assert shape("fa2", 1448.15, backward=False) == pytest.approx((260 + 298) / 2 / 335, rel=1e-3)


def test_short_sequences_pay_more_per_attention_flop():
    h100 = default_profile(get_gpu("h100-sxm"))
    per_flop = [attention_s(h100, 1e12, 0.0, backward=b, seq=s) for b in (False, True) for s in (2048, 16384)]
    assert per_flop[0] > per_flop[1] and per_flop[2] > per_flop[3]
    assert attention_s(h100, 1e12, 0.0, backward=False, seq=1 << 20) == attention_s(h100, 1e12, 0.0, backward=False)


def test_context_parallel_chunks_run_at_their_own_length():
    """A CP rank's kernel iterates over its chunk of keys: 4 ranks at 16k run 4k-long kernels, each with a quarter of
    the causal work at cuDNN's 4k rate; Ulysses (all-to-all) CP runs 16k-long kernels over a quarter of the heads."""
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate import step_time as st

    spec = load_model("llama-3-8b").spec
    h100 = default_profile(get_gpu("h100-sxm"))
    kw = dict(tokens=16384, tp=1, ep=1, dtype="bf16", e=2.0, recompute="none", frozen_base=False,
              framework="megatron", attention="flash", compile=False, etp=None,
              sdpa_flash=False)
    one = st._time_block(h100, spec, 0, seq_local=16384, cp=1, **kw).attention_forward
    ring = st._time_block(h100, spec, 0, seq_local=4096, cp=4, **{**kw, "tokens": 4096}).attention_forward
    ulysses = st._time_block(h100, spec, 0, seq_local=4096, cp=4, **{**kw, "tokens": 4096}, whole_sequence=True)
    overhead = h100.kernel_overhead_s
    # thread blocks: 32 heads x 128 query tiles unsplit (as many as the curves' 2,048 or more), 32 x 32 per ring rank,
    # 8 heads x 128 tiles per Ulysses rank: 1,024 each, which fill the SMs less well
    assert tile_factor(32 * 128, backward=False) == 1.0
    fewer = tile_factor(1024, backward=False)
    assert (ring - overhead) / (one - overhead) == pytest.approx(0.25 / shape("cudnn", 4096, backward=False) / fewer,
                                                                 rel=0.01)
    assert (ulysses.attention_forward - overhead) / (one - overhead) == pytest.approx(0.25 / fewer, rel=0.01)


def test_a_profile_may_name_its_attention_kernel(tmp_path):
    from gpuwise.catalog.devices import load_profile
    from gpuwise.errors import InvalidArgument

    gpu = get_gpu("h100-sxm")
    assert default_profile(gpu).attention_kernel == "cudnn"
    path = tmp_path / "p.json"
    path.write_text('{"attention_kernel": "fa3"}')
    assert load_profile(path, gpu).attention_kernel == "fa3"
    path.write_text('{"attention_kernel": "xformers"}')
    with pytest.raises(InvalidArgument, match="attention_kernel"):
        load_profile(path, gpu)


def test_head_sizes_follow_the_papers_panels():
    """FA3 paper Fig. 5-6 (H100, BF16): causal forward at 16k FA2 299, cuDNN 388, FA3 473 at head dim 64 and 298, 509,
    642 at 256, against 335, 539, 616 at 128; FA3's backward at 2k 422 (non-causal, head dim 64) against 561 at 16k,
    head dim 128. No backward is charted at 256: the 128 backward times the forward's 256 / 128 ratio."""
    assert shape("fa2", 16384, backward=False, head_dim=64) == pytest.approx(299 / 335)
    assert shape("cudnn", 16384, backward=False, head_dim=64) == pytest.approx(388 / 539)
    assert shape("fa3", 16384, backward=False, head_dim=64) == pytest.approx(473 / 616)
    assert shape("fa3", 2048, backward=True, causal=False, head_dim=64) == pytest.approx(422 / 561)
    assert shape("fa2", 16384, backward=False, head_dim=256) == pytest.approx(298 / 335)
    assert shape("fa3", 16384, backward=False, head_dim=256) == pytest.approx(642 / 616)
    assert shape("fa2", 16384, backward=True, causal=False, head_dim=256) == pytest.approx(326 / 370)
    # halfway between panels at 96 and 192; the end panels hold outside 64..256
    for lo_dim, mid_dim, hi_dim in ((64, 96, 128), (128, 192, 256)):
        lo, mid, hi = (shape("cudnn", 4096, backward=False, head_dim=d) for d in (lo_dim, mid_dim, hi_dim))
        assert mid == pytest.approx((lo + hi) / 2)
    assert shape("cudnn", 4096, backward=False, head_dim=32) == shape("cudnn", 4096, backward=False, head_dim=64)
    assert shape("fa2", 4096, backward=True, head_dim=512) == shape("fa2", 4096, backward=True, head_dim=256)
    assert shape("cudnn", 4096, backward=False, head_dim=128) == shape("cudnn", 4096, backward=False)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_small_heads_are_never_faster(family, backward, causal):
    """Up to head dim 128 every family's rate rises with the head (more FLOPs per byte loaded and per softmax)."""
    for s in LENGTHS:
        dims = (32, 64, 80, 96, 112, 128)
        values = [shape(family, s, backward=backward, causal=causal, head_dim=d) for d in dims]
        assert values == sorted(values)


def test_training_and_prefill_pass_the_model_s_head_size():
    """GPT-OSS's heads of 64 run attention at the cuDNN head-dim-64 rate in a training step's block and in a prefill
    pass; MLA (DeepSeek-V3) counts its q.k size, 192."""
    from dataclasses import replace

    from gpuwise.catalog.models import load_model
    from gpuwise.estimate import step_time as st
    from gpuwise.estimate.layer_ops import attention_head_dim

    assert attention_head_dim(load_model("deepseek-v3").spec) == 192
    spec = load_model("gpt-oss-120b").spec
    assert attention_head_dim(spec) == 64
    h100 = default_profile(get_gpu("h100-sxm"))
    kw = dict(tokens=4096, seq_local=4096, cp=1, tp=1, ep=1, dtype="bf16", e=2.0, recompute="none",
              frozen_base=False, framework="megatron", attention="flash", compile=False, etp=None, sdpa_flash=False)
    layer = next(i for i, t in enumerate(spec.layer_types) if t != "sliding")  # a full-attention layer
    small = st._time_block(h100, spec, layer, **kw).attention_forward - h100.kernel_overhead_s
    # the same shapes with heads of 128 (half as many: the same q.k FLOPs), run at the 128 rate
    big_spec = replace(spec, head_dim=128, num_heads=spec.num_heads // 2, num_kv_heads=spec.num_kv_heads // 2)
    big = st._time_block(h100, big_spec, layer, **kw).attention_forward - h100.kernel_overhead_s
    expected = shape("cudnn", 4096, backward=False) / shape("cudnn", 4096, backward=False, head_dim=64)
    # (half the heads are half the thread blocks: 32 x 32 tiles against 64 x 32)
    expected *= tile_factor(32 * 32, backward=False) / tile_factor(64 * 32, backward=False)
    assert small / big == pytest.approx(expected, rel=1e-3)
    # a prefill pass (what infer and the serving step cost price) runs its attention at the head size's rate too
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import engine_perf, forward_pass_s

    def prefill_attention(sp):
        return forward_pass_s(sp, profile=h100, topo=topology(get_gpu("h100-sxm"), num_gpus=1),
                              engine=engine_perf("vllm"), dtype="bf16", weight_bytes_per_param=2.0,
                              kv_bytes_per_element=2.0, rows=4096, sequences=1, context=4096, num_gpus=1, decode=False,
                              logits_rows=1).attention_s

    assert prefill_attention(spec) > 1.2 * prefill_attention(big_spec)


def test_fewer_thread_blocks_run_slower_as_measured_on_an_h100():
    """The tile factor against gpuwise's own H100 grid (cuDNN, causal, head dim 128): at each length, a shape's
    forward (and, above the host-bound calls, backward) throughput over that of the shape with 2,048 tiles."""
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/h100-sxm/attention-train-grid2.json"
    rows = [r for r in json.loads(path.read_text())["rows"] if r["backend"] == "cudnn" and r["seq"] >= 4096]
    checked = 0
    for seq in (4096, 8192):
        at: dict[int, list] = {}  # several batch x heads shapes share a block count: every one is checked
        for r in rows:
            if r["seq"] == seq:
                at.setdefault(r["batch"] * r["heads"] * seq // 128, []).append(r)
        def rate(r, key):  # FLOP/s of the call (the backward's FLOPs are the forward's x 2.5 at every shape)
            return r["flops_forward"] / r[key]

        # the reference: the mean rate of the shapes with 2,048 blocks (their batch x heads differ by up to 7%)
        ref = {key: sum(rate(r, key) for r in at[2048]) / len(at[2048]) for key in ("forward_s", "backward_s")}
        for tiles, shapes in at.items():
            for r in shapes:
                if tiles >= 2048:
                    continue
                fwd = rate(r, "forward_s") / ref["forward_s"]
                assert fwd == pytest.approx(tile_factor(tiles, backward=False), rel=0.1), (seq, tiles)
                if r["backward_s"] > 3e-4:  # under that, the call's host time is in the measurement
                    bwd = rate(r, "backward_s") / ref["backward_s"]
                    assert bwd == pytest.approx(tile_factor(tiles, backward=True), rel=0.1), (seq, tiles)
                checked += 1
    assert checked >= 7
    assert tile_factor(1, backward=False) < tile_factor(512, backward=False) < tile_factor(10**6, backward=False) == 1


def test_a_training_block_s_attention_counts_its_sequences_and_its_heads_per_gpu():
    """Thread blocks = sequences x heads on the GPU x 128-row tiles: Llama 3 8B at 2,048 tokens has 32 x 16 = 512 for
    one sequence, 1,024 for two, 128 on a TP 4 rank (H100 factors 0.77, 0.92, 0.49 of the 2,048-block rate)."""
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate import step_time as st

    spec = load_model("llama-3-8b").spec
    h100 = default_profile(get_gpu("h100-sxm"))
    kw = dict(seq_local=2048, cp=1, ep=1, dtype="bf16", e=2.0, recompute="none", frozen_base=False,
              framework="megatron", attention="flash", compile=False, etp=None, sdpa_flash=False)
    oh = h100.kernel_overhead_s

    def attention(**k):
        return st._time_block(h100, spec, 0, **kw, **k).attention_forward - oh

    one = attention(tokens=2048, tp=1)
    assert attention(tokens=4096, tp=1) / one == pytest.approx(2 * 0.77 / 0.92, rel=1e-3)
    assert attention(tokens=2048, tp=4) / one == pytest.approx(0.25 * 0.77 / 0.49, rel=1e-3)
    # per SM: the same blocks on a GPU with twice the SMs are half as many per SM
    assert tiles_over_curves(1024, backward=False, sms=264) == pytest.approx(0.77)
    # the head-dim-256 panel ran 8 heads (1,024 blocks): a kernel with as many is at the panel's rate
    assert tiles_over_curves(1024, backward=False, head_dim=256) == pytest.approx(1.0)


def _band_oracle(window: int, context: int, tile: int) -> float:
    """Brute force: a (query tile, key tile) pair is computed whole if any of its queries keeps any of its keys (the
    causal band: q - window < k <= q); over the kept pairs, counted query by query."""
    def touches(i: int, j: int) -> bool:
        return any(max(q - window + 1, j * tile) <= min(q, (j + 1) * tile - 1) for q in range(i * tile, (i + 1) * tile))

    n = context // tile
    computed = sum(touches(i, j) for i in range(n) for j in range(n)) * tile * tile
    kept = sum(min(q + 1, window) for q in range(context))
    return computed / kept


@pytest.mark.parametrize("window,context", [(128, 1024), (100, 1024), (300, 2048), (129, 512), (1000, 2048)])
def test_band_work_counts_the_tiles_a_band_touches(window, context):
    from gpuwise.catalog.attention_kernels import TILE_ROWS, band_work
    assert band_work(window, context) == pytest.approx(_band_oracle(window, context, TILE_ROWS), rel=1e-12)


def test_band_work_is_one_without_a_window_and_about_two_for_128_keys():
    from gpuwise.catalog.attention_kernels import band_work
    assert band_work(None, 4096) == band_work(8192, 4096) == band_work(4096, 4096) == 1.0
    assert band_work(128, 4096) == pytest.approx(63 * 128 * 128 / (128 * 129 / 2 + (4096 - 128) * 128))
    assert 1.0 < band_work(4096, 32768) < band_work(1024, 32768) < band_work(128, 32768)


def test_sink_backward_is_measured_for_cudnn_only():
    from gpuwise.catalog.attention_kernels import sink_backward_s
    assert sink_backward_s("cudnn", 1_000_000) == pytest.approx(1.51e-3)
    assert sink_backward_s("fa2", 1_000_000) == sink_backward_s("fa3", 1_000_000) == 0.0
