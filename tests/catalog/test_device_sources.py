"""devices.toml: each figure carries the source it was measured from, and a figure measured on one kind of board stays
on the boards that run the same kernel."""

from __future__ import annotations

import json

from gpuwise.catalog.devices import default_profile, load_profile
from gpuwise.catalog.gpus import get_gpu


def test_a_figure_with_a_source_of_its_own_shows_it_not_the_sections():
    h100 = default_profile(get_gpu("h100-sxm"))
    assert "kernel-floor" in h100.sources["gemm_overhead_us"]
    assert "fused_moe" in h100.sources["fused_moe_call_us"]
    assert "FlashAttention-3 paper" in h100.sources["attention_forward_efficiency"]  # the section's own source
    b200 = default_profile(get_gpu("b200"))
    assert "B300" in b200.sources["fused_moe_call_us"] and "B300" not in b200.sources["gemm_overhead_us"]


def test_the_flashinfer_moe_figure_stays_on_the_data_center_blackwell_parts():
    """FlashInfer's TensorRT-LLM MoE runs on sm_100/sm_103; GeForce and workstation Blackwell (sm_120) run the Triton
    kernel, with no measurement, so the kernel model's own costs stand there."""
    for gpu in ("b200", "gb200", "b300", "gb300"):
        assert default_profile(get_gpu(gpu)).fused_moe_call_s is not None, gpu
    for gpu in ("rtx-5090", "rtx-pro-6000"):
        assert default_profile(get_gpu(gpu)).fused_moe_call_s is None, gpu


def test_geforce_blackwell_runs_16_bit_gemms_at_its_own_measured_share():
    """A segment's table within an architecture ([architecture.Blackwell.consumer]) applies to that segment's cards
    only: the GeForce Blackwell cards reach their half-rate FP32-accumulate 16-bit peak (RTX 5060 Ti 47.0 of 47.4,
    RTX 5090 224.3 of 209.5 TFLOP/s), where B200 sustains 0.647 of its full rate at 1000 W; the workstation RTX PRO
    6000 and the data-center parts keep the architecture's figures, and Blackwell Ultra, which takes Blackwell's
    figures (`like`), takes none of its segment tables."""
    b200 = default_profile(get_gpu("b200"))
    for gpu in ("rtx-5090", "rtx-5060-ti-16gb", "rtx-5080"):
        p = default_profile(get_gpu(gpu))
        assert p.matmul_efficiency["bf16"] == p.matmul_efficiency["fp16"] == 0.95, gpu
        assert "BLACKWALL" in p.sources["matmul_efficiency.bf16"] and "5090-mm-perf" in p.sources["matmul_efficiency.bf16"]
        # fp8 and fp4 keep Blackwell's figures
        assert p.matmul_efficiency["fp8"] == b200.matmul_efficiency["fp8"], gpu
    for gpu in ("rtx-pro-6000", "b200", "gb200", "b300"):
        p = default_profile(get_gpu(gpu))
        assert "bf16" not in p.matmul_efficiency or p.matmul_efficiency["bf16"] != 0.95, gpu
        assert not any("BLACKWALL" in s for s in p.sources.values()), gpu


def test_a_measured_profile_names_its_figures_as_the_catalog_does(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"gpu": "h100-sxm", "kernel_overhead_us": 3.0, "gemm_overhead_us": 5.0}))
    prof = load_profile(f, get_gpu("h100-sxm"))
    assert prof.sources["gemm_overhead_us"] == prof.sources["kernel_overhead_us"]
    assert "kernel-floor" not in prof.sources["gemm_overhead_us"]
    assert "gemm_overhead_s" not in prof.sources and "kernel_overhead_s" not in prof.sources
