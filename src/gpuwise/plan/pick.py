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

import time
from dataclasses import replace

from ..catalog.devices import rental_price, speed_figures_missing
from ..catalog.gpus import GPU, all_gpus
from ..catalog.mig import mig_slices
from ..units import GiB
from .pick_request import ENGINE_VENDORS, RULES, TRAIN_VENDORS, Candidate, PickRequest, PickResult
from ..errors import GpuwiseError
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
    candidates: list[Candidate] = []
    errors: list[GpuwiseError] = []
    evaluated = 0
    for gpu in _kinds(req):
        price, source = _price(req, gpu)
        missing = speed_figures_missing(gpu)
        if missing:  # nothing to rank it by: said, not left out
            candidates.append(Candidate(gpu=gpu, count=1, fits=False, memory_bytes=None, tokens_per_s=None,
                                        usd_per_hour=price, usd_per_million_tokens=None, kwh_per_million_tokens=None,
                                        setup="", interconnect="", price_source=source, rule="unknown",
                                        reason=f"its {missing} not in the catalog: no speed to rank it by"))
            continue
        kind: list[Candidate] = []
        kind_errors: list[GpuwiseError] = []
        cheapest: float | None = None  # serve: the lowest $/h of an accepted deployment of this kind so far
        for n in _counts(req, gpu):
            if req.task == "serve" and cheapest is not None and price is not None and n * price >= cheapest:
                break  # a deployment of n-GPU replicas costs at least n x price: it cannot beat this kind's best
            c = _evaluate(req, gpu, n, price, source)
            if isinstance(c, GpuwiseError):
                kind_errors.append(c)
                continue
            if c is not None:
                kind.append(c)
                if req.task == "serve" and c.tokens_per_s and c.usd_per_hour is not None and (
                        req.budget_usd_per_hour is None or c.usd_per_hour <= req.budget_usd_per_hour):
                    cheapest = c.usd_per_hour if cheapest is None else min(cheapest, c.usd_per_hour)
        errors += kind_errors
        if not kind and kind_errors:  # no count of this kind could be costed: said, with the model's reason
            candidates.append(Candidate(gpu=gpu, count=1, fits=False, memory_bytes=None, tokens_per_s=None,
                                        usd_per_hour=price, usd_per_million_tokens=None, kwh_per_million_tokens=None,
                                        setup="", interconnect="", price_source=source, rule="unknown",
                                        reason=f"not costed: {kind_errors[0]}"))
        evaluated += len(kind)
        candidates.extend(_judge_serve(req, kind) if req.task == "serve" else _judge(req, kind))
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
            budget = (", of which vLLM takes gpu_memory_utilization 0.9" if req.task != "train"
                      and req.engine in ("vllm", "trtllm") else "")
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
