// One renderer per result section: each takes a command's --json document (docs/json-schema.md) and returns
// DOM. They format and arrange; they never compute a new estimate (a share of a total is the most they do).

import { h, table, facts } from "./dom.js";
import { PALETTE, stackedBar } from "./charts.js";
import * as f from "./format.js";

const GIB = 2 ** 30;

const INFER_PARTS = [["weights", "weights"], ["kv_cache", "KV cache"], ["activations", "activations"],
  ["overhead", "runtime overhead"]];
const TRAIN_PARTS = [["params", "parameters"], ["master_weights", "master weights"], ["grads", "gradients"],
  ["optimizer", "optimizer states"], ["activations", "activations"], ["logits", "logits and loss"],
  ["buffers", "communication buffers"], ["runtime", "runtime (CUDA, NCCL)"], ["allocator", "allocator allowance"]];
const TIME_PARTS = [["forward", "forward"], ["backward", "backward"], ["recompute", "recompute"],
  ["tp_comm", "TP comm"], ["cp_comm", "CP comm"], ["ep_comm", "EP comm"], ["pp_comm", "PP comm"],
  ["host_sync", "MoE host wait"], ["bubble", "pipeline bubble"], ["dp_comm", "DP comm"], ["optimizer", "optimizer"],
  ["offload", "CPU offload"], ["overhead", "overhead"]];
const ENGINES = { vllm: "vLLM", sglang: "SGLang", hf: "transformers", llamacpp: "llama.cpp", trtllm: "TensorRT-LLM" };

function parts(spec, values) {
  return spec.map(([key, label], i) => ({ key, label, value: values[key] ?? null, colour: PALETTE[i % PALETTE.length] }));
}

function largest(ps) {
  return ps.filter((p) => p.value).reduce((a, b) => (b.value > a.value ? b : a), { value: 0 });
}

function verdictHead(fits, tight, subtitle) {
  const word = fits ? (tight ? "FITS (tight)" : "FITS") : "DOES NOT FIT";
  return h("div", { class: `verdict-head ${fits ? (tight ? "tight" : "fits") : "nofit"}` },
    h("span", { id: "verdict-title", class: "verdict-word", "data-testid": "verdict-title", "data-fits": String(fits) }, word),
    h("span", { class: "verdict-sub" }, subtitle));
}

export function assumptions(list, title = "Assumptions") {
  if (!list || !list.length) return null;
  return h("details", { class: "assumptions", open: true, "data-testid": "assumptions" },
    h("summary", {}, `${title} (${list.length})`), h("ul", {}, list.map((a) => h("li", {}, a))));
}

/** A folded "what is X?" that app.js fills from /api/explain the first time it is opened. */
export function explain(term, question) {
  return h("details", { class: "explain", "data-explain": term }, h("summary", {}, question), h("div", { class: "explain-body" }));
}

/** The body of an opened explain box: the concept, then its numbers for this model and GPU. */
export function explained(doc) {
  return h("div", {},
    h("p", {}, doc.text),
    doc.facts && doc.facts.length ? h("ul", {}, doc.facts.map((x) => h("li", {}, x))) : null,
    doc.sources && doc.sources.length ? h("p", { class: "source" }, `Sources: ${doc.sources.join("; ")}`) : null);
}

/** Under a DOES NOT FIT verdict: the one change that fits (the CLI's `cheapest_fix`). */
function fixLine(fix) {
  if (!fix) return null;
  const speed = fix.slowdown === null || fix.slowdown === undefined ? ""
    : `, ${fix.slowdown >= 0 ? "+" : ""}${Math.round(fix.slowdown * 100)}% time`;
  return `cheapest change that fits: ${fix.change} (${f.gib(fix.memory_per_gpu)} per GPU${fix.tight ? ", tight" : ""}${speed})`;
}

function headroomText(bytes) {
  if (bytes === null || bytes === undefined) return f.UNKNOWN;
  return bytes >= 0 ? `${f.gib(bytes)} free` : `${f.gib(-bytes)} short`;
}

// Training fits when its allocated peak + runtime (memory_torch.required) does: short by that, not by the total with
// the caching allocator's allowance; a fit whose allowance does not fit says what the allocated peak leaves.
function trainHeadroomText(t) {
  const required = t.memory_torch ? t.memory_torch.required : null;
  if (required === null || required === undefined || t.gpu_memory === null || t.gpu_memory === undefined) {
    return headroomText(t.headroom_bytes);
  }
  if (!t.fits) return `${f.gib(required - t.gpu_memory)} short`;
  if (t.headroom_bytes < 0) return `${f.gib(t.gpu_memory - required)} free before the allocator's allowance`;
  return headroomText(t.headroom_bytes);
}

// What the headroom line compares, where "needs per GPU" (the total, allowance included) does not fit the card.
function trainHeadroomNote(t) {
  const notes = t.tight ? ["tight: not 15% spare for allocator fragmentation"] : [];
  const required = t.memory_torch ? t.memory_torch.required : null;
  const allowance = t.memory_per_gpu ? t.memory_per_gpu.allocator : null;
  if (required !== null && required !== undefined && allowance !== null && allowance !== undefined
      && t.headroom_bytes < 0) {
    notes.push(`allocated peak + runtime ${f.gib(required)}; the caching allocator's ${f.gib(allowance)} allowance comes on top`);
  }
  return notes.length ? notes.join("; ") : null;
}

export function modelLine(model, gpu, numGpus, extra, pasted = false) {
  // a pasted config's id is the API's temporary folder: name it by what it is instead
  const name = pasted ? `pasted config.json (${model.family || "unknown family"})`
    : model.hf_id && model.hf_id !== model.id ? `${model.id} (${model.hf_id})` : model.id;
  return `${name} on ${numGpus} × ${gpu.name}${extra ? `, ${extra}` : ""}`;
}

// ---------------------------------------------------------------- verdict + memory: inference (fit)

export function inferVerdict(fit, { pasted = false } = {}) {
  const ps = parts(INFER_PARTS, fit.memory);
  const big = largest(ps);
  const engine = ENGINES[fit.engine] || fit.engine;
  const budgetDiffers = fit.memory_budget !== fit.gpu_memory;
  const reasons = [
    big.value ? `largest part: ${big.label}, ${f.gib(big.value)} (${f.share(big.value, fit.memory.total)} of the total)` : null,
    `KV cache ${fit.kv_dtype}: ${f.known(fit.kv_cache_bytes_per_token) ? `${f.fixed(fit.kv_cache_bytes_per_token / 1024, 2)} KiB` : f.UNKNOWN} per token; weights ${fit.weights_format}`,
    `largest context at batch ${f.count(fit.batch)}: ${f.count(fit.max_context, "tokens")}` +
      (fit.max_context_limited_by ? ` (limited by ${fit.max_context_limited_by})` : ""),
    `largest batch at ${f.count(fit.context, "tokens")}: ${f.count(fit.max_batch, "sequences")}`,
    `fewest ${fit.gpu.id} GPUs that fit: ${fit.min_gpus === null ? "none up to 64" : f.count(fit.min_gpus)}`,
    fixLine(fit.cheapest_fix),
    fit.min_mig_profile ? `smallest MIG slice that fits: ${fit.min_mig_profile}` : null,
    fit.engine_details && fit.engine_details.kv_pool_bytes !== undefined
      ? `vLLM KV pool ${f.gib(fit.engine_details.kv_pool_bytes)}: up to ${f.count(fit.engine_details.max_concurrent_sequences)} concurrent sequences at this context`
      : null,
    fit.engine_details && fit.engine_details.cpu_layers
      ? `llama.cpp: ${f.count(fit.engine_details.gpu_layers)} layers on the GPU, ${f.count(fit.engine_details.cpu_layers)} on the CPU`
      : null,
  ];
  const el = h("div", {},
    verdictHead(fit.fits, false, modelLine(fit.model, fit.gpu, fit.num_gpus, `${engine}, ${f.params(fit.params)}`, pasted)),
    facts([
      ["needs per GPU", f.gib(fit.memory.total), { testid: "verdict-used" }],
      budgetDiffers ? [`${engine} budget`, f.gib(fit.memory_budget), { testid: "verdict-budget",
        title: "what the engine may use of the GPU" }] : null,
      ["GPU memory", f.gib(fit.gpu_memory), { testid: "verdict-capacity", note: fit.gpu.memory_source || null }],
      ["headroom", headroomText(fit.headroom_bytes), { testid: "verdict-headroom" }],
    ]),
    h("ul", { class: "reasons", "data-testid": "verdict-reasons" }, reasons.filter(Boolean).map((r) => h("li", {}, r))),
    explain("kv-cache", "What is the KV cache?"));
  return el;
}

export function inferMemory(fit, width) {
  const engine = ENGINES[fit.engine] || fit.engine;
  const lines = [{ value: fit.gpu_memory, label: "GPU memory" }];
  if (fit.memory_budget !== fit.gpu_memory) lines.push({ value: fit.memory_budget, label: `${engine} budget`, dashed: true });
  return stackedBar({ parts: parts(INFER_PARTS, fit.memory), lines, unit: { scale: GIB, name: "GiB" },
    valueText: f.gib, testid: "memory-svg", width,
    ariaLabel: `Memory per GPU: ${f.gib(fit.memory.total)} of ${f.gib(fit.gpu_memory)}` });
}

// ---------------------------------------------------------------- verdict + memory: training (train)

/** How sure a training prediction is: its category's band on held-out published runs (the CLI's "how sure" lines;
 * `memory_confidence` / `speed_confidence` of `gpuwise train --json`), and what no published run covers. */
function howSure(c, what) {
  if (!c) return null;
  const pct = (x) => `±${Math.round(100 * x)}%`;
  const verdicts = c.held_out_verdicts === undefined ? ""
    : `; fits / does not fit right on ${c.held_out_verdicts - c.wrong_verdicts} of ${c.held_out_verdicts} held-out runs`;
  const outside = c.outside_validated && c.outside_validated.length
    ? `; outside what was validated: ${c.outside_validated.join("; ")}` : "";
  const signed = (x) => `${x < 0 ? "" : "+"}${Math.round(100 * x)}%`;
  const band = c.band === "attention_dominated" && c.error_range
    ? `attention-dominated steps: ${Math.round(100 * c.attention_flops_share)}% of this step's FLOPs are attention, ` +
      `and such runs ranged from ${signed(c.error_range[0])} to ${signed(c.error_range[1])}`
    : (c.category_name || c.category);
  return `how sure (${what}): ${pct(c.median_abs_error)} typical, ${pct(c.p90_abs_error)} for 9 in 10 ` +
    `(${c.held_out_runs} held-out published runs, ${band})${verdicts}${outside}`;
}

export function trainVerdict(t, { pasted = false } = {}) {
  const ps = parts(TRAIN_PARTS, t.memory_per_gpu);
  const big = largest(ps);
  const L = t.layout;
  const layout = [`DP ${L.dp}`, L.tp > 1 ? `TP ${L.tp}${L.sp ? " + SP" : ""}` : null,
    L.pp > 1 ? `PP ${L.pp}${L.vpp > 1 ? `×${L.vpp}` : ""}` : null, L.cp > 1 ? `CP ${L.cp}` : null,
    L.ep > 1 ? `EP ${L.ep}` : null].filter(Boolean).join(", ");
  const ft = t.finetune && t.finetune.mode !== "full"
    ? `${t.finetune.mode} rank ${t.finetune.lora_rank ?? f.UNKNOWN}: ${f.params(t.trainable_params_on_gpu)} trainable on this GPU`
    : null;
  const reasons = [
    big.value ? `largest part: ${big.label}, ${f.gib(big.value)} (${f.share(big.value, t.memory_per_gpu.total)} of the total)` : null,
    `layout ${layout}, sharding ${L.sharding}; framework ${t.framework} (${t.framework_reason})`,
    `batch: ${f.count(t.global_batch, "sequences")} of ${f.count(t.seq, "tokens")} per step = ${f.count(t.tokens_per_step, "tokens")}; micro-batch ${f.count(t.micro_batch)} × ${f.count(t.num_microbatches)} per rank`,
    `precision ${t.precision}, optimizer ${t.optimizer}, recompute ${t.recompute}` +
      (t.offload && t.offload.length ? `, offload ${t.offload.join(", ")}` : ""),
    ft,
    fixLine(t.cheapest_fix),
    t.memory_peak ? `peak at the ${t.memory_peak.moment} on pipeline stage ${t.memory_peak.pipeline_stage}` : null,
    `largest micro-batch that fits: ${t.max_micro_batch === null ? "none (even 1 does not fit)" : f.count(t.max_micro_batch)}`,
    howSure(t.memory_confidence, "peak per GPU"),
    t.cpu_memory_per_gpu_bytes ? `host memory for offloaded states: ${f.gib(t.cpu_memory_per_gpu_bytes)} per GPU` : null,
  ];
  return h("div", {},
    verdictHead(t.fits, t.tight, modelLine(t.model, t.gpu, t.num_gpus, f.params(t.params), pasted)),
    facts([
      ["needs per GPU", f.gib(t.memory_per_gpu.total), { testid: "verdict-used" }],
      ["GPU memory", f.gib(t.gpu_memory), { testid: "verdict-capacity", note: t.gpu.memory_source || null }],
      ["headroom", trainHeadroomText(t), { testid: "verdict-headroom", note: trainHeadroomNote(t) }],
    ]),
    h("ul", { class: "reasons", "data-testid": "verdict-reasons" }, reasons.filter(Boolean).map((r) => h("li", {}, r))));
}

export function trainMemory(t, width) {
  return stackedBar({ parts: parts(TRAIN_PARTS, t.memory_per_gpu), lines: [{ value: t.gpu_memory, label: "GPU memory" }],
    unit: { scale: GIB, name: "GiB" }, valueText: f.gib, testid: "memory-svg", width,
    ariaLabel: `Memory per GPU: ${f.gib(t.memory_per_gpu.total)} of ${f.gib(t.gpu_memory)}` });
}

// ---------------------------------------------------------------- speed

export function inferSpeed(inf) {
  const phase = (name, p) => ({ name, ...p });
  const rows = [phase("prefill", inf.prefill), phase("first decode step", inf.decode_first_step),
    phase("last decode step", inf.decode_last_step)];
  const gpus = inf.num_gpus > 1 ? ` × ${inf.num_gpus} GPUs` : "";
  return h("div", {},
    inf.fits ? null : h("p", { class: "warn" }, "Does not fit as asked: these are the speeds it would have if it did."),
    facts([
      ["time to first token", f.seconds(inf.ttft_s), { testid: "ttft", note: `${f.count(inf.prompt_tokens, "prompt tokens")}` }],
      ["time per output token", f.seconds(inf.tpot_s), { testid: "tpot" }],
      ["throughput", f.perSecond(inf.output_tokens_per_s, "output tokens"), { testid: "tokens-per-s",
        note: `batch ${f.count(inf.batch)}; ${f.perSecond(inf.output_tokens_per_s_per_sequence, "tokens")} per sequence` }],
      ["request", f.seconds(inf.request_s), { testid: "request-time",
        note: `${f.count(inf.output_tokens, "output tokens")}; ${f.perSecond(inf.requests_per_s, "requests")}` }],
      ["cost", inf.usd_per_million_output_tokens === null ? f.UNKNOWN : `${f.usd(inf.usd_per_million_output_tokens)} per million output tokens`,
        { testid: "usd-per-million", title: inf.usd_source || "no price known",
          note: inf.usd_per_gpu_hour === null ? "no price known for this GPU" : `at ${f.usd(inf.usd_per_gpu_hour)} per GPU-hour${gpus}` }],
      ["decode turns compute-bound at", f.count(inf.compute_bound_batch, "sequences"), { testid: "compute-bound-batch" }],
    ]),
    table([
      { label: "phase", cell: (r) => r.name },
      { label: "time", num: true, cell: (r) => f.seconds(r.time_s) },
      { label: "bound by", cell: (r) => r.bound },
      { label: "work", num: true, cell: (r) => f.flops(r.flops) },
      { label: "memory traffic", num: true, cell: (r) => f.bytes(r.bytes) },
    ], rows, { testid: "infer-phases" }),
    inf.usd_source ? h("p", { class: "source" }, `Price: ${inf.usd_source}`) : null,
    inf.serving ? servingBlock(inf.serving) : null,
    assumptions(inf.assumptions, "Speed assumptions"));
}

// Serving under load (infer with a request rate): latency percentiles, throughput, goodput.
function servingBlock(sv) {
  const rate = sv.request_rate_is_inf ? "all at once" : f.perSecond(sv.request_rate, "requests");
  const stat = (name, key) => ({ name, ...sv[key] });
  const rows = [stat("time to first token", "ttft_s"), stat("time per output token", "tpot_s"),
    stat("inter-token latency", "itl_s"), stat("end to end", "e2e_s")];
  const slo = [sv.slo_ttft_s ? `TTFT ≤ ${f.seconds(sv.slo_ttft_s)}` : null,
    sv.slo_tpot_s ? `TPOT ≤ ${f.seconds(sv.slo_tpot_s)}` : null].filter(Boolean).join(" and ");
  return h("div", { "data-testid": "serving" },
    h("h3", {}, `Under load: ${f.count(sv.completed, "requests")}, ${rate}`),
    table([
      { label: "latency", cell: (r) => r.name },
      { label: "mean", num: true, cell: (r) => f.seconds(r.mean) },
      { label: "p50", num: true, cell: (r) => f.seconds(r.p50) },
      { label: "p90", num: true, cell: (r) => f.seconds(r.p90) },
      { label: "p99", num: true, cell: (r) => f.seconds(r.p99) },
    ], rows, { testid: "serving-latency" }),
    facts([
      ["throughput", f.perSecond(sv.output_tokens_per_s, "output tokens"), { testid: "serving-throughput",
        note: `${f.perSecond(sv.request_throughput_per_s, "requests")}; ${f.count(sv.mean_running_requests, "requests")} per step on average` }],
      ["KV pool", f.count(sv.kv_capacity_tokens, "tokens"), { testid: "serving-kv",
        note: `peak ${f.percent(sv.peak_kv_usage)} used; ${f.count(sv.preemptions, "preemptions")}` }],
      ["goodput", sv.goodput_requests_per_s === null ? "no targets given" : f.perSecond(sv.goodput_requests_per_s, "requests"),
        { testid: "serving-goodput", note: slo || "set TTFT / TPOT targets to count the requests that meet them" }],
    ]),
    assumptions(sv.assumptions, "Serving assumptions"));
}

export function trainSpeed(t, width) {
  const d = t.mfu_denominator || {};
  const denominator = d.peak_flops_per_gpu
    ? `of ${f.flopsPerSecond(d.peak_flops_per_gpu)} per GPU: the ${d.dtype} ${d.note || "dense peak"} of ${d.gpu}`
    : "denominator unknown";
  const time = stackedBar({ parts: parts(TIME_PARTS, t.time_breakdown_s || {}), lines: [],
    unit: { scale: 1, name: "s" }, valueText: f.seconds, testid: "time-svg", width,
    ariaLabel: `Step time breakdown: ${f.seconds(t.step_time_s)}` });
  return h("div", {},
    t.fits ? null : h("p", { class: "warn" }, "Does not fit as asked: this is the speed it would have if it did."),
    facts([
      ["step time", f.seconds(t.step_time_s), { testid: "step-time", note: `bound by ${t.bound || f.UNKNOWN}` }],
      ["throughput", f.perSecond(t.tokens_per_s, "tokens"), { testid: "tokens-per-s",
        note: `${f.perSecond(t.tokens_per_s_per_gpu, "tokens")} per GPU` }],
      ["MFU", f.percent(t.mfu), { testid: "mfu", note: denominator }],
      ["HFU", f.percent(t.hfu), { testid: "hfu", note: "with recomputation counted" }],
      ["pipeline bubble", f.percent(t.bubble_fraction), { testid: "bubble" }],
      ["GPU price", t.usd_per_gpu_hour === null ? f.UNKNOWN : `${f.usd(t.usd_per_gpu_hour)} per GPU-hour`,
        { testid: "usd-per-gpu-hour", title: t.usd_source || "no price known" }],
    ]),
    h("p", { class: "mfu-denominator", "data-testid": "mfu-denominator" },
      `MFU = model FLOPs per step (${f.flops(t.flops.model_per_step)}) / (step time × ${t.num_gpus} GPUs × ${d.peak_flops_per_gpu ? f.flopsPerSecond(d.peak_flops_per_gpu) : f.UNKNOWN})`),
    t.speed_confidence ? h("p", { class: "hint", "data-testid": "speed-how-sure" }, howSure(t.speed_confidence, "step time")) : null,
    explain("mfu", "What is MFU?"),
    h("h3", {}, "Where the step goes"),
    h("div", { class: "chart", "data-testid": "time-breakdown" }, time.svg),
    h("ul", { class: "legend" }, time.legend.filter((li) => Number(li.dataset.value) > 0)),
    t.usd_source ? h("p", { class: "source" }, `Price: ${t.usd_source}`) : null);
}

// ---------------------------------------------------------------- roofline table

export function rooflineOps(doc, ops) {
  return h("div", {},
    h("p", { class: "hint" },
      `${doc.phase}, batch ${f.count(doc.batch)}, ${f.count(doc.seq, "tokens")} per sequence; ` +
      `peak ${f.flopsPerSecond(doc.peak_flops)} (${doc.dtype}), memory ${f.bytesPerSecond(doc.bandwidth_bytes_per_s)}; ` +
      `dashed: achievable (${f.flopsPerSecond(doc.achievable_flops)}, ${f.bytesPerSecond(doc.achievable_bandwidth_bytes_per_s)}). ` +
      `Total ${f.seconds(doc.total_time_s)}.`),
    explain("roofline", "How to read a roofline"),
    table([
      { label: "#", cell: (o) => String(o.n) },
      { label: "operation", cell: (o) => o.name },
      { label: "intensity", num: true, cell: (o) => f.intensity(o.intensity_flops_per_byte) },
      { label: "attained", num: true, cell: (o) => f.flopsPerSecond(o.achieved) },
      { label: "time", num: true, cell: (o) => f.seconds(o.time_s) },
      { label: "bound", cell: (o) => (o.plotted ? o.bound : `${o.bound} (not plotted)`) },
    ], ops, { testid: "roofline-ops", rowAttrs: (o) => ({ title: `${f.flops(o.flops)}, ${f.bytes(o.bytes)} moved` }) }));
}

// ---------------------------------------------------------------- planner

export function plan(doc) {
  if (!doc.plans || !doc.plans.length) {
    return h("div", {}, h("p", { class: "warn" }, doc.why || "no layout fits"));
  }
  const den = doc.mfu_denominator || {};
  return h("div", {},
    h("p", { "data-testid": "plan-why" }, `Best: ${doc.plans[0].summary}. Why: ${doc.why}`),
    table([
      { label: "#", cell: (_, i) => String(i + 1) },
      { label: "layout", cell: (p) => p.summary },
      { label: "step time", num: true, cell: (p) => f.seconds(p.step_time_s) },
      { label: "MFU", num: true, cell: (p) => f.percent(p.mfu) },
      { label: "memory per GPU", num: true, cell: (p) => f.gib(p.memory_per_gpu) },
      { label: "bottleneck", cell: (p) => p.bottleneck },
      { label: "bubble", num: true, cell: (p) => f.percent(p.bubble_fraction) },
    ], doc.plans, { testid: "plan-table" }),
    h("p", { class: "hint" },
      `MFU of ${f.flopsPerSecond(den.flops_per_s_per_gpu)} per GPU (${den.what || "dense peak"}). ` +
      `${f.count(doc.evaluated)} layouts evaluated, ${f.count(doc.timed)} timed, ${f.count(doc.feasible)} fit; ` +
      `search ${f.seconds(doc.search_time_s)}.`));
}

// ---------------------------------------------------------------- pick

function latency(l) {
  if (!l) return f.UNKNOWN;
  if ("step_time_s" in l) return `step ${f.seconds(l.step_time_s)}`;
  const p = "percentile" in l ? `p${l.percentile} ` : "";
  return `${p}TTFT ${f.seconds(l.ttft_s)}, TPOT ${f.seconds(l.tpot_s)}`;
}

export function pick(doc, currentGpu) {
  const tokens = doc.task === "infer" || doc.task === "serve" ? "output tokens" : "tokens";
  const byRule = {};
  for (const r of doc.rejected) byRule[r.rule] = (byRule[r.rule] || 0) + 1;
  const ruleText = Object.entries(byRule).map(([k, v]) => `${k}: ${v}`).join(", ");
  return h("div", {},
    doc.why ? h("p", { "data-testid": "pick-why" }, doc.why) : null,
    doc.ranked.length ? table([
      { label: "#", cell: (_, i) => String(i + 1) },
      { label: "GPUs", cell: (c) => `${c.count} × ${c.gpu_name}` },
      { label: "setup", cell: (c) => c.setup },
      { label: "memory per GPU", num: true, cell: (c) => `${f.gib(c.memory_per_gpu)} of ${f.gib(c.memory_capacity)}` },
      { label: "throughput", num: true, cell: (c) => f.perSecond(c.tokens_per_s, tokens) },
      { label: "price", num: true, cell: (c) => (c.usd_per_hour === null ? f.UNKNOWN : `${f.usd(c.usd_per_hour)}/h`) },
      { label: `cost per million ${tokens}`, num: true, cell: (c) => f.usd(c.usd_per_million_tokens) },
      { label: "latency", cell: (c) => latency(c.latency_s) },
    ], doc.ranked, { testid: "pick-table",
      rowAttrs: (c) => ({ class: c.gpu === currentGpu ? "current" : null, title: c.price_source || null }) })
      : h("p", { class: "warn" }, "No candidate passed every rule."),
    h("p", { class: "hint" }, `${f.count(doc.accepted)} accepted candidates (top ${doc.ranked.length} shown), objective ${doc.objective}` +
      (doc.budget_usd_per_hour !== null ? `, budget ${f.usd(doc.budget_usd_per_hour)}/h` : "") +
      `, keeping ${f.percent(doc.headroom, 0)} of memory free.`),
    doc.rejected.length ? h("details", { class: "rejected", "data-testid": "pick-rejected" },
      h("summary", {}, `${doc.rejected.length} rejected (${ruleText})`),
      table([
        { label: "GPUs", cell: (c) => `${c.count} × ${c.gpu_name}` },
        { label: "rule", cell: (c) => c.rule },
        { label: "reason", cell: (c) => c.reason },
      ], doc.rejected)) : null);
}

// ---------------------------------------------------------------- what runs here (gpuwise models --fits)

const billions = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(1)}B` : `${(n / 1e6).toFixed(0)}M`);

export function runnable(doc, top) {
  const rows = doc.runnable.slice(0, top);
  const gpus = doc.num_gpus > 1 ? `${doc.num_gpus} × ${doc.gpu.name}` : doc.gpu.name;
  return h("div", {},
    h("p", { "data-testid": "runnable-what" }, `${f.count(doc.runnable.length)} catalog models run on ${gpus} with ` +
      `${doc.engine} and at least ${f.count(doc.context)} tokens of context; the largest first, each in the most ` +
      "faithful format that fits."),
    rows.length ? table([
      { label: "#", cell: (_, i) => String(i + 1) },
      { label: "model", cell: (x) => x.id },
      { label: "parameters", num: true, cell: (x) => billions(x.params) + (x.active_params ? ` (${billions(x.active_params)} active)` : "") },
      { label: "format", cell: (x) => x.weights_format.replace(/^gguf:/, "") },
      { label: "weights", num: true, cell: (x) => f.gib(x.weight_bytes) },
      { label: "GPUs", num: true, cell: (x) => String(x.num_gpus) },
      { label: "max context", num: true, cell: (x) => (x.max_context === null ? f.UNKNOWN : f.count(x.max_context)) },
      { label: "decode", num: true, cell: (x) => f.perSecond(x.decode_tokens_per_s, "tokens") },
      { label: "note", cell: (x) => x.note || "" },
    ], rows, { testid: "runnable-table" }) : h("p", { class: "warn" }, "No catalog model fits."),
    doc.speed_unknown ? h("p", { class: "hint" }, `Speed unknown: ${doc.speed_unknown}.`) : null,
    doc.not_fitting.length ? h("p", { class: "hint" },
      `Not in any format (${doc.not_fitting.length}): ${doc.not_fitting.join(", ")}.`) : null);
}

// ---------------------------------------------------------------- doctor

export function doctor(doc, tryHref) {
  const timeLabel = doc.task === "infer" ? "time per token" : "step time";
  const baseline = doc.task === "infer" ? doc.tpot_s : doc.step_time_s;
  const fitsText = (r) => (r.fits ? (r.tight ? "yes (tight)" : "yes") : "no");
  const tryCell = (r) => {
    const href = tryHref(r.options);
    return href ? h("a", { href, class: "try" }, "try") : "";
  };
  return h("div", {},
    h("p", { class: doc.fits ? "" : "warn", "data-testid": "doctor-verdict" }, doc.verdict),
    h("p", { class: "hint" }, `Capacity ${f.gib(doc.capacity_bytes)}, predicted ${f.gib(doc.predicted_bytes)}; ` +
      `${timeLabel} as asked: ${f.seconds(baseline)}.`),
    doc.combination ? h("div", { class: "callout", "data-testid": "doctor-combination" },
      h("strong", {}, "Fits with: "), doc.combination.change,
      ` (${f.gib(doc.combination.memory_per_gpu)} per GPU, ${timeLabel} ${f.seconds(doc.combination.time_s)}, ` +
      `${f.change(doc.combination.slowdown)}) `, tryCell(doc.combination)) : null,
    table([
      { label: "remedy", cell: (r) => r.change },
      { label: "memory per GPU", num: true, cell: (r) => f.gib(r.memory_per_gpu) },
      { label: "saves", num: true, cell: (r) => f.gib(r.saved_bytes) },
      { label: timeLabel, num: true, cell: (r) => f.seconds(r.time_s) },
      { label: "change in time", num: true, cell: (r) => f.change(r.slowdown) },
      { label: "fits", cell: fitsText },
      { label: "note", cell: (r) => [r.changes_job ? "changes the job" : "", r.note || ""].filter(Boolean).join("; ") },
      { label: "", cell: tryCell },
    ], doc.remedies, { testid: "doctor-remedies", rowAttrs: (r) => ({ class: r.fits ? "fits" : null }) }));
}
