"""Human output: compact tables and a breakdown bar. Memory in GiB (binary, as nvidia-smi's MiB),
always with its unit; unknown shown as 'unknown'."""

from __future__ import annotations

import math

import sys
from typing import TYPE_CHECKING

from ..catalog.gpus import GPU
from ..catalog.models import CatalogEntry, entry_spec
from ..model.params import param_counts
from ..units import GB, GiB, fmt_bytes, fmt_count, fmt_gib

if TYPE_CHECKING:  # types only: `gpuwise fit` must not load the training estimators
    from ..plan.fit import FitResult
    from ..plan.train import TrainResult


def _unicode_ok() -> bool:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return "utf" in enc


def breakdown_bar(parts: list[tuple[str, float]], capacity: float, width: int = 48) -> tuple[str, str]:
    """A stacked bar of `parts` against `capacity` and its legend. Overflow is marked with '!'."""
    glyphs = ["█", "▓", "▒", "░"] if _unicode_ok() else ["#", "=", "+", "-"]
    free = "·" if _unicode_ok() else "."
    total = sum(v for _, v in parts)
    scale = max(capacity, total)
    cells = []
    for i, (_, v) in enumerate(parts):
        cells.append(glyphs[i % len(glyphs)] * int(round(v / scale * width)))
    bar = "".join(cells)[:width]
    if total <= capacity:
        bar = bar.ljust(int(round(capacity / scale * width)), free)
    else:
        cap_at = int(round(capacity / scale * width))
        bar = bar[:cap_at] + "|" + "!" * max(len(bar) - cap_at, 1)
    legend = "  ".join(f"{glyphs[i % len(glyphs)]} {name}" for i, (name, _) in enumerate(parts))
    return f"[{bar}]", legend


def _table(rows: list[list[str]], header: list[str], right: set[int] | None = None) -> str:
    right = right or set()
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    def line(r: list[str]) -> str:
        return "  ".join(str(c).rjust(widths[i]) if i in right else str(c).ljust(widths[i])
                         for i, c in enumerate(r)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _fix_line(fix, what: str) -> str:
    """The one change that fits, under a DOES NOT FIT verdict (from `gpuwise doctor`)."""
    if fix is None:
        return "no single change gpuwise knows fits: see `gpuwise doctor` for what comes closest"
    tight = ", tight" if fix.tight else ""
    if fix.fits and fix.capacity_bytes and fix.memory_bytes > fix.capacity_bytes:
        tight += ": over the card only by the caching allocator's allowance"
    speed = f", {what} {fix.slowdown:+.0%}" if fix.slowdown is not None else ""
    return (f"cheapest change that fits: {fix.change} ({fix.memory_bytes / GiB:.1f} GiB per GPU{tight}{speed}); "
            f"all remedies, ranked by {what}: `gpuwise doctor{' --task infer' if what == 'time per token' else ''}` "
            "with the same options")


def render_fit(r: FitResult, fix=None) -> str:
    req = r.request
    spec = req.model.spec
    m = r.estimate.memory
    gpu = req.gpu
    name = req.model.id + (f" ({req.model.hf_id})" if req.model.hf_id and req.model.hf_id != req.model.id else "")
    params = fmt_count(r.params.total) + (f", {fmt_count(r.params.active)} active" if spec.is_moe else "")
    lines = [
        f"{name}: {params} params, {spec.family}, {spec.num_layers} layers, {spec.attention_kind.upper()}",
        f"on {req.num_gpus} x {gpu.name} ({fmt_gib(gpu.memory_bytes)} each) with {req.engine}; "
        f"weights {r.weights.name}, KV {r.kv.name}, context {r.context:,} tokens x batch {req.batch}",
        "",
    ]
    parts = [("weights", m.weights), ("KV cache", m.kv_cache), ("activations", m.activations),
             ("overhead", m.overhead)]
    per = " per GPU" if req.num_gpus > 1 else ""
    rows = [[k, fmt_gib(v), f"{100 * v / m.total:.0f}%" if m.total else "-"] for k, v in parts]
    rows.append(["total" + per, fmt_gib(m.total), ""])
    rows.append(["budget" + per, fmt_gib(r.estimate.budget_bytes), ""])
    lines.append(_table(rows, ["memory" + per, "size", "share"], right={1, 2}))
    if req.engine == "vllm":
        d = r.estimate.details
        lines.append(f"(vLLM's budget: gpu_memory_utilization {d['gpu_memory_utilization']:.2f} x "
                     f"{fmt_gib(d['cuda_total_bytes'])} as CUDA reports it, plus the CUDA context outside it; "
                     f"activations are its profiling run's peak, overhead its non-torch memory and the context)")
    bar, legend = breakdown_bar(parts, r.estimate.budget_bytes)
    lines += ["", f"{bar}  {legend}", ""]
    verdict = "FITS" if r.fits else "DOES NOT FIT"
    lines.append(f"{verdict}: {fmt_gib(abs(r.estimate.headroom_bytes))} "
                 f"{'headroom' if r.fits else 'short'} on the most loaded GPU")
    if not r.fits:
        lines.append(_fix_line(fix, "time per token"))
    lines.append(f"KV cache: {fmt_bytes(r.kv_cache_bytes_per_token)} per token "
                 f"({_kv_formula(r)})")
    d = r.estimate.details
    if req.engine in ("vllm", "sglang"):
        name = "vLLM" if req.engine == "vllm" else "SGLang"
        tokens = d.get("kv_pool_tokens")
        lines.append(f"{name} KV pool: {fmt_gib(d['kv_pool_bytes'])}"
                     + (f" = {tokens:,} tokens" if tokens is not None else "")
                     + (" per GPU (data-parallel attention: each GPU its own requests)" if d.get("dp_attention") else "")
                     + f", room for {d['max_concurrent_sequences']:,} sequences of {r.context:,} tokens at once"
                     + (" (vLLM logs these as 'GPU KV cache size' and 'Maximum concurrency')"
                        if req.engine == "vllm" else " (SGLang logs '#tokens' / max_total_num_tokens)"))
    if req.engine == "llamacpp" and not r.fits:
        lines.append(f"llama.cpp would offload {d['gpu_layers']} of {spec.num_layers} layers to the GPU(s) "
                     f"(-ngl {d['gpu_layers']}); the other {d['cpu_layers']} run on the CPU, much slower")
    limit = " (the model's maximum)" if r.max_context_limited_by == "model maximum" else ""
    lines.append(f"largest context at batch {req.batch}: {r.max_context:,} tokens{limit}")
    lines.append(f"largest batch at {r.context:,} tokens: {r.max_batch:,}")
    lines.append(f"fewest {gpu.id} GPUs: {r.min_gpus if r.min_gpus is not None else 'none up to 64 fits'}")
    if gpu.mig_profiles:
        lines.append(f"smallest MIG slice: {r.min_mig_profile or 'none fits'}")
    lines += ["", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def _kv_formula(r: FitResult) -> str:
    spec = r.request.model.spec
    b = r.kv.bytes
    if spec.mla is not None:
        mla = spec.mla
        if r.request.engine == "hf":
            return (f"{spec.num_layers} layers x {spec.num_heads} heads x ({mla.qk_head_dim} K + {mla.v_head_dim} V)"
                    f" x {b:g} B, decompressed by transformers")
        return f"{spec.num_layers} layers x ({mla.kv_lora_rank} latent + {mla.qk_rope_head_dim} rope) x {b:g} B, MLA"
    heads = spec.num_heads if (r.request.engine == "hf" and spec.hf_expands_kv_cache) else spec.num_kv_heads
    if spec.layer_kv or spec.kv_shared_layers:  # Gemma 4: one term per layer shape; shared layers cache nothing
        from collections import Counter

        shapes = Counter(spec.kv_dims(i) for i in range(spec.num_layers) if spec.caches_kv(i))
        text = " + ".join(f"2 x {n} layers x {kv} KV heads x {hd} x {b:g} B" for (kv, hd), n in shapes.items())
        shared = spec.num_attention_layers - sum(shapes.values())
        if shared:
            text += f"; {shared} layers reuse earlier layers' K/V"
    else:
        text = f"2 x {spec.num_attention_layers} {'attention ' if spec.hybrid else ''}layers x {heads} KV heads x " \
               f"{spec.head_dim} x {b:g} B"
    if spec.num_sliding_layers:
        text += f"; {spec.num_sliding_layers} sliding layers hold at most {spec.sliding_window:,} tokens"
    if spec.linear is not None and spec.num_linear_layers:
        from ..estimate.kv_cache import STATE_BYTES_PER_ELEMENT, state_bytes_per_sequence

        text += (f"; plus {fmt_bytes(state_bytes_per_sequence(spec))} of recurrent state per sequence in its "
                 f"{spec.num_linear_layers} {spec.linear.name} layers ({spec.linear.state_elements:,} elements each, "
                 f"{STATE_BYTES_PER_ELEMENT:g} B" + (f"; the SSM state {spec.linear.ssm_state_bytes:g} B"
                                                    if spec.linear.ssm_state_bytes else "") + ")")
    return text


def render_gpus(gpus: list[GPU]) -> str:
    rows = []
    for g in gpus:
        bw = g.memory_bandwidth_bytes_per_s
        bf16 = g.peak("bf16") or g.peak("fp16")
        fp8 = g.peak("fp8")
        rows.append([
            g.id, g.name, f"{g.memory_bytes / GiB:.1f}", f"{bw / GB:,.0f}" if bw else "unknown",
            f"{bf16 / 1e12:,.1f}" if bf16 else "unknown", f"{fp8 / 1e12:,.0f}" if fp8 else "-",
            g.interconnect or "unknown", f"{g.tdp_w:.0f}" if g.tdp_w else "unknown",
            f"${g.price_usd:,.0f}" if g.price_usd else "unknown",
        ])
    table = _table(rows, ["id", "name", "GiB", "GB/s", "bf16 TFLOP/s", "fp8", "interconnect", "W", "price"],
                   right={2, 3, 4, 5, 7, 8})
    return table + "\n\nTFLOP/s are dense peaks (no sparsity), 16-bit with fp32 accumulate; prices are estimates " \
                   "unless noted (see --json for sources)."


def render_models(entries: list[CatalogEntry]) -> str:
    rows = []
    for e in entries:
        spec = entry_spec(e)
        c = param_counts(spec)
        rows.append([e.id, e.hf_id, e.family, fmt_count(c.total), fmt_count(c.active) if spec.is_moe else "",
                     spec.attention_kind, f"{spec.max_position_embeddings:,}" if spec.max_position_embeddings else "-"])
    return _table(rows, ["id", "hugging face id", "family", "params", "active", "attn", "max ctx"], right={3, 4, 6})


def render_runnable(r, top: int) -> str:
    """`gpuwise models --fits`: the models that run, best first, and those that do not."""
    gpus = f"{r.num_gpus} x {r.gpu.name}" if r.num_gpus > 1 else r.gpu.name
    lines = [f"What runs on {gpus} ({fmt_gib(r.gpu.memory_bytes)} each) with {r.engine}, with at least "
             f"{r.context:,} tokens of context (or the model's maximum), in the best format that fits:", ""]
    rows = []
    for i, x in enumerate(r.runnable[:top], 1):
        speed = "unknown" if x.decode_tokens_per_s is None else f"{x.decode_tokens_per_s:,.0f}"
        rows.append([str(i), x.model.id, fmt_count(x.params) + (f" ({fmt_count(x.active_params)})"
                                                                 if x.active_params else ""),
                     x.weights.name.removeprefix("gguf:"), f"{x.bits_per_weight:.1f}", fmt_gib(x.weight_bytes),
                     str(x.num_gpus), f"{x.max_context:,}", speed, x.note])
    lines.append(_table(rows, ["#", "model", "params (active)", "format", "bits/w", "weights", "GPUs", "max context",
                               "decode tok/s", "note"], right={0, 4, 5, 6, 7, 8}))
    more = len(r.runnable) - top
    lines.append("")
    if more > 0:
        lines.append(f"... and {more} smaller models that fit (--top {len(r.runnable)} or --json lists them)")
    if r.not_fitting:
        lines.append(f"Not in any format at {r.context:,} tokens ({len(r.not_fitting)}): {', '.join(r.not_fitting)}")
    lines.append("Ranked by parameters among formats of 4+ bits per weight, then the low-bit fits; decode tok/s is "
                 "one sequence's rate (`gpuwise infer`)" + (f"; speed unknown: {r.speed_unknown}" if r.speed_unknown
                                                           else "") + ".")
    return "\n".join(lines)


def render_train(r: TrainResult, fix=None) -> str:
    req = r.request
    spec = req.model.spec
    lay = r.layout
    mem = r.memory
    gpu = req.gpu
    params = fmt_count(r.params.total) + (f", {fmt_count(r.params.active)} active" if spec.is_moe else "")
    degrees = f"dp {lay.dp} x tp {lay.tp}{' (sp)' if lay.sp and lay.tp > 1 else ''} x pp {lay.pp}" + \
        (f" (vpp {lay.vpp})" if lay.vpp > 1 else "") + f" x cp {lay.cp}" + (f", ep {lay.ep}" if lay.ep > 1 else "") \
        + (f" (expert tp {lay.expert_tp})" if lay.ep > 1 and lay.expert_tp != lay.tp else "")
    tune = "" if req.finetune == "full" else f", {req.finetune} rank {req.lora_rank} on {req.lora_targets}"
    impl = f" ({req.job.torch_optimizer_impl})" if req.job.torch_optimizer_impl else ""
    lines = [
        f"{req.model.id}: {params} params, {spec.family}, {spec.num_layers} layers",
        f"on {req.num_gpus} x {gpu.name} ({fmt_gib(gpu.memory_bytes)} each): {degrees}, {lay.sharding}",
        f"{r.framework} profile ({r.framework_reason}); {req.precision}, {req.optimizer}{impl}, recompute "
        f"{req.job.recompute}{tune}",
        f"batch {req.global_batch} x {req.seq:,} tokens = {req.global_batch * req.seq:,} tokens/step; micro-batch "
        f"{req.micro_batch}, {r.num_microbatches} micro-batches per rank",
        "",
    ]
    names = [("parameters", mem.params), ("master weights", mem.master_weights), ("gradients", mem.grads),
             ("optimizer states", mem.optimizer), ("activations", mem.activations), ("logits + loss", mem.logits),
             ("buffers", mem.buffers), ("CUDA runtime", mem.runtime), ("allocator", mem.allocator)]
    parts = [(k, v) for k, v in names if v > 0]
    rows = [[k, fmt_gib(v), f"{100 * v / mem.total:.0f}%"] for k, v in parts]
    rows.append(["total per GPU", fmt_gib(mem.total), ""])
    rows.append(["GPU memory", fmt_gib(gpu.memory_bytes), ""])
    lines.append(_table(rows, ["memory per GPU", "size", "share"], right={1, 2}))
    where = f"pipeline stage {mem.stage} of {lay.pp}" if lay.pp > 1 else "every rank"
    lines.append(f"(peak at the {mem.moment.replace('-', ' ')}, {where}; activations of "
                 f"{mem.activation_in_flight:g} micro-batch(es) in flight, {fmt_gib(mem.activations_per_microbatch)} "
                 f"per micro-batch)")
    mo = mem.moments
    lines.append(f"allocated (torch.cuda.max_memory_allocated) at the end of forward {fmt_gib(mo['end_of_forward'])}, "
                 f"backward peak {fmt_gib(mo['backward_peak'])}, optimizer step {fmt_gib(mo['optimizer_step'])}; "
                 f"peak reserved by PyTorch's caching allocator {fmt_gib(mem.torch_reserved)}")
    if mem.cpu:
        lines.append(f"offloaded to host memory: {fmt_gib(mem.cpu)} per GPU")
    bar, legend = breakdown_bar(parts[:6] + [("other", sum(v for _, v in parts[6:]))], gpu.memory_bytes)
    lines += ["", f"{bar}", f"{legend}", ""]
    verdict = "FITS" + (" (tight: within 15% allocator fragmentation)" if r.tight else "") if r.fits \
        else "DOES NOT FIT"
    if r.fits and r.headroom_bytes < 0:  # the allocated peak fits, the allocator's allowance does not
        lines.append(f"{verdict}: allocated peak + runtime leave {fmt_gib(gpu.memory_bytes - mem.required)} per GPU; "
                     f"the caching allocator's {fmt_gib(mem.allocator)} allowance does not fit, so it will run near "
                     f"the card's limit (fragmentation can still end it)")
    elif r.fits:
        lines.append(f"{verdict}: {fmt_gib(r.headroom_bytes)} headroom per GPU")
    else:  # short by what must fit (allocated peak + runtime); the allocator's allowance comes on top
        lines.append(f"{verdict}: {fmt_gib(mem.required - gpu.memory_bytes)} short per GPU (allocated peak + "
                     f"runtime {fmt_gib(mem.required)}; {fmt_gib(-r.headroom_bytes)} short with the caching "
                     f"allocator's {fmt_gib(mem.allocator)} allowance)")
    from ..plan.confidence import train_memory_confidence

    mconf = train_memory_confidence(r)
    lines.append(f"how sure (peak per GPU): {mconf.describe()}")
    if mconf.outside:
        lines.append(f"outside what was validated (memory): {'; '.join(mconf.outside)}")
    if not r.fits:
        lines.append(_fix_line(fix, "step time"))
    mb = r.max_micro_batch
    lines.append(f"largest micro-batch that fits: {mb if mb is not None else 'none (even 1 does not fit)'}")
    f = r.flops
    lines.append(f"FLOPs per step: model {f.model:.3e} (MFU numerator), hardware {f.hardware:.3e} (with recompute); "
                 f"{f.model_per_token:.3e} per token ({req.flops_convention} attention)")
    lines.append(render_train_perf(r))
    lines += ["", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def _dur(s: float | None) -> str:
    if s is None:
        return "unknown"
    if s != s:  # NaN: a statistic with no samples (no inter-token gaps when every request emits one token)
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    if s < 3600 * 2:
        return f"{s:.2f} s"
    if s < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def render_train_perf(r) -> str:
    p = r.perf
    st = p.step
    lines = ["", "predicted speed (device profile + topology; no efficiency typed in):"]
    denom = (f"{p.peak_flops_per_gpu / 1e12:.0f} TFLOP/s dense {p.peak_dtype} per {p.profile.gpu.name}"
             if p.peak_flops_per_gpu else "unknown peak")
    mfu = f"{100 * p.mfu:.1f}%" if p.mfu is not None else "unknown"
    hfu = f"{100 * p.hfu:.1f}%" if p.hfu is not None else "unknown"
    lines.append(f"  step time {_dur(st.step_time_s)}; MFU {mfu}, HFU {hfu} (of {denom})")
    lines.append(f"  {p.tokens_per_s:,.0f} tokens/s, {p.tokens_per_s_per_gpu:,.0f} per GPU")
    from ..plan.train import train_confidence

    conf = train_confidence(r)
    lines.append(f"  how sure: {conf.describe()}")
    if conf.outside:
        lines.append(f"  outside what was validated: {'; '.join(conf.outside)}")
    total = st.step_time_s
    rows = [[k.replace("_", " "), _dur(v), f"{100 * v / total:.0f}%"] for k, v in st.breakdown.items() if v > 0]
    lines.append(_table(rows, ["where the step goes", "time", "share"], right={1, 2}))
    if st.bubble_fraction:
        lines.append(f"  pipeline bubble: {100 * st.bubble_fraction:.1f}% idle ({r.layout.pp} stages, "
                     f"{st.num_microbatches} micro-batches)")
    t = p.topology
    lines.append(f"  network: {t.gpus_per_node} GPUs per node over {t.intra.name} "
                 f"({t.intra.busbw_bytes_per_s / GB:.0f} GB/s bus bandwidth), {t.inter.name} across nodes "
                 f"({t.inter.busbw_bytes_per_s / GB:.0f} GB/s)")
    if p.train_tokens:
        cost = f"${p.cost_usd:,.0f}" if p.cost_usd is not None else "unknown"
        price = f"${p.usd_per_gpu_hour}/GPU-hour ({p.usd_source})" if p.usd_per_gpu_hour else p.usd_source
        watts = p.profile.gpu.power_w
        energy = (f"{p.energy_kwh:,.0f} kWh at {watts:g} W per GPU (an upper-bound estimate)"
                  if p.energy_kwh is not None and watts else "unknown")
        lines.append(f"  {p.train_tokens:.3g} tokens: {_dur(p.train_time_s)}, {p.gpu_hours:,.0f} GPU-hours, "
                     f"cost {cost} at {price}; energy {energy}")
    return "\n".join(lines)


def render_infer(r) -> str:
    req = r.request
    mem = r.memory
    lines = [f"{req.model.id} on {req.num_gpus} x {req.gpu.name} with {req.engine}: weights {mem.weights.name}, "
             f"KV {mem.kv.name}, compute {r.compute_dtype}",
             f"batch {req.batch} x {req.samples} sample(s), prompt {req.prompt_tokens:,} + output "
             f"{req.output_tokens:,} tokens; memory {fmt_gib(mem.estimate.memory.total)} per GPU "
             f"({'fits' if mem.fits else 'DOES NOT FIT'})", ""]
    if r.serving is not None:
        lines += _serving_lines(r.serving)
        turn, ran = r.compute_bound_batch, r.serving.result.mean_running
        if turn:
            lines.append(f"ridge: decode's weight GEMMs turn compute-bound at ~{turn} requests per step; the engine ran "
                         f"{ran:,.1f} per step here, so " + (
                             "more users per step still ride almost free (each step reads the weights once for all)"
                             if ran < turn else "each more user per step now costs compute time"))
        lines += ["", f"one static batch of {req.batch} (no queueing):"]
    rows = [["time to first token", _dur(r.ttft_s), f"prefill {r.prefill.bound}-bound"],
            ["time per output token", _dur(r.tpot_s), f"decode {r.decode_first.bound}-bound"],
            ["request (prompt to last token)", _dur(r.request_s), ""],
            ["output tokens/s per sequence", f"{r.output_tokens_per_s_per_sequence:,.1f}", ""],
            ["output tokens/s, all sequences", f"{r.output_tokens_per_s:,.1f}", ""],
            ["requests/s", f"{r.requests_per_s:,.3f}", ""]]
    if r.usd_per_million_output_tokens is not None:
        rows.append(["USD per million output tokens", f"{r.usd_per_million_output_tokens:,.3f}",
                     f"at ${r.usd_per_gpu_hour}/GPU-hour"])
    else:
        rows.append(["USD per million output tokens", "unknown", r.usd_source])
    lines.append(_table(rows, ["", "value", "why"], right={1}))
    turn = r.compute_bound_batch
    lines.append("")
    lines.append(f"decode's weight GEMMs turn compute-bound at batch ~{turn}: below it, more sequences ride along "
                 f"almost free (attention over each sequence's KV cache stays memory-bound)" if turn
                 else "no compute peak for this dtype: cannot place the decode ridge")
    lines.append("n parallel samples of one prompt (shared prefill, n-fold decode):")
    lines.append(_table([[str(p.samples), _dur(p.seconds), _dur(p.seconds_per_sample), "yes" if p.fits else "no"]
                         for p in r.samples_curve], ["samples", "time", "per sample", "fits"], right={1, 2}))
    lines += ["", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def _serving_lines(sv) -> list[str]:
    """The under-load section of `infer`: latency percentiles, throughput, what the engine ran, goodput."""
    res = sv.result
    wl = sv.load.workload
    load = ("all at once" if math.isinf(wl.request_rate) else f"{wl.request_rate:g} requests/s (Poisson)") + (
        f", at most {wl.max_concurrency} in flight" if wl.max_concurrency else "")
    out = [f"serving under load: {res.completed:,} requests, {load}"]
    rows = [[name, *(_dur(getattr(st, k)) for k in ("mean", "p50", "p90", "p99"))]
            for name, st in (("time to first token (TTFT)", res.ttft_s), ("time per output token (TPOT)", res.tpot_s),
                             ("inter-token latency (ITL)", res.itl_s), ("end to end", res.e2e_s))]
    out.append(_table(rows, ["latency", "mean", "p50", "p90", "p99"], right={1, 2, 3, 4}))
    out.append(f"throughput: {res.request_throughput:,.2f} requests/s, {res.output_throughput:,.0f} output tokens/s, "
               f"{res.total_throughput:,.0f} prompt + output tokens/s (over {_dur(res.duration_s)})")
    out.append(f"engine: {res.mean_running:,.1f} requests per step on average (at most {res.max_running:,}); "
               f"KV pool {sv.kv_capacity_tokens:,} tokens, peak {100 * res.peak_kv_usage:.0f}% used; "
               f"{res.preemptions:,} preemptions")
    if sv.goodput is not None:
        slo = " and ".join(f"{n} <= {_dur(v)}" for n, v in (("TTFT", sv.slo_ttft_s), ("TPOT", sv.slo_tpot_s)) if v)
        out.append(f"goodput: {sv.goodput:,.2f} requests/s meet {slo} "
                   f"({100 * sv.goodput / res.request_throughput:.0f}% of the {res.request_throughput:,.2f} served)"
                   if res.request_throughput else f"goodput: 0 requests/s meet {slo}")
    out += [f"  - {a}" for a in sv.assumptions]
    return out


def render_roofline(r) -> str:
    rf = r.roofline
    lines = [f"{r.model.id} on {r.gpu.name}: {r.phase}, batch {r.batch}, {r.seq:,} tokens, {rf.dtype}",
             f"peak {rf.peak_flops / 1e12:.0f} TFLOP/s, bandwidth {rf.bandwidth_bytes_per_s / 1e12:.2f} TB/s: ridge "
             f"{rf.ridge:.0f} FLOP/byte (achievable {rf.achievable_ridge:.0f})", ""]
    rows = [[op.name, f"{op.flops / 1e9:,.1f}", f"{op.bytes / 1e6:,.1f}",
             f"{op.intensity:,.1f}" if op.bytes else "inf", rf.bound(op), _dur(op.time_s)] for op in rf.ops]
    lines.append(_table(rows, ["operation", "GFLOP", "MB moved", "FLOP/byte", "bound", "time"],
                        right={1, 2, 3, 5}))
    lines.append(f"total {_dur(sum(op.time_s for op in rf.ops))} at the achievable roofline")
    from ..estimate.engines import DEFAULT_CONTEXT
    from ..plan.infer import DEFAULT_OUTPUT, DEFAULT_PROMPT
    from ..plan.roofline import DEFAULT_SEQ

    if r.seq == DEFAULT_SEQ:
        lines.append(f"{DEFAULT_SEQ:,} tokens: roofline's default (`fit` defaults to a {DEFAULT_CONTEXT:,}-token "
                     f"context, `infer` to {DEFAULT_PROMPT} + {DEFAULT_OUTPUT}); --seq for another")
    if r.plot:
        lines.append(f"plot written to {r.plot}")
    return "\n".join(lines)


def render_plan(r) -> str:
    from ..plan.planner import describe

    req = r.request
    lines = [f"{req.model.id} on {req.num_gpus} x {req.gpu.name}, seq {req.seq}, global batch {req.global_batch} "
             f"sequences, framework {req.framework}" + (" with torch.compile" if req.compile else "")
             + f", objective {req.objective}"]
    if not r.plans:
        lines.append(r.why)
    for i, p in enumerate(r.plans, 1):
        mfu = "unknown" if p.mfu is None else f"{100 * p.mfu:.1f}%"
        lines.append(f"{i}. {describe(p)}")
        lines.append(f"   step {_dur(p.step_time_s)}, MFU {mfu}, {p.memory_bytes / GiB:.1f} GiB per GPU, "
                     f"bubble {100 * p.step.bubble_fraction:.0f}%, largest overhead: {p.bottleneck.replace('_', ' ')} "
                     f"{_dur(p.step.breakdown[p.bottleneck])}")
    if len(r.plans) > 1:
        lines.append(f"Why #1: {r.why}.")
    if r.plans:
        from .json_out import plan_train_command

        lines.append(f"Check #1 with: {plan_train_command(r, r.plans[0])[1]}")
    lines.append(f"MFU = model FLOPs / (step time x GPUs x dense peak of the GEMM dtype per GPU). Searched "
                 f"{r.evaluated:,} layouts ({r.feasible:,} fit) in {_dur(r.search_time_s)}.")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x:+.0%}"


def _remedy_lines(r, now_s: float | None) -> list[str]:
    """The observed-OOM line, the ranked remedies and the combination (training and inference doctors)."""
    gib = GiB
    lines = []
    if r.observed_bytes is not None and r.offset_bytes == 0:
        lines.append(f"Observed {r.observed_bytes / gib:.1f} GiB at the OOM; the model predicts "
                     f"{r.predicted_bytes / gib:.1f} GiB, which already explains it: figures below are the model's.")
    elif r.observed_bytes is not None:
        lines.append(f"Observed {r.observed_bytes / gib:.1f} GiB at the OOM vs {r.predicted_bytes / gib:.1f} GiB "
                     f"predicted: the {r.offset_bytes / gib:.1f} GiB the model does not explain is kept in every "
                     "figure below.")
    before = r.needed_bytes
    rows = []
    for x in r.remedies:
        rows.append([("tight" if x.tight else "fits" if x.fits else "no"), x.change, f"{x.memory_bytes / gib:.1f}",
                     f"{(before - x.memory_bytes) / gib:.1f}", _dur(x.step_time_s), _pct(x.slowdown),
                     "; ".join(w for w in ("changes the job" if x.changes_job else "", x.note) if w)])
    if rows:
        lines.append(_table(rows, ["fits", "remedy", "GiB/GPU", "saves GiB", "time", "vs now", "note"],
                            right={2, 3, 4, 5}))
    else:
        lines.append("No remedy gpuwise knows saves memory here.")
    if r.combination is not None:
        c = r.combination
        where = "with other hardware" if c.changes_job else "on the same GPUs"
        tight = " (tight: within the 15% fragmentation allocators often add)" if c.tight else ""
        lines.append(f"Best combination {where}: {c.change}: {c.memory_bytes / gib:.1f} GiB per GPU{tight}, "
                     f"{_dur(c.step_time_s)} ({_pct(c.slowdown)} vs {_dur(now_s)}).")
    roomy = getattr(r, "roomy", None)
    if roomy is not None:
        lines.append(f"With 15% to spare: {roomy.change}: {roomy.memory_bytes / gib:.1f} GiB per GPU, "
                     f"{_dur(roomy.step_time_s)} ({_pct(roomy.slowdown)} vs {_dur(now_s)}).")
    return lines


def render_doctor(r) -> str:
    req = r.request
    lines = [f"{req.model.id} training on {req.num_gpus} x {req.gpu.name}: {r.verdict}.",
             "time = predicted step time."]
    lines += _remedy_lines(r, r.base.perf.step.step_time_s)
    if r.combination is None and not r.fits:
        lines.append("No combination of micro-batch, recompute, sharding, 8-bit optimizer and offload fits on these "
                     "GPUs: change the job or the hardware (rows marked 'changes the job').")
    return "\n".join(lines)


def render_doctor_infer(r) -> str:
    req = r.request
    lines = [f"{req.model.id} inference with {req.engine} on {req.num_gpus} x {req.gpu.name}, batch {req.batch}, "
             f"context {req.context}: {r.verdict}.", "time = predicted time per output token."]
    return "\n".join(lines + _remedy_lines(r, r.tpot_s))


def _usd(x: float | None, fmt: str = ".2f") -> str:
    return "unknown" if x is None else f"${x:{fmt}}"


def _serve_targets(req) -> str:
    parts = [f"TTFT <= {req.slo_ttft_ms:g} ms" if req.slo_ttft_ms else "",
             f"TPOT <= {req.slo_tpot_ms:g} ms" if req.slo_tpot_ms else ""]
    return " and ".join(p for p in parts if p) or "none (replicas at 90% of their saturation rate)"


def render_pick(r) -> str:
    from ..plan.pick_request import FINETUNE_METHOD, RULES

    req = r.request
    what = {"infer": f"inference with {req.engine}, batch {req.batch}, {req.prompt_tokens} + {req.output_tokens} "
                     "tokens", "train": f"training, seq {req.train_seq}, {req.train_batch} sequences per step",
            "serve": f"serving {req.request_rate:g} requests/s with {req.engine}, {req.prompt_tokens} + {req.output_tokens} "
                     f"tokens, p{req.slo_percentile} targets: {_serve_targets(req)}" if req.task == "serve" else "",
            "finetune": f"fine-tuning ({req.finetune or FINETUNE_METHOD}), seq {req.train_seq}, {req.train_batch} sequences "
                        "per step"}[req.task]
    gib = GiB
    lines = [f"{req.model.id}: {what}; ranked by {'cost per million tokens' if req.objective == 'cost' else 'speed'}"]
    rows = []
    for i, c in enumerate(r.ranked, 1):
        rows.append([str(i), c.label, f"{c.tokens_per_s:,.0f}" if c.tokens_per_s else "unknown", _usd(c.usd_per_hour),
                     _usd(c.usd_per_million_tokens, ".3g"), f"{(c.memory_bytes or 0) / gib:.1f} / "
                     f"{c.gpu.memory_bytes / gib:.0f}", c.setup])
    if rows:
        speed = "output tok/s" if req.task in ("infer", "serve") else "train tok/s"
        lines.append(_table(rows, ["#", "GPUs", speed, "$/h", "$/M tok", "GiB/GPU", "setup"], right={2, 3, 4, 5}))
        best = r.ranked[0]
        lines.append(f"Why #1: {r.why}.")
        lines.append(f"#1 interconnect: {best.interconnect}.")
        if best.run_hours is not None:
            lines.append(f"#1 for {req.train_tokens:,.0f} tokens: {best.run_hours:,.1f} h, {_usd(best.run_usd, ',.0f')}.")
        if best.kwh_per_million_tokens is not None:
            lines.append(f"#1 energy: {best.kwh_per_million_tokens:.3g} kWh per million tokens at TDP (an upper bound).")
    else:
        lines.append(r.why + ".")
    by_rule: dict[str, list] = {}
    for c in r.rejected:
        by_rule.setdefault(c.rule, []).append(c)
    if by_rule:
        lines.append(f"Rejected ({len(r.rejected)}), by the first rule each fails ({', '.join(RULES)}):")
    for rule in RULES:
        group = by_rule.get(rule, [])
        for c in group[:3]:
            lines.append(f"  {rule}: {c.label}: {c.reason}")
        if len(group) > 3:
            lines.append(f"  {rule}: ... and {len(group) - 3} more (--json lists them)")
    lines.append("Prices: on-demand rental list prices (catalog, with sources in --json) unless given with --price; "
                 "MIG slices pro-rata.")
    return "\n".join(lines)
