"""The continuous-batching simulation (estimate/serving.py) against queueing facts that hold for any engine:
a lone request costs exactly its steps, Little's law, a closed loop never exceeds its concurrency, latency never
falls as the rate rises, throughput saturates, and a full KV pool preempts instead of losing requests."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.estimate.serving import (EngineLimits, Frontend, OutputReservation, StepCost, Workload, simulate, stats,
                                     stretch_steps)


def _cost(per_row_s=20e-6, fixed_s=5e-3, kv_s=2e-8, pair_s=1e-10, overhead_s=1e-3) -> StepCost:
    grid = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    # a memory-bound floor (the weights) until rows make it compute-bound
    return StepCost(rows_grid=grid, rows_s=tuple(max(fixed_s, per_row_s * m) for m in grid), head_grid=(1, 4096),
                    head_s=(1e-5, 1e-3), kv_read_s_per_token=kv_s, prefill_attention_s_per_pair=pair_s,
                    step_overhead_s=overhead_s)


LIMITS = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=400_000, block_size=16)


def _wl(n=300, prompt=500, out=100, **kw) -> Workload:
    return Workload(prompt_tokens=(prompt,) * n, output_tokens=(out,) * n, **kw)


def test_a_first_chunk_of_n_tokens_reaches_the_client_with_the_nth():
    """SGLang --stream-interval N streams a request's output when its length is a multiple of N (or it has finished):
    a lone request's first token reaches the client N - 1 decode steps later than with N = 1, its last at the same
    time; TPOT is what the client computes, (e2e - TTFT) / (output - 1); an output of at most N tokens is seen
    whole at its end. Under load (the decode-only stretches stop at a first chunk) the same holds per request."""
    cost = _cost()
    fe = Frontend(latency_s=0.01)
    one = simulate(cost, _wl(n=1, prompt=500, out=40), LIMITS, frontend=fe)
    ten = simulate(cost, _wl(n=1, prompt=500, out=40), LIMITS, frontend=Frontend(latency_s=0.01, first_chunk_tokens=10))
    decode = [cost.seconds(1, 1, 501 + k, 0) for k in range(39)]
    assert ten.ttft_s.mean == pytest.approx(one.ttft_s.mean + sum(decode[:9]))
    assert ten.e2e_s.mean == pytest.approx(one.e2e_s.mean)
    assert ten.tpot_s.mean == pytest.approx((ten.e2e_s.mean - ten.ttft_s.mean) / 39)
    short = simulate(cost, _wl(n=1, prompt=500, out=8), LIMITS, frontend=Frontend(first_chunk_tokens=10))
    assert short.ttft_s.mean == pytest.approx(short.e2e_s.mean)
    wl = _wl(n=200, prompt=300, out=60, max_concurrency=16)
    base = simulate(cost, wl, LIMITS, frontend=fe)
    chunked = simulate(cost, wl, LIMITS, frontend=Frontend(latency_s=0.01, first_chunk_tokens=8))
    assert chunked.e2e_s.mean == pytest.approx(base.e2e_s.mean, rel=1e-9)
    shift = [a - b for a, b in zip(chunked.ttft_values, base.ttft_values)]
    step = min(cost.seconds(16, 16, 16 * 360, 0), cost.seconds(1, 1, 301, 0))
    assert min(shift) >= 7 * step * (1 - 1e-9)  # seven more decode steps at least, each no shorter than the shortest
    with pytest.raises(ValueError, match="first_chunk_tokens"):
        Frontend(first_chunk_tokens=0)


def test_a_lone_request_costs_its_prefill_step_then_one_step_per_token():
    cost = _cost()
    r = simulate(cost, _wl(n=1, prompt=500, out=10), LIMITS)
    prefill = cost.seconds(500, 1, 0, 500 * (500 + 1) / 2)
    assert r.ttft_s.mean == pytest.approx(prefill)
    # the k-th decode step reads the 501 + k - 1 tokens cached so far
    decode = [cost.seconds(1, 1, 501 + k, 0) for k in range(9)]
    assert r.e2e_s.mean == pytest.approx(prefill + sum(decode))
    assert r.tpot_s.mean == pytest.approx(sum(decode) / 9)
    assert r.completed == 1 and r.steps == 10


def test_requests_finishing_inside_a_decode_stretch_cost_exactly_their_steps(monkeypatch):
    """Two requests sent together, 4 and 9 output tokens: one prefill step for both, 3 steps decoding both (the first
    finishes in the third, inside the decode-only stretch), then 5 steps decoding the second alone. The two stretches
    run in the tight loop through their finishing steps: three step costs are priced in all (the prefill step and
    each stretch's fixed part), not one per finishing step besides."""
    import gpuwise.estimate.serving as serving

    priced = []
    real = serving._step_seconds
    monkeypatch.setattr(serving, "_step_seconds", lambda *a: priced.append(a) or real(*a))
    cost = _cost()
    wl = Workload(prompt_tokens=(300, 200), output_tokens=(4, 9))
    r = simulate(cost, wl, LIMITS)
    assert len(priced) == 3
    prefill = cost.seconds(500, 2, 0, 300 * 301 / 2 + 200 * 201 / 2)
    both = [cost.seconds(2, 2, 301 + 201 + 2 * k, 0, 2) for k in range(3)]
    alone = [cost.seconds(1, 1, 201 + 3 + k, 0, 1) for k in range(5)]
    assert r.steps == 1 + 3 + 5 and r.completed == 2
    assert r.finished_at[0] == pytest.approx(prefill + sum(both))
    assert r.finished_at[1] == pytest.approx(prefill + sum(both) + sum(alone))
    assert r.tpot_values[0] == pytest.approx(sum(both) / 3)
    assert r.tpot_values[1] == pytest.approx((sum(both) + sum(alone)) / 8)


def test_a_long_prompt_is_chunked_by_the_token_budget():
    cost = _cost()
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=512, kv_capacity_tokens=100_000)
    r = simulate(cost, _wl(n=1, prompt=2000, out=2), limits)
    assert r.steps == 4 + 1  # ceil(2000 / 512) prefill steps, then one decode step
    chunks = [512, 512, 512, 464]
    done, t = 0, 0.0
    for c in chunks:
        t += cost.seconds(c, 1 if c == 464 else 0, 0, c * (done + (c + 1) / 2))
        done += c
    assert r.ttft_s.mean == pytest.approx(t)


def test_littles_law_holds():
    """Mean requests in the system = arrival rate x mean time in the system (steady Poisson load)."""
    r = simulate(_cost(), _wl(n=2000, request_rate=5.0, seed=3), LIMITS)
    busy_running = r.mean_running  # per step; steps are short and back to back at this load
    assert r.request_throughput == pytest.approx(5.0, rel=0.1)
    assert busy_running == pytest.approx(r.request_throughput * r.e2e_s.mean, rel=0.15)


def test_closed_loop_never_exceeds_its_concurrency():
    for c in (1, 4, 32):
        r = simulate(_cost(), _wl(n=200, max_concurrency=c), LIMITS)
        assert r.max_running <= c
        assert r.completed == 200
    one = simulate(_cost(), _wl(n=20, max_concurrency=1), LIMITS)
    # one at a time: the throughput is one over the request's own latency
    assert one.request_throughput == pytest.approx(1 / one.e2e_s.mean, rel=1e-6)


def test_latency_never_falls_as_the_rate_rises():
    last_ttft = last_e2e = 0.0
    for rate in (0.5, 1, 2, 4, 8, 16, 32, 64, math.inf):
        r = simulate(_cost(), _wl(n=400, request_rate=rate, seed=1), LIMITS)
        assert r.ttft_s.mean >= last_ttft * 0.999
        assert r.e2e_s.mean >= last_e2e * 0.999
        last_ttft, last_e2e = r.ttft_s.mean, r.e2e_s.mean


def test_throughput_follows_the_rate_then_saturates():
    cap = simulate(_cost(), _wl(n=1000), LIMITS).request_throughput  # everything at once: the engine's limit
    low = simulate(_cost(), _wl(n=1000, request_rate=cap / 10, seed=2), LIMITS)
    assert low.request_throughput == pytest.approx(cap / 10, rel=0.1)
    over = simulate(_cost(), _wl(n=1000, request_rate=cap * 3, seed=2), LIMITS)
    assert over.request_throughput <= cap * 1.05
    assert over.request_throughput >= cap * 0.8
    assert over.ttft_s.p50 > 10 * low.ttft_s.p50  # the queue builds past the knee


def test_a_full_kv_pool_preempts_and_still_completes_everything():
    small = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=20_000, block_size=16)
    r = simulate(_cost(), _wl(n=200, prompt=500, out=300), small)
    assert r.completed == 200
    assert r.preemptions > 0
    assert r.peak_kv_usage <= 1.0 + 1e-9
    roomy = simulate(_cost(), _wl(n=200, prompt=500, out=300), LIMITS)
    assert roomy.preemptions == 0
    assert r.output_throughput < roomy.output_throughput  # recomputation costs time


def test_a_request_larger_than_the_pool_is_refused():
    with pytest.raises(ValueError, match="does not fit in the KV pool"):
        simulate(_cost(), _wl(n=1, prompt=30_000, out=10), EngineLimits(
            max_num_seqs=8, max_num_batched_tokens=2048, kv_capacity_tokens=20_000))


def test_weighted_percentiles_and_goodput():
    s = stats([1.0, 2.0, 3.0], [1.0, 1.0, 98.0])
    assert s.p50 == 3.0 and s.mean == pytest.approx((1 + 2 + 294) / 100)
    r = simulate(_cost(), _wl(n=100, request_rate=2.0), LIMITS)
    assert r.goodput(None, None) == pytest.approx(r.request_throughput)
    assert r.goodput(r.ttft_s.p50, None) == pytest.approx(r.request_throughput / 2, rel=0.1)


def test_a_cached_prefix_is_not_computed_again_but_is_attended_to():
    cost = _cost()
    r = simulate(cost, _wl(n=1, prompt=1000, out=2, prefix_hit_rate=0.75), LIMITS)
    new = 250  # 1000 - 750 cached
    assert r.ttft_s.mean == pytest.approx(cost.seconds(new, 1, 0, new * (750 + (new + 1) / 2)))
    with pytest.raises(ValueError, match="prefix-cache hit rate"):
        _wl(n=1, prefix_hit_rate=1.0)


def test_speculative_decoding_trades_rows_for_tokens():
    from gpuwise.estimate.serving import Speculation

    assert Speculation(num_tokens=2, acceptance_rate=0.5, draft_layers_fraction=0.03).tokens_per_step == \
        pytest.approx(1 + 0.5 + 0.25)
    base = simulate(_cost(), _wl(n=4, prompt=200, out=300, max_concurrency=1), LIMITS)
    useless = simulate(_cost(), _wl(n=4, prompt=200, out=300, max_concurrency=1), LIMITS,
                       speculation=Speculation(num_tokens=1, acceptance_rate=0.0, draft_layers_fraction=0.03))
    good = simulate(_cost(), _wl(n=4, prompt=200, out=300, max_concurrency=1), LIMITS,
                    speculation=Speculation(num_tokens=3, acceptance_rate=0.8, draft_layers_fraction=0.03))
    assert useless.tpot_s.mean >= base.tpot_s.mean  # nothing accepted: the drafts only cost
    assert good.tpot_s.mean < 0.6 * base.tpot_s.mean  # ~2.95 tokens a step at a memory-bound batch of one
    assert good.completed == base.completed == 4


@pytest.mark.parametrize(("cost", "limits", "prompts", "outs"), [
    (_cost(), LIMITS, (500,), (100,)),
    (_cost(per_row_s=80e-6, fixed_s=2e-3), LIMITS, (200, 1500, 800), (50, 400, 10)),
    (_cost(kv_s=1e-7), EngineLimits(max_num_seqs=1024, max_num_batched_tokens=8192, kv_capacity_tokens=30_000),
     (900, 300), (300, 120)),  # a small pool: few requests decode at once
    (_cost(overhead_s=5e-3), EngineLimits(max_num_seqs=16, max_num_batched_tokens=512, kv_capacity_tokens=1_000_000),
     (4000,), (20,)),  # long prompts, chunked prefill dominates
    (_cost(), EngineLimits(max_num_seqs=64, max_num_batched_tokens=2048, kv_capacity_tokens=200_000,
                           reserve_full_length=True), (1000,), (1000,)),
    (_cost(), EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=40_000, block_size=1,
                           prefill_first=True, output_reservation=OutputReservation()),
     (200, 1500, 800), (50, 400, 10)),  # SGLang's scheduler
])
def test_no_simulated_saturation_exceeds_the_analytic_ceiling(cost, limits, prompts, outs):
    """`saturation_ceiling` is an upper bound `gpuwise pick --task serve` uses to reject, without simulating, a
    replica that would need more than 64 copies: the simulated engine with every request queued at once never
    finishes more requests per second."""
    from gpuwise.estimate.serving import saturation_ceiling

    n = 240
    wl = Workload(prompt_tokens=tuple(prompts[i % len(prompts)] for i in range(n)),
                  output_tokens=tuple(outs[i % len(outs)] for i in range(n)), request_rate=math.inf)
    ceiling = saturation_ceiling(cost, wl, limits)
    assert simulate(cost, wl, limits).request_throughput <= ceiling


def test_a_step_that_preempts_admits_no_waiting_request():
    # Two 48-token prompts fill 6 of the pool's 8 blocks; decoding them runs it out and the newer one is preempted.
    # vLLM's V1 scheduler admits nothing in that step (`if not preempted_reqs`), so the preempted request comes back
    # only once its prompt and output so far fit beside the other: one preemption. Taken straight back (same-step
    # admission), it would be preempted a second time.
    lim = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=128, block_size=16)
    r = simulate(_cost(), Workload(prompt_tokens=(48, 48), output_tokens=(64, 64), request_rate=math.inf), lim)
    assert r.completed == 2
    assert r.preemptions == 1


@settings(max_examples=300, deadline=None)
@given(a=st.floats(1e-5, 1.0), b=st.floats(0.0, 1e-2), k_max=st.integers(-2, 5000), window=st.floats(-1.0, 200.0))
def test_a_decode_stretch_in_closed_form_runs_the_steps_a_loop_runs(a, b, k_max, window):
    # the loop the closed form replaced: step j (from 0) starts at the sum of the steps before it
    k, now = 0, 0.0
    while k < k_max and now < window:
        now += a + b * k
        k += 1
    got = stretch_steps(a, b, k_max, window)
    starts = [a * j + b * j * (j - 1) / 2 for j in (got - 1, got, got + 1) if j >= 0]
    near = any(abs(t - window) <= 1e-9 * max(1.0, window) for t in starts)  # summation order at the boundary
    assert got == k or (near and abs(got - k) <= 1)
    assert stretch_steps(a, b, k_max, math.inf) == max(0, k_max)


@pytest.mark.parametrize("no_evict", [False, True])
def test_a_lone_request_that_fills_the_pool_to_the_last_block_is_never_preempted(no_evict):
    # 4,096 tokens in a 4,096-token pool: its blocks are counted exactly, not as the average of many requests'
    lim = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=4096,
                       reserve_full_length=no_evict)
    r = simulate(_cost(), Workload(prompt_tokens=(3996,), output_tokens=(100,), request_rate=math.inf), lim)
    assert r.completed == 1
    assert r.preemptions == 0


def test_a_waiting_request_starts_the_step_after_a_slot_frees():
    # one slot: the second request's prompt runs in the step right after the first request's last token
    c = _cost()
    lim = EngineLimits(max_num_seqs=1, max_num_batched_tokens=2048, kv_capacity_tokens=100_000)
    r = simulate(c, Workload(prompt_tokens=(100, 100), output_tokens=(20, 20), request_rate=math.inf), lim)
    assert r.steps == 2 * 20  # each: one prompt step (its first token) and 19 decode steps
    assert r.first_token_at[1] == pytest.approx(r.finished_at[0] + c.seconds(100, 1, 0.0, 100 * 101 / 2, 1))


def test_prompt_first_steps_admit_an_arrival_while_others_decode():
    # SGLang's order without its reservation: the fifth request, arriving 1 ms in with slots and budget free, gets its
    # prompt step after the first four's and then decodes with them (it is not held until one finishes)
    lim = EngineLimits(max_num_seqs=8, max_num_batched_tokens=4, kv_capacity_tokens=100_000, prefill_first=True)
    r = simulate(_cost(), Workload(prompt_tokens=(4,) * 5, output_tokens=(50,) * 5,
                                   arrival_times=(0.0, 0.0, 0.0, 0.0, 0.001)), lim)
    assert r.first_token_at[4] < 6 * _cost().seconds(4, 1, 0.0, 10.0, 1)
    assert r.finished_at[4] == pytest.approx(r.finished_at[0])


def test_a_prompt_chunk_on_few_heads_runs_its_attention_kernel_with_few_thread_blocks():
    # a 4,096-row chunk on 8 heads is 8 x 32 = 256 blocks of 128 rows: the H100 ran those at 0.62 of the rate at
    # 2,048 blocks (attention_kernels.toml [tiles]), which 64 heads x 32 reach
    from dataclasses import replace

    plain = _cost()
    pairs = 4096 * 4097 / 2
    attention = pairs * plain.prefill_attention_s_per_pair
    few = replace(plain, attention_heads=8)
    assert few.seconds(4096, 1, 0.0, pairs, 1, prefill_rows=4096) - plain.seconds(4096, 1, 0.0, pairs, 1) == \
        pytest.approx(attention * (1 / 0.62 - 1))
    many = replace(plain, attention_heads=64)
    assert many.seconds(4096, 1, 0.0, pairs, 1, prefill_rows=4096) == pytest.approx(plain.seconds(4096, 1, 0.0,
                                                                                                  pairs, 1))


def test_the_no_evict_policy_never_preempts_and_never_reports_more_than_its_pool():
    # TensorRT-LLM's GUARANTEED_NO_EVICT reserves each started request's whole length: a KV-bound burst queues instead
    lim = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=20_000,
                       reserve_full_length=True)
    r = simulate(_cost(), _wl(n=200, prompt=500, out=300), lim)
    assert r.completed == 200
    assert r.preemptions == 0
    assert r.peak_kv_usage <= 1.0
    assert max(u for _, u in r.kv_usage_timeline) <= 1.0


@pytest.mark.parametrize("computed, chunk, window", [(0, 500, 128), (100, 50, 128), (0, 64, 128), (300, 2048, 128),
                                                     (127, 1, 128), (0, 10, 4096)])
def test_band_pairs_count_what_a_sliding_window_layer_attends_to(computed, chunk, window):
    from gpuwise.catalog.attention_kernels import band_pairs
    brute = sum(min(p + 1, window) for p in range(computed, computed + chunk))
    assert band_pairs(computed, chunk, window) == brute


def test_a_lone_prompt_pays_its_window_layers_capped_pairs():
    """A prompt of 500 tokens on a model with half its attention in 128-key windows: the step's attention is the full
    layers' pairs at their weight plus the windowed layers' capped pairs at theirs."""
    import dataclasses

    from gpuwise.catalog.attention_kernels import band_pairs
    cost = dataclasses.replace(_cost(), attention_window=128, full_pair_weight=0.5, window_pair_weight=0.8)
    r = simulate(cost, _wl(n=1, prompt=500, out=2), LIMITS)
    pairs = 500 * 501 / 2 * 0.5 + band_pairs(0, 500, 128) * 0.8
    assert r.ttft_s.mean == pytest.approx(cost.seconds(500, 1, 0, pairs))
    assert pairs < 500 * 501 / 2  # far fewer than if every layer attended to every key


def test_the_serving_step_cost_splits_gpt_oss_attention_by_layer_kind():
    """gpt-oss: every second layer slides over 128 keys; their share of the pair FLOPs is a half, their weight their
    kernel's extra cost (the band's tiles at the window's rate) on top of that."""
    from gpuwise.catalog.attention_kernels import band_work
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import engine_perf, forward_pass_s
    from gpuwise.plan.serve import step_cost

    spec = load_model("gpt-oss-20b").spec
    profile = default_profile(get_gpu("h100-sxm"))
    engine = engine_perf("vllm")

    def step(rows, sequences, context, decode, logits_rows):
        return forward_pass_s(spec, profile=profile, topo=topology(profile.gpu, num_gpus=1), engine=engine,
                              dtype="bf16", weight_bytes_per_param=2.0, kv_bytes_per_element=2.0, rows=rows,
                              sequences=sequences, context=context, num_gpus=1, decode=decode, logits_rows=logits_rows)
    c = step_cost(step, spec=spec, profile=profile, engine=engine, kv_bytes_per_element=2.0, tp=1, max_rows=64,
                  mean_context=8192, mean_prompt=8000)
    assert c.attention_window == 128 and c.full_pair_weight == pytest.approx(0.5)
    assert c.window_pair_weight > 0.5 * band_work(128, 8000)  # the window's kernel runs below the long prompt's rate
