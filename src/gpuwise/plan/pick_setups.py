"""How `gpuwise pick` costs one candidate (a GPU kind and a count): the same models as `infer`, `plan` and `train`.

Inference: `gpuwise infer` at the requested batch, whole requests (prefill included). Training from scratch: the
planner's fastest layout within the memory left after the headroom. Fine-tuning with adapters: transformers + PEFT
data parallel, the fastest recompute mode and micro-batch that fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..catalog.gpus import GPU
from ..errors import GpuwiseError, InvalidArgument
from ..estimate.comm import topology
from ..estimate.layout import divisors
from ..units import GB, GiB
from .runnable import FORMATS, most_faithful_format, smallest_format
from .pick_request import FINETUNE_METHOD, Candidate, PickRequest

if TYPE_CHECKING:
    from ..estimate.serving import StepCost
    from .infer import InferRequest, KernelSetup
    from .serve import LoadSpec


def _link(topo) -> str:
    """The level the GPUs of one node talk over, with its bandwidth, and a warning when it is PCIe."""
    lv = topo.intra
    slow = "pcie" in lv.name.lower()
    return (f"{lv.name}, {lv.busbw_bytes_per_s / GB:.0f} GB/s bus bandwidth"
            + (" (no NVLink between these cards: tensor parallel over PCIe is slow)" if slow else ""))


def _rate(x: float | None) -> str:
    return "unknown" if x is None else f"{x:,.0f} tokens/s"


def _evaluate(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate | GpuwiseError:
    """The candidate, or the error that makes it one the models do not cover (no peak for the dtype, a TP degree
    that does not divide the heads, an input no GPU can take): pick.py decides whether it is the GPU's or the
    request's."""
    try:
        if req.task == "infer":
            return _infer(req, gpu, n, price, source)
        if req.task == "serve":
            return _serve(req, gpu, n, price, source)
        return _train(req, gpu, n, price, source)
    except GpuwiseError as exc:
        return exc


def _money(req, gpu: GPU, n: int, price: float | None, tokens_per_s: float | None):
    per_hour = price * n if price is not None else None
    per_m = per_hour / 3600 / tokens_per_s * 1e6 if (per_hour is not None and tokens_per_s) else None
    kwh = gpu.power_w * n / 1000 / 3600 / tokens_per_s * 1e6 if (gpu.power_w and tokens_per_s) else None
    return per_hour, per_m, kwh


def _weights(req: PickRequest, gpu: GPU, n: int, batch: int) -> tuple[str | None, str]:
    """The weights to cost (name, what the setup says of them): --weights as given, else the most faithful of the
    engine's formats that fits here (the checkpoint's own, then FP8, then 4-bit for vLLM and SGLang; the GGUF ladder
    for llama.cpp), so that a 70B model on two 24 GB cards is tried in 4 bits rather than rejected in 16."""
    if req.weights is not None or req.engine not in FORMATS:
        return req.weights, ""
    from dataclasses import replace

    kept = replace(gpu, memory_bytes=int(gpu.memory_bytes * (1 - req.headroom)))  # the format must leave the headroom
    context = req.prompt_tokens + req.output_tokens
    fmt = most_faithful_format(req.model, kept, n, req.engine, context=context, batch=batch,
                               vllm_version=req.vllm_version) or most_faithful_format(
        req.model, gpu, n, req.engine, context=context, batch=batch, vllm_version=req.vllm_version)
    if fmt is None:  # none fits: cost the smallest, so that a memory rejection gives the least this setup needs
        fmt = smallest_format(req.model, req.engine)
    return (fmt.name, f", {fmt.name.removeprefix('gguf:')}") if fmt is not None else (None, "")


def _infer(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate:
    from .infer import InferRequest, infer

    weights, said = _weights(req, gpu, n, req.batch)
    r = infer(InferRequest(model=req.model, gpu=gpu, num_gpus=n, weights=weights, kv_dtype=req.kv_dtype,
                           batch=req.batch, prompt_tokens=req.prompt_tokens, output_tokens=req.output_tokens,
                           engine=req.engine, usd_per_gpu_hour=price, vllm_version=req.vllm_version,
                           sglang_version=req.sglang_version))
    fits = r.memory.fits
    speed = req.batch * req.output_tokens / r.request_s  # whole requests: prefill included, as infer's cost
    per_hour, per_m, kwh = _money(req, gpu, n, price, speed)
    if req.engine == "llamacpp":
        setup = ("one GPU" if n == 1 else f"llama.cpp layer split over {n} GPUs") + said
        link = ("none" if n == 1 else "layer split sends one activation per token between cards: PCIe is enough, "
                "but the cards work in turn, so it is no faster than one card that fits")
    else:
        setup = ("one GPU" if n == 1 else f"tensor parallel {n}") + said
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
    finetune = req.finetune or (FINETUNE_METHOD if req.task == "finetune" else "full")
    precision = req.precision
    if precision == "bf16" and not gpu.peak("bf16") and gpu.peak("fp16"):
        precision = "fp16"  # what people run on GPUs without bf16 tensor cores (V100, T4)
    seq, batch = req.train_seq, req.train_batch
    if finetune == "full":
        from .planner import COMPILING_FRAMEWORKS, PlanRequest, describe, plan
        from .train import model_problem

        # pre-training runs on torchtitan where it builds the model's layers, else Megatron-LM (Mamba-2 hybrids)
        framework = "fsdp" if req.task != "train" else (
            "torchtitan" if model_problem("torchtitan", req.model.spec) is None else "megatron")
        # torchao's float8 runs compiled (eager casts cost more than fp8 saves); Megatron's fp8 is Transformer Engine's
        compiled = precision == "fp8" and framework in COMPILING_FRAMEWORKS
        res = plan(PlanRequest(model=req.model, gpu=gpu, num_gpus=n, seq=seq, global_batch=batch, top=1,
                               framework=framework, precision=precision, reserve_gib=reserve / GiB, compile=compiled))
        if not res.plans:
            return None
        p = res.plans[0]
        return p.step_time_s, p.memory_bytes, f"{framework}{' + compile' if compiled else ''}: {describe(p)}", \
            p.layout.tp
    return _finetune_adapters(req, gpu, n, seq, batch, finetune, precision, gpu.memory_bytes - reserve)


def _finetune_adapters(req: PickRequest, gpu: GPU, n: int, seq: int, batch: int, finetune: str, precision: str,
                       budget: float) -> tuple[float, float, str, int] | None:
    """LoRA/QLoRA with transformers + PEFT, data parallel over n: the fastest (recompute, micro-batch) within
    `budget` bytes per GPU."""
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


SERVE_MAX_REPLICAS = 64
"""Deployments needing more replicas than this (even at each replica's saturation rate) are rejected ('scale'):
beyond what one serving deployment runs; they are also the slowest to simulate (tiny KV pools)."""
SERVE_SIM_REQUESTS = 300
"""Requests per simulated trial of a replica in the capacity search (enough for a stable p90 at moderate load)."""
SERVE_BISECTIONS = 6
"""Most trials of the rate search (regula falsi on latency / target, stopped when the bracket is within 3%)."""


@dataclass(frozen=True)
class _ServeSetup:
    """A serving candidate that fits: its GPUs, price, kernel setup, step cost and engine limits."""
    gpu: GPU
    n: int
    price: float | None
    source: str
    ireq: InferRequest
    ks: KernelSetup
    cost: StepCost
    load: LoadSpec
    setup: str

    def _floor(self, rate: float, per_replica: float) -> float | None:
        """What the deployment costs at least if each replica of n GPUs finishes `per_replica` requests/s."""
        return None if self.price is None else self.price * self.n * max(1, math.ceil(rate / per_replica))


@dataclass(frozen=True)
class ServeBound(_ServeSetup):
    """Before any simulation: the most requests/s one replica could finish (`saturation_ceiling`, an analytical
    upper bound) bounds what the deployment costs from below without simulating it."""
    ceiling: float
    """Requests/s one replica cannot exceed (its KV pool's largest decode batch at its decode-only step time)."""

    def floor_usd_per_hour(self, rate: float) -> float | None:
        """The least this deployment can cost: the replicas the rate needs at the ceiling rate, each n GPUs."""
        return self._floor(rate, self.ceiling)


@dataclass(frozen=True)
class ServeProbe(_ServeSetup):
    """After its first simulation (one replica's saturation rate), before the rate search: enough to bound what the
    deployment costs (`floor_usd_per_hour`)."""
    saturation: float
    """Requests/s one replica finishes with every request queued at once (no latency target)."""

    def floor_usd_per_hour(self, rate: float) -> float | None:
        """The least this deployment can cost: the replicas the rate needs at the saturation rate, each n GPUs."""
        return self._floor(rate, self.saturation)


def _serve(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate:
    """Replicas of `n` GPUs (tensor parallel; llama.cpp on one GPU): the highest rate one replica sustains within
    the SLOs at the percentile (simulated), then as many replicas as the requested rate needs."""
    probe = serve_probe(req, gpu, n, price, source)
    return probe if isinstance(probe, Candidate) else serve_search(req, probe)


def _too_many(req: PickRequest, b: ServeBound, why: str) -> Candidate:
    return Candidate(gpu=b.gpu, count=b.n, fits=True, memory_bytes=b.ks.mem.estimate.memory.total, tokens_per_s=None,
                     usd_per_hour=None, usd_per_million_tokens=None, kwh_per_million_tokens=None, setup=b.setup,
                     interconnect="", price_source=b.source, rule="scale", reason=(
                         f"{why}: {req.request_rate:g}/s would need more than {SERVE_MAX_REPLICAS} replicas"))


def serve_bound(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate | ServeBound:
    """The candidate's memory check, step cost and saturation ceiling, without simulating; a Candidate when that
    already decides it (does not fit, or needs more than SERVE_MAX_REPLICAS replicas even at the ceiling)."""
    from ..estimate.serving import Workload, saturation_ceiling
    from .infer import InferRequest, kernel_setup, serving_model

    if req.engine == "llamacpp" and n > 1:
        raise InvalidArgument("llama.cpp's layer split does not serve faster than one GPU")
    weights, said = _weights(req, gpu, n, 1)
    ireq = InferRequest(model=req.model, gpu=gpu, num_gpus=n, weights=weights, kv_dtype=req.kv_dtype,
                        prompt_tokens=req.prompt_tokens, output_tokens=req.output_tokens, engine=req.engine,
                        request_rate=req.request_rate, num_prompts=SERVE_SIM_REQUESTS, vllm_version=req.vllm_version,
                        sglang_version=req.sglang_version)
    ks = kernel_setup(ireq)
    setup = ("one GPU per replica" if n == 1 else f"tensor parallel {n} per replica") + said
    if not ks.mem.fits:
        return Candidate(gpu=gpu, count=n, fits=False, memory_bytes=ks.mem.estimate.memory.total, tokens_per_s=None,
                         usd_per_hour=None, usd_per_million_tokens=None, kwh_per_million_tokens=None, setup=setup,
                         interconnect="", price_source=source)
    cost, load, _, _ = serving_model(ireq, ks)
    wl = load.workload
    at_once = Workload(prompt_tokens=wl.prompt_tokens, output_tokens=wl.output_tokens, request_rate=float("inf"))
    b = ServeBound(gpu, n, price, source, ireq, ks, cost, load, setup, saturation_ceiling(cost, at_once, load.limits))
    if req.request_rate / b.ceiling > SERVE_MAX_REPLICAS:  # decided without simulating (tiny pools simulate slowest)
        return _too_many(req, b, f"one replica finishes at most {b.ceiling:.3g} requests/s (its KV pool's largest "
                                 "decode batch)")
    return b


def serve_saturation(req: PickRequest, b: ServeBound) -> Candidate | ServeProbe:
    """One replica's saturation rate, simulated with every request queued at once; a Candidate when it needs more
    than SERVE_MAX_REPLICAS replicas."""
    from ..estimate.serving import Workload, simulate

    wl = b.load.workload
    at_once = Workload(prompt_tokens=wl.prompt_tokens, output_tokens=wl.output_tokens, request_rate=float("inf"))
    saturation = simulate(b.cost, at_once, b.load.limits).request_throughput
    if req.request_rate / saturation > SERVE_MAX_REPLICAS:
        return _too_many(req, b, f"one replica saturates at {saturation:.3g} requests/s")
    return ServeProbe(b.gpu, b.n, b.price, b.source, b.ireq, b.ks, b.cost, b.load, b.setup, saturation)


def serve_probe(req: PickRequest, gpu: GPU, n: int, price: float | None, source: str) -> Candidate | ServeProbe:
    """The candidate's memory check and one replica's saturation rate; a Candidate when that already decides it
    (does not fit, or needs more than SERVE_MAX_REPLICAS replicas)."""
    b = serve_bound(req, gpu, n, price, source)
    return b if isinstance(b, Candidate) else serve_saturation(req, b)


def serve_search(req: PickRequest, probe: ServeProbe) -> Candidate:
    """The highest rate one replica sustains within the SLOs at the percentile (simulated), then as many replicas as
    the requested rate needs."""
    from ..estimate.serving import Workload, simulate

    gpu, n, price, source, ks, cost, setup = probe.gpu, probe.n, probe.price, probe.source, probe.ks, probe.cost, \
        probe.setup
    wl, lim = probe.load.workload, probe.load.limits
    saturation = probe.saturation
    pct = req.slo_percentile

    def trial(rate: float):
        return simulate(cost, Workload(prompt_tokens=wl.prompt_tokens, output_tokens=wl.output_tokens,
                                       request_rate=rate), lim)

    def ratio(res) -> float:
        """The worse of latency / target at the percentile (<= 1: the targets are met)."""
        parts = [res.ttft_s.percentile(pct) * 1e3 / req.slo_ttft_ms if req.slo_ttft_ms else 0.0,
                 res.tpot_s.percentile(pct) * 1e3 / req.slo_tpot_ms if req.slo_tpot_ms else 0.0]
        return max(parts)

    def meets(res) -> bool:
        return ratio(res) <= 1.0

    # the latency floor: one request alone (no queue, no batch)
    low = simulate(cost, Workload(prompt_tokens=wl.prompt_tokens[:1], output_tokens=wl.output_tokens[:1]), lim)
    if not meets(low):
        return Candidate(gpu=gpu, count=n, fits=True, memory_bytes=ks.mem.estimate.memory.total, tokens_per_s=None,
                         usd_per_hour=None, usd_per_million_tokens=None, kwh_per_million_tokens=None, setup=setup,
                         interconnect="", price_source=source,
                         latency={"ttft_s": low.ttft_s.percentile(pct), "tpot_s": low.tpot_s.percentile(pct),
                                  "percentile": pct, "gpus_per_replica": n}, reason=(
                             f"even alone a request's TTFT is {low.ttft_s.percentile(pct) * 1e3:,.0f} ms and TPOT "
                             f"{low.tpot_s.percentile(pct) * 1e3:,.1f} ms per replica (targets: "
                             f"{_slo_text(req)})"))
    lo, hi = saturation / 50, saturation
    if req.slo_ttft_ms is None and req.slo_tpot_ms is None:
        lo = saturation * 0.9  # no targets: run replicas at 90% of their saturation rate (latency unbounded)
    else:
        # the highest rate within the targets: regula falsi (Illinois) on the worse of the two latency/target
        # ratios, which rises with the rate; a trial that meets the targets raises the floor
        f_lo, f_hi = ratio(low) - 1, ratio(trial(hi)) - 1
        if f_hi <= 0:
            lo = hi
        side = 0
        for _ in range(SERVE_BISECTIONS if f_hi > 0 else 0):
            mid = hi - f_hi * (hi - lo) / (f_hi - f_lo) if f_hi != f_lo else (lo + hi) / 2
            mid = min(max(mid, lo + 0.05 * (hi - lo)), hi - 0.05 * (hi - lo))
            f_mid = ratio(trial(mid)) - 1
            if f_mid <= 0:
                lo, f_lo = mid, f_mid
                if side == -1:
                    f_hi /= 2
                side = -1
            else:
                hi, f_hi = mid, f_mid
                if side == 1:
                    f_lo /= 2
                side = 1
            if (hi - lo) <= 0.03 * hi:
                break
    replicas = math.ceil(req.request_rate / lo)
    at = trial(req.request_rate / replicas)
    out_tokens = sum(wl.output_tokens) / len(wl.output_tokens)
    speed = req.request_rate * out_tokens
    gpus = replicas * n
    per_hour, per_m, kwh = _money(req, gpu, gpus, price, speed)
    link = "none (one GPU)" if n == 1 else f"tensor parallel all-reduces every layer: {_link(ks.topo)}"
    return Candidate(gpu=gpu, count=gpus, fits=True, memory_bytes=ks.mem.estimate.memory.total, tokens_per_s=speed,
                     usd_per_hour=per_hour, usd_per_million_tokens=per_m, kwh_per_million_tokens=kwh,
                     setup=f"{replicas} x {setup} ({lo:,.2f} requests/s each within the targets)",
                     interconnect=link, price_source=source,
                     latency={"ttft_s": at.ttft_s.percentile(pct), "tpot_s": at.tpot_s.percentile(pct),
                              "percentile": pct, "replicas": replicas, "gpus_per_replica": n,
                              "requests_per_s_per_replica": lo})


def _slo_text(req: PickRequest) -> str:
    parts = [f"TTFT <= {req.slo_ttft_ms:g} ms" if req.slo_ttft_ms else "", f"TPOT <= {req.slo_tpot_ms:g} ms"
             if req.slo_tpot_ms else ""]
    return " and ".join(p for p in parts if p) or "none"
