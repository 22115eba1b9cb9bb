"""SGLang's scheduler in the serving simulation (estimate/serving.py): prompt chunks run in steps of their own before
the decodes (`prefill_first`), and admission reserves each request's output (`OutputReservation`, SGLang's
new_token_ratio). Each test sets the same workload against the vLLM-like default, so it fails if the flag stops
changing what it claims to change."""

import pytest

from gpuwise.estimate.serving import EngineLimits, OutputReservation, StepCost, Workload, simulate


def _cost() -> StepCost:
    """A memory-bound floor (the weights) until the rows make a step compute-bound, as in test_serving.py."""
    grid = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    return StepCost(rows_grid=grid, rows_s=tuple(max(5e-3, 20e-6 * m) for m in grid), head_grid=(1, 4096),
                    head_s=(1e-5, 1e-3), kv_read_s_per_token=2e-8, prefill_attention_s_per_pair=1e-10,
                    step_overhead_s=1e-3)


def _wl(n: int = 300, prompt: int = 500, out: int = 100, **kw) -> Workload:
    return Workload(prompt_tokens=(prompt,) * n, output_tokens=(out,) * n, **kw)


SMALL_POOL = dict(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=20_000, block_size=1)


def test_prompt_chunks_run_alone_and_the_decoding_requests_wait():
    """A short request decoding when eight long prompts arrive: mixed steps let it finish while they prefill; with
    SGLang's prefill-first steps it produces nothing until every prompt has its first token."""
    wl = Workload(prompt_tokens=(10,) + (2000,) * 8, output_tokens=(5,) + (20,) * 8, arrival_times=(0.0,) * 9)
    limits = dict(max_num_seqs=64, max_num_batched_tokens=2048, kv_capacity_tokens=100_000)
    mixed = simulate(_cost(), wl, EngineLimits(**limits))
    first = simulate(_cost(), wl, EngineLimits(**limits, prefill_first=True))
    assert mixed.finished_at[0] < max(mixed.first_token_at[1:])
    assert first.finished_at[0] > max(first.first_token_at[1:])
    # the wait through the prompt steps is one long inter-token gap (16,010 prompt tokens at 2,048 a step)
    assert first.itl_s.p99 > 3 * mixed.itl_s.p99
    assert first.completed == mixed.completed == 9


def test_reserving_outputs_admits_fewer_requests_and_rarely_retracts():
    """Prompts that fit the pool but whose outputs do not: admitting on the prompt alone fills the pool and then
    preempts again and again; reserving each request's output (ratio 0.7 of what the running ones still have to
    produce, falling over the decode steps) keeps fewer requests running and almost never retracts."""
    wl = _wl(n=200, prompt=500, out=300)
    greedy = simulate(_cost(), wl, EngineLimits(**SMALL_POOL))
    reserving = simulate(_cost(), wl, EngineLimits(**SMALL_POOL, output_reservation=OutputReservation()))
    assert reserving.completed == greedy.completed == 200
    assert reserving.max_running < greedy.max_running
    assert reserving.preemptions < greedy.preemptions / 10
    assert reserving.peak_kv_usage <= 1.0 + 1e-9


def test_the_reservation_ratio_falls_to_its_floor():
    r = OutputReservation()
    assert r.minimum == pytest.approx(0.098)  # SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14
    assert r.initial - r.decay * r.decay_steps == pytest.approx(r.minimum)


def test_an_idle_server_admits_a_request_as_large_as_its_pool():
    """Nothing running: the reservation cannot block a request the pool can hold (no deadlock)."""
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=512, kv_capacity_tokens=1000, block_size=1,
                          prefill_first=True, output_reservation=OutputReservation())
    r = simulate(_cost(), _wl(n=3, prompt=600, out=400), limits)
    assert r.completed == 3 and r.preemptions == 0


def test_latency_never_falls_as_the_rate_rises_under_sglang_rules():
    import math

    limits = EngineLimits(**{**SMALL_POOL, "kv_capacity_tokens": 60_000}, prefill_first=True,
                          output_reservation=OutputReservation())
    last_ttft = last_e2e = 0.0
    for rate in (0.5, 2, 8, 32, math.inf):
        r = simulate(_cost(), _wl(n=400, request_rate=rate, seed=1), limits)
        assert r.ttft_s.mean >= last_ttft * 0.999
        assert r.e2e_s.mean >= last_e2e * 0.999
        last_ttft, last_e2e = r.ttft_s.mean, r.e2e_s.mean


def test_an_eager_prefill_step_takes_at_least_its_launches():
    """SGLang runs prompt chunks without CUDA graphs: a step with a prompt chunk takes at least the host's launches
    (StepCost.prefill_host_s); decode steps, graphed, do not."""
    from dataclasses import replace

    wl = _wl(n=1, prompt=20, out=50, arrival_times=(0.0,))
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=2048, kv_capacity_tokens=10_000, prefill_first=True)
    graphed = simulate(_cost(), wl, limits)
    eager = simulate(replace(_cost(), prefill_host_s=0.05), wl, limits)
    assert eager.ttft_s.p50 == pytest.approx(graphed.ttft_s.p50 + 0.05 - 5e-3, rel=1e-3)  # 50 ms, not the 5 ms floor
    assert eager.tpot_s.p50 == pytest.approx(graphed.tpot_s.p50)


def test_sglangs_eager_prefill_reproduces_its_source():
    """engine_perf.toml's per-kernel figure against its sources: graphing SGLang's prefill saved 10.3 ms of TTFT for
    Llama-3.1-8B-Instruct-FP8 at TP 8 with 1,024 prompt tokens (PR #13094: gpuwise's launches less the same pass's
    kernels), and DeepSeek-V3's one-token prefill took 82.6 ms eager, host-bound (PR #12160: gpuwise's launches); both
    within a factor of 1.35 now that an fp8 pass launches its activation-quantize kernels too (DeepSeek's came out
    at 0.67 of its source without them). Both PRs measured SGLang before 0.5.10, whose prefill ran eagerly by
    default."""
    import gpuwise

    llama = gpuwise.infer("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, engine="sglang", weights="fp8",
                          prompt_tokens=1024, output_tokens=16, sglang_version="0.5.5").prefill
    saved = llama.host_s - (llama.gemm_s + llama.attention_s + llama.stream_s + llama.comm_s)
    assert 10.3e-3 / 1.35 < saved < 10.3e-3 * 1.35
    ds = gpuwise.infer("deepseek-v3", gpu="h200-sxm", num_gpus=8, engine="sglang", prompt_tokens=1,
                       output_tokens=16, sglang_version="0.5.5").prefill
    assert 82.6e-3 / 1.35 < ds.host_s < 82.6e-3 * 1.35 and ds.bound == "host"


def test_an_fp8_pass_quantizes_each_gemm_input_with_a_kernel_of_its_own():
    """W8A8 fp8 (vLLM's Fp8LinearOp, SGLang's fp8 linears): one quantize kernel per GEMM input, the router and the
    shared-expert gate left out and MLA's q_a and kv_a sharing one (fused_qkv_a_proj_with_mqa); the routed experts
    quantize the tokens once before dispatch and then their intermediate copies. An eager prefill launches them all,
    so it takes 40 us more per kernel than the same pass in 16 bits."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import activation_quant, engine_perf, forward_pass_s
    from gpuwise.estimate.layer_ops import block_ops

    llama = load_model("llama-3.1-8b").spec
    ops = block_ops(llama, 0, tokens=100, keys=100)
    assert activation_quant(ops, 100) == (4, 0, 100 * (4096 + 4096 + 4096 + 14336))
    ds = load_model("deepseek-v3").spec
    moe = block_ops(ds, 3, tokens=100, keys=100)
    kernels, experts, elements = activation_quant(moe, 100, expert_rows=800, expert_copies=6400)
    assert (kernels, experts) == (8, 2)  # q_a (+ kv_a), q_b, kv_b, o, experts up and down, shared up and down
    assert elements == 100 * (7168 + 1536 + 512 + 16384 + 7168 + 2048) + 800 * 7168 + 6400 * 2048

    gpu = get_gpu("h100-sxm")
    sglang = engine_perf("sglang")
    passes = {dtype: forward_pass_s(llama, profile=default_profile(gpu), topo=topology(gpu, num_gpus=1),
                                    engine=sglang, dtype=dtype, weight_bytes_per_param=1.0, kv_bytes_per_element=2.0,
                                    rows=64, sequences=1, context=64, num_gpus=1, decode=False, logits_rows=1)
              for dtype in ("fp8", "bf16")}
    assert passes["fp8"].host_s - passes["bf16"].host_s == pytest.approx(
        4 * llama.num_layers * sglang.prefill_host_s_per_kernel)


def test_data_parallel_attention_quantizes_the_gathered_tokens_for_the_experts():
    """DeepSeek-V3 decoding on 8 H200 with SGLang's DP attention: each GPU quantizes its own 32 rows for the
    attention and shared-expert GEMMs, and the 8 x 32 tokens gathered for its experts, whose 8 x 32 x 8 routed copies
    spread over the 8 expert ranks. The fp8 pass streams those bytes (16 bits in, 8 out) and pays a kernel's fixed
    cost for each quantize kernel but the experts' two, which the measured fused-MoE call already covers."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import engine_perf, forward_pass_s

    spec = load_model("deepseek-v3").spec
    gpu = get_gpu("h200-sxm")
    profile = default_profile(gpu)
    assert profile.fused_moe_call_s > 0
    rows, dp = 32, 8
    topo, sglang = topology(gpu, num_gpus=dp), engine_perf("sglang")
    passes = {dtype: forward_pass_s(spec, profile=profile, topo=topo, engine=sglang, dtype=dtype,
                                    weight_bytes_per_param=1.0, kv_bytes_per_element=1.0, rows=rows, sequences=rows,
                                    context=2048, num_gpus=dp, decode=True, logits_rows=rows, dp_attention=True)
              for dtype in ("fp8", "bf16")}
    h, q_lora, kv_lora, attn_out, shared_i, dense_i = 7168, 1536, 512, 128 * 128, 2048, 18432
    attention = rows * (h + q_lora + kv_lora + attn_out)
    moe_layers = sum(spec.moe.moe_layers)
    per_moe = attention + rows * (h + shared_i) + rows * dp * h + rows * dp * spec.moe.top_k / dp * 2048
    per_dense = attention + rows * (h + dense_i)
    elements = moe_layers * per_moe + (spec.num_layers - moe_layers) * per_dense
    fixed = (moe_layers * 6 + (spec.num_layers - moe_layers) * 6) * profile.kernel_overhead_s
    assert passes["fp8"].stream_s - passes["bf16"].stream_s == pytest.approx(
        elements * 3 / profile.bandwidth + fixed, rel=1e-9)


def test_infer_says_when_its_gemms_quantize_their_inputs():
    """The quantize kernels are charged where the GEMMs run in fp8 (a GPU with fp8 tensor cores), and `infer` says so;
    an A100 runs fp8 weights through 16-bit GEMMs (no activation quantization) and says nothing of it."""
    import gpuwise

    h100 = gpuwise.infer("llama-3.1-8b", gpu="h100-sxm", weights="fp8")
    assert h100.compute_dtype == "fp8" and any("quantized to fp8 by a kernel" in a for a in h100.assumptions)
    a100 = gpuwise.infer("llama-3.1-8b", gpu="a100-sxm-80gb", weights="fp8")
    assert a100.compute_dtype != "fp8" and not any("quantized to fp8" in a for a in a100.assumptions)
