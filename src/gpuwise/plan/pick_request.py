"""`gpuwise pick`'s request, its candidates and its result (the search and its rules are in pick.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..errors import MAX_TOKENS, InvalidArgument, require_positive_int, require_positive_number, require_train_tokens
from ..estimate.engines import Engine
from ..estimate.job import Finetune, job_default
from ..fields import field_default
from .infer import InferRequest, require_engine_versions

Task = Literal["infer", "serve", "train", "finetune"]
PickPrecision = Literal["bf16", "fp16", "fp8", "fp32"]
"""The precisions pick costs GPUs with (bf16 falls back to fp16 on GPUs without bf16; pure bf16 has no such
fallback, so it is `gpuwise train`'s alone)."""
PickObjective = Literal["cost", "speed"]
TASKS: tuple[str, ...] = get_args(Task)
OBJECTIVES: tuple[str, ...] = get_args(PickObjective)
TRAIN_SEQ = job_default("seq")
"""Tokens per sequence for --task train unless --seq is given (`gpuwise train`'s default)."""
FINETUNE_SEQ = 2048
"""Tokens per sequence for --task finetune unless --seq is given (instruction data is mostly shorter)."""
TRAIN_BATCH = 256
"""Sequences per step for --task train unless --global-batch is given (1M tokens at 4,096 tokens)."""
FINETUNE_METHOD = "lora"
"""Fine-tuning method for --task finetune unless --finetune is given (what most people fine-tune with)."""
FINETUNE_BATCH = 16
"""Sequences per step for --task finetune unless --global-batch is given (PEFT examples' order of magnitude)."""
RULES = ("unknown", "precision", "memory", "slo", "scale", "communication", "budget", "headroom", "cost")
SloPercentile = Literal[50, 90, 99]
ENGINE_VENDORS = {"vllm": ("nvidia", "amd"), "sglang": ("nvidia", "amd"), "hf": ("nvidia", "amd"), "trtllm": ("nvidia",),
                  "llamacpp": ("nvidia", "amd", "apple")}
TRAIN_VENDORS = ("nvidia", "amd")


@dataclass(frozen=True, kw_only=True)
class PickRequest:
    """Which GPU kind and how many for a workload: the options of `gpuwise pick`."""

    model: LoadedModel
    task: Task = "infer"
    """What the GPUs are for: one static batch (infer), serving a request rate within latency targets (serve),
    pre-training (train) or fine-tuning (finetune)."""
    gpus: tuple[GPU, ...] | None = None
    """Candidate GPUs, a comma list (a MIG slice as GPU:PROFILE; default: the catalog, with MIG slices unless
    --no-mig)."""
    max_gpus: int = 8
    """Most GPUs of one kind."""
    budget_usd_per_hour: float | None = None
    """Most to spend per hour, all GPUs together."""
    objective: PickObjective = "cost"
    """Rank by cost per million tokens or by tokens per second."""
    headroom: float = 0.10
    """Share of each GPU's memory to keep free (longer contexts, bigger batches, fragmentation)."""
    mig: bool = True
    """Whether MIG slices of the GPUs that have them are candidates (--no-mig leaves them out)."""
    prices: dict[str, float] = field(default_factory=dict)
    """Your prices in USD per GPU-hour, ID=USD,ID=USD (override the catalog's rental prices)."""
    top: int = 10
    """Candidates to show."""
    weights: str | None = field_default(InferRequest, "weights")
    """infer: weight format (default: what the engine loads)."""
    kv_dtype: str | None = field_default(InferRequest, "kv_dtype")
    """infer: KV cache type."""
    batch: int = field_default(InferRequest, "batch")
    """infer: concurrent sequences."""
    prompt_tokens: int = field_default(InferRequest, "prompt_tokens")
    """infer: prompt tokens per sequence."""
    output_tokens: int = field_default(InferRequest, "output_tokens")
    """infer: output tokens per sequence."""
    engine: Engine = field_default(InferRequest, "engine")
    """infer: serving engine."""
    vllm_version: str | None = None
    """infer/serve, vLLM: its version, as `gpuwise infer --vllm-version` takes it (default: the newest checked)."""
    sglang_version: str | None = None
    """infer/serve, SGLang: its version, as `gpuwise infer --sglang-version` takes it (default: the newest)."""
    request_rate: float | None = None
    """serve: requests per second to sustain (Poisson arrivals; required for --task serve)."""
    slo_ttft_ms: float | None = None
    """serve: time-to-first-token target (ms) at --slo-percentile."""
    slo_tpot_ms: float | None = None
    """serve: time-per-output-token target (ms) at --slo-percentile."""
    slo_percentile: SloPercentile = 90
    """serve: the percentile of requests the targets hold for."""
    seq: int | None = None
    """train/finetune: tokens per sequence (default {TRAIN_SEQ} for train, {FINETUNE_SEQ} for finetune)."""
    global_batch: int | None = None
    """train/finetune: sequences per step (default {TRAIN_BATCH} for train, {FINETUNE_BATCH} for finetune)."""
    precision: PickPrecision = job_default("precision")
    """train/finetune: training precision (fp16 where a GPU has no bf16 tensor cores)."""
    finetune: Finetune | None = None
    """finetune: method (default {FINETUNE_METHOD})."""
    train_tokens: float | None = None
    """train/finetune: token budget of the run (its time and cost)."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InvalidArgument(f"--task: unknown value '{self.task}'; valid: {', '.join(TASKS)}")
        if self.objective not in OBJECTIVES:
            raise InvalidArgument(f"--objective: unknown value '{self.objective}'; valid: {', '.join(OBJECTIVES)}")
        if self.engine not in ENGINE_VENDORS:
            raise InvalidArgument(f"--engine: unknown value '{self.engine}'; valid: {', '.join(ENGINE_VENDORS)}")
        require_positive_int("--max-gpus", self.max_gpus, 1 << 16)
        require_positive_int("--top", self.top, 1 << 16)
        for name, value in (("--seq", self.seq), ("--global-batch", self.global_batch)):
            if value is not None:  # the bounds `gpuwise train` and `plan` keep
                require_positive_int(name, value, MAX_TOKENS)
        if self.train_tokens is not None:
            require_train_tokens(self.train_tokens)
        if self.budget_usd_per_hour is not None:
            require_positive_number("--budget-usd-per-hour", self.budget_usd_per_hour, 1e7)
        if not 0 <= self.headroom < 1:
            raise InvalidArgument(f"--headroom must be a fraction in [0, 1), got {self.headroom}")
        if self.task != "finetune" and self.finetune is not None:
            raise InvalidArgument("--finetune applies to --task finetune")
        if self.task in ("infer", "serve") and (self.seq or self.global_batch or self.train_tokens):
            raise InvalidArgument("--seq, --global-batch and --train-tokens apply to --task train or finetune")
        versions = [n for n, v in (("--vllm-version", self.vllm_version), ("--sglang-version", self.sglang_version))
                    if v is not None]
        if versions and self.task not in ("infer", "serve"):
            raise InvalidArgument(f"{versions[0]} applies to --task infer or serve")
        require_engine_versions(self.engine, self.vllm_version, self.sglang_version)
        serve_only = [n for n, v in (("--request-rate", self.request_rate), ("--slo-ttft-ms", self.slo_ttft_ms),
                                     ("--slo-tpot-ms", self.slo_tpot_ms)) if v is not None]
        if self.task != "serve" and serve_only:
            verb = "applies" if len(serve_only) == 1 else "apply"
            raise InvalidArgument(f"{', '.join(serve_only)} {verb} to --task serve")
        if self.task == "serve":
            if self.request_rate is None or not (0 < self.request_rate < float("inf")):
                raise InvalidArgument("--task serve needs --request-rate: a finite number of requests per second")
            for n, v in (("--slo-ttft-ms", self.slo_ttft_ms), ("--slo-tpot-ms", self.slo_tpot_ms)):
                if v is not None:
                    require_positive_number(n, v, 1e9)
            if self.engine == "hf":
                raise InvalidArgument("--task serve needs a continuous-batching engine: vllm, sglang, trtllm or "
                                      "llamacpp")
            if self.slo_percentile not in (50, 90, 99):
                raise InvalidArgument(f"--slo-percentile: unknown value '{self.slo_percentile}'; valid: 50, 90, 99")

    @property
    def train_seq(self) -> int:
        return self.seq or (TRAIN_SEQ if self.task == "train" else FINETUNE_SEQ)

    @property
    def train_batch(self) -> int:
        return self.global_batch or (TRAIN_BATCH if self.task == "train" else FINETUNE_BATCH)


@dataclass(frozen=True)
class Candidate:
    gpu: GPU
    count: int
    fits: bool
    memory_bytes: float | None
    """Peak per GPU of the best setup found (None when nothing could be costed)."""
    tokens_per_s: float | None
    """infer: output tokens/s over the batch; train/finetune: training tokens/s."""
    usd_per_hour: float | None
    """For all `count` GPUs (None: unknown price)."""
    usd_per_million_tokens: float | None
    kwh_per_million_tokens: float | None
    """At TDP: an upper-bound estimate."""
    setup: str
    """The layout or engine split that was costed."""
    interconnect: str
    """What the setup needs from the interconnect, and what this GPU has."""
    price_source: str
    run_hours: float | None = None
    run_usd: float | None = None
    latency: dict = field(default_factory=dict)
    """infer: ttft_s and tpot_s; serve: ttft_s and tpot_s at the percentile, per replica at its share of the rate;
    train: step_time_s."""
    rule: str | None = None
    """The rule that rejected it (RULES), None when accepted."""
    reason: str = ""

    @property
    def label(self) -> str:
        return f"{self.count} x {self.gpu.name}" if self.count > 1 else self.gpu.name

    @property
    def headroom_bytes(self) -> float:
        return self.gpu.memory_bytes - (self.memory_bytes or 0.0)


@dataclass(frozen=True)
class PickResult:
    request: PickRequest
    ranked: tuple[Candidate, ...]
    """Accepted, best first (at most `top`)."""
    rejected: tuple[Candidate, ...]
    why: str
    accepted: int
    search_time_s: float
