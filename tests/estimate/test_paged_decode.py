"""Paged-KV decode attention (the kernels vLLM and SGLang run) streams the cache at its own measured bandwidth, not at
the device's copy bandwidth: FlashAttention-3's paged decode on an H100 reaches 1,849 GB/s of 3,350."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.infer_time import engine_perf
from gpuwise.estimate.kernels import attention_s
from gpuwise.plan.infer import InferRequest, kernel_setup, serving_model


def test_fa3_paged_decode_time_on_h100_is_the_published_one():
    """Dao-AILab/flash-attention#1572 (2025-04-11): batch 16, 32 heads (MHA), head dim 128, 4,000 cached tokens,
    pages of 8, CUDA graph: 567.2 us. The cache it reads: 16 x 4,000 x 32 x 128 x 2 (K, V) x 2 bytes."""
    h100 = default_profile(get_gpu("h100-sxm"))
    nbytes = 16 * 4000 * 32 * 128 * 2 * 2
    flops = 4.0 * 16 * 32 * 128 * 4000  # q.k and p.v per head and key
    t = attention_s(h100, flops, nbytes, backward=False, bandwidth=h100.paged_decode_bandwidth)
    assert t == pytest.approx(567.2e-6, rel=0.02)
    assert attention_s(h100, flops, nbytes, backward=False) < 0.7 * t  # at the copy bandwidth: far faster


def test_no_measurement_means_the_copy_bandwidth():
    a100 = default_profile(get_gpu("a100-sxm-80gb"))
    assert a100.paged_decode_efficiency is None and a100.paged_decode_bandwidth == a100.bandwidth


def _setup(model: str, engine: str, num_gpus: int = 1, gpu: str = "h100-sxm", **kw):
    from gpuwise.catalog.models import load_model

    req = InferRequest(model=load_model(model), gpu=get_gpu(gpu), num_gpus=num_gpus, engine=engine, **kw)
    return req, kernel_setup(req)


def _kv_read(model: str, engine: str, **kw) -> float:
    req, ks = _setup(model, engine, **kw)
    cost, *_ = serving_model(dataclasses.replace(req, request_rate=float("inf"), num_prompts=4), ks)
    return cost.kv_read_s_per_token


def test_only_paged_engines_read_the_cache_at_the_paged_rate():
    """vLLM and SGLang decode over a paged cache with FlashAttention's kernels; TensorRT-LLM runs its own (XQA) and
    HF a contiguous cache: those keep the copy bandwidth."""
    assert engine_perf("vllm").paged_decode and engine_perf("sglang").paged_decode
    assert not engine_perf("trtllm").paged_decode and not engine_perf("hf").paged_decode
    h100 = default_profile(get_gpu("h100-sxm"))
    ratio = h100.bandwidth / h100.paged_decode_bandwidth
    assert ratio > 1.5
    job = dict(batch=32, prompt_tokens=4000, output_tokens=200, weights="bf16", kv_dtype="bf16")
    # the static decode step: its attention time, with and without the paged kernel
    req, ks = _setup("qwen3-8b", "vllm", **job)
    from gpuwise.estimate.infer_time import forward_pass_s

    def attention(engine) -> float:
        return forward_pass_s(req.model.spec, profile=ks.profile, topo=ks.topo, engine=engine, dtype=ks.dtype,
                              weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=32, sequences=32,
                              context=4000, num_gpus=1, decode=True, logits_rows=0).attention_s

    paged, unpaged = attention(ks.eng), attention(dataclasses.replace(ks.eng, paged_decode=False))
    assert paged / unpaged == pytest.approx(ratio, rel=0.05)
    # the serving simulation's cost of each cached token a decoding request reads
    assert _kv_read("qwen3-8b", "vllm", **job) / _kv_read("qwen3-8b", "trtllm", **job) == pytest.approx(ratio)


def test_a_latent_cache_keeps_flashmla_at_copy_bandwidth():
    """FlashMLA reaches 3,000 GB/s on an H800 in its memory-bound setting (deepseek-ai/FlashMLA README): an MLA
    model's latent cache is not charged the paged kernels' rate."""
    job = dict(num_gpus=8, gpu="h200", weights="fp8", kv_dtype="bf16", batch=64, prompt_tokens=2000,
               output_tokens=100)
    assert _kv_read("deepseek-v3", "vllm", **job) == pytest.approx(_kv_read("deepseek-v3", "trtllm", **job))


def test_vllm_waits_for_its_host_per_running_request_and_sglang_does_not():
    """vLLM before 0.14 without --async-scheduling prepares step n + 1 after step n: PR #23914's sync/async
    throughputs on A100 (1014/1025 tps at batch 32, 4039/4258 at batch 256) put the hidden host time at 0.34 and
    3.26 ms per step, 13 us per running request; SGLang's overlap scheduler runs it beside the GPU."""
    vllm, sglang = engine_perf("vllm"), engine_perf("sglang")
    slope = (256 / 4039 - 256 / 4258 - (32 / 1014 - 32 / 1025)) / (256 - 32)
    assert vllm.step_overhead_s_per_request == pytest.approx(slope, rel=0.03)
    assert sglang.step_overhead_s_per_request == 0.0
    req, ks = _setup("qwen3-8b", "vllm", batch=1, vllm_version="0.11.0")  # synchronous before 0.14
    assert _setup("qwen3-8b", "vllm", batch=1)[1].eng.step_overhead_s_per_request == 0.0  # asynchronous since
    from gpuwise.estimate.infer_time import forward_pass_s

    def overhead(seqs: int) -> float:
        return forward_pass_s(req.model.spec, profile=ks.profile, topo=ks.topo, engine=vllm, dtype=ks.dtype,
                              weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=seqs, sequences=seqs,
                              context=1000, num_gpus=1, decode=True, logits_rows=seqs).overhead_s

    assert overhead(256) - overhead(1) == pytest.approx(255 * vllm.step_overhead_s_per_request)
    cost, *_ = serving_model(dataclasses.replace(req, request_rate=float("inf"), num_prompts=4), ks)
    assert cost.seconds(64, 64, 0, 0, 200) - cost.seconds(64, 64, 0, 0, 0) == pytest.approx(
        200 * vllm.step_overhead_s_per_request)
