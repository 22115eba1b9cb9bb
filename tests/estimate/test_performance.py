"""Performance model: roofline ridge points, bubble, collective volumes, kernel times, step time, inference."""

from __future__ import annotations

import json
import math

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile, load_profile, rental_price
from gpuwise.catalog.gpus import get_gpu
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.comm import bus_factor, inner_sizes, topology
from gpuwise.estimate.kernels import matmul_s
from gpuwise.estimate.roofline import ridge_point


def test_ridge_point_h100_bf16_is_295():
    g = get_gpu("h100-sxm")
    assert ridge_point(g.peak_flops["bf16"], g.memory_bandwidth_bytes_per_s) == pytest.approx(295, abs=1)


@pytest.mark.parametrize("p, m, busy", [(4, 4, 4 / 7), (8, 1, 1 / 8)])
def test_pipeline_bubble_matches_the_formula(p, m, busy):
    # 4 stages, 4 micro-batches: at most 4/7 busy; 8 stages, 1 micro-batch: 1/8 (REFERENCE.md).
    r = gpuwise.train("llama-3.2-1b", gpu="h100-sxm", num_gpus=p, pp=p, seq=1024, global_batch=m, micro_batch=1,
                      framework="megatron")
    assert 1 - r.perf.step.bubble_fraction == pytest.approx(busy)


def test_interleaving_divides_the_bubble_by_v():
    common = dict(gpu="h100-sxm", num_gpus=4, pp=4, seq=1024, global_batch=8, micro_batch=1, framework="megatron")
    plain = gpuwise.train("llama-3.2-1b", **common).perf.step
    inter = gpuwise.train("llama-3.2-1b", vpp=2, **common).perf.step
    assert plain.bubble_fraction == pytest.approx(3 / 11)
    assert inter.bubble_fraction == pytest.approx(1.5 / 9.5)


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_collective_bus_factors(n):
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    assert bus_factor("all_gather", n) == bus_factor("reduce_scatter", n) == pytest.approx((n - 1) / n)
    assert bus_factor("all_reduce", 1) == 0


def test_collective_time_is_latency_plus_bytes_over_busbw():
    topo = topology(get_gpu("h100-sxm"), num_gpus=16)
    s = 1 << 30
    t = topo.collective_s("all_reduce", s, 8)
    assert t == pytest.approx(topo.intra.latency_s * 3 + s * 2 * 7 / 8 / topo.intra.busbw_bytes_per_s)
    # The same group spread over nodes (stride 8) runs at the NIC's bus bandwidth.
    assert topo.collective_s("all_reduce", s, 2, inner=8) > topo.collective_s("all_reduce", s, 2, inner=1)


def test_placement_puts_tp_innermost():
    assert inner_sizes({"tp": 8, "cp": 2, "pp": 4, "dp": 16}) == {"tp": 1, "cp": 8, "ep": 16, "pp": 16, "dp": 64}


def test_pcie_gpus_get_pcie_bandwidth_and_bridges_only_pair():
    t2 = topology(get_gpu("rtx-3090"), num_gpus=2)
    t4 = topology(get_gpu("rtx-3090"), num_gpus=4)
    assert "NVLink" in t2.intra.name and t4.intra.name.startswith("PCIe")
    assert topology(get_gpu("rtx-4090"), num_gpus=2).intra.busbw_bytes_per_s < 32e9


def test_matmul_time_roofline_and_quantization():
    p = default_profile(get_gpu("h100-sxm"))
    big = matmul_s(p, 8192, 8192, 8192, "bf16", 2.0)
    ideal = 2 * 8192**3 / p.matmul_flops("bf16")
    assert ideal <= big <= ideal * 1.05 + 1e-5
    # 8 x 33 tiles of 128 x 256 fill two waves of 132 SMs exactly; one row more needs more waves.
    full = matmul_s(p, 1024, 33 * 256, 8192, "bf16", 2.0)
    assert matmul_s(p, 1025, 33 * 256, 8192, "bf16", 2.0) > 1.1 * full
    # A matrix-vector product is memory-bound: a GEMM's fixed time plus the weight bytes over the bandwidth a
    # memory-bound GEMM streams at (Hopper: the H200's measured line, 4.5 us + bytes / (0.94 x bandwidth))
    gemv = matmul_s(p, 1, 8192, 8192, "bf16", 2.0)
    assert gemv == pytest.approx(8192 * 8192 * 2 / p.gemm_bandwidth + p.gemm_fixed_s, rel=0.01)
    assert p.gemm_bandwidth == pytest.approx(0.94 * 3.35e12, rel=0.01) and p.gemm_fixed_s == pytest.approx(4.5e-6)


def test_profile_file_overrides_defaults(tmp_path):
    g = get_gpu("h100-sxm")
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"matmul_tflops": {"bf16": 600}, "memory_bandwidth_gb_s": 3000}))
    prof = load_profile(f, g)
    assert prof.matmul_flops("bf16") == pytest.approx(600e12)
    # matmul_tflops is the best-shape rate; a file may also set the share of it a model's GEMMs reach
    f2 = tmp_path / "p2.json"
    f2.write_text(json.dumps({"matmul_tflops": {"bf16": 600}, "matmul_shape_efficiency": 0.9}))
    assert load_profile(f2, g).matmul_flops("bf16") == pytest.approx(540e12)
    assert prof.bandwidth == pytest.approx(3000e9)
    assert prof.sources["memory_efficiency"] == "profile p.json"
    slow = gpuwise.train("llama-3.2-1b", gpu=g, seq=1024, profile=str(f)).perf.step.step_time_s
    fast = gpuwise.train("llama-3.2-1b", gpu=g, seq=1024).perf.step.step_time_s
    assert slow > fast


@pytest.mark.parametrize("doc", ['{"matmul_efficiency": {"bf16": 1.5}}', "[]", "not json",
                                 '{"gemm_bandwidth_gb_s": 3000, "matmul_memory_efficiency": 0.9}',
                                 '{"gemm_overhead_us": -1}', '{"gemm_bandwidth_gb_s": 1e9}'])
def test_bad_profile_files_are_one_line_errors(tmp_path, doc):
    f = tmp_path / "bad.json"
    f.write_text(doc)
    with pytest.raises(InvalidArgument):
        load_profile(f, get_gpu("h100-sxm"))


def test_mfu_is_model_flops_over_time_and_peak():
    r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, micro_batch=2,
                      fsdp="full", recompute="full")
    p = r.perf
    assert p.mfu == pytest.approx(r.flops.model / (p.step.step_time_s * 8 * 989.5e12))
    assert p.hfu > p.mfu  # recompute counts in HFU only
    assert sum(p.step.breakdown.values()) == pytest.approx(p.step.step_time_s)
    assert 0.2 < p.mfu < 0.8


def test_more_tensor_parallel_across_nodes_is_slower():
    common = dict(gpu="h100-sxm", num_gpus=8, gpus_per_node=4, seq=4096, global_batch=2, micro_batch=1,
                  framework="megatron")
    inside = gpuwise.train("llama-3.1-70b", tp=4, pp=2, **common).perf.step
    across = gpuwise.train("llama-3.1-70b", tp=8, **common).perf.step
    assert across.breakdown["tp_comm"] > 4 * inside.breakdown["tp_comm"]


def test_cost_and_energy_follow_the_token_budget():
    r = gpuwise.train("llama-3.2-1b", gpu="h100-sxm", num_gpus=8, seq=2048, global_batch=64, fsdp="full",
                      train_tokens=1e10)
    p = r.perf
    price, _ = rental_price(get_gpu("h100-sxm"))
    assert p.train_time_s == pytest.approx(1e10 / p.tokens_per_s)
    assert p.cost_usd == pytest.approx(p.gpu_hours * price)
    assert p.energy_kwh == pytest.approx(p.gpu_hours * 0.7)
    unknown = gpuwise.train("llama-3.2-1b", gpu="gaudi2", seq=2048, train_tokens=1e9).perf
    assert unknown.cost_usd is None and "no rental price" in unknown.usd_source


def test_decode_is_memory_bound_and_batching_is_nearly_free():
    one = gpuwise.infer("llama-3.1-8b", gpu="h100-sxm", batch=1, prompt_tokens=1024, output_tokens=64)
    many = gpuwise.infer("llama-3.1-8b", gpu="h100-sxm", batch=32, prompt_tokens=1024, output_tokens=64)
    assert one.decode_first.bound == "memory"
    assert many.tpot_s < 1.5 * one.tpot_s
    assert many.output_tokens_per_s > 20 * one.output_tokens_per_s
    assert one.prefill.bound == "compute"  # 1,024 prompt rows: past the ridge (a 128-token prompt is not)
    # The turn-over batch agrees with the roofline's placement of the MLP GEMMs of a decode step.
    turn = one.compute_bound_batch
    below = gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", batch=turn // 2).roofline
    above = gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", batch=turn * 2).roofline
    mlp = lambda rf: next(op for op in rf.ops if op.name == "mlp")  # noqa: E731
    assert below.bound(mlp(below)) == "memory" and above.bound(mlp(above)) == "compute"
    assert turn == math.ceil(below.achievable_ridge)  # bf16 weights: 2 FLOPs per 2 bytes per sequence


def test_samples_share_the_prefill():
    r = gpuwise.infer("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2048, output_tokens=64)
    per = [p.seconds_per_sample for p in r.samples_curve]
    assert all(b < a for a, b in zip(per, per[1:]))


def test_layer_split_decode_is_not_faster_than_one_gpu():
    one = gpuwise.infer("llama-3-8b", gpu="rtx-4090", engine="llamacpp", weights="Q4_K_M", output_tokens=64)
    two = gpuwise.infer("llama-3-8b", gpu="rtx-4090", num_gpus=2, engine="llamacpp", weights="Q4_K_M",
                        output_tokens=64)
    assert two.tpot_s >= one.tpot_s


def test_tensor_parallel_decode_is_faster_on_nvlink():
    one = gpuwise.infer("llama-3.1-70b", gpu="h100-sxm", num_gpus=1, weights="fp8", output_tokens=64)
    four = gpuwise.infer("llama-3.1-70b", gpu="h100-sxm", num_gpus=4, weights="fp8", output_tokens=64)
    assert four.tpot_s < one.tpot_s


def test_roofline_decode_ops_are_memory_bound_prefill_matmuls_compute_bound():
    dec = gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", phase="decode", batch=1).roofline
    pre = gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", phase="prefill", batch=1, seq=4096).roofline
    assert all(dec.bound(op) == "memory" for op in dec.ops)
    mlp = next(op for op in pre.ops if op.name == "mlp")
    assert pre.bound(mlp) == "compute"
    assert mlp.intensity > pre.ridge


def test_roofline_plot_files(tmp_path):
    pytest.importorskip("matplotlib")
    for name in ("r.png", "r.svg"):
        gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", plot=str(tmp_path / name))  # the API writes it (report/)
        assert (tmp_path / name).stat().st_size > 1000
    with pytest.raises(InvalidArgument):
        gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", plot=str(tmp_path / "r.gif"))


def test_the_python_api_says_where_the_plot_went(tmp_path):
    pytest.importorskip("matplotlib")
    r = gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", plot=str(tmp_path / "r.png"))
    assert r.plot == str(tmp_path / "r.png")


def test_a_streaming_kernel_is_placed_against_the_copy_rate_it_is_timed_at():
    """The roofline's achievable line is the GEMMs' streaming rate; attention over the cache and the norms are timed
    at the copy rate, and their bound follows that rate: a 580-token prefill's attention (232 FLOP per byte on an
    H100, between the GEMM ridge 225 and the copy ridge 240) is memory-bound, as its time says."""
    rf = gpuwise.roofline("llama-3.1-8b", gpu="h100-sxm", phase="prefill", seq=580).roofline
    attn = next(op for op in rf.ops if op.name == "attention (scores, values)")
    copy_ridge = rf.achievable_flops / rf.copy_bandwidth_bytes_per_s
    assert rf.achievable_ridge < attn.intensity < copy_ridge
    assert rf.bound(attn) == "memory"
    assert attn.time_s == pytest.approx(attn.bytes / rf.copy_bandwidth_bytes_per_s)
