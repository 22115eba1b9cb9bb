"""The serving simulation's engine policies and HTTP frontend (estimate/serving.py): TensorRT-LLM's no-evict
admission, and the server process in front of the engine, checked against what each mechanism must do in closed
form (a lone request, a burst of requests, a stream of tokens)."""

import math

import pytest

from gpuwise.estimate.serving import EngineLimits, Frontend, StepCost, Workload, simulate


def _cost(per_row_s=20e-6, fixed_s=5e-3, kv_s=2e-8, pair_s=1e-10, overhead_s=1e-3) -> StepCost:
    grid = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    return StepCost(rows_grid=grid, rows_s=tuple(max(fixed_s, per_row_s * m) for m in grid), head_grid=(1, 4096),
                    head_s=(1e-5, 1e-3), kv_read_s_per_token=kv_s, prefill_attention_s_per_pair=pair_s,
                    step_overhead_s=overhead_s)


def _wl(n=300, prompt=500, out=100, **kw) -> Workload:
    return Workload(prompt_tokens=(prompt,) * n, output_tokens=(out,) * n, **kw)


LIMITS = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=400_000, block_size=16)


def test_no_evict_admits_only_whole_requests_and_never_preempts():
    # a pool of 500 blocks of 16: a whole request of 500 + 500 tokens takes 63 blocks, so 7 run at a time
    small = dict(max_num_seqs=256, max_num_batched_tokens=2048, kv_capacity_tokens=8_000, block_size=16)
    vllm = simulate(_cost(), _wl(n=40, prompt=500, out=500), EngineLimits(**small))
    trt = simulate(_cost(), _wl(n=40, prompt=500, out=500), EngineLimits(**small, reserve_full_length=True))
    assert vllm.preemptions > 0          # optimistic admission runs out of blocks as the outputs grow
    assert trt.preemptions == 0
    assert trt.max_running == (8000 // 16) // math.ceil(1000 / 16) == 7
    assert trt.completed == vllm.completed == 40


def test_no_evict_changes_nothing_when_the_pool_holds_everything():
    a = simulate(_cost(), _wl(n=50), LIMITS)
    b = simulate(_cost(), _wl(n=50), EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048,
                                                  kv_capacity_tokens=400_000, block_size=16, reserve_full_length=True))
    assert (a.ttft_s, a.e2e_s, a.steps) == (b.ttft_s, b.e2e_s, b.steps)


def test_an_idle_frontend_adds_its_latency_and_its_cpu_to_a_lone_request():
    fe = Frontend(latency_s=0.05, request_s=0.004, token_s=100e-6)
    bare = simulate(_cost(), _wl(n=1, out=10), LIMITS)
    served = simulate(_cost(), _wl(n=1, out=10), LIMITS, frontend=fe)
    # taken in (4 ms) before the engine starts; each step's one token streamed (0.1 ms) after it; latency once
    assert served.ttft_s.mean == pytest.approx(bare.ttft_s.mean + 0.004 + 100e-6 + 0.05)
    assert served.e2e_s.mean == pytest.approx(bare.e2e_s.mean + 0.004 + 100e-6 + 0.05)
    assert served.tpot_s.mean == pytest.approx(bare.tpot_s.mean)
    assert served.steps == bare.steps


def test_a_frontend_with_latency_only_shifts_every_request_by_it():
    bare = simulate(_cost(), _wl(n=200, request_rate=20.0, seed=1), LIMITS)
    lat = simulate(_cost(), _wl(n=200, request_rate=20.0, seed=1), LIMITS, frontend=Frontend(latency_s=0.03))
    assert [b + 0.03 for b in bare.ttft_values] == pytest.approx(list(lat.ttft_values))
    assert lat.tpot_s.mean == pytest.approx(bare.tpot_s.mean)


def test_a_burst_is_taken_in_one_request_at_a_time():
    """All sent at once: the k-th request reaches the engine after k x request_s, so the last first token comes no
    earlier than n x request_s."""
    n, req_s = 200, 0.01
    r = simulate(_cost(), _wl(n=n, out=2), LIMITS, frontend=Frontend(request_s=req_s))
    assert max(r.ttft_values) >= n * req_s
    assert max(r.ttft_values) < n * req_s + 1.0  # and not much later: the engine keeps up with 100 requests/s


def test_streaming_cpu_caps_output_throughput():
    """One frontend CPU streams at most 1 / token_s tokens per second, whatever the engine could do."""
    token_s = 1e-3
    wl = _wl(n=300, prompt=100, out=200)
    bare = simulate(_cost(), wl, LIMITS)
    capped = simulate(_cost(), wl, LIMITS, frontend=Frontend(token_s=token_s))
    assert bare.output_throughput > 2 / token_s  # the engine alone is well above the cap
    assert capped.output_throughput <= 1 / token_s * 1.0001
    assert capped.output_throughput == pytest.approx(1 / token_s, rel=0.1)
    assert capped.steps == bare.steps  # the engine does not wait for the frontend


@pytest.mark.parametrize("fe", [Frontend(latency_s=0.05, request_s=0.005, token_s=150e-6),
                                Frontend(request_s=0.02), Frontend(token_s=400e-6)])
def test_latency_never_falls_as_the_rate_rises_behind_a_frontend(fe):
    means = [simulate(_cost(), _wl(n=400, request_rate=rate, seed=2), LIMITS, frontend=fe).e2e_s.mean
             for rate in (1.0, 5.0, 20.0, 60.0, math.inf)]
    assert means == sorted(means)


@pytest.mark.parametrize("bad", [dict(latency_s=-1.0), dict(request_s=math.nan), dict(token_s=math.inf)])
def test_a_frontend_refuses_impossible_numbers(bad):
    with pytest.raises(ValueError):
        Frontend(**bad)


def test_a_slow_run_far_into_the_clock_ends_and_every_request_meets_an_idle_server():
    """At 0.001 requests/s, 300 requests arrive over ~3e5 s: the frontend's small jobs (a step's tokens) fall below
    the clock's resolution there and must still end (this run used to loop forever)."""
    fe = Frontend(latency_s=0.05, request_s=0.004, token_s=100e-6)
    lone = simulate(_cost(), _wl(n=1, out=10), LIMITS, frontend=fe)
    slow = simulate(_cost(), _wl(n=300, out=10, request_rate=1e-3, seed=2), LIMITS, frontend=fe)
    assert slow.completed == 300
    assert slow.ttft_s.p99 == pytest.approx(lone.ttft_s.mean, rel=1e-6)
    assert slow.e2e_s.mean == pytest.approx(lone.e2e_s.mean, rel=1e-6)


def test_a_rate_beyond_the_clock_is_refused():
    with pytest.raises(ValueError, match="clock"):
        _wl(n=10, request_rate=1e-20)
