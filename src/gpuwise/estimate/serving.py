"""Serving under load: a continuous-batching engine simulated step by step over a stream of requests.

The engine (vLLM's V1 scheduler; TensorRT-LLM's in-flight batching and llama.cpp's server slots behave alike for
this purpose; SGLang's order differs, below) runs one forward pass per step over every running request:

1. Requests already running are scheduled first, in admission order: each decoding request gets one token and a
   request part-way through its prompt gets the next chunk, all within a token budget per step
   (`max_num_batched_tokens`: chunked prefill).
2. Every scheduled token needs a KV-cache slot. When the paged pool (`kv_capacity_tokens`, whole blocks of
   `block_size`) runs out, the most recently admitted request is preempted: its blocks are freed and it goes back
   to the front of the queue, to recompute its prompt and the tokens it had produced (vLLM's recompute
   preemption; the prefix cache is not modelled).
3. Waiting requests are then admitted first come first served while the budget, `max_num_seqs` and the pool
   allow; a prompt longer than the remaining budget is admitted with a chunk of it. None is admitted in a step that
   preempted (vLLM V1 schedules the waiting queue only `if not preempted_reqs`).
4. The step's time is the forward pass over all those rows (`StepCost`); requests whose prompt completes emit their
   first token at its end (time to first token), decoding requests one more token (inter-token latency).

SGLang orders its steps differently (`EngineLimits.prefill_first`, `OutputReservation`): prompt chunks run in steps of
their own, ahead of the decodes, and a waiting request is admitted only while its prompt and whole output fit beside
the outputs the running requests are still expected to produce. TensorRT-LLM reserves every started request's whole
length and never preempts (`EngineLimits.reserve_full_length`).

Arrivals are those of vLLM's `benchmark_serving` / `vllm bench serve`: all at once (`request_rate` inf) or a
Poisson process of the given rate, and at most `max_concurrency` requests in flight when that is set (a closed
loop: the next request is sent when one finishes).

Decoding requests are kept in aggregate (one counter of decode steps, a heap of the step at which each finishes),
so a step costs O(log n) whatever the batch: 10,000 requests simulate in well under a second
(benchmarks/serving_sim.py prints the figure).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

from ..catalog.attention_kernels import PLATEAU_HEAD_DIM, band_pairs, flash_tiles, tiles_over_curves

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """Time of one engine step as a function of what it computes (built from the kernel model by `plan.serve`).

    seconds = rows_s(rows) + head_s(logits_rows) + kv_read_s_per_token x cached tokens the decoding requests read
              + prefill_attention_s_per_pair x (query, key) pairs of the prompt chunks
                / tile_factor(the thread blocks of the prompt chunks' attention kernel)
              + state_s_per_request x running requests (hybrid models' recurrent state) + step_overhead_s
    """

    rows_grid: tuple[int, ...]
    """Row counts (tokens in the step) at which the forward pass without attention and logits was timed."""
    rows_s: tuple[float, ...]
    """GEMMs, streaming kernels and tensor-parallel all-reduces of the step at each grid point (interpolated)."""
    head_grid: tuple[int, ...]
    head_s: tuple[float, ...]
    """The LM head at each number of logit rows (one per request that emits a token)."""
    kv_read_s_per_token: float
    """Decode attention: seconds per cached token (all layers) read by one decoding request."""
    prefill_attention_s_per_pair: float
    """Prefill attention: seconds per (query, key) pair, all layers, at the flash kernel's rate."""
    step_overhead_s: float
    """The engine's time per step outside the kernels (scheduling, sampling, detokenizing)."""
    step_overhead_s_per_request: float = 0.0
    """Host time per running request per step (scheduling it, preparing its inputs, processing its output) that
    the GPU waits for: engines that schedule step n + 1 only after step n (vLLM without --async-scheduling)."""
    prefill_host_s: float = 0.0
    """Host time to launch a step with prompt chunks that the engine runs eagerly (SGLang's extend): such a step's
    kernels take at least this long (`EnginePerf.prefill_host_s_per_kernel`); 0: graphed or compiled."""
    prefill_graph_rows: float = 0.0
    """A step of at most this many rows replays CUDA graphs instead (SGLang's piecewise graphs: no `prefill_host_s`
    floor); 0: none does, inf: every step."""
    state_s_per_request: float = 0.0
    """Hybrid models: seconds to read and write one running request's recurrent state (all its recurrent layers)
    in a step; 0 for attention-only models."""
    attention_heads: float = 0.0
    """Query heads on a GPU: a step's prompt chunks run the flash kernel as heads x ceil(prompt rows / 128) thread
    blocks, and fewer than its rate is quoted at cost more (`attention_kernels.tiles_over_curves`); 0: not
    applied."""
    attention_head_dim: float = PLATEAU_HEAD_DIM
    attention_sms: int | None = None
    """The GPU's SMs (None: an H100's 132), for the thread blocks per SM."""
    attention_window: int = 0
    """Sliding-window layers' window (keys a query attends to; 0: none): their prompt-chunk pairs are capped at it."""
    full_pair_weight: float = 1.0
    """Of `prefill_attention_s_per_pair`, the share of a (query, key) pair's cost in the layers that attend to every
    key (1 without sliding-window layers)."""
    window_pair_weight: float = 0.0
    """A sliding-window layer's pair (`attention_kernels.band_pairs`) in units of `prefill_attention_s_per_pair`: their
    share of the FLOPs per pair, times their kernel's extra cost (the key tiles its band touches, `attention_kernels.band_work`,
    and the kernel's rate at the window's length against the prompt's)."""

    def seconds(self, rows: int, logits_rows: int, kv_tokens: float, attention_pairs: float,
                requests: int = 0, prefill_rows: int | None = None) -> float:
        """`prefill_rows`: the step's prompt-chunk rows, for the prefill attention's thread blocks (None: as many as
        its rate is quoted at)."""
        return _step_seconds(self, rows, self.rows_time(rows), self.head_time(logits_rows), kv_tokens,
                             attention_pairs, requests, prefill_rows)

    def rows_time(self, rows: int) -> float:
        return _interp(self.rows_grid, self.rows_s, rows)

    def head_time(self, rows: int) -> float:
        return _interp(self.head_grid, self.head_s, rows)


def _step_seconds(cost, rows: int, rows_s: float, head_s: float, kv_tokens: float, attention_pairs: float,
                  requests: int, prefill_rows: int | None = None) -> float:
    """One step of `rows` rows: its kernels (at least the eager launches of a step with prompt chunks, unless it
    replays CUDA graphs), then the host's time."""
    attention = attention_pairs * cost.prefill_attention_s_per_pair
    if attention > 0 and prefill_rows and cost.attention_heads > 0:
        # (the chunks' rows taken together: a few more blocks where several prompts share the step)
        attention /= tiles_over_curves(flash_tiles(1, cost.attention_heads, prefill_rows), backward=False,
                                       head_dim=cost.attention_head_dim, sms=cost.attention_sms)
    kernels = (rows_s + head_s + kv_tokens * cost.kv_read_s_per_token + attention
               + requests * cost.state_s_per_request)
    if attention_pairs > 0 and kernels < cost.prefill_host_s and rows > cost.prefill_graph_rows:
        kernels = cost.prefill_host_s
    return kernels + cost.step_overhead_s + requests * cost.step_overhead_s_per_request


def _interp(xs: tuple[int, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear in x through the grid; 0 at 0; linear extrapolation past the last point."""
    if x <= 0:
        return 0.0
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return ys[i]
    if i == 0:
        return ys[0] * x / xs[0]
    if i == len(xs):
        i -= 1
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLimits:
    """What the scheduler may put in one step, and the KV pool (vLLM's names)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    """Tokens the paged KV pool holds on each GPU (all layers), whole blocks."""
    block_size: int = 16
    reserve_full_length: bool = False
    """Admit a request only when the blocks of its whole prompt and output fit beside those reserved by the running
    ones, and never preempt: TensorRT-LLM's default capacity policy, GUARANTEED_NO_EVICT ("guarantee that a started
    request is never paused", TensorRT-LLM docs, performance-tuning-guide/useful-runtime-flags.md). vLLM and SGLang
    admit on the prompt alone and preempt when the pool runs out (False)."""
    prefill_first: bool = False
    """A step runs either prompt chunks alone or one decode token for every running request, and the prompt chunks
    go first whenever a waiting request can be admitted: SGLang's scheduler (`get_next_batch_to_run` tries
    `get_new_batch_prefill` before the decode batch; the two mix only with --enable-mixed-chunk, off by default).
    Decoding requests wait through those steps. vLLM, TensorRT-LLM and llama.cpp put the running requests' decode
    tokens and the prompt chunks in one step (False)."""
    output_reservation: OutputReservation | None = None
    """SGLang's admission rule; None: a request is admitted when its prompt chunk fits in the free pool."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputReservation:
    """SGLang's admission rule (python/sglang/srt/managers/schedule_policy.py, PrefillAdder): a waiting request is
    admitted only while its prompt still to compute plus its whole expected output (max_new_tokens, clipped at
    `clip_tokens`: SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION) fits in the free pool after reserving, for every decoding
    request, `ratio` x its output still to come, and for every request admitted in the same step its chunk and its
    whole output. The ratio (new_token_ratio) starts at `initial` (SGLANG_INIT_NEW_TOKEN_RATIO 0.7) and falls by
    (initial - minimum) / `decay_steps` each decode step down to minimum = initial x `minimum_factor`
    (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600); when the pool runs out and
    requests are retracted it restarts at (tokens decoded + `retract_steps` x requests) / their max_new_tokens, at
    most 1 (ScheduleBatch.retract_decode, SGLANG_RETRACT_DECODE_STEPS 20). Benchmark clients send each request's
    output length as its max_new_tokens, so the scheduler's estimate is the real length."""

    initial: float = 0.7
    minimum_factor: float = 0.14
    decay_steps: int = 600
    clip_tokens: int = 4096
    retract_steps: int = 20

    @property
    def minimum(self) -> float:
        return self.initial * self.minimum_factor

    @property
    def decay(self) -> float:
        return (self.initial - self.minimum) / self.decay_steps


MAX_SPAN_S = 1e8
"""Longest expected arrival span (requests / rate) a run may have: the clock is a float in seconds, resolving
1e8 s to ~15 ns; far beyond, the time of a step is lost in the clock's rounding."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """The requests: lengths and send times, as a benchmark client produces them."""

    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    request_rate: float = math.inf
    """Requests per second (Poisson arrivals); inf sends all at once."""
    max_concurrency: int | None = None
    """At most this many requests in flight (the client waits for one to finish before sending the next)."""
    arrival_times: tuple[float, ...] | None = None
    """Explicit send times (s), one per request, instead of `request_rate` (a decode instance fed by prefill ones)."""
    prefilled: bool = False
    """The prompts arrive with their KV cache already computed (disaggregated decode): only the last prompt token's
    row is run when a request is admitted, and its whole prompt is allocated in the pool at once."""
    prefix_hit_rate: float = 0.0
    """Share of each prompt already in the engine's prefix cache (vLLM automatic prefix caching, SGLang's radix
    cache): those tokens are not computed again (the last prompt token always is); they still occupy the pool."""
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.prompt_tokens) != len(self.output_tokens) or not self.prompt_tokens:
            raise ValueError("a workload needs as many prompt lengths as output lengths, at least one")
        if not 0 <= self.prefix_hit_rate < 1:
            raise ValueError(f"the prefix-cache hit rate must be in [0, 1), got {self.prefix_hit_rate}")
        if self.arrival_times is not None and len(self.arrival_times) != len(self.prompt_tokens):
            raise ValueError("one arrival time per request")
        if not math.isinf(self.request_rate) and len(self.prompt_tokens) / self.request_rate > MAX_SPAN_S:
            raise ValueError(f"{len(self.prompt_tokens):,} requests at {self.request_rate:g} per second arrive over "
                             f"~{len(self.prompt_tokens) / self.request_rate:.3g} s, beyond the {MAX_SPAN_S:.0e} s "
                             "(~3 years) the simulation's clock resolves to the microsecond; at such a rate every "
                             "request meets an idle server: use --max-concurrency 1 for its latencies")


    def arrivals(self) -> list[float]:
        """Send times (s): explicit, Poisson with `request_rate`, or all at 0."""
        n = len(self.prompt_tokens)
        if self.arrival_times is not None:
            return list(self.arrival_times)
        if math.isinf(self.request_rate):
            return [0.0] * n
        rng = random.Random(self.seed)
        t, out = 0.0, []
        for _ in range(n):
            t += rng.expovariate(self.request_rate)
            out.append(t)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculation:
    """Speculative decoding with a one-layer draft head (EAGLE, DeepSeek's MTP): each step drafts `num_tokens`
    tokens one after another, then the target model verifies them in the same pass as the request's next token.

    With a per-token acceptance rate a (the chance a draft token is accepted given the ones before it were), a step
    yields (1 - a^(k+1)) / (1 - a) tokens on average (Leviathan et al. 2023, eq. 1)."""

    num_tokens: int
    acceptance_rate: float
    draft_layers_fraction: float
    """The draft head's share of one target forward pass, without the LM head (one layer of L: 1/L)."""

    def __post_init__(self) -> None:
        if self.num_tokens < 1:
            raise ValueError("speculative decoding needs at least one draft token")
        if not 0 <= self.acceptance_rate < 1:
            raise ValueError(f"the acceptance rate must be in [0, 1), got {self.acceptance_rate}")

    @property
    def tokens_per_step(self) -> float:
        a, k = self.acceptance_rate, self.num_tokens
        return (1 - a ** (k + 1)) / (1 - a)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frontend:
    """The server process between the benchmark client and the engine (vLLM's API server, SGLang's tokenizer
    manager, trtllm-serve): one CPU that turns each request into token ids (chat template, tokenizer) and each
    emitted token into a streamed chunk (detokenize, JSON, socket write). The engine runs in its own process and does
    not wait for it; a request reaches the engine only once it has been taken in, and the client sees a step's
    tokens only once the frontend has streamed them. When both kinds of work are queued they share the CPU equally
    (one event loop alternating between the request handlers and the output handler).

    Offline runs (vLLM's LLM class, trtllm-bench) have no frontend: `simulate(..., frontend=None)`."""

    latency_s: float = 0.0
    """Fixed time every request's first and last token take on the way to the client (HTTP, process hops), with the
    server idle; it occupies no CPU of the frontend."""
    request_s: float = 0.0
    """Frontend CPU to take in one request (template, tokenize, validate, hand to the engine)."""
    token_s: float = 0.0
    """Frontend CPU to stream one output token to its client."""
    first_chunk_tokens: int = 1
    """Output tokens a request has produced when its first chunk is streamed: 1, except SGLang with
    --stream-interval N > 1, which streams a request's output whenever its length is a multiple of N (or it has
    finished), so the client's first token arrives with the N-th (vLLM sends the first token at once whatever its
    interval)."""

    def __post_init__(self) -> None:
        for name in ("latency_s", "request_s", "token_s"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"frontend {name} must be a finite number >= 0, got {v}")
        if not (isinstance(self.first_chunk_tokens, int) and self.first_chunk_tokens >= 1):
            raise ValueError(f"frontend first_chunk_tokens must be a whole number >= 1, got {self.first_chunk_tokens}")

    @property
    def idle(self) -> bool:
        return self.request_s == 0 and self.token_s == 0


@dataclass(frozen=True, slots=True)
class Stats:
    """mean, p50, p90, p99 of a latency (seconds)."""

    mean: float
    p50: float
    p90: float
    p99: float

    def percentile(self, p: int) -> float:
        return {50: self.p50, 90: self.p90, 99: self.p99}[p]


def stats(values: list[float], weights: list[float] | None = None) -> Stats:
    """Mean and nearest-rank percentiles (numpy's 'linear' between ranks), optionally weighted."""
    if not values:
        return Stats(math.nan, math.nan, math.nan, math.nan)
    if weights is None:
        xs = sorted(values)
        n = len(xs)

        def pct(p: float) -> float:
            pos = (n - 1) * p / 100
            lo = int(pos)
            hi = min(lo + 1, n - 1)
            return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

        return Stats(sum(xs) / n, pct(50), pct(90), pct(99))
    pairs = sorted(zip(values, weights))
    total = sum(w for _, w in pairs)

    def wpct(p: float) -> float:
        target, acc = total * p / 100, 0.0
        for v, w in pairs:
            acc += w
            if acc >= target:
                return v
        return pairs[-1][0]

    return Stats(sum(v * w for v, w in pairs) / total, wpct(50), wpct(90), wpct(99))


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingResult:
    ttft_s: Stats
    """Time to first token: from sending the request to the end of the step that completes its prompt."""
    tpot_s: Stats
    """Time per output token after the first, per request: (e2e - ttft) / (output - 1)."""
    itl_s: Stats
    """Inter-token latency: every gap between two tokens of a request (the step times it waited through)."""
    e2e_s: Stats
    duration_s: float
    """From the first send to the last token."""
    completed: int
    request_throughput: float
    """Requests per second over `duration_s`."""
    output_throughput: float
    """Output tokens per second, all requests together."""
    total_throughput: float
    """Prompt + output tokens per second."""
    mean_running: float
    """Requests in a step, averaged over steps (the batch the engine actually ran)."""
    max_running: int
    peak_kv_usage: float
    """Largest share of the KV pool in use."""
    preemptions: int
    steps: int
    kv_usage_timeline: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    """(time s, share of the KV pool in use), at most ~200 points."""
    ttft_values: tuple[float, ...] = field(default_factory=tuple, repr=False)
    tpot_values: tuple[float, ...] = field(default_factory=tuple, repr=False)
    first_token_at: tuple[float, ...] = field(default_factory=tuple, repr=False)
    """Per request, in workload order: the time (s) its first token was emitted."""
    finished_at: tuple[float, ...] = field(default_factory=tuple, repr=False)
    """Per request, in workload order: the time (s) its last token was emitted."""

    def goodput(self, ttft_slo_s: float | None, tpot_slo_s: float | None) -> float:
        """Requests per second that met both SLOs (vLLM's --goodput: each request against its own TTFT and TPOT)."""
        good = sum(1 for a, b in zip(self.ttft_values, self.tpot_values)
                   if (ttft_slo_s is None or a <= ttft_slo_s) and (tpot_slo_s is None or b <= tpot_slo_s))
        return good / self.duration_s if self.duration_s > 0 else 0.0


class _Memo:
    """A StepCost whose interpolations are remembered by row count (a simulation asks for the same few counts
    again and again)."""

    __slots__ = ("cost", "rows", "head", "kv_read_s_per_token", "prefill_attention_s_per_pair", "step_overhead_s",
                 "step_overhead_s_per_request", "prefill_host_s", "prefill_graph_rows", "state_s_per_request",
                 "attention_heads",
                 "attention_head_dim", "attention_sms", "attention_window", "full_pair_weight", "window_pair_weight")

    def __init__(self, cost: StepCost) -> None:
        self.cost, self.rows, self.head = cost, {}, {}
        self.kv_read_s_per_token = cost.kv_read_s_per_token
        self.prefill_attention_s_per_pair = cost.prefill_attention_s_per_pair
        self.step_overhead_s = cost.step_overhead_s
        self.step_overhead_s_per_request = cost.step_overhead_s_per_request
        self.prefill_host_s = cost.prefill_host_s
        self.prefill_graph_rows = cost.prefill_graph_rows
        self.state_s_per_request = cost.state_s_per_request
        self.attention_heads = cost.attention_heads
        self.attention_head_dim = cost.attention_head_dim
        self.attention_sms = cost.attention_sms
        self.attention_window = cost.attention_window
        self.full_pair_weight = cost.full_pair_weight
        self.window_pair_weight = cost.window_pair_weight

    def rows_time(self, n: int) -> float:
        t = self.rows.get(n)
        if t is None:
            t = self.rows[n] = self.cost.rows_time(n)
        return t

    def head_time(self, n: int) -> float:
        t = self.head.get(n)
        if t is None:
            t = self.head[n] = self.cost.head_time(n)
        return t

    def seconds(self, rows: int, logits_rows: int, kv_tokens: float, attention_pairs: float,
                requests: int = 0, prefill_rows: int | None = None) -> float:
        return _step_seconds(self, rows, self.rows_time(rows), self.head_time(logits_rows), kv_tokens,
                             attention_pairs, requests, prefill_rows)


class _Req:
    __slots__ = ("i", "prompt", "out", "sent", "computed", "target", "produced", "first", "dec0", "ctx0", "order",
                 "alive", "done", "first_step", "last_step", "res_a", "res_b", "prod0", "chunk_step")

    def __init__(self, i: int, prompt: int, out: int, sent: float) -> None:
        self.i, self.prompt, self.out, self.sent = i, prompt, out, sent
        self.computed = 0          # tokens whose KV is in the cache
        self.target = prompt       # tokens to prefill before the next token is emitted (prompt + recomputed output)
        self.produced = 0          # output tokens emitted so far
        self.first: float | None = None
        self.dec0 = 0              # decode counter when it entered decode
        self.ctx0 = 0              # cached tokens when it entered decode
        self.order = 0             # admission order (preemption takes the largest)
        self.alive = False
        self.done = math.nan       # time of its last token
        self.first_step = -1       # the step that emitted its first token
        self.last_step = -1        # the step that emitted its last token
        self.chunk_step = -1       # the step whose tokens make its first streamed chunk, where that is not the first
        self.res_a = self.res_b = 0.0  # its output reservation while decoding: res_a - res_b x decode counter
        self.prod0 = 0.0           # produced - dec0 x tokens per step, when it entered decode


def stretch_steps(a: float, b: float, k_max: int, window_s: float) -> int:
    """Steps of a decode-only stretch: at most `k_max`, each starting before `window_s` seconds have passed, when step
    j (from 0) takes a + b j seconds; step j starts at elapsed(j) = a j + b j (j - 1) / 2."""
    if k_max <= 0 or window_s <= 0:
        return 0
    if math.isinf(window_s) or (a <= 0 and b <= 0):
        return k_max

    def elapsed(j: int) -> float:
        return a * j + b * j * (j - 1) / 2

    # the first step that would start too late: the root of elapsed(j) = window_s (in the form that keeps its
    # precision when the growth is small), then exact by integer steps
    c = a - b / 2
    disc = math.sqrt(c * c + 2 * b * window_s)
    root = 2 * window_s / (c + disc) if c > 0 else (disc - c) / b
    j = max(1, min(k_max, math.ceil(root)))
    while j > 1 and elapsed(j - 1) >= window_s:
        j -= 1
    while j < k_max and elapsed(j) < window_s:
        j += 1
    return j


def saturation_ceiling(cost: StepCost, workload: Workload, limits: EngineLimits) -> float:
    """Requests per second the engine cannot exceed, without a simulation (no speculation, no frontend): a running
    request holds at least its prompt's blocks, so at most min(max_num_seqs, pool blocks / the shortest prompt's
    blocks) decode at once; a step that decodes n of them takes at least its decode-only time at the shortest
    prompt's context, and every request but its first token (the prefill's) needs a decode row. t(n) is piecewise
    linear between the cost grids' points, so n / t(n) is monotone on each piece and its largest value at n <= the
    cap lies on a grid point or the cap. `simulate`'s throughput at an infinite rate never exceeds it
    (tests/estimate/test_serving.py)."""
    bs = limits.block_size
    shortest = min(workload.prompt_tokens)
    decode_tokens = sum(workload.output_tokens) / len(workload.output_tokens) - 1
    if decode_tokens <= 0:
        return math.inf
    most = max(1, min(limits.max_num_seqs, (limits.kv_capacity_tokens // bs) // max(1, math.ceil(shortest / bs))))
    points = {1, most} | {g for g in (*cost.rows_grid, *cost.head_grid) if 1 <= g <= most}
    best = max(n / cost.seconds(n, n, n * shortest, 0.0, n) for n in points)
    return best / decode_tokens


def simulate(cost: StepCost, workload: Workload, limits: EngineLimits, *, speculation: Speculation | None = None,
             frontend: Frontend | None = None, timeline_points: int = 200) -> ServingResult:
    """Run the engine over the workload until every request has finished (and, with a `frontend`, until the client
    has every token)."""
    if limits.kv_capacity_tokens < limits.block_size:
        raise ValueError("the KV pool holds no block")
    cost = _Memo(cost)
    window = cost.attention_window
    sends = workload.arrivals()
    reqs = [_Req(i, p, o, s) for i, (p, o, s) in enumerate(zip(workload.prompt_tokens, workload.output_tokens, sends))]
    longest = max(r.prompt + r.out for r in reqs)
    if longest > limits.kv_capacity_tokens:
        raise ValueError(f"a request of {longest:,} tokens does not fit in the KV pool of "
                         f"{limits.kv_capacity_tokens:,} tokens")
    bs = limits.block_size
    cap_blocks = limits.kv_capacity_tokens // bs
    spec_rows = speculation.num_tokens + 1 if speculation else 1   # rows a decoding request puts in a step
    per_step = speculation.tokens_per_step if speculation else 1.0  # tokens it gains per step
    hit = workload.prefix_hit_rate

    def steps_for(tokens: int) -> int:
        return math.ceil(tokens / per_step - 1e-9)

    def draft_s(n: int) -> float:
        if not speculation or not n:
            return 0.0
        return speculation.num_tokens * (cost.rows_time(n) * speculation.draft_layers_fraction + cost.head_time(n))
    budget_max = limits.max_num_batched_tokens
    conc = workload.max_concurrency or len(reqs)
    no_evict = limits.reserve_full_length
    res = limits.output_reservation
    # a disaggregated decode instance merges the requests that arrive with their KV into its decode batch
    prefill_first = limits.prefill_first and not workload.prefilled
    ratio = res.initial if res is not None else 0.0   # SGLang's new_token_ratio
    res_a = res_b = 0.0            # decoding requests' reserved output at decode counter c: res_a - res_b x c
    dec_out_sum = dec_prod0 = 0.0  # their max_new_tokens, and sum of (produced - dec0 x per_step)
    stall_s = 0.0                  # prefill-only seconds the decoding requests waited since their last token, summed
    stall_n = 0                    # how many of them waited
    fe = frontend if (frontend is not None and not frontend.idle) else None
    fe_latency = frontend.latency_s if frontend is not None else 0.0
    chunk = frontend.first_chunk_tokens if frontend is not None else 1
    chunk_heap: list[tuple[int, int, int]] = []  # (decode counter of a first chunk's last token, request, its dec0)
    ingest: deque[list] = deque()  # [request, frontend CPU seconds left], in arrival order
    outq: deque[list] = deque()    # [step, frontend CPU seconds left]: each step's tokens to stream, in order
    delivered: dict[int, float] = {}  # step -> when the client has its tokens
    fe_t = 0.0                     # the frontend has been simulated up to this time
    cur_step = 0
    finished: list[_Req] = []
    reserved = 0                   # blocks reserved by running requests for their whole length (no-evict policy)
    pf_blocks = 0                  # blocks the prefilling requests hold: sum of ceil(computed / bs), kept in step

    pending = deque(reqs)          # not yet sent, in send order
    waiting: deque[_Req] = deque()  # sent, not running
    prefilling: list[_Req] = []    # running, prompt not complete (admission order)
    decoding: dict[int, _Req] = {}  # running, producing a token per step (insertion = admission order)
    finish_heap: list[tuple[int, int]] = []
    dec_counter = 0                # decode steps so far
    dec_ctx_sum = 0                # cached tokens of decoding requests, at the counter when they entered + growth
    in_flight = 0
    now = 0.0
    order = 0
    ttft, tpot, e2e = [], [], []
    itl_v: list[float] = []
    itl_w: list[float] = []
    completed = out_tokens = in_tokens = 0
    preemptions = steps = max_running = 0
    running_sum = 0
    peak_kv = 0.0
    timeline: list[tuple[float, float]] = []
    first_send = sends[0] if sends else 0.0

    def used_blocks() -> float:
        dec = (dec_ctx_sum + len(decoding) * (bs - 1) / 2) / bs if decoding else 0.0
        return dec + pf_blocks

    def pf_join(r: _Req) -> None:
        nonlocal pf_blocks
        prefilling.append(r)
        pf_blocks += math.ceil(r.computed / bs)

    def pf_leave(r: _Req) -> None:
        nonlocal pf_blocks
        prefilling.remove(r)
        pf_blocks -= math.ceil(r.computed / bs)

    def finish(r: _Req) -> None:
        nonlocal completed, out_tokens, in_tokens, in_flight, reserved
        if no_evict:
            reserved -= math.ceil((r.prompt + r.out) / bs)
        r.done = now
        r.last_step = cur_step
        finished.append(r)
        completed += 1
        out_tokens += r.out
        in_tokens += r.prompt
        in_flight -= 1

    def fe_advance(to: float) -> None:
        """Run the frontend up to time `to`: requests taken in join the engine's queue, streamed steps are
        delivered; with both kinds of work queued each gets half the CPU."""
        nonlocal fe_t
        while ingest or outq:
            si = (0.5 if outq else 1.0) if ingest else 0.0
            so = 1.0 - si if outq else 0.0
            need = min(ingest[0][1] / si if ingest else math.inf, outq[0][1] / so if outq else math.inf)
            # a job whose rest is below the clock's resolution at this time (far into a slow run) ends now;
            # otherwise it would never end, the clock adding nothing
            dt = need if fe_t + need <= fe_t else min(need, max(to - fe_t, 0.0))
            fe_t += dt
            if ingest:
                ingest[0][1] -= dt * si
                if ingest[0][1] <= 1e-12:
                    waiting.append(ingest.popleft()[0])
            if outq:
                outq[0][1] -= dt * so
                if outq[0][1] <= 1e-12:
                    k = outq.popleft()[0]
                    if k >= 0:
                        delivered[k] = fe_t
            if dt < need:  # `to` reached before the next job is done
                break
        fe_t = max(fe_t, to)

    def chunks_due() -> bool:
        """Requests whose first streamed chunk (SGLang --stream-interval) completed at `dec_counter` take the
        current step as its step; True if any did."""
        due = False
        while chunk_heap and chunk_heap[0][0] <= dec_counter:
            _, i, d0 = heapq.heappop(chunk_heap)
            r = reqs[i]
            if i in decoding and r.dec0 == d0 and r.chunk_step < 0:  # (else preempted since: pushed again later)
                r.chunk_step = cur_step
                due = True
        return due

    def retire() -> None:
        """Decoding requests whose last token came out in the step just run (at `dec_counter`) finish."""
        nonlocal dec_ctx_sum
        while finish_heap and finish_heap[0][0] <= dec_counter:
            _, i = heapq.heappop(finish_heap)
            r = reqs[i]
            if i not in decoding or r.dec0 + steps_for(r.out - r.produced) != dec_counter:
                continue  # stale entry (the request was preempted)
            del decoding[i]
            res_leave(r)
            dec_ctx_sum -= r.ctx0 + (dec_counter - r.dec0) * per_step
            r.produced = r.out
            finish(r)

    def preempt_last() -> bool:
        nonlocal dec_ctx_sum, preemptions, reserved
        # the most recently admitted running request
        cand = None
        if prefilling:
            cand = prefilling[-1]
        if decoding:
            last = next(reversed(decoding.values()))
            if cand is None or last.order > cand.order:
                cand = last
        if cand is None:
            return False
        if cand.i in decoding:
            del decoding[cand.i]
            res_leave(cand)
            produced_now = min(round((dec_counter - cand.dec0) * per_step), cand.out - cand.produced - 1)
            dec_ctx_sum -= cand.ctx0 + (dec_counter - cand.dec0) * per_step
            cand.produced += produced_now
        else:
            pf_leave(cand)
        if no_evict:  # (not reached in practice: the no-evict policy never runs out) its reservation goes with it
            reserved -= math.ceil((cand.prompt + cand.out) / bs)
        cand.alive = False
        cand.computed = 0
        cand.target = cand.prompt + cand.produced  # recompute everything it had
        waiting.appendleft(cand)
        preemptions += 1
        return True

    def res_join(r: _Req) -> None:
        """`r` enters decode at the current counter: reserve its output still to come (SGLang), linearly released
        as it decodes (exact for outputs up to the clip)."""
        nonlocal res_a, res_b, dec_out_sum, dec_prod0
        if res is None:
            return
        rem = r.out - r.produced
        clip = min(rem, res.clip_tokens)
        r.res_b = clip / rem * per_step if rem > 0 else 0.0
        r.res_a = clip + r.res_b * r.dec0 if rem > 0 else 0.0
        r.prod0 = r.produced - r.dec0 * per_step
        res_a += r.res_a
        res_b += r.res_b
        dec_out_sum += r.out
        dec_prod0 += r.prod0

    def res_leave(r: _Req) -> None:
        nonlocal res_a, res_b, dec_out_sum, dec_prod0
        if res is None:
            return
        if not decoding:  # keep float drift from accumulating
            res_a = res_b = dec_out_sum = dec_prod0 = 0.0
            return
        res_a -= r.res_a
        res_b -= r.res_b
        dec_out_sum -= r.out
        dec_prod0 -= r.prod0

    def reserved_output() -> float:
        """Tokens SGLang sets aside for the decoding requests' outputs still to come."""
        return ratio * max(0.0, res_a - res_b * dec_counter) if decoding else 0.0

    # the step's own state (budget, rows, pairs, emitting, offset, preempted) is reset at the top of each slow step;
    # these helpers read and update it there
    def run_chunk(r: _Req, chunk: int) -> None:
        """`chunk` more prompt tokens of `r` in this step, attending to its cached ones (causal)."""
        nonlocal pairs, budget, rows, pf_blocks, offset
        if window:  # the full-attention layers' pairs, and the sliding-window layers' capped ones
            pairs += (chunk * (r.computed + (chunk + 1) / 2) * cost.full_pair_weight
                      + band_pairs(r.computed, chunk, window) * cost.window_pair_weight)
        else:
            pairs += chunk * (r.computed + (chunk + 1) / 2)
        pf_blocks += math.ceil((r.computed + chunk) / bs) - math.ceil(r.computed / bs)
        r.computed += chunk
        budget -= chunk
        rows += chunk
        if r.computed >= r.target:
            emitting.append(r)
            if res is not None:  # its whole output (its chunk is already in the pool's use)
                offset += min(max(r.out - r.produced, 0), res.clip_tokens)

    def overfull(n: int) -> bool:
        """The next tokens of the `n` decoding requests do not fit in the pool. Its use is counted on average ((bs - 1)
        / 2 tokens short of whole blocks per request), a lone decoding request's exactly; TensorRT-LLM's no-evict
        policy reserved every running request's whole length, so it never runs out."""
        if no_evict:
            return False
        if n == 1 and not prefilling:
            return math.ceil((dec_ctx_sum + per_step) / bs) > cap_blocks
        return used_blocks() + n * per_step / bs > cap_blocks

    def make_room() -> int:
        """1. decoding requests: one token each, or their drafts to verify (first in vLLM's running list order);
        the most recently admitted running requests are preempted until those tokens fit in the pool."""
        nonlocal preempted, ratio
        n = len(decoding)
        while overfull(n) and (decoding or prefilling):
            preempt_last()
            preempted = True
            n = len(decoding)
        if preempted and res is not None and decoding:  # SGLang restarts its ratio from the retracted batch
            decoded = dec_prod0 + n * dec_counter * per_step
            ratio = min(1.0, (decoded + res.retract_steps * n) / (dec_out_sum + 1))
        return n

    def reservation_allows(r: _Req) -> bool:
        """SGLang's PrefillAdder: the prompt still to compute plus the whole output fit beside what the running
        requests and this step's admissions reserve (a server running nothing admits any request). The chunks
        already scheduled in this step are in `used_blocks` (SGLang counts them in its offset instead)."""
        if res is None or not (decoding or prefilling or offset):
            return True
        free = (cap_blocks - used_blocks()) * bs
        total = (r.target - r.computed) + min(max(r.out - r.produced, 0), res.clip_tokens) + bs
        return total < free - reserved_output() - offset

    def fill(running: int) -> int:
        """2. requests part-way through their prompt get their next chunk; 3. waiting requests are admitted, first
        come first served, while the budget, max_num_seqs and the pool allow (a prompt longer than the budget
        left is admitted with a chunk of it). Returns the running count."""
        nonlocal reserved, order
        for r in prefilling:  # (admissions below append; nothing leaves the list in this loop)
            if budget <= 0:
                break
            chunk = min(r.target - r.computed, budget)
            extra = math.ceil((r.computed + chunk) / bs) - math.ceil(r.computed / bs)
            if used_blocks() + extra > cap_blocks:
                break
            run_chunk(r, chunk)
        if preempted and res is None and not no_evict:
            # vLLM's V1 scheduler admits no waiting request in a step that preempted one (vllm/v1/core/sched/
            # scheduler.py, Scheduler.schedule: the waiting queue is scheduled only `if not preempted_reqs`): the
            # request just preempted would otherwise come straight back and be preempted again
            return running
        while waiting and budget > 0 and running < limits.max_num_seqs:
            r = waiting[0]
            if not fits_now(r, budget) or not reservation_allows(r):
                break
            chunk = min(r.target - r.computed, budget)
            if workload.prefilled and r.computed == 0:  # its KV arrived with it: allocate it, run the last row
                r.computed = r.target - 1
                chunk = 1
            if no_evict:
                reserved += math.ceil((r.prompt + r.out) / bs)
            waiting.popleft()
            if hit and r.computed == 0:  # the cached prefix of its prompt is not computed again
                r.computed = min(int(hit * r.prompt), r.target - 1)
                chunk = min(r.target - r.computed, budget)
            order += 1
            r.order = order
            r.alive = True
            pf_join(r)
            running += 1
            run_chunk(r, chunk)
        return running

    def fits_now(r: _Req, budget: int) -> bool:
        """The pool takes waiting request `r`'s first chunk within `budget` (all of its KV if it arrived with it), and
        under the no-evict policy its whole length beside the reservations."""
        if used_blocks() + math.ceil(min(r.target - r.computed, budget) / bs) > cap_blocks:
            return False
        if no_evict and reserved + math.ceil((r.prompt + r.out) / bs) > cap_blocks:
            return False
        return not (workload.prefilled and r.computed == 0 and used_blocks() + math.ceil(r.target / bs) > cap_blocks)

    def waiting_blocked(n_dec: int) -> bool:
        """The head of the queue (admission is first come first served) cannot start beside `n_dec` decoding
        requests, and stays unable to until one of them finishes: the pool only fills during a decode-only stretch,
        and the running count, the step's token budget and the no-evict reservations stay. SGLang's output
        reservation changes step by step, so it never counts as blocked."""
        if res is not None or prefill_first:  # SGLang's prompt steps run with the whole budget, decodes waiting
            return False
        budget = budget_max - n_dec * spec_rows
        return budget <= 0 or n_dec >= limits.max_num_seqs or not fits_now(waiting[0], budget)

    while pending or waiting or prefilling or decoding or ingest:
        # send what the client has sent by now (and the concurrency limit allows)
        while pending and in_flight < conc and pending[0].sent <= now:
            r = pending.popleft()
            r.sent = max(r.sent, now) if workload.max_concurrency else r.sent
            in_flight += 1
            if fe is None:
                waiting.append(r)
            else:  # the frontend takes it in before the engine sees it
                fe_advance(r.sent)
                ingest.append([r, fe.request_s])
        if fe is not None:
            fe_advance(now)
        if not (waiting or prefilling or decoding):
            nxt = pending[0].sent if (pending and in_flight < conc) else math.inf
            if ingest:  # the frontend's next event: a request taken in, or a step streamed (the CPU shares change)
                si = 0.5 if outq else 1.0
                nxt = min(nxt, fe_t + ingest[0][1] / si, fe_t + outq[0][1] / (1 - si) if outq else math.inf)
            if math.isinf(nxt):
                raise RuntimeError("the simulation has nothing left to wait for")
            now = max(now, nxt)
            continue
        n_dec = len(decoding)
        if n_dec and not prefilling and not ingest and (not waiting or waiting_blocked(n_dec)):
            # decode-only stretch: the same requests step together until one finishes, one arrives or the pool
            # fills (the queue, if any, cannot start before then); each step's time is linear in the cached tokens,
            # so run it in a tight loop
            fixed = cost.seconds(n_dec * spec_rows, n_dec * spec_rows, 0, 0.0, n_dec) + draft_s(n_dec)
            per_kv = cost.kv_read_s_per_token
            while finish_heap and (finish_heap[0][1] not in decoding
                                   or reqs[finish_heap[0][1]].dec0 + steps_for(reqs[finish_heap[0][1]].out
                                                                               - reqs[finish_heap[0][1]].produced)
                                   != finish_heap[0][0]):
                heapq.heappop(finish_heap)  # stale entries of preempted requests
            # through the step in which the next request finishes (it is retired below, as a slow step would), or
            # completes its first streamed chunk
            k_max = (finish_heap[0][0] - dec_counter) if finish_heap else 0
            if chunk_heap:
                k_max = min(k_max, max(chunk_heap[0][0] - dec_counter, 1))
            if not no_evict:  # (the no-evict policy reserved the whole lengths: the pool cannot run out)
                room = cap_blocks - used_blocks()
                k_max = min(k_max, int(room * bs / (n_dec * per_step)) - 1)
            next_send = pending[0].sent if (pending and in_flight < conc) else math.inf
            k = 0
            t0 = now
            if fe is None:  # step j takes fixed + per_kv x (cached + j x growth): the stretch in closed form
                growth = n_dec * per_step
                a, b = fixed + per_kv * dec_ctx_sum, per_kv * growth
                k = stretch_steps(a, b, k_max, next_send - now)
                now += k * a + b * k * (k - 1) / 2
                dec_ctx_sum += k * growth
            while fe is not None and k < k_max and now < next_send:
                now += fixed + per_kv * dec_ctx_sum
                dec_ctx_sum += n_dec * per_step
                k += 1
                fe_advance(now)
                outq.append([-1, fe.token_s * n_dec * per_step])
            if k:
                dec_counter += k
                steps += k
                if (finish_heap and finish_heap[0][0] <= dec_counter) or (chunk_heap and chunk_heap[0][0]
                                                                           <= dec_counter):
                    # the stretch's last step finishes requests or completes first chunks
                    cur_step = steps
                    chunks_due()
                    if fe is None:
                        delivered[cur_step] = now
                    else:
                        outq[-1][0] = cur_step
                running_sum += k * n_dec
                max_running = max(max_running, n_dec)
                waited = min(stall_n, n_dec)
                if waited:  # the first of these steps ends a gap that prefill-only steps lengthened
                    itl_v.append(((now - t0) / k + stall_s / stall_n) / per_step)
                    itl_w.append(waited * per_step)
                itl_v.append((now - t0) / k / per_step)
                itl_w.append((n_dec * k - waited) * per_step)
                stall_s, stall_n = 0.0, 0
                if res is not None:
                    ratio = max(ratio - k * res.decay, res.minimum)
                usage = min(1.0, used_blocks() / cap_blocks)  # (the average count can pass a no-evict pool)
                peak_kv = max(peak_kv, usage)
                if len(timeline) < 20 * timeline_points:
                    timeline.append((now - first_send, usage))
                retire()
                continue
        budget = budget_max
        rows = 0
        pairs = 0.0
        emitting: list[_Req] = []
        offset = 0.0  # SGLang: the outputs of the requests whose prompt completes in this step
        preempted = False

        run_dec = 0  # decoding requests that take a step this time
        running = 0
        if prefill_first and (prefilling or waiting):
            # SGLang: a prefill-only step whenever a prompt chunk can run; the decoding requests wait through it
            running = fill(len(decoding) + len(prefilling))
        if rows == 0:
            n_dec = len(decoding)
            if overfull(n_dec):
                n_dec = make_room()
            run_dec = n_dec
            budget = budget_max - n_dec * spec_rows
            rows = n_dec * spec_rows
            running = n_dec + len(prefilling)
            if not prefill_first and (prefilling or waiting):  # mixed steps: prompt chunks beside the decodes
                running = fill(running)
        if rows == 0:  # nothing could be scheduled: the pool is full of prefills that cannot grow
            if preempted and waiting:
                # the step preempted its only running request (the pool's use is counted on average, (bs - 1) / 2
                # tokens per request short of whole blocks); vLLM runs an empty step and admits it in the next
                continue
            if not preempt_last():
                raise RuntimeError("the scheduler made no progress")
            continue
        if not run_dec:  # the batch the engine runs: the prompt chunks alone
            running -= len(decoding)
        # the decoding requests read their whole cached context this step
        dt = (cost.seconds(rows, run_dec * spec_rows + len(emitting), dec_ctx_sum if run_dec else 0.0, pairs,
                           running, rows - run_dec * spec_rows) + draft_s(run_dec))
        now += dt
        steps += 1
        cur_step = steps
        if fe is None:
            delivered[cur_step] = now
        else:  # this step's tokens join the frontend's stream
            fe_advance(now)
            outq.append([cur_step, fe.token_s * (run_dec * per_step + len(emitting))])
        running_sum += running
        max_running = max(max_running, running)
        usage = min(1.0, used_blocks() / cap_blocks)
        peak_kv = max(peak_kv, usage)
        if len(timeline) < 20 * timeline_points:
            timeline.append((now - first_send, usage))
        if not run_dec and decoding:  # a prefill-only step: the decoding requests' next token waits
            # every request decoding now waits through it (none leaves before the next decode step, so the last
            # such step's count is how many waited; the joiners below wait from the next one)
            stall_s += dt * len(decoding)
            stall_n = len(decoding)
        elif run_dec:
            # decoding requests produce their token (the counter advances with every step they take; only they read
            # it); those that waited through prefill-only steps saw a longer gap
            dec_counter += 1
            dec_ctx_sum += n_dec * per_step
            waited = min(stall_n, n_dec)
            if waited:  # at their mean wait
                itl_v.append((dt + stall_s / stall_n) / per_step)
                itl_w.append(waited * per_step)
            if n_dec > waited:
                itl_v.append(dt / per_step)
                itl_w.append((n_dec - waited) * per_step)
            stall_s, stall_n = 0.0, 0
            if res is not None:
                ratio = max(ratio - res.decay, res.minimum)
            chunks_due()
            retire()
        else:
            dec_counter += 1
        # requests whose prompt completed: first token (or the next token after a recompute)
        for r in emitting:
            pf_leave(r)
            if r.first is None:
                r.first = now
                r.first_step = cur_step
            r.produced += 1
            if r.produced >= r.out:
                finish(r)
                continue
            r.dec0 = dec_counter
            r.ctx0 = r.computed + 1
            decoding[r.i] = r
            if r.chunk_step < 0 and r.produced < chunk < r.out:
                heapq.heappush(chunk_heap, (dec_counter + steps_for(chunk - r.produced), r.i, dec_counter))
            res_join(r)
            dec_ctx_sum += r.ctx0
            heapq.heappush(finish_heap, (dec_counter + steps_for(r.out - r.produced), r.i))
    if fe is not None:
        fe_advance(math.inf)
    for r in finished:  # what the client sees: a step's tokens once streamed, plus the fixed latency
        # (the first chunk: the first token's step, or the step of the chunk's last token, or the last step)
        r.first = delivered[r.first_step if chunk == 1 else r.chunk_step if r.chunk_step >= 0 else r.last_step] \
            + fe_latency
        r.done = delivered[r.last_step] + fe_latency
        ttft.append(r.first - r.sent)
        e2e.append(r.done - r.sent)
        tpot.append((r.done - r.first) / (r.out - 1) if r.out > 1 else 0.0)
    end = max((r.done for r in finished), default=now)
    duration = max(end - first_send, 1e-12)
    step_every = max(1, len(timeline) // timeline_points)
    return ServingResult(
        first_token_at=tuple(r.first if r.first is not None else math.nan for r in reqs),
        finished_at=tuple(r.done for r in reqs),
        ttft_s=stats(ttft), tpot_s=stats(tpot), itl_s=stats(itl_v, itl_w), e2e_s=stats(e2e), duration_s=duration,
        completed=completed, request_throughput=completed / duration, output_throughput=out_tokens / duration,
        total_throughput=(out_tokens + in_tokens) / duration, mean_running=running_sum / max(steps, 1),
        max_running=max_running, peak_kv_usage=peak_kv, preemptions=preemptions, steps=steps,
        kv_usage_timeline=tuple(timeline[::step_every]), ttft_values=tuple(ttft), tpot_values=tuple(tpot))
