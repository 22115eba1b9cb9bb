"""`gpuwise pick`: which GPU kind and how many for a workload, ranked, with the rule that rejected the others.

Candidates: catalog GPUs the engine or trainer runs on (NVIDIA; AMD for vLLM, transformers and PyTorch training;
any device for llama.cpp), in counts 1, 2, 4 ... up to `max_gpus`, and the MIG slices of GPUs that have them (one
slice, no interconnect; compute, memory bandwidth and TDP pro-rata to the slice, price pro-rata to the larger of
its compute and memory shares). Each candidate is costed by the same models as `infer`, `plan` and `train`.

Decision order (the order people use), the first rule that fails names the rejection:
1. memory: the workload does not fit (best layout, largest micro-batch);
2. communication: more cards of a kind that are no faster than fewer of them that pass every rule
   (interconnect-bound, e.g. tensor parallel over PCIe, or llama.cpp's layer split);
3. budget: count x price per GPU-hour above `budget_usd_per_hour` (an unknown price cannot pass a budget);
4. headroom: less than `headroom` of the memory left free, for longer contexts, bigger batches, fragmentation.
The rest are ranked by cost per million tokens (objective cost; unknown prices last) or by tokens per second
(objective speed); ties go to the faster, then to the one with more memory free.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from ..catalog.devices import rental_price, speed_figures_missing
from ..catalog.gpus import GPU, all_gpus
from ..catalog.mig import mig_slices
from ..estimate.engines import SGLANG
from ..units import GiB
from .pick_request import ENGINE_VENDORS, RULES, TRAIN_VENDORS, Candidate, PickRequest, PickResult
from ..errors import GpuwiseError
from ..estimate.layer_ops import raise_untimed_linear
from .pick_setups import _evaluate, _rate


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
    vendors = ENGINE_VENDORS[req.engine] if req.task in ("infer", "serve") else TRAIN_VENDORS
    out = []
    for g in all_gpus():
        if g.vendor not in vendors:
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
    if req.task == "serve":
        return _finish(req, *_pick_serve(req), t0)
    spec = req.model.spec
    if spec.parallel_hybrid:  # the model itself cannot be costed on any GPU: said once
        raise_untimed_linear(spec)
    candidates: list[Candidate] = []
    errors: list[GpuwiseError] = []
    evaluated = 0
    for gpu, price, source in _priced_kinds(req, candidates):
        kind: list[Candidate] = []
        kind_errors: list[GpuwiseError] = []
        for n in _counts(req, gpu):
            c = _evaluate(req, gpu, n, price, source)
            if isinstance(c, GpuwiseError):
                kind_errors.append(c)
                continue
            if c is not None:
                kind.append(c)
        errors += kind_errors
        if not kind and kind_errors:  # no count of this kind could be costed: said, with the model's reason
            candidates.append(_unknown(gpu, price, source, f"not costed: {kind_errors[0]}"))
        evaluated += len(kind)
        candidates.extend(_judge(req, kind))
    return _finish(req, candidates, errors, evaluated, t0)


def _priced_kinds(req: PickRequest, candidates: list[Candidate]):
    """(gpu, price per GPU-hour, its source) for each GPU kind to cost; a kind without the speed figures to rank it
    by is added to `candidates` as unknown (said, not left out)."""
    for gpu in _kinds(req):
        price, source = _price(req, gpu)
        missing = speed_figures_missing(gpu)
        if missing:
            candidates.append(_unknown(gpu, price, source, f"its {missing} not in the catalog: no speed to rank it by"))
            continue
        if req.task in ("train", "finetune") and req.precision == "fp8" and _fp8_refused(gpu):
            candidates.append(replace(_unknown(gpu, price, source, "no fp8 tensor cores: fp8 training (torchao's "
                                               "float8, Transformer Engine) needs them (Ada, Hopper, Blackwell, "
                                               "CDNA 3 and later)"), rule="precision"))
            continue
        yield gpu, price, source


def _fp8_refused(gpu: GPU) -> bool:
    from .train import fp8_hardware_problem  # train's own rule, imported when a training pick needs it

    return fp8_hardware_problem(gpu) is not None


def _unknown(gpu: GPU, price: float | None, source: str, reason: str) -> Candidate:
    return Candidate(gpu=gpu, count=1, fits=False, memory_bytes=None, tokens_per_s=None, usd_per_hour=price,
                     usd_per_million_tokens=None, kwh_per_million_tokens=None, setup="", interconnect="",
                     price_source=source, rule="unknown", reason=reason)


@dataclass
class _Kind:
    """A GPU kind in the serving search: its price, and how many of its counts were costed or skipped, with the
    errors of those that could not be."""
    gpu: GPU
    price: float | None
    source: str
    costed: int = 0
    skipped: int = 0
    errors: list = field(default_factory=list)


def _pick_serve(req: PickRequest) -> tuple[list[Candidate], list[GpuwiseError], int]:
    """--task serve as a best-first search on what each deployment costs at least: a kind and replica size of n
    GPUs costs at least n x its price per hour; after its memory check and step cost, at least its replicas at the
    analytical ceiling of one replica's rate (`saturation_ceiling`), each n GPUs; after its first simulation (one
    replica's saturation rate) at least its replicas at that rate; the rate search within the targets (about eight
    simulations) gives the cost itself. The candidate with the lowest floor is always taken next; once
    `top` deployments are accepted, the ones whose floor is above the top-th best's cost cannot enter the ranking
    and are rejected by the cost rule, with that floor, unsimulated. The ranking is the one a full search gives."""
    import heapq

    from .pick_setups import ServeBound, ServeProbe, serve_bound, serve_saturation, serve_search

    candidates: list[Candidate] = []
    errors: list[GpuwiseError] = []
    heap: list[tuple[float, str, int, int, object]] = []  # (floor, gpu id, count, stage, item): stable order

    kinds: dict[str, _Kind] = {}
    for gpu, price, source in _priced_kinds(req, candidates):
        kinds[gpu.id] = _Kind(gpu, price, source)
        for n in _counts(req, gpu):
            heapq.heappush(heap, (price * n if price is not None else math.inf, gpu.id, n, 0, (gpu.id, n)))
    rate = req.request_rate
    bounded = req.objective == "cost"
    best: list[float] = []  # $/h of the accepted deployments so far, cheapest first
    evaluated = 0
    while heap:
        floor, _, _, _, item = heapq.heappop(heap)
        if bounded and len(best) >= req.top and floor > best[req.top - 1]:
            candidates.append(_cost_rejection(req, item, floor, best[req.top - 1], kinds))
            continue
        if isinstance(item, ServeProbe):
            c = _judge_serve(req, [serve_search(req, item)])[0]
            candidates.append(c)
            if c.rule is None and c.usd_per_hour is not None:
                best.append(c.usd_per_hour)
                best.sort()
            continue
        if isinstance(item, ServeBound):
            p = serve_saturation(req, item)
            stage = 2
        else:
            kind = kinds[item[0]]
            try:
                p = serve_bound(req, kind.gpu, item[1], kind.price, kind.source)
            except GpuwiseError as exc:
                kind.errors.append(exc)
                continue
            kind.costed += 1
            evaluated += 1
            stage = 1
        if isinstance(p, Candidate):
            candidates.extend(_judge_serve(req, [p]))
        else:
            key = p.floor_usd_per_hour(rate)
            heapq.heappush(heap, (key if key is not None else math.inf, p.gpu.id, p.n, stage, p))
    for kind in kinds.values():
        errors += kind.errors
        if not kind.costed and not kind.skipped and kind.errors:  # no count could be costed: said, with the reason
            candidates.append(_unknown(kind.gpu, kind.price, kind.source, f"not costed: {kind.errors[0]}"))
    return candidates, errors, evaluated


def _cost_rejection(req: PickRequest, item, floor: float, kth: float, kinds: dict) -> Candidate:
    """The cost rule: a deployment whose floor is above the top-th best's cost, with what that floor rests on."""
    from .pick_setups import ServeBound, ServeProbe

    if isinstance(item, ServeProbe):
        gpu, n, source, memory, setup = item.gpu, item.n, item.source, item.ks.mem.estimate.memory.total, item.setup
        why = f"with every replica at its saturation rate ({item.saturation:.3g} requests/s)"
    elif isinstance(item, ServeBound):
        gpu, n, source, memory, setup = item.gpu, item.n, item.source, item.ks.mem.estimate.memory.total, item.setup
        why = (f"with every replica at the most one can finish ({item.ceiling:.3g} requests/s, its KV pool's largest "
               "decode batch)")
    else:
        kind = kinds[item[0]]
        kind.skipped += 1
        gpu, n, source, memory, setup = kind.gpu, item[1], kind.source, None, ""
        why = "for a single replica"
    head = (f"price unknown: ranked after the {req.top} priced deployments found" if floor == math.inf else
            f"at least ${floor:,.2f}/h {why}, above the #{req.top} deployment's ${kth:,.2f}/h")
    return Candidate(gpu=gpu, count=n, fits=True, memory_bytes=memory, tokens_per_s=None, usd_per_hour=None,
                     usd_per_million_tokens=None, kwh_per_million_tokens=None, setup=setup, interconnect="",
                     price_source=source, rule="cost", reason=f"{head}: not searched further")


def _finish(req: PickRequest, candidates: list[Candidate], errors: list[GpuwiseError], evaluated: int,
            t0: float) -> PickResult:
    if not evaluated and errors and all(type(e) is type(errors[0]) and str(e) == str(errors[0]) for e in errors):
        raise errors[0]  # the request itself, not a GPU: no GPU could take it, for the same reason
    accepted = [c for c in candidates if c.rule is None]
    accepted.sort(key=_rank_key(req))
    rejected = [c for c in candidates if c.rule is not None]
    rejected.sort(key=lambda c: (RULES.index(c.rule), c.gpu.id, c.count))
    ranked = tuple(accepted[: req.top])
    if req.task == "serve" and not accepted:
        _no_layout_meets(req, rejected)
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
            how = f" ({c.setup})" if c.setup else ""
            budget = ""
            if req.task != "train" and req.engine == "vllm":
                budget = ", of which vLLM takes gpu_memory_utilization 0.9"
            elif req.task != "train" and req.engine == "trtllm":  # sized by vLLM's rule (plan/fit.py says why)
                budget = (", of which TensorRT-LLM is given 0.9 as vLLM's gpu_memory_utilization (its own "
                          "free_gpu_memory_fraction 0.9 of what loading leaves is a little larger)")
            elif req.task != "train" and req.engine == "sglang":  # its default for this memory and tp = the count
                frac = SGLANG.mem_fraction_static(c.gpu.memory_bytes, c.count)
                budget = f", of which SGLang takes mem_fraction_static {frac:g}"
            out.append(replace(c, rule="memory", reason=f"needs {need}{how}; {c.gpu.name} has "
                                                        f"{c.gpu.memory_bytes / GiB:.1f} GiB{budget}"))
            continue
        if fastest_smaller is not None and (c.tokens_per_s or 0) <= (fastest_smaller.tokens_per_s or 0):
            out.append(replace(c, rule="communication", reason=(
                f"no faster than {fastest_smaller.label} ({_rate(c.tokens_per_s)} vs "
                f"{_rate(fastest_smaller.tokens_per_s)}): {c.interconnect}")))
            continue
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
        # Only an accepted count makes more cards pointless: more cards that leave the headroom a smaller count
        # lacked are not rejected as "no faster" than it.
        if fastest_smaller is None or (c.tokens_per_s or 0) > (fastest_smaller.tokens_per_s or 0):
            fastest_smaller = c
        out.append(c)
    return out


def _no_layout_meets(req: PickRequest, rejected: list[Candidate]) -> None:
    """--task serve with targets no candidate meets: one line with the best latency reachable (exit 2)."""
    from ..errors import InvalidArgument

    slo = [c for c in rejected if c.rule == "slo" and c.latency]
    if not slo:
        return  # nothing fits, or the budget rules everything out: the rejections say so
    pct = req.slo_percentile
    best_ttft = min(slo, key=lambda c: c.latency["ttft_s"])
    best_tpot = min(slo, key=lambda c: c.latency["tpot_s"])

    def where(c: Candidate) -> str:
        n = c.latency.get("gpus_per_replica", c.count)
        return f"{n} x {c.gpu.name}" if n > 1 else c.gpu.name

    targets = " and ".join(t for t in (f"TTFT <= {req.slo_ttft_ms:g} ms" if req.slo_ttft_ms else "",
                                       f"TPOT <= {req.slo_tpot_ms:g} ms" if req.slo_tpot_ms else "") if t)
    raise InvalidArgument(
        f"no GPU kind and replica size meets p{pct} {targets}, even at low load; the best reachable: TTFT "
        f"{best_ttft.latency['ttft_s'] * 1e3:,.0f} ms ({where(best_ttft)}), TPOT "
        f"{best_tpot.latency['tpot_s'] * 1e3:,.1f} ms ({where(best_tpot)})")


def _judge_serve(req: PickRequest, kind: list[Candidate]) -> list[Candidate]:
    """Serving: every replica size that fits and meets the SLOs competes on cost (more GPUs per replica are not
    rejected for being no faster: they may need fewer GPUs in all); the budget rule as for the other tasks."""
    out = []
    for c in kind:
        if not c.fits:
            need = f"{c.memory_bytes / GiB:.1f} GiB per GPU" if c.memory_bytes else "more than it has"
            out.append(replace(c, rule="memory", reason=f"{c.reason or 'the weights and one request need ' + need}"))
        elif c.rule is not None:
            out.append(c)
        elif c.tokens_per_s is None:
            out.append(replace(c, rule="slo"))
        elif req.budget_usd_per_hour is not None and (c.usd_per_hour is None or c.usd_per_hour > req.budget_usd_per_hour):
            out.append(replace(c, rule="budget", reason="price unknown: cannot check the budget" if c.usd_per_hour is None
                               else f"${c.usd_per_hour:.2f}/h > ${req.budget_usd_per_hour:g}/h"))
        else:
            out.append(c)
    return out


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
