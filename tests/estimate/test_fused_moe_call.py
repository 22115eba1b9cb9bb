"""The Triton fused_moe call (vLLM, SGLang) at decode sizes: its measured time at one token against gpuwise's MoE
layer, and the fixed cost it adds to every MoE layer of a decode step (devices.toml fused_moe_call_us)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.estimate.infer_time import engine_perf, forward_pass_s, fused_moe_kernel_costs
from gpuwise.plan.infer import InferRequest, kernel_setup


def test_the_hopper_figure_is_the_measured_excess_over_the_weights():
    """Triton fused_moe at one token: vLLM PR #24700 on an H100 (Qwen3-30B-A3B FP8 40.44 us for 8 experts x 3 x 2,048
    x 768 FP8 bytes; Mixtral-8x7B TP2 BF16 144.03 us for 2 experts x 3 x 4,096 x 7,168 x 2 bytes), SGLang PR #11730 on
    an H200 (Qwen3-235B TP8 FP8 31.70 us, 18.9 MB) and vLLM PR #44830 on an H100 (Qwen3-Next TP4 block FP8 29.45 us,
    7.9 MB): beyond streaming those bytes at the GEMM rate, their median is the figure devices.toml keeps."""
    h100, h200 = default_profile(get_gpu("h100-sxm")), default_profile(get_gpu("h200-sxm"))
    excess = [40.44e-6 - 8 * 3 * 2048 * 768 / h100.gemm_bandwidth,
              144.03e-6 - 2 * 3 * 4096 * 7168 * 2 / h100.gemm_bandwidth,
              31.70e-6 - 18.9e6 / h200.gemm_bandwidth,
              29.45e-6 - 7.9e6 / h100.gemm_bandwidth]
    assert h100.fused_moe_call_s == pytest.approx(statistics.median(excess), abs=0.6e-6)
    assert all(abs(x - h100.fused_moe_call_s) < 5e-6 for x in excess)
    assert default_profile(get_gpu("a100-sxm-80gb")).fused_moe_call_s is None  # no measurement: kernel costs only


def test_the_blackwell_figure_is_the_measured_excess_of_flashinfers_trtllm_moe():
    """flashinfer PRs #4985 / #5301 on a B300 (bench_moe_deepseek.py: DeepSeek's MoE with 32 of 256 experts local, 2
    of them active at one token, 3 x 7,168 x 2,048 each; routing, activation quantization and finalize timed): MXFP8
    38.64 us, BF16 50.26 us, NVFP4 36.70 us. Beyond the active experts' bytes at the GEMM streaming rate each leaves
    the figure devices.toml keeps for Blackwell, within 3 us; B300 (Blackwell Ultra) takes Blackwell's figures but
    for its NVFP4 GEMM rate, measured on a B300 of its own (tests/estimate/test_nvfp4_training.py)."""
    b300 = default_profile(get_gpu("b300"))
    expert = 3 * 7168 * 2048
    for us, bytes_per_weight in ((38.641, 1 + 1 / 32), (50.256, 2.0), (36.704, 0.5 + 1 / 16)):
        excess = us * 1e-6 - 2 * expert * bytes_per_weight / b300.gemm_bandwidth
        assert b300.fused_moe_call_s == pytest.approx(excess, abs=3e-6)
    b200 = default_profile(get_gpu("b200"))
    assert b300.fused_moe_call_s == b200.fused_moe_call_s
    same = {k: v for k, v in b300.matmul_efficiency.items() if k != "fp4"}
    assert same == {k: v for k, v in b200.matmul_efficiency.items() if k != "fp4"}
    assert b300.attention_kernel == b200.attention_kernel


def test_each_moe_layer_of_a_fused_moe_engine_pays_the_call():
    model = load_model("qwen3-30b-a3b")
    req = InferRequest(model=model, gpu=get_gpu("h100-sxm"), engine="vllm", batch=8)
    ks = kernel_setup(req)
    vllm = engine_perf("vllm")
    assert vllm.fused_moe and engine_perf("sglang").fused_moe and not engine_perf("trtllm").fused_moe

    def step(engine) -> float:
        return forward_pass_s(model.spec, profile=ks.profile, topo=ks.topo, engine=engine, dtype=ks.dtype,
                              weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=8, sequences=8,
                              context=1000, num_gpus=1, decode=True, logits_rows=8).seconds

    extra = ks.profile.fused_moe_call_s - fused_moe_kernel_costs(ks.profile)
    moe_layers = sum(model.spec.moe.moe_layers)
    assert step(vllm) - step(dataclasses.replace(vllm, fused_moe=False)) == pytest.approx(moe_layers * extra)
    dense = load_model("qwen3-8b")
    assert forward_pass_s(dense.spec, profile=ks.profile, topo=ks.topo, engine=vllm, dtype=ks.dtype,
                          weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=8, sequences=8, context=1000,
                          num_gpus=1, decode=True, logits_rows=8).seconds == pytest.approx(
        forward_pass_s(dense.spec, profile=ks.profile, topo=ks.topo, engine=dataclasses.replace(vllm, fused_moe=False),
                       dtype=ks.dtype, weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=8, sequences=8,
                       context=1000, num_gpus=1, decode=True, logits_rows=8).seconds)  # dense models: unchanged


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"])
def test_a_moe_block_charges_the_streaming_kernels_the_fused_call_replaces(model):
    """The call's excess is its time beyond the kernels the model already charges for what it stands for (four
    streaming kernels and two grouped GEMMs): a MoE block charges at least those four besides a dense block's, whatever
    number of GEMMs its attention has (MLA's five, GQA's two)."""
    from gpuwise.estimate.infer_time import FUSED_MOE_KERNELS
    from gpuwise.estimate.layer_ops import block_ops

    spec = load_model(model).spec
    moe_layer = spec.moe.moe_layers.index(True)
    ops = block_ops(spec, moe_layer, tokens=8, keys=100)
    streaming = ops.kernels - len(ops.gemms) - 1  # less the attention kernel
    dense = block_ops(load_model("llama-3.1-8b").spec, 0, tokens=8, keys=100)
    dense_streaming = dense.kernels - len(dense.gemms) - 1
    assert streaming - (FUSED_MOE_KERNELS - 2) >= dense_streaming - 1  # the dense activation is among the four
