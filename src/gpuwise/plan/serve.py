"""Serving under load for `gpuwise infer --request-rate R | --max-concurrency N`: the kernel model turned into a
per-step cost, the engine's limits and KV pool, and the continuous-batching simulation (`estimate/serving.py`).

Nothing here is fitted to a benchmark: a step costs what its kernels cost (`estimate/infer_time.forward_pass_s`,
interpolated over the rows a step carries) plus the engine's per-step overhead (`catalog/data/engine_perf.toml`);
the KV pool is the engine's own memory rule (`estimate/inference_memory.py`).
"""

from __future__ import annotations

import csv
import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..catalog.attention_kernels import band_work
from ..errors import InvalidArgument
from ..jsonfile import read_text_bounded
from ..estimate import engines
from ..estimate.infer_time import PassTime, decode_kv_bandwidth, engine_perf
from ..estimate.kernels import attention_s
from ..estimate.kv_cache import kv_cache_bytes, state_bytes_per_sequence
from ..estimate.layer_ops import attention_head_dim, block_ops
from ..estimate.serving import (EngineLimits, Frontend, OutputReservation, ServingResult, Speculation, StepCost,
                                Workload, simulate, stats)
from ..model.spec import SLIDING

MAX_LENGTHS_FILE_BYTES = 16 << 20
MAX_REQUESTS = 200_000


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """The load of one `infer` run, as resolved from the request."""

    workload: Workload
    limits: EngineLimits
    limits_reason: str
    lengths_source: str
    speculation: Speculation | None = None
    frontend: Frontend | None = None
    """The HTTP server in front of the engine (None offline)."""


def require_lengths_path(path: str) -> None:
    """InvalidArgument for an empty or blank --dataset-path (checked before anything is loaded)."""
    if not path.strip():
        raise InvalidArgument("--dataset-path is empty: give a JSONL or CSV file of prompt and output lengths")


def read_lengths(path: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Prompt and output lengths from a JSONL file ({"prompt_tokens": P, "output_tokens": O} per line) or a CSV
    file with a header naming `prompt_tokens` and `output_tokens` columns."""
    require_lengths_path(path)
    p = Path(path)
    # a regular file only, bounded, opened non-blocking (a device, FIFO or /proc file is refused, never read)
    text = read_text_bounded(path, MAX_LENGTHS_FILE_BYTES, what="lengths file ")
    rows: list[tuple[object, object]] = []
    if p.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames or not {"prompt_tokens", "output_tokens"} <= set(reader.fieldnames):
            raise InvalidArgument(f"lengths file '{path}': the CSV header needs prompt_tokens and output_tokens")
        rows = [(r.get("prompt_tokens"), r.get("output_tokens")) for r in reader]
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (RecursionError, ValueError):  # json.JSONDecodeError is a ValueError
                raise InvalidArgument(f"lengths file '{path}' line {n}: not JSON (or nested too deeply)") from None
            if not isinstance(obj, dict):
                raise InvalidArgument(f"lengths file '{path}' line {n}: expected an object with prompt_tokens and "
                                      "output_tokens")
            rows.append((obj.get("prompt_tokens"), obj.get("output_tokens")))
    if not rows:
        raise InvalidArgument(f"lengths file '{path}' has no rows")
    if len(rows) > MAX_REQUESTS:
        raise InvalidArgument(f"lengths file '{path}' has {len(rows):,} rows; at most {MAX_REQUESTS:,}")
    prompts, outputs = [], []
    for n, (a, b) in enumerate(rows, 1):
        try:
            pa, ob = int(str(a)), int(str(b))
        except ValueError:
            raise InvalidArgument(f"lengths file '{path}' row {n}: prompt_tokens and output_tokens must be "
                                  "whole numbers") from None
        if pa < 1 or ob < 1 or pa > 1 << 22 or ob > 1 << 22:
            raise InvalidArgument(f"lengths file '{path}' row {n}: lengths must be between 1 and {1 << 22:,}")
        prompts.append(pa)
        outputs.append(ob)
    return tuple(prompts), tuple(outputs)


CHAT_PROMPT_CV = 547 / 246
"""Spread of chat prompt lengths (std / mean): ShareGPT first turns, NanoFlow (arXiv 2408.12757) Table 4, mean 246,
std 547 tokens (validation/serving_sources/sharegpt_lengths.md; a secondary transcription)."""
CHAT_OUTPUT_CV = 244 / 322
"""Spread of chat replies: the same table, mean 322, std 244 tokens."""


def chat_lengths(n: int, mean_prompt: float, mean_output: float, *, seed: int = 0, max_prompt: int = 1024,
                 max_total: int = 2048, min_len: int = 4) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`n` chat-like (prompt, output) lengths: log-normal with ShareGPT's published spread, kept within vLLM bench's
    ShareGPT filter (4 <= prompt <= 1,024, output >= 4, prompt + output <= 2,048), scaled so that the kept lengths
    have the given means. A stand-in for the data set's own lengths, which gpuwise does not ship."""
    rng = random.Random(seed)
    sp = math.sqrt(math.log(1 + CHAT_PROMPT_CV ** 2))
    so = math.sqrt(math.log(1 + CHAT_OUTPUT_CV ** 2))
    zs = [(rng.gauss(0, 1), rng.gauss(0, 1)) for _ in range(n)]
    kp, ko = mean_prompt, mean_output  # scales, corrected for what the clipping removes
    for _ in range(8):
        prompts = [min(max_prompt, max(min_len, round(kp * math.exp(sp * a - sp * sp / 2)))) for a, _ in zs]
        outputs = [min(max_total - p, max(min_len, round(ko * math.exp(so * b - so * so / 2))))
                   for p, (_, b) in zip(prompts, zs)]
        kp *= mean_prompt / (sum(prompts) / n)
        ko *= mean_output / (sum(outputs) / n)
    return tuple(prompts), tuple(outputs)


def step_cost(step, *, spec, profile, engine, kv_bytes_per_element: float, tp: int, max_rows: int,
              mean_context: float, mean_prompt: float, prefill_graph_rows: float = 0.0) -> StepCost:
    """The per-step cost of the simulation from the kernel model.

    `step(rows, sequences, context, decode, logits_rows) -> PassTime` is the infer path's own forward pass, so the
    static answer and the simulation price the same kernels. The row grid doubles from 1 to `max_rows`. Steps with
    prompt chunks of at most `prefill_graph_rows` tokens replay CUDA graphs (no eager launch floor).
    """
    grid: list[int] = []
    m = 1
    while m < max_rows:
        grid.append(m)
        m *= 2
    grid.append(max_rows)
    rows_s = []
    # a hybrid's recurrent state is read and written once per running request, not per row: the rows are timed
    # with no sequence attached (their scan at the chunked kernels' rate) and the state priced per request below
    hybrid = spec.linear is not None
    for m in grid:
        p: PassTime = step(m, 0 if hybrid else m, 1, True, 0)
        rows_s.append(p.seconds - p.overhead_s)
    head_grid = [m for m in grid if m <= 4096] or [1]
    base = step(1, 1, 1, True, 0).seconds
    head_s = [max(step(1, 1, 1, True, m).seconds - base, 0.0) for m in head_grid]
    # decode attention streams each request's cached K/V once per step (memory-bound): bytes per cached token at
    # the workload's mean context (sliding-window layers hold at most their window), at the paged decode kernel's
    # bandwidth where the engine runs one (`decode_kv_bandwidth`)
    ctx = max(1, int(mean_context))
    kv_bytes = (kv_cache_bytes(spec, context=ctx, batch=1, bytes_per_element=kv_bytes_per_element, engine="vllm",
                               tp=tp) - state_bytes_per_sequence(spec, tp)) / ctx  # the state: per request, below
    # the flash kernel's rate at the workload's mean prompt length (the per-launch cost is in rows_s); sliding-window
    # layers: their pairs capped at the window, at the kernel's rate there, over the key tiles their band touches
    window = spec.sliding_window or 0
    windowed = [window and spec.layer_types[i] == SLIDING for i in range(spec.num_layers)]
    per_layer = [block_ops(spec, i, tokens=1, keys=1, tp=tp).attention_flops for i in range(spec.num_layers)]
    flops_per_pair = sum(per_layer)
    flops_window = sum(f for f, w in zip(per_layer, windowed) if w)
    probe, prompt = 1e15, max(1.0, mean_prompt)

    def s_per_flop(seq: float) -> float:
        return (attention_s(profile, probe, 0.0, backward=False, seq=seq, head_dim=attention_head_dim(spec))
                - profile.kernel_overhead_s) / probe
    full_rate = s_per_flop(prompt)
    window_cost = (flops_window / flops_per_pair * s_per_flop(min(prompt, window)) / full_rate
                   * band_work(window, prompt)) if flops_window else 0.0
    return StepCost(rows_grid=tuple(grid), rows_s=tuple(rows_s), head_grid=tuple(head_grid), head_s=tuple(head_s),
                    kv_read_s_per_token=kv_bytes / decode_kv_bandwidth(profile, engine, spec),
                    prefill_attention_s_per_pair=flops_per_pair * full_rate,
                    attention_window=window if flops_window else 0,
                    full_pair_weight=1.0 - flops_window / flops_per_pair if flops_per_pair else 1.0,
                    window_pair_weight=window_cost,
                    step_overhead_s=engine.step_overhead_s,
                    step_overhead_s_per_request=engine.step_overhead_s_per_request,
                    prefill_host_s=step(1, 1, 1, False, 1).host_s if engine.prefill_host_s_per_kernel else 0.0,
                    prefill_graph_rows=prefill_graph_rows,
                    state_s_per_request=2 * state_bytes_per_sequence(spec, tp) / profile.bandwidth if hybrid else 0.0,
                    attention_heads=spec.num_heads / tp, attention_head_dim=attention_head_dim(spec),
                    attention_sms=profile.gpu.sm_count)


def run(cost: StepCost, load: LoadSpec) -> ServingResult:
    try:
        return simulate(cost, load.workload, load.limits, speculation=load.speculation, frontend=load.frontend)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def vllm_limits(gpu_memory_bytes: int, gpu_id: str, *, max_num_seqs: int | None,
                max_num_batched_tokens: int | None) -> tuple[int, int, str]:
    """vLLM's scheduler limits: what was given, else its server defaults for this GPU (engines.VLLMDefaults)."""
    d_seqs, d_tokens = engines.VLLM.scheduler_limits(gpu_memory_bytes, gpu_id)
    seqs = max_num_seqs or d_seqs
    tokens = max_num_batched_tokens or d_tokens
    given = [n for n, v in (("--max-num-seqs", max_num_seqs), ("--max-num-batched-tokens", max_num_batched_tokens))
             if v]
    reason = "as given" if len(given) == 2 else (
        f"vLLM's server defaults on this GPU ({d_seqs} sequences, {d_tokens:,} tokens per step)"
        + (f"; {', '.join(given)} as given" if given else ""))
    return seqs, tokens, reason


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingAnswer:
    """`infer` under load: the simulated run, what it assumed, and the goodput against the SLOs given."""

    result: ServingResult
    load: LoadSpec
    kv_capacity_tokens: int
    kv_capacity_reason: str
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    goodput: float | None
    """Requests per second meeting every SLO given (None without SLOs)."""
    assumptions: tuple[str, ...]


TRTLLM_LIMITS = (2048, 8192)
"""TensorRT-LLM's max_batch_size and max_num_tokens defaults (tensorrt_llm/llmapi/llm_args.py BuildConfig)."""
LLAMACPP_SLOTS = 4
"""llama-server's parallel slots when -np is not given (auto: 4, with a unified KV cache, since Oct 2025)."""
LLAMACPP_BATCH = 2048
"""llama-server's logical batch (-b 2048): tokens per step, prompts processed in n_ubatch pieces."""


def load_spec(req, *, gpu_memory_bytes: int, gpu_id: str, kv_pool_bytes: float | None,
              kv_bytes_per_token: float, context: int, dp: int = 1,
              state_bytes_per_sequence: float = 0.0) -> tuple[LoadSpec, int, str]:
    """The workload and the engine's limits and KV pool for an under-load `InferRequest`; with data-parallel
    attention over `dp` GPUs, one rank's: every dp-th request, 1/dp of the rate or of the concurrency (the engines
    deal requests round-robin over their DP ranks).

    `state_bytes_per_sequence`: a hybrid model's recurrent state per request on one GPU. The engines hold one state
    slot per running request in the same memory (SGLang's MambaPool beside its token pool, vLLM's hybrid allocator in
    its block pool), so the running requests are capped at what the pool holds with their states and their KV at
    `context` tokens each, and the token pool is what their state slots leave (`hybrid_slots`)."""
    if req.dataset_path:
        prompts, outputs = read_lengths(req.dataset_path)
        n = req.num_prompts
        prompts = tuple(prompts[i % len(prompts)] for i in range(n))
        outputs = tuple(outputs[i % len(outputs)] for i in range(n))
        source = f"{req.dataset_path} (cycled to {n:,} requests)"
    else:
        prompts = (req.prompt_tokens,) * req.num_prompts
        outputs = (req.output_tokens,) * req.num_prompts
        source = f"every request {req.prompt_tokens:,} prompt + {req.output_tokens:,} output tokens"
    rate = req.request_rate if req.request_rate is not None else math.inf
    conc = req.max_concurrency
    if dp > 1:
        prompts, outputs = prompts[::dp] or prompts[:1], outputs[::dp] or outputs[:1]
        rate = rate / dp
        conc = max(1, math.ceil(conc / dp)) if conc else None
        source += f"; every {dp}th of them on the simulated DP rank"
    try:
        workload = Workload(prompt_tokens=prompts, output_tokens=outputs, request_rate=rate,
                            max_concurrency=conc, prefix_hit_rate=req.prefix_cache_hit_rate or 0.0)
    except ValueError as exc:
        raise InvalidArgument(f"--request-rate: {exc}") from None
    speculation = (Speculation(num_tokens=req.num_speculative_tokens, acceptance_rate=req.acceptance_rate,
                               draft_layers_fraction=1 / req.model.spec.num_layers)
                   if req.num_speculative_tokens else None)
    block = engines.VLLM.block_size
    if req.engine == "llamacpp":
        seqs = req.max_num_seqs or LLAMACPP_SLOTS
        tokens = req.max_num_batched_tokens or LLAMACPP_BATCH
        reason = ("llama-server's defaults (4 slots, -b 2048)" if not (req.max_num_seqs or req.max_num_batched_tokens)
                  else "as given")
        capacity = seqs * context
        cap_reason = f"{seqs} slots x {context:,} tokens of context each"
        block = 1
    elif req.engine == "sglang":
        from ..estimate.engines import SGLANG

        pool = kv_pool_bytes or 0.0
        capacity = int(pool // kv_bytes_per_token) if kv_bytes_per_token > 0 else 0
        seqs = req.max_num_seqs or min(SGLANG.max_running_requests, max(1, capacity // 2) if capacity else
                                       SGLANG.max_running_requests)  # a pool of states alone: its slots cap it
        tokens = req.max_num_batched_tokens or SGLANG.chunked_prefill_size(gpu_memory_bytes)
        reason = ("as given" if (req.max_num_seqs and req.max_num_batched_tokens) else
                  f"SGLang's defaults on this GPU (max_running_requests {seqs}: half the pool's tokens, at most "
                  f"{SGLANG.max_running_requests}; chunked_prefill_size {tokens:,})")
        cap_reason = (f"SGLang's KV pool {pool / 2**30:.2f} GiB per GPU / {kv_bytes_per_token:,.0f} bytes per token "
                      "(token pages)")
        reason += ("; " + ("prompt chunks join the decode steps (--enable-mixed-chunk)" if req.enable_mixed_chunk
                           else "prompt chunks run in steps of their own, before decodes")
                   + ", and a request is admitted only while its prompt and whole output fit beside the running "
                   "requests' reserved outputs (new_token_ratio 0.7, falling to 0.098 over 600 decode steps)")
        block = 1
    else:
        if req.engine == "trtllm":
            seqs = req.max_num_seqs or TRTLLM_LIMITS[0]
            tokens = req.max_num_batched_tokens or TRTLLM_LIMITS[1]
            reason = ("TensorRT-LLM's defaults (max_batch_size 2048, max_num_tokens 8192; GUARANTEED_NO_EVICT: a "
                      "request starts only when its whole prompt and output fit in the pool, and is never preempted)")
        else:
            seqs, tokens, reason = vllm_limits(gpu_memory_bytes, gpu_id, max_num_seqs=req.max_num_seqs,
                                               max_num_batched_tokens=req.max_num_batched_tokens)
        pool = kv_pool_bytes or 0.0
        capacity = int(pool // (kv_bytes_per_token * block)) * block if kv_bytes_per_token > 0 else 0
        cap_reason = (f"the engine's KV pool {pool / 2**30:.2f} GiB per GPU / {kv_bytes_per_token:,.0f} bytes per "
                      f"token, in blocks of {block}")
    if state_bytes_per_sequence > 0 and req.engine != "llamacpp":
        # the requests' whole lengths, as the workload has them (a length file's mean, not --prompt-tokens)
        mean_length = max(1, round(statistics.fmean(p + o for p, o in zip(prompts, outputs))))
        cap = seqs
        seqs, capacity, note = hybrid_slots(kv_pool_bytes or 0.0, kv_bytes_per_token, state_bytes_per_sequence,
                                            seqs, mean_length, block)
        cap_reason += note
        if seqs < cap:
            reason += f"; running requests capped at {seqs} by their recurrent states"
    if capacity < block:
        raise InvalidArgument("under load: the weights leave no room for a KV cache on this GPU (see `gpuwise fit`); "
                              "use more GPUs, smaller weights or a larger GPU")
    sglang = req.engine == "sglang"
    limits = EngineLimits(max_num_seqs=seqs, max_num_batched_tokens=tokens, kv_capacity_tokens=capacity,
                          block_size=block, reserve_full_length=req.engine == "trtllm",
                          prefill_first=sglang and not req.enable_mixed_chunk,
                          output_reservation=OutputReservation() if sglang else None)
    frontend = None if req.offline else frontend_of(req.engine, req.stream_interval, engine_version(req))
    return (LoadSpec(workload=workload, limits=limits, limits_reason=reason, lengths_source=source,
                     speculation=speculation, frontend=frontend),
            capacity, cap_reason)


def hybrid_slots(pool: float, per_token: float, state: float, seqs: int, context: int,
                 block: int) -> tuple[int, int, str]:
    """(running requests, token capacity, note) of a hybrid model's pool: each running request holds `state` bytes of
    recurrent state beside its KV, so at most pool / (state + `context` tokens of KV) requests run, and the tokens are
    what their state slots leave."""
    fit = int(pool // (state + per_token * context)) if state + per_token * context > 0 else seqs
    slots = max(1, min(seqs, fit))
    left = max(0.0, pool - slots * state)
    # a model whose every layer is recurrent caches no token: the pool's limit is its slots alone
    capacity = int(left // (per_token * block)) * block if per_token > 0 else (slots * context if fit else 0)
    note = (f", less {slots} recurrent-state slots of {state / 2**20:,.1f} MiB each (one per running request, at most "
            f"what the pool holds with {context:,} tokens of KV each)")
    return slots, capacity, note


def engine_version(req) -> str | None:
    """The release of the engine `req` serves with, as given (--vllm-version, --sglang-version); None: the newest."""
    return {"vllm": req.vllm_version, "sglang": req.sglang_version}.get(req.engine)


def frontend_of(engine: str, stream_interval: int = 1, version: str | None = None) -> Frontend | None:
    """The engine's HTTP server as `infer` models it at release `version` (None: the newest modelled;
    catalog/data/engine_perf.toml); None when it has none. `stream_interval`: the engine's --stream-interval;
    SGLang's first chunk waits for that many tokens."""
    latency, request, token = engine_perf(engine).frontend_figures(version)
    f = Frontend(latency_s=latency, request_s=request, token_s=token,
                 first_chunk_tokens=stream_interval if engine == "sglang" else 1)
    return None if (f.idle and f.latency_s == 0) else f


SWEEP_SHARES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 1.25)
"""Request rates of the latency-vs-rate curve, as shares of the engine's saturation throughput."""


@dataclass(frozen=True, slots=True)
class SweepPoint:
    request_rate: float
    result: ServingResult


def rate_sweep(cost: StepCost, load: LoadSpec, *, num_prompts: int = 500) -> tuple[float, list[SweepPoint]]:
    """(saturation requests/s, latency at rates from 5% to 125% of it): where queueing starts (the knee)."""
    from dataclasses import replace

    wl = replace(load.workload, max_concurrency=None, prompt_tokens=load.workload.prompt_tokens[:num_prompts],
                 output_tokens=load.workload.output_tokens[:num_prompts])
    spec = load.speculation
    saturation = simulate(cost, replace(wl, request_rate=math.inf), load.limits, speculation=spec).request_throughput
    return saturation, [SweepPoint(saturation * s, simulate(cost, replace(wl, request_rate=saturation * s),
                                                             load.limits, speculation=spec)) for s in SWEEP_SHARES]


def parse_pd(text: str) -> tuple[int, int]:
    """'1P1D' / '2p4d' -> (prefill instances, decode instances)."""
    import re

    m = re.fullmatch(r"\s*(\d+)\s*[pP]\s*(\d+)\s*[dD]\s*", text or "")
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1 or int(m.group(1)) > 64 or int(m.group(2)) > 64:
        raise InvalidArgument(f"--pd-disaggregation: expected xPyD with 1 <= x, y <= 64 (e.g. 1P1D, 2P4D), got "
                              f"'{text}'")
    return int(m.group(1)), int(m.group(2))


def disaggregated(cost: StepCost, load: LoadSpec, *, prefill: int, decode: int,
                  transfer_s: Callable[[int], float]) -> ServingResult:
    """Disaggregated serving: `prefill` instances run prompts only (chunked, no decodes in their steps), each
    request's KV then crosses to a decode instance (`transfer_s(prompt_tokens)`), and `decode` instances run decodes
    only (a request joins with its prompt's KV allocated and runs its last prompt row, then one token a step). The
    client's first token comes from the decode instance. Requests are dealt round-robin to the prefill instances in
    arrival order and to the decode instances in the order their KV arrives; every prefill instance is simulated, one
    decode instance is, and throughput is `decode` times its own."""
    from dataclasses import replace

    wl, lim = load.workload, load.limits
    if wl.max_concurrency:
        raise InvalidArgument("--pd-disaggregation is modelled under --request-rate (open-loop arrivals), not "
                              "--max-concurrency")
    sends = wl.arrivals()
    n = len(sends)
    ready = [math.nan] * n
    pre_running = pre_steps = 0.0
    for k in range(prefill):
        idx = list(range(k, n, prefill))
        if not idx:
            continue
        wp = Workload(prompt_tokens=tuple(wl.prompt_tokens[i] for i in idx), output_tokens=(1,) * len(idx),
                      arrival_times=tuple(sends[i] for i in idx), prefix_hit_rate=wl.prefix_hit_rate)
        rp = simulate(cost, wp, lim)
        pre_running += rp.mean_running * rp.steps
        pre_steps += rp.steps
        for j, i in enumerate(idx):
            ready[i] = rp.first_token_at[j] + transfer_s(wl.prompt_tokens[i])
    order = sorted((i for i in range(n) if wl.output_tokens[i] > 1), key=lambda i: ready[i])
    mine = order[::decode]
    if not mine:
        raise InvalidArgument("--pd-disaggregation: every request ends at its first token; nothing to decode")
    wd = Workload(prompt_tokens=tuple(wl.prompt_tokens[i] for i in mine),
                  output_tokens=tuple(wl.output_tokens[i] - 1 for i in mine),
                  arrival_times=tuple(ready[i] for i in mine), prefilled=True)
    # the decode instance's requests arrive with their KV: their last prompt row runs in a graphed decode step, not
    # an eager prefill pass
    rd = simulate(replace(cost, prefill_host_s=0.0), wd, lim, speculation=load.speculation)
    ttft = [rd.first_token_at[j] - sends[i] for j, i in enumerate(mine)]
    e2e = [rd.finished_at[j] - sends[i] for j, i in enumerate(mine)]
    tpot = [(e - t) / (wl.output_tokens[i] - 1) if wl.output_tokens[i] > 2 else 0.0
            for e, t, i in zip(e2e, ttft, mine)]
    start = min(sends[i] for i in mine)
    duration = max(rd.finished_at) - start
    out_tokens = sum(wl.output_tokens[i] for i in mine) * decode
    in_tokens = sum(wl.prompt_tokens[i] for i in mine) * decode
    completed = len(mine) * decode
    return replace(rd, ttft_s=stats(ttft), tpot_s=stats(tpot), e2e_s=stats(e2e), duration_s=duration,
                   completed=completed, request_throughput=completed / duration,
                   output_throughput=out_tokens / duration, total_throughput=(out_tokens + in_tokens) / duration,
                   ttft_values=tuple(ttft), tpot_values=tuple(tpot))
