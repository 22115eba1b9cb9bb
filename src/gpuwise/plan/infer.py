"""`gpuwise infer`: how fast a model serves on a GPU: time to first token, time per output token, throughput, cost.

Built on `fit` (the memory side: weight format, KV dtype, does it fit, largest batch) and the latency model
(`estimate/infer_time.py`). Also answers two questions people ask about serving: at which batch decode stops
being memory-bound (after that, more sequences cost real time), and what n parallel samples of one prompt cost
(one shared prefill, n-fold decode) as a curve.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..catalog.devices import DeviceProfile, device_profile, network_overrides, rental_price
from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..errors import InvalidArgument, require_positive_int, require_positive_number
from ..estimate.comm import Topology, topology
from ..estimate.engines import DEFAULT_CONTEXT, Engine, release_version, vllm_version
from ..estimate.infer_time import ENGINES, EnginePerf, PassTime, engine_perf, forward_pass_s
from ..estimate.inference_memory import inference_memory
from ..estimate.kv_cache import kv_bytes_per_token, state_bytes_per_sequence
from ..fields import field_default
from ..quant.formats import matrix_bytes_per_param
from . import serve
from .fit import FitRequest, FitResult, fit, require_scheduler_limits, require_vllm_version
from .serve import ServingAnswer
from ..estimate.serving import StepCost

SERVING_HELD_OUT_MEDIAN = 0.204
"""Median |error| of TTFT and TPOT on the held-out published serving runs (`python -m validation.serving`); a test
keeps it equal to what the validation prints."""

MAX_TOKENS = 1 << 22
MAX_PROMPTS = 200_000
SAMPLE_CURVE = (1, 2, 4, 8, 16, 32, 64, 128)


DEFAULT_PROMPT, DEFAULT_OUTPUT = 512, 128
"""infer's default request: one short chat turn (llama-bench's default test lengths, -p 512 -n 128)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InferRequest:
    """Inference latency and throughput of a static batch: the options of `gpuwise infer`."""

    model: LoadedModel
    gpu: GPU
    num_gpus: int = 1
    """GPUs (tensor parallel, or the engine's layer split)."""
    weights: str | None = None
    """Weight format: a dtype or quantization (default: what the engine loads for this checkpoint)."""
    kv_dtype: str | None = None
    """KV cache type (default: the model's compute dtype, llama.cpp f16)."""
    batch: int = 1
    """Concurrent sequences (different prompts)."""
    prompt_tokens: int = 512  # DEFAULT_PROMPT
    """Prompt tokens per sequence."""
    output_tokens: int = 128  # DEFAULT_OUTPUT
    """Output tokens per sequence."""
    samples: int = 1
    """Completions per prompt (shared prefill, n-fold decode)."""
    engine: Engine = field_default(FitRequest, "engine")
    """Serving engine."""
    profile: str | None = None
    """Measured device profile (JSON, from `gpuwise calibrate`) overriding the defaults."""
    usd_per_gpu_hour: float | None = None
    """Price per GPU-hour (default: the catalog's on-demand rental price, unknown if it has none)."""
    request_rate: float | None = None
    """Serve under load: requests per second, Poisson arrivals (vLLM bench's --request-rate; inf sends all at
    once); reports TTFT, TPOT, ITL and end-to-end latency percentiles and throughput from a simulation of the
    engine's continuous batching."""
    max_concurrency: int | None = None
    """Serve under load with at most this many requests in flight (vLLM bench's --max-concurrency: the client
    sends the next request when one finishes)."""
    num_prompts: int = 1000
    """Requests sent under load (vLLM bench's --num-prompts)."""
    dataset_path: str | None = None
    """Prompt and output lengths of the requests under load: a JSONL file ({{"prompt_tokens": P, "output_tokens":
    O}} per line) or a CSV file with those columns, cycled to --num-prompts (default: every request
    --prompt-tokens + --output-tokens, as vLLM bench's random dataset)."""
    gpu_memory_utilization: float | None = None
    """vLLM --gpu-memory-utilization: share of the GPU's memory for weights, activations and the KV pool (default
    0.9)."""
    mem_fraction_static: float | None = None
    """SGLang --mem-fraction-static (default: SGLang's rule for the GPU)."""
    enable_expert_parallel: bool = False
    """MoE: spread the routed experts whole over the GPUs instead of splitting each (vLLM --enable-expert-parallel,
    SGLang --ep-size = TP, TensorRT-LLM moe_expert_parallel_size = TP)."""
    enable_dp_attention: bool = False
    """MoE: data-parallel attention (SGLang --enable-dp-attention; vLLM --data-parallel-size N
    --enable-expert-parallel): each GPU serves its own requests' attention with the attention weights whole and
    their KV cache (all heads), the routed experts spread over the GPUs and fed by all of them."""
    max_num_seqs: int | None = None
    """Requests the engine runs at once (vLLM --max-num-seqs, SGLang --max-running-requests; default: the
    engine's for the GPU)."""
    max_num_batched_tokens: int | None = None
    """Tokens per engine step, prompt chunks included (vLLM --max-num-batched-tokens, SGLang
    --chunked-prefill-size; default: the engine's for the GPU)."""
    pd_disaggregation: str | None = None
    """Under load: disaggregated prefill and decode as xPyD (e.g. 1P1D, 2P4D): x prefill and y decode instances of
    --num-gpus GPUs each; each request's KV crosses between them over the inter-node network (vLLM's and SGLang's
    PD disaggregation)."""
    enable_mixed_chunk: bool = False
    """Under load, SGLang: put prompt chunks into the decode steps (SGLang --enable-mixed-chunk) instead of running
    them in steps of their own ahead of the decodes, SGLang's default."""
    enable_piecewise_cuda_graph: bool = False
    """SGLang before 0.5.10: capture prefill in piecewise CUDA graphs (SGLang --enable-piecewise-cuda-graph), so a
    prompt's pass no longer waits for its kernels' launches from the host (catalog/data/engine_perf.toml
    prefill_host_us_per_kernel); SGLang's default since 0.5.10."""
    disable_piecewise_cuda_graph: bool = False
    """SGLang 0.5.10 and later: run prefill eagerly (SGLang --disable-piecewise-cuda-graph) instead of in the
    piecewise CUDA graphs it captures by default."""
    vllm_version: str | None = None
    """vLLM's version, e.g. 0.11.0 (default: the newest checked, 0.19; 0.10 and later): its memory rule (as in
    `fit`) and, under load, its scheduling (synchronous before 0.14 unless --async-scheduling, asynchronous since
    unless --no-async-scheduling) and its HTTP server's figures (0.19 and later: their own, engine_perf.toml)."""
    async_scheduling: bool = False
    """vLLM before 0.14: schedule step n + 1 while step n runs (vLLM --async-scheduling), hiding the host's time per
    running request; vLLM's default since 0.14."""
    no_async_scheduling: bool = False
    """vLLM 0.14 and later: schedule synchronously (vLLM --no-async-scheduling): the GPU waits for the host's time
    per running request every step."""
    sglang_version: str | None = None
    """SGLang's version (e.g. 0.5.9): before 0.5.10 its prefill ran eagerly unless --enable-piecewise-cuda-graph
    (default: the newest, which graphs it)."""
    offline: bool = False
    """Under load: the engine's in-process API with no HTTP server (vLLM's LLM class, trtllm-bench, SGLang's
    Engine): no frontend taking requests in and streaming tokens (catalog/data/engine_perf.toml)."""
    stream_interval: int = 1
    """Under load, vLLM and SGLang: output tokens per streamed chunk (their --stream-interval). SGLang streams a
    request's output when its length is a multiple of it, so the client's first token comes with the N-th (TTFT
    later by N - 1 decode steps, TPOT over the rest); vLLM sends the first token at once, so no figure moves."""
    prefix_cache_hit_rate: float | None = None
    """Under load: share of each prompt already in the engine's prefix cache (vLLM automatic prefix caching,
    SGLang's radix cache; shared system prompts, multi-turn chats): not computed again, still held in the pool."""
    num_speculative_tokens: int | None = None
    """Under load: speculative decoding with a one-layer draft head (EAGLE, MTP) proposing this many tokens per step
    (vLLM's num_speculative_tokens); needs --acceptance-rate."""
    acceptance_rate: float | None = None
    """Under load: the chance each draft token is accepted given the ones before it were (a step then yields
    (1 - a^(k+1)) / (1 - a) tokens)."""
    slo_ttft_ms: float | None = None
    """Time-to-first-token target (ms) under load: goodput counts the requests that meet it (vLLM bench
    --goodput ttft:MS)."""
    slo_tpot_ms: float | None = None
    """Time-per-output-token target (ms) under load (vLLM bench --goodput tpot:MS)."""

    def __post_init__(self) -> None:
        require_positive_int("--num-gpus", self.num_gpus, 4096)
        require_positive_int("--batch", self.batch, 1 << 20)
        require_positive_int("--prompt-tokens", self.prompt_tokens, MAX_TOKENS)
        require_positive_int("--output-tokens", self.output_tokens, MAX_TOKENS)
        require_positive_int("--samples", self.samples, 1 << 12)
        if self.engine not in ENGINES:
            raise InvalidArgument(f"unknown engine '{self.engine}'; use one of: {', '.join(ENGINES)}")
        if self.usd_per_gpu_hour is not None:
            require_positive_number("--usd-per-gpu-hour", self.usd_per_gpu_hour, 1e4)
        if self.request_rate is not None and not (self.request_rate > 0):  # also NaN
            raise InvalidArgument(f"--request-rate must be a positive number of requests per second (or inf), "
                                  f"got {self.request_rate}")
        if self.max_concurrency is not None:
            require_positive_int("--max-concurrency", self.max_concurrency, 1 << 20)
        require_positive_int("--num-prompts", self.num_prompts, MAX_PROMPTS)
        require_scheduler_limits(self.max_num_seqs, self.max_num_batched_tokens)
        for name, v in (("--slo-ttft-ms", self.slo_ttft_ms), ("--slo-tpot-ms", self.slo_tpot_ms)):
            if v is not None:
                require_positive_number(name, v, 1e9)
        if self.dataset_path is not None:
            serve.require_lengths_path(self.dataset_path)
        load_only = [n for n, v in (("--dataset-path", self.dataset_path), ("--slo-ttft-ms", self.slo_ttft_ms),
                                    ("--slo-tpot-ms", self.slo_tpot_ms),
                                    ("--prefix-cache-hit-rate", self.prefix_cache_hit_rate),
                                    ("--num-speculative-tokens", self.num_speculative_tokens),
                                    ("--acceptance-rate", self.acceptance_rate),
                                    ("--pd-disaggregation", self.pd_disaggregation),
                                    ("--offline", True if self.offline else None),
                                    ("--enable-mixed-chunk", True if self.enable_mixed_chunk else None))
                 if v is not None]
        if self.prefix_cache_hit_rate is not None and not 0 <= self.prefix_cache_hit_rate < 1:
            raise InvalidArgument(f"--prefix-cache-hit-rate must be in [0, 1), got {self.prefix_cache_hit_rate}")
        if self.num_speculative_tokens is not None:
            require_positive_int("--num-speculative-tokens", self.num_speculative_tokens, 64)
        if (self.num_speculative_tokens is None) != (self.acceptance_rate is None):
            raise InvalidArgument("speculative decoding needs both --num-speculative-tokens and --acceptance-rate")
        if self.acceptance_rate is not None and not 0 <= self.acceptance_rate < 1:
            raise InvalidArgument(f"--acceptance-rate must be in [0, 1), got {self.acceptance_rate}")
        if load_only and not self.under_load:
            verb = "describes" if len(load_only) == 1 else "describe"
            raise InvalidArgument(f"{', '.join(load_only)} {verb} serving under load: add --request-rate or "
                                  "--max-concurrency")
        if self.enable_expert_parallel and self.engine not in ("vllm", "sglang", "trtllm"):
            raise InvalidArgument(f"--enable-expert-parallel: {self.engine} splits layers, not experts; use vllm, "
                                  "sglang or trtllm")
        if self.enable_expert_parallel and self.model.spec.moe is None:
            raise InvalidArgument("--enable-expert-parallel applies to mixture-of-experts models")
        if self.enable_piecewise_cuda_graph and self.engine != "sglang":
            raise InvalidArgument(f"--enable-piecewise-cuda-graph is SGLang's option (vLLM compiles and graphs its "
                                  f"prefill by default); this engine is {self.engine}")
        require_engine_versions(self.engine, self.vllm_version, self.sglang_version)
        vllm_only = [n for n, v in (("--async-scheduling", self.async_scheduling),
                                    ("--no-async-scheduling", self.no_async_scheduling)) if v]
        if vllm_only and self.engine != "vllm":
            raise InvalidArgument(f"{vllm_only[0]} is vLLM's; this engine is {self.engine}")
        if self.async_scheduling and self.no_async_scheduling:
            raise InvalidArgument("--async-scheduling and --no-async-scheduling contradict each other: give one")
        if self.disable_piecewise_cuda_graph and self.engine != "sglang":
            raise InvalidArgument(f"--disable-piecewise-cuda-graph is SGLang's; this engine is {self.engine}")
        if self.enable_piecewise_cuda_graph and self.disable_piecewise_cuda_graph:
            raise InvalidArgument("--enable-piecewise-cuda-graph and --disable-piecewise-cuda-graph contradict each "
                                  "other: give one")
        if self.stream_interval != 1:
            require_positive_int("--stream-interval", self.stream_interval, MAX_TOKENS)
            if self.engine not in ("vllm", "sglang"):
                raise InvalidArgument(f"--stream-interval is vLLM's and SGLang's; this engine is {self.engine}")
            if self.offline or self.request_rate is None and self.max_concurrency is None:
                raise InvalidArgument("--stream-interval applies to serving over HTTP under load (--request-rate or "
                                      "--max-concurrency, without --offline)")
        if self.enable_mixed_chunk and self.engine != "sglang":
            raise InvalidArgument(f"--enable-mixed-chunk is SGLang's option (the other engines always mix prompt "
                                  f"chunks into decode steps); this engine is {self.engine}")
        if self.gpu_memory_utilization is not None and self.engine not in ("vllm", "trtllm"):
            raise InvalidArgument("--gpu-memory-utilization is vLLM's option (TensorRT-LLM's pool is modelled as "
                                  f"vLLM's); this engine is {self.engine}")
        if self.under_load and self.engine == "hf":
            raise InvalidArgument("transformers' generate runs one static batch, not continuous batching; serve "
                                  "under load with --engine vllm, sglang, trtllm or llamacpp")

    @property
    def under_load(self) -> bool:
        """A load was given: simulate the engine serving a stream of requests."""
        return self.request_rate is not None or self.max_concurrency is not None
    @property
    def memory_engine(self) -> str:
        """TensorRT-LLM pre-allocates a paged KV pool like vLLM: its memory follows vLLM's model."""
        return "vllm" if self.engine == "trtllm" else self.engine


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplesPoint:
    samples: int
    seconds: float
    """Prefill once, then decode `samples` x batch sequences."""
    seconds_per_sample: float
    fits: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class InferResult:
    request: InferRequest
    memory: FitResult
    engine: EnginePerf
    profile: DeviceProfile
    topology: Topology
    compute_dtype: str
    prefill: PassTime
    decode_first: PassTime
    decode_last: PassTime
    ttft_s: float
    tpot_s: float
    """Mean time per output token of one sequence over the whole generation."""
    request_s: float
    """Time from prompt to the last output token of a request."""
    output_tokens_per_s_per_sequence: float
    output_tokens_per_s: float
    """All sequences together, during decode."""
    requests_per_s: float
    """Batches back to back: batch x samples completions per request_s."""
    compute_bound_batch: int | None
    """Batch at which the weight GEMMs of a decode step turn compute-bound (achievable GEMM rate / the GEMMs'
    streaming rate x bytes per weight / 2); None when the GPU has no peak for the compute dtype. Attention over the
    KV cache stays memory-bound."""
    usd_per_gpu_hour: float | None
    usd_source: str
    usd_per_million_output_tokens: float | None
    samples_curve: tuple[SamplesPoint, ...]
    serving: ServingAnswer | None = None
    """Under load (--request-rate / --max-concurrency): the simulated engine's latencies and throughput."""
    plot: str | None = None
    """The latency-vs-rate plot written for this result (`gpuwise infer --plot`), or None."""
    assumptions: tuple[str, ...] = field(default_factory=tuple)


def _compute_dtype(gpu: GPU, weights_name: str, kind: str) -> str:
    if kind == "fp8" and "fp8" in gpu.peak_flops:
        return "fp8"
    if weights_name == "bf16" and "bf16" in gpu.peak_flops:
        return "bf16"
    if weights_name == "fp32":
        return "tf32" if "tf32" in gpu.peak_flops else "fp32"
    return "fp16" if "fp16" in gpu.peak_flops else "bf16"


@dataclass(frozen=True, slots=True)
class KernelSetup:
    """What every timing of one `infer` request shares: its memory answer, engine, device and forward pass."""

    mem: FitResult
    eng: EnginePerf
    profile: DeviceProfile
    topo: Topology
    dtype: str
    step: Callable[[int, int, float, bool, int], PassTime]
    """step(rows, sequences, context, decode, logits_rows): one forward pass (estimate/infer_time.forward_pass_s),
    a prefill pass launched eagerly where the engine launches prefill from the host
    (`EnginePerf.prefill_host_s_per_kernel`)."""
    graphed_step: Callable[[int, int, float, bool, int], PassTime]
    """The same pass replayed from CUDA graphs: no host launches (for prefill passes of at most
    `prefill_graph_rows` tokens)."""
    prefill_graph_rows: float = 0.0
    """Prefill passes of at most this many tokens replay CUDA graphs (SGLang's piecewise graphs; inf: every chunk,
    0: none); `sglang_prefill_graph_rows`."""
    prefill_graph_note: str = ""
    """Why prefill is or is not graphed (SGLang; '' for the other engines)."""

    def prefill_step(self, rows: int, seqs: int, ctx: float, logits: int) -> PassTime:
        """A prefill pass of `rows` tokens as the engine launches it (graphed up to `prefill_graph_rows`)."""
        return (self.graphed_step if rows <= self.prefill_graph_rows else self.step)(rows, seqs, ctx, False, logits)


def require_engine_versions(engine: str, vllm: str | None, sglang: str | None) -> None:
    """--vllm-version and --sglang-version, as `infer` and `pick` take them: each for its own engine, and a version
    gpuwise models."""
    for name, value, owner, label in (("--vllm-version", vllm, "vllm", "vLLM"),
                                      ("--sglang-version", sglang, "sglang", "SGLang")):
        if value is not None and engine != owner:
            raise InvalidArgument(f"{name} is {label}'s; this engine is {engine}")
    require_vllm_version(vllm)
    if sglang is not None:
        try:
            release_version(sglang, "SGLang")
        except ValueError as exc:
            raise InvalidArgument(f"--sglang-version: {exc}") from None


def asynchronous_scheduling(req: InferRequest, eng: EnginePerf) -> bool:
    """vLLM schedules step n + 1 while step n runs: by default since 0.14 (`EnginePerf.async_scheduling_from`;
    --no-async-scheduling turns it off), with --async-scheduling before. Its exclusions (pipeline parallelism, the
    CPU backend, drafts other than EAGLE/MTP) are not layouts `infer` serves."""
    if req.no_async_scheduling:
        return False
    first = eng.async_scheduling_from
    return req.async_scheduling or bool(first) and vllm_version(req.vllm_version) >= vllm_version(first)


def sglang_prefill_graph_rows(req: InferRequest, eng: EnginePerf) -> tuple[float, str]:
    """Prompt tokens up to which SGLang's prefill passes replay its piecewise CUDA graphs (inf: every chunk, 0: none,
    always 0 for the other engines) and why, by SGLang's rules (catalog/data/engine_perf.toml): on by default since
    0.5.10 (--enable-piecewise-cuda-graph before), off where ServerArgs turns it off for what gpuwise can express
    (a GPU other than CUDA, a blacklisted architecture, a multimodal checkpoint, DP attention, PD disaggregation);
    MLA models graph at most `prefill_graph_rows_mla` tokens."""
    if req.engine != "sglang" or not eng.prefill_host_s_per_kernel:
        return 0.0, ""
    spec = req.model.spec
    first = eng.prefill_graphs_from
    new = bool(first) and (req.sglang_version is None or release_version(req.sglang_version, "SGLang")
                           >= release_version(first, "SGLang"))
    if req.disable_piecewise_cuda_graph:
        return 0.0, "prefill runs eagerly (--disable-piecewise-cuda-graph)"
    if not (new or req.enable_piecewise_cuda_graph):
        return 0.0, (f"prefill runs eagerly (SGLang {req.sglang_version}: piecewise CUDA graphs by default only since "
                     f"{first}; --enable-piecewise-cuda-graph before)")
    off = (f"a GPU without CUDA ({req.gpu.vendor})" if req.gpu.vendor in ("amd", "intel", "apple", "google") else
           f"{spec.family} (its architecture blacklist)"
           if spec.family in eng.prefill_graph_eager_families else
           f"a multimodal checkpoint ({spec.wrapper})" if spec.wrapper else
           "DP attention" if req.enable_dp_attention else
           "PD disaggregation" if req.pd_disaggregation else None)
    why = "--enable-piecewise-cuda-graph" if req.enable_piecewise_cuda_graph else f"SGLang's default since {first}"
    if off:
        return 0.0, f"prefill runs eagerly: SGLang turns its piecewise CUDA graphs ({why}) off for {off}"
    if spec.mla is not None and eng.prefill_graph_rows_mla:
        return float(eng.prefill_graph_rows_mla), (f"prefill passes of up to {eng.prefill_graph_rows_mla:,} tokens "
                                                   f"replay piecewise CUDA graphs ({why}; MLA's limit), longer ones "
                                                   "run eagerly")
    return math.inf, f"prefill replays piecewise CUDA graphs ({why}): no host launches"


def kernel_setup(req: InferRequest) -> KernelSetup:
    spec = req.model.spec
    if req.engine == "trtllm" and (req.weights or "").lower().startswith("q"):
        raise InvalidArgument("TensorRT-LLM does not run GGUF files; use bf16, fp8, int8 or int4-awq/gptq weights")
    context = req.prompt_tokens + req.output_tokens
    sequences = req.batch * req.samples
    vllm = req.memory_engine == "vllm"
    mem = fit(FitRequest(model=req.model, gpu=req.gpu, num_gpus=req.num_gpus, weights=req.weights,
                         kv_dtype=req.kv_dtype, context=context, batch=sequences, engine=req.memory_engine,
                         gpu_memory_utilization=req.gpu_memory_utilization if vllm else None,
                         max_num_seqs=req.max_num_seqs if vllm else None,
                         max_num_batched_tokens=req.max_num_batched_tokens if vllm else None,
                         mem_fraction_static=req.mem_fraction_static, enable_dp_attention=req.enable_dp_attention,
                         vllm_version=req.vllm_version))
    eng = engine_perf(req.engine)
    if asynchronous_scheduling(req, eng):
        eng = replace(eng, step_overhead_s_per_request=0.0, step_overhead_s=(
            eng.step_overhead_s if eng.async_step_overhead_s is None else eng.async_step_overhead_s))
    graph_rows, graph_note = sglang_prefill_graph_rows(req, eng)
    graphed = replace(eng, prefill_host_s_per_kernel=0.0)
    profile = device_profile(req.gpu, req.profile)
    topo = topology(req.gpu, num_gpus=req.num_gpus, overrides=network_overrides(req.profile))
    w = mem.weights
    wbpp = matrix_bytes_per_param(w, spec)
    dtype = _compute_dtype(req.gpu, w.name, w.kind)
    kv_e = mem.kv.bytes

    def pass_s(e: EnginePerf, rows: int, seqs: int, ctx: float, decode: bool, logits: int) -> PassTime:
        return forward_pass_s(spec, profile=profile, topo=topo, engine=e, dtype=dtype, weight_bytes_per_param=wbpp,
                              kv_bytes_per_element=kv_e, rows=rows, sequences=seqs, context=ctx,
                              num_gpus=req.num_gpus, decode=decode, logits_rows=logits,
                              expert_parallel=req.enable_expert_parallel, dp_attention=req.enable_dp_attention)

    def step(rows: int, seqs: int, ctx: float, decode: bool, logits: int) -> PassTime:
        return pass_s(eng, rows, seqs, ctx, decode, logits)

    def graphed_step(rows: int, seqs: int, ctx: float, decode: bool, logits: int) -> PassTime:
        return pass_s(graphed, rows, seqs, ctx, decode, logits)

    return KernelSetup(mem, eng, profile, topo, dtype, step, graphed_step, graph_rows, graph_note)


def infer(req: InferRequest) -> InferResult:
    spec = req.model.spec
    ks = kernel_setup(req)
    mem, eng, profile, topo, dtype, step = ks.mem, ks.eng, ks.profile, ks.topo, ks.dtype, ks.step
    w = mem.weights
    context = req.prompt_tokens + req.output_tokens
    sequences = req.batch * req.samples
    wbpp = matrix_bytes_per_param(w, spec)

    def prefill_s(prompts: int) -> PassTime:
        """The prompt in chunks (llama.cpp's n_ubatch) or at once; the breakdown is the first chunk's."""
        chunk = eng.prefill_chunk or req.prompt_tokens
        passes = []
        for done in range(0, req.prompt_tokens, chunk):
            n = min(chunk, req.prompt_tokens - done)
            last = done + n >= req.prompt_tokens
            passes.append(ks.prefill_step(prompts * n, prompts, done + n, prompts if last else 0))
        return replace(passes[0], seconds=sum(p.seconds for p in passes))

    def decode_s(seqs: int) -> tuple[float, PassTime, PassTime]:
        first = step(seqs, seqs, req.prompt_tokens, True, seqs)
        last = step(seqs, seqs, context, True, seqs)
        mid = step(seqs, seqs, req.prompt_tokens + req.output_tokens / 2, True, seqs)
        return mid.seconds, first, last  # linear in context: the midpoint is the mean

    pre = prefill_s(req.batch)
    ttft = pre.seconds + eng.step_overhead_s
    tpot, d_first, d_last = decode_s(sequences)
    request_s = ttft + (req.output_tokens - 1) * tpot
    out_per_s = sequences / tpot
    rps = req.batch / request_s
    price, price_source = (req.usd_per_gpu_hour, "as given") if req.usd_per_gpu_hour else rental_price(req.gpu)
    usd_per_m = (price * req.num_gpus / 3600 / (sequences * req.output_tokens / request_s) * 1e6
                 if price is not None else None)
    curve = []
    for n in SAMPLE_CURVE:
        seqs = req.batch * n
        t = ttft + (req.output_tokens - 1) * decode_s(seqs)[0]
        fits = inference_memory(spec, gpu_memory=req.gpu.memory_bytes, gpu_id=req.gpu.id, num_gpus=req.num_gpus,
                                weights=w, kv_dtype=mem.kv, context=context, batch=seqs,
                                engine=req.memory_engine, vllm=mem.request.vllm_options).fits
        curve.append(SamplesPoint(samples=n, seconds=t, seconds_per_sample=t / n, fits=fits))
    serving = _under_load(req, ks) if req.under_load else None
    # The weight GEMMs of a decode step read every weight once for the whole batch and do 2 x batch FLOPs per
    # weight: they turn compute-bound when batch x 2 / bytes-per-weight reaches the achievable ridge point (the GEMM
    # rate over the rate a memory-bound GEMM streams its weights at, as estimate/kernels.matmul_s costs them).
    rate = profile.matmul_flops(dtype)
    turn = math.ceil(rate * wbpp / (2 * profile.gemm_bandwidth)) if rate and profile.gemm_bandwidth else None
    return InferResult(request=req, memory=mem, engine=eng, profile=profile, topology=topo, compute_dtype=dtype,
                       prefill=pre, decode_first=d_first, decode_last=d_last, ttft_s=ttft, tpot_s=tpot,
                       request_s=request_s, output_tokens_per_s_per_sequence=1 / tpot, output_tokens_per_s=out_per_s,
                       requests_per_s=rps, compute_bound_batch=turn, usd_per_gpu_hour=price, usd_source=price_source,
                       usd_per_million_output_tokens=usd_per_m, samples_curve=tuple(curve), serving=serving,
                       assumptions=_assumptions(req, eng, mem, dtype, ks))


def serving_model(req: InferRequest, ks: KernelSetup) -> tuple[StepCost, serve.LoadSpec, int, str]:
    """The per-step cost and the load (workload, scheduler limits, KV pool) of an under-load request."""
    spec = req.model.spec
    mem, eng = ks.mem, ks.eng
    dp = req.num_gpus if (req.enable_dp_attention and spec.moe is not None) else 1
    tp = 1 if dp > 1 else (req.num_gpus if eng.multi_gpu == "tp" else 1)
    per_token = kv_bytes_per_token(spec, mem.kv.bytes, req.memory_engine if req.memory_engine != "hf" else "vllm", tp)
    load, capacity, cap_reason = serve.load_spec(
        req, gpu_memory_bytes=req.gpu.memory_bytes, gpu_id=req.gpu.id,
        kv_pool_bytes=mem.estimate.details.get("kv_pool_bytes"), kv_bytes_per_token=per_token,
        context=req.prompt_tokens + req.output_tokens, dp=dp,
        state_bytes_per_sequence=state_bytes_per_sequence(spec, tp))
    wl = load.workload
    cost = serve.step_cost(ks.step, spec=spec, profile=ks.profile, engine=eng, kv_bytes_per_element=mem.kv.bytes,
                           tp=tp, max_rows=load.limits.max_num_batched_tokens,
                           prefill_graph_rows=ks.prefill_graph_rows,
                           mean_context=statistics.fmean(p + o / 2 for p, o in zip(wl.prompt_tokens, wl.output_tokens)),
                           mean_prompt=statistics.fmean(wl.prompt_tokens))
    return cost, load, capacity, cap_reason


def _under_load(req: InferRequest, ks: KernelSetup) -> ServingAnswer:
    """Simulate the engine serving the request stream (plan/serve.py, estimate/serving.py)."""
    cost, load, capacity, cap_reason = serving_model(req, ks)
    wl = load.workload
    if req.pd_disaggregation:
        x, y = serve.parse_pd(req.pd_disaggregation)
        per_token = kv_bytes_per_token(req.model.spec, ks.mem.kv.bytes,
                                       req.memory_engine if req.memory_engine != "hf" else "vllm", 1)
        n = req.num_gpus

        def transfer_s(prompt: int) -> float:
            # every GPU of the prefill instance sends its shard of the request's KV over its own NIC
            return ks.topo.collective_s("send_recv", prompt * per_token / n, 2, ks.topo.gpus_per_node)

        try:
            result = serve.disaggregated(cost, load, prefill=x, decode=y, transfer_s=transfer_s)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
    else:
        result = serve.run(cost, load)
    dp = req.num_gpus if (req.enable_dp_attention and req.model.spec.moe is not None) else 1
    if dp > 1:  # one DP rank was simulated with its share of the requests: the throughputs are dp times its own
        from dataclasses import replace as _replace

        result = _replace(result, completed=result.completed * dp, request_throughput=result.request_throughput * dp,
                          output_throughput=result.output_throughput * dp,
                          total_throughput=result.total_throughput * dp)
    ttft = req.slo_ttft_ms / 1e3 if req.slo_ttft_ms else None
    tpot = req.slo_tpot_ms / 1e3 if req.slo_tpot_ms else None
    goodput = result.goodput(ttft, tpot) if (ttft or tpot) else None
    notes = [f"requests: {load.lengths_source}",
             f"arrivals: {'all at once' if math.isinf(wl.request_rate) else f'Poisson, {wl.request_rate:g} requests/s'}"
             + (f", at most {wl.max_concurrency} in flight" if wl.max_concurrency else ""),
             f"scheduler: at most {load.limits.max_num_seqs} requests and {load.limits.max_num_batched_tokens:,} "
             f"tokens per step ({load.limits_reason}); chunked prefill, "
             + ("no preemption (whole requests reserved)" if load.limits.reserve_full_length
                else "recompute preemption") + ", no prefix cache",
             _frontend_note(load.frontend, req.engine, req.offline, req.stream_interval),
             f"KV pool: {capacity:,} tokens ({cap_reason})"
             + (f"; data-parallel attention: one of {dp} GPUs simulated with every {dp}th request, each GPU "
                "holding its own requests' KV, the experts shared" if dp > 1 else ""),
             f"each step costs its kernels plus {ks.eng.step_overhead_s * 1e3:.1f} ms of engine time "
             "(catalog/data/engine_perf.toml)",
             *([f"disaggregated {req.pd_disaggregation.upper()}: prefill and decode instances of {req.num_gpus} GPU(s) "
                f"each ({(sum(serve.parse_pd(req.pd_disaggregation)) * req.num_gpus)} GPUs in all); each request's "
                "KV crosses over the inter-node network, every GPU sending its shard"] if req.pd_disaggregation else []),
             *([f"prefix cache: {req.prefix_cache_hit_rate:.0%} of each prompt reused (not computed)"]
               if req.prefix_cache_hit_rate else []),
             *([f"speculative decoding: {load.speculation.num_tokens} draft tokens per step from a one-layer head, "
                f"acceptance {load.speculation.acceptance_rate:g}: {load.speculation.tokens_per_step:.2f} tokens per "
                "step per request, each verified in the step's forward pass"] if load.speculation else []),
             "how sure: against published benchmark runs (validation/serving.py, docs/serving.md) the held-out "
             f"median error of TTFT and TPOT is about {SERVING_HELD_OUT_MEDIAN:.0%} (target 15%); time to first "
             "token under a burst of requests is predicted too low and saturation throughput too high, so read them "
             "as optimistic"]
    return serve.ServingAnswer(result=result, load=load, kv_capacity_tokens=capacity, kv_capacity_reason=cap_reason,
                               slo_ttft_s=ttft, slo_tpot_s=tpot, goodput=goodput, assumptions=tuple(notes))


def _frontend_note(fe: serve.Frontend | None, engine: str, offline: bool, stream_interval: int = 1) -> str:
    if offline:
        return "frontend: none (--offline: the engine's in-process API, as trtllm-bench or vLLM's LLM class)"
    if fe is None:
        return f"frontend: the {engine} server's own time is not modelled (no figures in catalog/data/engine_perf.toml)"
    chunks = ("" if stream_interval == 1 else
              f"; --stream-interval {stream_interval}: the client's first token comes with a request's output token "
              f"{stream_interval} (SGLang streams when the output's length is a multiple of it)"
              if fe.first_chunk_tokens > 1 else
              f"; --stream-interval {stream_interval} groups the later tokens only (vLLM sends the first at once)")
    return (f"frontend: the {engine} server process takes each request in ({fe.request_s * 1e3:g} ms of CPU) and "
            f"streams each token ({fe.token_s * 1e6:g} us of CPU) on one CPU, plus {fe.latency_s * 1e3:g} ms of fixed "
            "latency per request (catalog/data/engine_perf.toml; --offline drops it)" + chunks)


def _assumptions(req: InferRequest, eng: EnginePerf, mem: FitResult, dtype: str,
                 ks: KernelSetup | None = None) -> tuple[str, ...]:
    out = [f"weights {mem.weights.name}, KV cache {mem.kv.name} (as `gpuwise fit` resolves them)",
           f"engine {eng.name}: {'CUDA graphs' if eng.cuda_graphs else 'eager launches'}, "
           f"{eng.multi_gpu} across GPUs, {eng.step_overhead_s * 1e3:.1f} ms per decode step outside the kernels"
           + (f" plus {eng.step_overhead_s_per_request * 1e6:.0f} us of host time per running request (synchronous "
              "scheduling" + (", vLLM before 0.14 or --no-async-scheduling" if eng.async_scheduling_from else "")
              + ")" if eng.step_overhead_s_per_request else
              "; asynchronous scheduling (vLLM's default since 0.14): the host's work per request overlaps the GPU"
              if eng.async_scheduling_from else "")
           + ("; decode attention streams its paged KV cache at the paged kernel's measured bandwidth where one "
              "is known (Hopper: 55% of HBM peak)" if eng.paged_decode else ""),
           *([f"SGLang: {ks.prefill_graph_note}"
              + ("" if ks.prefill_graph_rows == math.inf else
                 f"; an eager pass takes at least its kernels' launches, {eng.prefill_host_s_per_kernel * 1e6:.0f} us "
                 "each (catalog/data/engine_perf.toml)")] if ks is not None and ks.prefill_graph_note else []),
           "static batch: every sequence has the same prompt and output length; tpot averages the growing context"]
    if (req.prompt_tokens, req.output_tokens) == (DEFAULT_PROMPT, DEFAULT_OUTPUT):
        from .roofline import DEFAULT_SEQ

        out.append(f"prompt {DEFAULT_PROMPT} + output {DEFAULT_OUTPUT} tokens: infer's default request (one short chat "
                   f"turn; `fit` defaults to a {DEFAULT_CONTEXT:,}-token context, `roofline` to {DEFAULT_SEQ:,} "
                   "tokens); pass --prompt-tokens and --output-tokens for yours")
    max_pos = req.model.spec.max_position_embeddings
    if max_pos is not None and req.prompt_tokens + req.output_tokens > max_pos:
        out.append(f"prompt + output = {req.prompt_tokens + req.output_tokens:,} tokens is beyond the model's "
                   f"maximum context ({max_pos:,}, max_position_embeddings): an engine refuses such a request "
                   "(vLLM: --max-model-len), or the model runs past what it was trained for")
    if dtype == "fp8":
        out.append("fp8 GEMMs (W8A8): each GEMM input is quantized to fp8 by a kernel of its own first (vLLM's "
                   "Fp8LinearOp, SGLang's fp8 linears; the router stays in 16 bits)"
                   + ("; TensorRT-LLM fuses some of them into its norms, which is not modelled"
                      if req.engine == "trtllm" else ""))
    if req.engine == "trtllm":
        out.append("TensorRT-LLM memory modelled as vLLM's (paged KV pool pre-allocated)")
    if eng.multi_gpu == "layer-split" and req.num_gpus > 1:
        out.append("layer split: one token visits the GPUs in turn, so decode is no faster than on one GPU")
    if req.model.spec.moe is not None and req.num_gpus > 1 and (req.enable_expert_parallel or req.enable_dp_attention):
        out.append("expert parallelism: routing taken as uniform; a decode step waits for the GPU whose experts the "
                   "batch touches most (the expected maximum over the GPUs), so small batches read more than an "
                   "even share")
    lm = req.model.spec.linear
    if lm is not None:
        out.append(f"{req.model.spec.num_linear_layers} {lm.name} layers: prefill scans at the rate vLLM's and "
                   "SGLang's Triton kernels measure on an H100 (scaled by SM count, capped by the matrix peak; not "
                   "checked on other GPUs or engines), decode reads and writes each sequence's recurrent state once "
                   "per token (docs/performance.md)")
    if not mem.fits:
        out.append("the configuration does NOT fit in memory (see `gpuwise fit`); times are what it would take")
    return tuple(out)
