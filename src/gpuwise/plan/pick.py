"""`gpuwise pick`: which GPU kind and how many for a workload, ranked, with the rule that rejected the others.

Candidates: catalog GPUs the engine or trainer runs on (NVIDIA; AMD for vLLM, transformers and PyTorch training;
any device for llama.cpp), in counts 1, 2, 4 ... up to `max_gpus`, and the MIG slices of GPUs that have them (one
slice, no interconnect; compute, memory bandwidth and TDP pro-rata to the slice, price pro-rata to the larger of
its compute and memory shares). Each candidate is costed by the same models as `infer`, `plan` and `train`.

Decision order (the order people use), the first rule that fails names the rejection:
1. memory: the workload does not fit (best layout, largest micro-batch);
2. communication: more cards of a kind that are no faster than fewer of them (interconnect-bound, e.g. tensor
   parallel over PCIe, or llama.cpp's layer split);
3. budget: count x price per GPU-hour above `budget_usd_per_hour` (an unknown price cannot pass a budget);
4. headroom: less than `headroom` of the memory left free, for longer contexts, bigger batches, fragmentation.
The rest are ranked by cost per million tokens (objective cost; unknown prices last) or by tokens per second
(objective speed); ties go to the faster, then to the one with more memory free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..catalog.devices import rental_price
from ..catalog.gpus import GPU, all_gpus
from ..catalog.models import LoadedModel
from ..errors import GpuwiseError, InvalidArgument, require_positive_int, require_positive_number
from ..estimate.comm import topology
from ..units import GiB

TASKS = ("infer", "train", "finetune")
OBJECTIVES = ("cost", "speed")
RULES = ("memory", "communication", "budget", "headroom")
ENGINE_VENDORS = {"vllm": ("nvidia", "amd"), "hf": ("nvidia", "amd"), "trtllm": ("nvidia",),
                  "llamacpp": ("nvidia", "amd", "apple")}
TRAIN_VENDORS = ("nvidia", "amd")


@dataclass(frozen=True, kw_only=True)
class PickRequest:
    model: LoadedModel
    task: str = "infer"
    gpus: tuple[GPU, ...] | None = None
    """Candidate kinds; None: the catalog (and MIG slices, unless `mig` is False)."""
    max_gpus: int = 8
    budget_usd_per_hour: float | None = None
    objective: str = "cost"
    headroom: float = 0.10
    """Share of each GPU's memory to keep free."""
    mig: bool = True
    prices: dict = field(default_factory=dict)
    """USD per GPU-hour by GPU id, overriding the catalog's rental prices."""
    top: int = 10
    # infer
    weights: str | None = None
    kv_dtype: str | None = None
    batch: int = 1
    prompt_tokens: int = 512
    output_tokens: int = 128
    engine: str = "vllm"
    # train / finetune
    seq: int | None = None
    """Tokens per sequence (default 4096 for train, 2048 for finetune)."""
    global_batch: int | None = None
    """Sequences per step (default 256 for train, 16 for finetune)."""
    precision: str = "bf16"
    finetune: str | None = None
    """full | lora | qlora for task finetune (default lora)."""
    train_tokens: float | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InvalidArgument(f"--task: unknown value '{self.task}'; valid: {', '.join(TASKS)}")
        if self.objective not in OBJECTIVES:
            raise InvalidArgument(f"--objective: unknown value '{self.objective}'; valid: {', '.join(OBJECTIVES)}")
        if self.engine not in ENGINE_VENDORS:
            raise InvalidArgument(f"--engine: unknown value '{self.engine}'; valid: {', '.join(ENGINE_VENDORS)}")
        require_positive_int("--max-gpus", self.max_gpus, 1 << 16)
        require_positive_int("--top", self.top, 1 << 16)
        if self.budget_usd_per_hour is not None:
            require_positive_number("--budget-usd-per-hour", self.budget_usd_per_hour, 1e7)
        if not 0 <= self.headroom < 1:
            raise InvalidArgument(f"--headroom must be a fraction in [0, 1), got {self.headroom}")
        if self.task != "finetune" and self.finetune is not None:
            raise InvalidArgument("--finetune applies to --task finetune")
        if self.task == "infer" and (self.seq or self.global_batch or self.train_tokens):
            raise InvalidArgument("--seq, --global-batch and --train-tokens apply to --task train or finetune")

    @property
    def train_seq(self) -> int:
        return self.seq or (4096 if self.task == "train" else 2048)

    @property
    def train_batch(self) -> int:
        return self.global_batch or (256 if self.task == "train" else 16)


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
    """infer: ttft_s and tpot_s; train: step_time_s."""
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


def mig_slices(gpu: GPU) -> list[GPU]:
    """One GPU-like entry per MIG profile smaller than the whole card (compute, bandwidth, TDP pro-rata)."""
    out = []
    for p in gpu.mig_profiles:
        if p.compute_fraction >= 1:
            continue
        mem_share = p.memory_gb / gpu.memory_gb
        out.append(replace(
            gpu, id=f"{gpu.id}:{p.name}", name=f"{gpu.name} MIG {p.name}", memory_gb=p.memory_gb,
            memory_bytes=p.memory_bytes, memory_bytes_source="MIG profile size read as GiB",
            peak_flops={k: v * p.compute_fraction for k, v in gpu.peak_flops.items()},
            memory_bandwidth_bytes_per_s=(gpu.memory_bandwidth_bytes_per_s or 0) * mem_share or None,
            l2_cache_bytes=int(gpu.l2_cache_bytes * mem_share) if gpu.l2_cache_bytes else None,
            interconnect="none (MIG slice)", interconnect_bytes_per_s=None, nvlink=False,
            tdp_w=gpu.tdp_w * max(p.compute_fraction, mem_share) if gpu.tdp_w else None, mig_profiles=(),
            extra={**gpu.extra, "mig_parent": gpu.id, "mig_share": max(p.compute_fraction, mem_share)}))
    return out


def resolve_gpu(name: str) -> GPU:
    """A catalog GPU, or one of its MIG slices as 'GPU:PROFILE' (e.g. 'h100-sxm:3g.40gb')."""
    from ..catalog.gpus import get_gpu

    base, _, profile = name.partition(":")
    gpu = get_gpu(base)
    if not profile:
        return gpu
    slices = {s.id.split(":", 1)[1]: s for s in mig_slices(gpu)}
    if profile not in slices:
        raise InvalidArgument(f"{gpu.name} has no MIG profile '{profile}' smaller than the card; valid: "
                              f"{', '.join(slices) or 'none'}")
    return slices[profile]


def _price(req: PickRequest, gpu: GPU) -> tuple[float | None, str]:
    if gpu.id in req.prices:
        return float(req.prices[gpu.id]), "as given"
    parent = gpu.extra.get("mig_parent")
    if parent:
        base = req.prices.get(parent)
        price, source = (base, "as given") if base is not None else rental_price(replace(gpu, id=parent))
        if price is None:
            return None, source
        share = gpu.extra["mig_share"]
        return price * share, f"{share:.0%} of the card's price (pro-rata to the slice; {source})"
    return rental_price(gpu)


def _kinds(req: PickRequest) -> list[GPU]:
    if req.gpus is not None:
        return list(req.gpus)
    vendors = ENGINE_VENDORS[req.engine] if req.task == "infer" else TRAIN_VENDORS
    out = []
    for g in all_gpus():
        if g.vendor not in vendors:
            continue
        if not g.memory_bandwidth_bytes_per_s:
            continue
        out.append(g)
        if req.mig:
            out.extend(mig_slices(g))
    return out


def _counts(req: PickRequest, gpu: GPU) -> list[int]:
    if gpu.extra.get("mig_parent"):
        return [1]
    out, n = [], 1
    while n <= req.max_gpus:
        out.append(n)
        n *= 2
    return out


def pick(req: PickRequest) -> PickResult:
    t0 = time.perf_counter()
    candidates: list[Candidate] = []
    for gpu in _kinds(req):
        price, source = _price(req, gpu)
        kind: list[Candidate] = []
        for n in _counts(req, gpu):
            c = _evaluate(req, gpu, n, price, source)
            if c is not None:
                kind.append(c)
        candidates.extend(_judge(req, kind))
    accepted = [c for c in candidates if c.rule is None]
    accepted.sort(key=_rank_key(req))
    rejected = [c for c in candidates if c.rule is not None]
    rejected.sort(key=lambda c: (RULES.index(c.rule), c.gpu.id, c.count))
    ranked = tuple(accepted[: req.top])
    return PickResult(request=req, ranked=ranked, rejected=tuple(rejected), why=_why(req, ranked),
                      accepted=len(accepted), search_time_s=time.perf_counter() - t0)


def _rank_key(req: PickRequest):
    inf = float("inf")

    def key(c: Candidate):
        cost = c.usd_per_million_tokens if c.usd_per_million_tokens is not None else inf
        speed = -(c.tokens_per_s or 0.0)
        first, second = (cost, speed) if req.objective == "cost" else (speed, cost)
        return first, second, -c.headroom_bytes, c.count, c.gpu.id

    return key


def _judge(req: PickRequest, kind: list[Candidate]) -> list[Candidate]:
    """Apply the rules in order to the counts of one GPU kind (smallest count first)."""
    out: list[Candidate] = []
    fastest_smaller: Candidate | None = None
    for c in kind:
        if not c.fits:
            need = f"{c.memory_bytes / GiB:.1f} GiB per GPU" if c.memory_bytes else "more than it has"
            out.append(replace(c, rule="memory", reason=f"needs {need}; {c.gpu.name} has "
                                                        f"{c.gpu.memory_bytes / GiB:.1f} GiB"))
            continue
        if fastest_smaller is not None and (c.tokens_per_s or 0) <= (fastest_smaller.tokens_per_s or 0):
            out.append(replace(c, rule="communication", reason=(
                f"no faster than {fastest_smaller.label} ({_rate(c.tokens_per_s)} vs "
                f"{_rate(fastest_smaller.tokens_per_s)}): {c.interconnect}")))
            continue
        if fastest_smaller is None or (c.tokens_per_s or 0) > (fastest_smaller.tokens_per_s or 0):
            fastest_smaller = c
        if req.budget_usd_per_hour is not None:
            if c.usd_per_hour is None:
                out.append(replace(c, rule="budget", reason="price unknown: cannot check the budget "
                                                            "(give one with --price ID=USD)"))
                continue
            if c.usd_per_hour > req.budget_usd_per_hour:
                out.append(replace(c, rule="budget", reason=f"${c.usd_per_hour:.2f}/h > ${req.budget_usd_per_hour:g}/h"))
                continue
        if req.headroom > 0 and c.memory_bytes is not None and c.headroom_bytes < req.headroom * c.gpu.memory_bytes:
            out.append(replace(c, rule="headroom", reason=(
                f"{c.headroom_bytes / GiB:.1f} GiB free of {c.gpu.memory_bytes / GiB:.1f} GiB, under the "
                f"{req.headroom:.0%} kept for longer contexts, bigger batches and fragmentation")))
            continue
        out.append(c)
    return out


def _link(topo) -> str:
    """The level the GPUs of one node talk over, with its bandwidth, and a warning when it is PCIe."""
    lv = topo.intra
    slow = "pcie" in lv.name.lower()
    return (f"{lv.name}, {lv.busbw_bytes_per_s / 1e9:.0f} GB/s bus bandwidth"
            + (" (no NVLink between these cards: tensor parallel over PCIe is slow)" if slow else ""))


def _rate(x: float | None) -> str:
    return "unknown" if x is None else f"{x:,.0f} tokens/s"


def _evaluate(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate | None:
    try:
        if req.task == "infer":
            return _infer(req, gpu, n, price, source)
        return _train(req, gpu, n, price, source)
    except GpuwiseError:
        return None  # a combination the models do not cover (e.g. no peak for the dtype): not a candidate


def _money(req, gpu: GPU, n: int, price: float | None, tokens_per_s: float | None):
    per_hour = price * n if price is not None else None
    per_m = per_hour / 3600 / tokens_per_s * 1e6 if (per_hour is not None and tokens_per_s) else None
    kwh = gpu.tdp_w * n / 1000 / 3600 / tokens_per_s * 1e6 if (gpu.tdp_w and tokens_per_s) else None
    return per_hour, per_m, kwh


def _infer(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate:
    from .infer import InferRequest, infer

    r = infer(InferRequest(model=req.model, gpu=gpu, num_gpus=n, weights=req.weights, kv_dtype=req.kv_dtype,
                           batch=req.batch, prompt_tokens=req.prompt_tokens, output_tokens=req.output_tokens,
                           engine=req.engine, usd_per_gpu_hour=price))
    fits = r.memory.fits
    speed = req.batch * req.output_tokens / r.request_s  # whole requests: prefill included, as infer's cost
    per_hour, per_m, kwh = _money(req, gpu, n, price, speed)
    if req.engine == "llamacpp":
        setup = "one GPU" if n == 1 else f"llama.cpp layer split over {n} GPUs"
        link = ("none" if n == 1 else "layer split sends one activation per token between cards: PCIe is enough, "
                "but the cards work in turn, so it is no faster than one card that fits")
    else:
        setup = "one GPU" if n == 1 else f"tensor parallel {n}"
        link = "none (one GPU)" if n == 1 else f"tensor parallel all-reduces every layer: {_link(r.topology)}"
    return Candidate(gpu=gpu, count=n, fits=fits, memory_bytes=r.memory.estimate.memory.total, tokens_per_s=speed,
                     usd_per_hour=per_hour, usd_per_million_tokens=per_m, kwh_per_million_tokens=kwh, setup=setup,
                     interconnect=link, price_source=source, latency={"ttft_s": r.ttft_s, "tpot_s": r.tpot_s})


def _train(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate:
    """The fastest setup that keeps the headroom free; failing that, the fastest that fits at all (which the
    headroom rule then rejects)."""
    reserve = req.headroom * gpu.memory_bytes
    best = _train_setup(req, gpu, n, reserve)
    if best is None and reserve > 0:
        best = _train_setup(req, gpu, n, 0.0)
    if best is None:
        return Candidate(gpu=gpu, count=n, fits=False, memory_bytes=None, tokens_per_s=None, usd_per_hour=None,
                         usd_per_million_tokens=None, kwh_per_million_tokens=None, setup="nothing fits",
                         interconnect="", price_source=source)
    step_s, memory, setup, tp = best
    speed = req.train_batch * req.train_seq / step_s
    per_hour, per_m, kwh = _money(req, gpu, n, price, speed)
    if n == 1:
        link = "none (one GPU)"
    else:
        topo = topology(gpu, num_gpus=n)
        if tp > 1:
            link = f"tensor parallel {tp} needs NVLink-class bandwidth: {_link(topo)}"
        else:
            link = f"data-parallel gradient traffic overlaps the backward pass: {_link(topo)} is enough"
    run_h = req.train_tokens / speed / 3600 if req.train_tokens else None
    run_usd = run_h * per_hour if (run_h is not None and per_hour is not None) else None
    return Candidate(gpu=gpu, count=n, fits=True, memory_bytes=memory, tokens_per_s=speed, usd_per_hour=per_hour,
                     usd_per_million_tokens=per_m, kwh_per_million_tokens=kwh, setup=setup, interconnect=link,
                     price_source=source, run_hours=run_h, run_usd=run_usd, latency={"step_time_s": step_s})


def _train_setup(req: PickRequest, gpu: GPU, n: int, reserve: float) -> tuple[float, float, str, int] | None:
    """(step time, memory per GPU, setup, TP degree) of the fastest setup within memory - reserve, or None."""
    finetune = req.finetune or ("lora" if req.task == "finetune" else "full")
    precision = req.precision
    if precision == "bf16" and not gpu.peak("bf16") and gpu.peak("fp16"):
        precision = "fp16"  # what people run on GPUs without bf16 tensor cores (V100, T4)
    seq, batch = req.train_seq, req.train_batch
    if finetune == "full":
        from .planner import PlanRequest, describe, plan

        framework = "torchtitan" if req.task == "train" else "fsdp"
        res = plan(PlanRequest(model=req.model, gpu=gpu, num_gpus=n, seq=seq, global_batch=batch, top=1,
                               framework=framework, precision=precision, reserve_gib=reserve / GiB))
        if not res.plans:
            return None
        p = res.plans[0]
        return p.step_time_s, p.memory_bytes, f"{framework}: {describe(p)}", p.layout.tp
    return _finetune_adapters(req, gpu, n, seq, batch, finetune, precision, gpu.memory_bytes - reserve)


def _finetune_adapters(req: PickRequest, gpu: GPU, n: int, seq: int, batch: int, finetune: str, precision: str,
                       budget: float) -> tuple[float, float, str, int] | None:
    """LoRA/QLoRA with transformers + PEFT, data parallel over n: the fastest (recompute, micro-batch) within
    `budget` bytes per GPU."""
    from ..estimate.layout import divisors
    from .train import TrainRequest, train

    if batch % n:
        raise InvalidArgument(f"global batch {batch} does not divide over {n} GPUs")
    best = None
    for rc in ("none", "full"):
        for mb in divisors(batch // n):  # memory grows with the micro-batch: stop at the first over budget
            r = train(TrainRequest(model=req.model, gpu=gpu, num_gpus=n, seq=seq, global_batch=batch,
                                   micro_batch=mb, recompute=rc, finetune=finetune, precision=precision))
            if r.memory.total > budget:
                break
            t = r.perf.step.step_time_s
            if best is None or t < best[0]:
                best = (t, r.memory.total, f"{finetune} (PEFT), data parallel {n}, micro-batch {mb}, recompute {rc}", 1)
    return best


def _why(req: PickRequest, ranked: tuple[Candidate, ...]) -> str:
    if not ranked:
        return "nothing passes the rules: see the rejections"
    a = ranked[0]
    if len(ranked) == 1:
        return f"{a.label} is the only candidate that passes every rule"
    b = ranked[1]
    if req.objective == "cost" and a.usd_per_million_tokens is not None and b.usd_per_million_tokens is not None:
        if abs(a.usd_per_million_tokens - b.usd_per_million_tokens) <= 0.005 * b.usd_per_million_tokens:
            return (f"{a.label} and {b.label} cost about the same per million tokens (${a.usd_per_million_tokens:.3g}); "
                    f"#1 is {'faster' if (a.tokens_per_s or 0) > (b.tokens_per_s or 0) else 'the one with more memory free'}")
        return (f"{a.label} costs ${a.usd_per_million_tokens:.3g} per million tokens against "
                f"${b.usd_per_million_tokens:.3g} for {b.label} ({_rate(a.tokens_per_s)} vs {_rate(b.tokens_per_s)} "
                f"at ${a.usd_per_hour:.2f}/h vs ${b.usd_per_hour:.2f}/h)")
    return f"{a.label} runs at {_rate(a.tokens_per_s)} against {_rate(b.tokens_per_s)} for {b.label}"
