// The page's controller: reads the form (or the query string), asks the API one question per section, and
// hands each answer to its renderer (render.js). The query string holds the inputs under the API's own
// parameter names, so a link to the view is the view; the equivalent CLI commands come from /api/cli.

import { call, cleanParams } from "./api.js";
import { h, clear } from "./dom.js";
import { roofline } from "./charts.js";
import * as render from "./render.js";
import * as f from "./format.js";

const DEFAULTS = { task: "infer", source: "catalog", model: "llama-3.1-8b", gpu: "rtx-4090", finetune: "lora" };

// Inputs of the form that map one to one onto API parameters (sharding maps onto fsdp or zero).
const FIELDS = ["model", "gpu", "num_gpus", "gpu_memory", "power_limit", "engine", "weights", "kv_dtype", "batch", "context", "prompt_tokens",
  "output_tokens", "request_rate", "slo_ttft_ms", "slo_tpot_ms", "finetune", "lora_rank", "seq", "global_batch", "micro_batch", "precision", "tp", "recompute",
  "optimizer", "offload", "phase"];
const TASK_FIELDS = {
  infer: ["engine", "weights", "kv_dtype", "batch", "context", "prompt_tokens", "output_tokens", "request_rate",
    "slo_ttft_ms", "slo_tpot_ms"],
  train: ["seq", "global_batch", "micro_batch", "precision", "fsdp", "zero", "tp", "recompute", "optimizer", "offload"],
};
TASK_FIELDS.finetune = [...TASK_FIELDS.train, "finetune", "lora_rank"];

// Which parameters each command takes from the page (the API rejects unknown ones: docs/json-schema.md).
const FIT = ["model", "gpu", "num_gpus", "gpu_memory", "weights", "kv_dtype", "context", "batch", "engine"];
const INFER = ["model", "gpu", "num_gpus", "gpu_memory", "power_limit", "weights", "kv_dtype", "batch", "prompt_tokens", "output_tokens", "engine",
  "request_rate", "slo_ttft_ms", "slo_tpot_ms"];
const TRAIN = ["model", "gpu", "num_gpus", "gpu_memory", "power_limit", "seq", "global_batch", "micro_batch", "tp", "zero", "fsdp", "recompute",
  "offload", "optimizer", "precision"];
const PICK_INFER = ["model", "weights", "kv_dtype", "batch", "prompt_tokens", "output_tokens", "engine"];
const PICK_SERVE = ["model", "weights", "kv_dtype", "prompt_tokens", "output_tokens", "engine", "request_rate",
  "slo_ttft_ms", "slo_tpot_ms"];
const PICK_PRECISIONS = ["bf16", "fp16", "fp8", "fp32"];
const PLAN_PRECISIONS = ["fp32", "bf16", "fp16", "bf16-pure", "fp8", "nvfp4"];  // gpuwise plan --precision: train's
const PLAN_FRAMEWORKS = ["megatron", "torchtitan", "fsdp", "deepspeed"];  // gpuwise plan --framework
const PICK_TOP = 10, PLAN_TOP = 5, RUNNABLE_TOP = 10;

const $ = (sel) => document.querySelector(sel);
const form = $("#query");
let generation = 0;
let controller = null;
let current = null; // the state of the view on screen

// ---------------------------------------------------------------- state <-> form <-> query string

function readForm() {
  const st = { task: form.task.value, source: form.model_source.value, config: form.config.value.trim() };
  for (const name of FIELDS) st[name] = form[name].value.trim();
  const [kind, value] = (form.sharding.value || ":").split(":");
  st.fsdp = kind === "fsdp" ? value : "";
  st.zero = kind === "zero" ? value : "";
  return st;
}

function setSelect(select, value) {
  if (value && ![...select.options].some((o) => o.value === value)) {
    select.append(h("option", { value }, `${value} (as given)`));
  }
  select.value = value || "";
}

function writeForm(st) {
  form.task.value = st.task;
  form.model_source.value = st.source;
  form.config.value = st.config || "";
  for (const name of FIELDS) {
    const el = form[name];
    if (el.tagName === "SELECT") setSelect(el, st[name]);
    else el.value = st[name] || "";
  }
  form.sharding.value = st.fsdp ? `fsdp:${st.fsdp}` : st.zero && st.zero !== "0" ? `zero:${st.zero}` : "";
  showTaskFields();
}

function fromQuery(search) {
  const q = new URLSearchParams(search);
  const st = { ...DEFAULTS, config: "", fsdp: "", zero: "" };
  for (const name of [...FIELDS, "task", "fsdp", "zero"]) if (q.has(name)) st[name] = q.get(name);
  if (!["infer", "train", "finetune"].includes(st.task)) st.task = "infer";
  if (q.has("config")) {
    st.source = "config";
    try {
      st.config = JSON.stringify(JSON.parse(q.get("config")), null, 2);
    } catch {
      st.config = q.get("config");
    }
  }
  return st;
}

/** The inputs that matter for this task, under the API's parameter names. */
function toQuery(st) {
  const out = { task: st.task };
  if (st.source === "config") {
    try {
      out.config = JSON.stringify(JSON.parse(st.config));
    } catch {
      out.config = st.config;
    }
  } else {
    out.model = st.model;
  }
  out.gpu = st.gpu;
  out.num_gpus = st.num_gpus;
  out.gpu_memory = st.gpu_memory;
  out.power_limit = st.power_limit;
  for (const name of TASK_FIELDS[st.task]) out[name] = st[name];
  out.phase = st.phase;
  return new URLSearchParams(cleanParams(out)).toString();
}

function pickParams(st, names, extra = {}) {
  const out = {};
  for (const n of names) if (!(n === "model" && st.source === "config")) out[n] = st[n];
  return cleanParams({ ...out, ...extra });
}

function showTaskFields() {
  const task = form.task.value;
  for (const el of form.querySelectorAll("[data-tasks]")) el.hidden = !el.dataset.tasks.split(" ").includes(task);
  const source = form.model_source.value;
  for (const el of form.querySelectorAll("[data-source]")) el.hidden = el.dataset.source !== source;
}

// ---------------------------------------------------------------- errors next to their input

function clearFieldErrors() {
  for (const el of form.querySelectorAll(".field-error")) {
    el.hidden = true;
    el.textContent = "";
  }
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
}

/** The input a CLI error message is about, if it names one (an option flag, the model, the GPU, a format). */
function fieldFor(message, st) {
  const flag = /--([a-z][a-z-]*)/.exec(message);
  if (flag) {
    const name = flag[1].replace(/-/g, "_");
    if (name === "fsdp" || name === "zero") return "sharding";
    if (form.querySelector(`#${name}`)) return name;
  }
  if (/config/i.test(message) && st.source === "config") return "config";
  if (/\bmodel\b/i.test(message)) return st.source === "config" ? "config" : "model";
  if (/\bGPU\b/.test(message)) return "gpu";
  if (/weight format/i.test(message)) return "weights";
  if (/dtype/i.test(message)) return st.task === "infer" ? "kv_dtype" : "precision";
  return null;
}

function showFieldError(name, message) {
  const box = $(`#${name}-error`);
  const input = $(`#${name}`);
  if (!box || !input || input.closest("[hidden]")) return false;
  box.textContent = message;
  box.hidden = false;
  input.setAttribute("aria-invalid", "true");
  return true;
}

// ---------------------------------------------------------------- sections

function section(id) {
  return $(`#${id}-section`);
}

function setLoading(id) {
  const sec = section(id);
  sec.hidden = false;
  sec.dataset.state = "loading";
  sec.setAttribute("aria-busy", "true");
}

function fill(id, target, ...nodes) {
  const sec = section(id);
  sec.dataset.state = "ok";
  sec.removeAttribute("aria-busy");
  clear(target).append(...nodes.filter(Boolean));
}

// One error message is shown in full once: next to its input (when it names one) and in the first section, in
// page order, that failed with it; the other sections it stopped say they were not computed.
const ORDER = ["verdict", "memory", "doctor", "speed", "roofline", "plan", "runnable", "pick", "share"];
let shownErrors = new Map(); // message -> {id, target} of the section showing it (this view only)
let inputErrors = new Set(); // messages shown next to an input (this view only)

function failed(id, target, err) {
  if (err.name === "AbortError") return;
  const owner = shownErrors.get(err.message);
  if (owner && owner.id !== id && ORDER.indexOf(owner.id) < ORDER.indexOf(id)) {
    notComputed(id, target, err.message);
    return;
  }
  shownErrors.set(err.message, { id, target });
  // a later section failed with it first: this one shows it now, that one says it was not computed
  if (owner && owner.id !== id) notComputed(owner.id, owner.target, err.message);
  const sec = section(id);
  sec.dataset.state = "error";
  sec.removeAttribute("aria-busy");
  clear(target).append(h("p", { class: "error", role: "alert", "data-testid": `${id}-error` }, err.message));
}

function notComputed(id, target, message) {
  const sec = section(id);
  sec.dataset.state = "not-computed";
  sec.removeAttribute("aria-busy");
  const owner = shownErrors.get(message);
  const where = owner ? section(owner.id).querySelector("h2").textContent : "above";
  clear(target).append(h("p", { class: "hint not-computed", "data-testid": `${id}-not-computed` },
    inputErrors.has(message) ? "Not computed: fix the input first." : `Not computed: see the error under ${where}.`));
}

function skip(id, target, message) {
  const sec = section(id);
  sec.dataset.state = "skipped";
  sec.removeAttribute("aria-busy");
  clear(target).append(h("p", { class: "hint" }, message));
}

function hide(id) {
  const sec = section(id);
  sec.hidden = true;
  sec.dataset.state = "skipped";
  sec.removeAttribute("aria-busy");
}

/** A link that applies a remedy's `options` to the current inputs (null when an option has no input here). */
function remedyHref(options) {
  if (!current || !options) return null;
  const next = { ...current };
  for (const [k, v] of Object.entries(options)) {
    if (![...FIELDS, "fsdp", "zero"].includes(k)) return null;
    next[k] = Array.isArray(v) ? v.join(",") : String(v);
    if (k === "fsdp") next.zero = "";
    if (k === "zero") next.fsdp = "";
  }
  return `?${toQuery(next)}`;
}

// ---------------------------------------------------------------- one view

async function ask(st) {
  const gen = ++generation;
  if (controller) controller.abort();
  controller = new AbortController();
  current = st;
  let config = null;
  if (st.source === "config") {
    try {
      config = JSON.parse(st.config);
      if (typeof config !== "object" || Array.isArray(config) || config === null) throw new Error("not an object");
    } catch (err) {
      clearFieldErrors();
      showFieldError("config", `not a JSON object: ${err.message}`);
      return;
    }
  }
  const opts = { config, signal: controller.signal };
  const live = () => gen === generation;
  const results = $("#results");
  results.dataset.state = "loading";
  results.setAttribute("aria-busy", "true");
  $("#status").textContent = "Answering…";
  const started = performance.now();
  clearFieldErrors();
  history.replaceState(null, "", `?${toQuery(st)}`);
  $("#view-link").value = location.href;
  for (const id of ["verdict", "memory", "speed", "roofline", "plan", "runnable", "pick", "share"]) setLoading(id);
  setLoading("doctor");
  section("doctor").hidden = true;

  shownErrors = new Map();
  inputErrors = new Set();
  const primaryError = (err) => {
    if (!live() || err.name === "AbortError") return;
    const name = fieldFor(err.message, st);
    if (name && showFieldError(name, err.message)) inputErrors.add(err.message);
  };
  const jobs = st.task === "infer" ? inferView(st, opts, live, primaryError) : trainView(st, opts, live, primaryError);
  jobs.push(cliCommands(st, opts, live));
  await Promise.allSettled(jobs);
  if (!live()) return;
  results.dataset.state = "done";
  results.removeAttribute("aria-busy");
  const anyError = document.querySelector('.card[data-state="error"]');
  $("#status").textContent = anyError ? "Answered, with errors (see the sections)"
    : `Answered in ${f.seconds((performance.now() - started) / 1000)}`;
}

function inferView(st, opts, live, primaryError) {
  const fitJob = call("fit", pickParams(st, FIT), opts).then((fit) => {
    if (!live()) return;
    fill("verdict", $("#verdict"), render.inferVerdict(fit, { pasted: st.source === "config" }));
    const bar = render.inferMemory(fit, $("#memory-bar").clientWidth);
    fill("memory", $("#memory-bar"), bar.svg);
    clear($("#memory-legend")).append(...bar.legend);
    clear($("#memory-assumptions")).append(render.assumptions(fit.assumptions) || "");
    if (fit.fits) return hide("doctor");
    setLoading("doctor");
    return call("doctor", pickParams(st, FIT, { task: "infer" }), opts)
      .then((doc) => live() && fill("doctor", $("#doctor"), render.doctor(doc, remedyHref)))
      .catch((err) => live() && failed("doctor", $("#doctor"), err));
  }).catch((err) => {
    if (!live()) return;
    primaryError(err);
    failed("verdict", $("#verdict"), err);
    failed("memory", $("#memory-bar"), err);
    clear($("#memory-legend"));
    clear($("#memory-assumptions"));
    hide("doctor");
  });
  const inferJob = call("infer", pickParams(st, INFER), opts).then((inf) => {
    if (!live()) return;
    fill("speed", $("#speed"), render.inferSpeed(inf));
    const phase = st.phase || "decode";
    // decode: the cache at the end of the request (prompt + output); prefill: the prompt
    const seq = phase === "decode" ? inf.prompt_tokens + inf.output_tokens : inf.prompt_tokens;
    return rooflineJob(st, opts, live, { phase, batch: inf.batch, seq });
  }).catch((err) => {
    if (!live()) return;
    primaryError(err);
    failed("speed", $("#speed"), err);
    failed("roofline", $("#roofline"), err);
    clear($("#roofline-ops"));
  });
  // with a request rate, which GPUs serve it within the targets (replicas priced at that load), else one batch
  const pickAsk = st.request_rate
    ? pickParams(st, PICK_SERVE, { task: "serve", top: PICK_TOP })
    : pickParams(st, PICK_INFER, { task: "infer", top: PICK_TOP });
  const pickJob = call("pick", pickAsk, opts)
    .then((doc) => live() && fill("pick", $("#pick"), render.pick(doc, st.gpu)))
    .catch((err) => live() && failed("pick", $("#pick"), err));
  skip("plan", $("#plan"), "The planner searches training layouts: choose Training to see them.");
  // every catalog model on these GPUs (or this much memory), in its best format: gpuwise models --fits
  const fits = `${st.num_gpus || 1}x ${st.gpu}`;
  const runnableJob = call("models", cleanParams({ fits, gpu_memory: st.gpu_memory, engine: st.engine || "vllm",
    top: RUNNABLE_TOP }), opts)
    .then((doc) => live() && fill("runnable", $("#runnable"), render.runnable(doc, RUNNABLE_TOP)))
    .catch((err) => live() && failed("runnable", $("#runnable"), err));
  return [fitJob, inferJob, pickJob, runnableJob];
}

function trainParams(st) {
  const p = pickParams(st, TRAIN);
  if (st.task === "finetune") Object.assign(p, cleanParams({ finetune: st.finetune, lora_rank: st.lora_rank }));
  return p;
}

function trainView(st, opts, live, primaryError) {
  const params = trainParams(st);
  skip("runnable", $("#runnable"), "Which models run here, in which format, is an inference question: choose Inference.");
  const trainJob = call("train", params, opts).then((t) => {
    if (!live()) return;
    fill("verdict", $("#verdict"), render.trainVerdict(t, { pasted: st.source === "config" }));
    const bar = render.trainMemory(t, $("#memory-bar").clientWidth);
    fill("memory", $("#memory-bar"), bar.svg);
    clear($("#memory-legend")).append(...bar.legend);
    clear($("#memory-assumptions")).append(render.assumptions(t.assumptions) || "");
    fill("speed", $("#speed"), render.trainSpeed(t, $("#speed").clientWidth));
    const jobs = [rooflineJob(st, opts, live, { phase: st.phase || "prefill", batch: t.micro_batch, seq: t.seq })];
    if (st.task === "train" || st.finetune === "full") {
      const planParams = pickParams(st, ["model", "gpu", "gpu_memory"], { num_gpus: t.num_gpus, seq: t.seq, global_batch: t.global_batch,
        precision: PLAN_PRECISIONS.includes(t.precision) ? t.precision : "", optimizer: t.optimizer || "",
        // the job's own trainer where the planner has it; else the planner's default (Megatron), which does not run
        // bitsandbytes' 8-bit AdamW: that is planned as FSDP
        framework: PLAN_FRAMEWORKS.includes(t.framework) ? t.framework : (t.optimizer === "adamw-8bit" ? "fsdp" : ""),
        top: PLAN_TOP });
      jobs.push(call("plan", planParams, opts)
        .then((doc) => live() && fill("plan", $("#plan"), render.plan(doc)))
        .catch((err) => live() && failed("plan", $("#plan"), err)));
    } else {
      skip("plan", $("#plan"), "The planner searches full-training layouts; LoRA and QLoRA jobs use the layout above.");
    }
    // The GPU ranking answers for the job on screen: train's own sequence length and global batch (pick's
    // defaults are a different job).
    const pickTask = st.task === "finetune" ? "finetune" : "train";
    jobs.push(call("pick", pickParams(st, ["model"], {
      seq: t.seq, global_batch: t.global_batch, task: pickTask,
      precision: PICK_PRECISIONS.includes(st.precision) ? st.precision : "",
      finetune: st.task === "finetune" ? st.finetune : "", top: PICK_TOP }), opts)
      .then((doc) => live() && fill("pick", $("#pick"), render.pick(doc, st.gpu)))
      .catch((err) => live() && failed("pick", $("#pick"), err)));
    if (t.fits) {
      hide("doctor");
    } else {
      setLoading("doctor");
      jobs.push(call("doctor", params, opts)
        .then((doc) => live() && fill("doctor", $("#doctor"), render.doctor(doc, remedyHref)))
        .catch((err) => live() && failed("doctor", $("#doctor"), err)));
    }
    return Promise.allSettled(jobs);
  }).catch((err) => {
    if (!live()) return;
    primaryError(err);
    for (const [id, el] of [["verdict", "#verdict"], ["memory", "#memory-bar"], ["speed", "#speed"],
      ["roofline", "#roofline"], ["plan", "#plan"], ["pick", "#pick"]]) failed(id, $(el), err);
    clear($("#memory-legend"));
    clear($("#memory-assumptions"));
    clear($("#roofline-ops"));
    hide("doctor");
  });
  return [trainJob];
}

function rooflineJob(st, opts, live, { phase, batch, seq }) {
  setLoading("roofline");
  return call("roofline", pickParams(st, ["model", "gpu", "gpu_memory"], { phase, batch, seq }), opts).then((doc) => {
    if (!live()) return;
    const { svg, ops } = roofline(doc, $("#roofline").clientWidth);
    fill("roofline", $("#roofline"), svg);
    clear($("#roofline-ops")).append(render.rooflineOps(doc, ops));
  }).catch((err) => {
    if (!live()) return;
    failed("roofline", $("#roofline"), err);
    clear($("#roofline-ops"));
  });
}

/** The equivalent `gpuwise ...` commands, as the API spells them (never rebuilt here). */
async function cliCommands(st, opts, live) {
  const asked = st.task === "infer"
    ? [["fit", pickParams(st, FIT)], ["infer", pickParams(st, INFER)]]
    : [["train", trainParams(st)]];
  try {
    const answers = await Promise.all(asked.map(([command, params]) =>
      call("cli", { command, ...params }, opts)));
    if (!live()) return;
    $("#cli-command").value = answers[0].command;
    const list = answers.map((a) => h("li", {}, h("code", { "data-testid": "cli-line" }, a.command)));
    if (st.source === "config") list.push(h("li", { class: "hint" }, "Save the pasted config as ./config.json first."));
    fill("share", $("#cli-commands"), ...list);
  } catch (err) {
    if (!live()) return;
    $("#cli-command").value = "";
    failed("share", $("#cli-commands"), err);
  }
}

/** Fill a "what is X?" box the first time it opens, with the numbers of the model and GPU on screen. */
async function onToggle(ev) {
  const box = ev.target;
  if (!(box instanceof HTMLDetailsElement) || !box.open || !box.dataset.explain || box.dataset.loaded) return;
  box.dataset.loaded = "1";
  const body = box.querySelector(".explain-body");
  body.textContent = "loading…";
  const st = current || readForm();
  try {
    const doc = await call("explain", pickParams(st, ["model", "gpu"], { term: box.dataset.explain }),
      { config: st.source === "config" ? JSON.parse(st.config) : null });
    clear(body).append(render.explained(doc));
  } catch (err) {
    delete box.dataset.loaded;
    clear(body).append(h("p", { class: "error" }, err.message));
  }
}

// ---------------------------------------------------------------- catalogs for the inputs

async function loadCatalogs() {
  const [models, gpus] = await Promise.allSettled([call("models", {}), call("gpus", {})]);
  if (models.status === "fulfilled") {
    const list = $("#model-list");
    for (const m of models.value.models) {
      list.append(h("option", { value: m.id }, `${m.hf_id} · ${f.params(m.params)}`));
    }
    modelsById = new Map(models.value.models.map((m) => [m.id, m]));
  }
  if (gpus.status === "fulfilled") {
    const select = $("#gpu");
    const groups = new Map();
    for (const g of gpus.value.gpus) {
      const key = `${g.vendor === "nvidia" ? "NVIDIA" : g.vendor === "amd" ? "AMD" : g.vendor[0].toUpperCase() + g.vendor.slice(1)} ${g.segment}`;
      if (!groups.has(key)) groups.set(key, h("optgroup", { label: key }));
      groups.get(key).append(h("option", { value: g.id }, `${g.name} · ${f.known(g.memory_bytes) ? `${f.fixed(g.memory_bytes / 2 ** 30, 0)} GiB` : "memory unknown"}`));
    }
    select.append(...groups.values());
    gpusById = new Map(gpus.value.gpus.map((g) => [g.id, g]));
  }
}

let modelsById = new Map();
let gpusById = new Map();

function describeInputs() {
  const m = modelsById.get(form.model.value.trim());
  $("#model-info").textContent = m
    ? `${m.hf_id}: ${f.params(m.params)}${m.active_params !== m.params ? ` (${f.params(m.active_params)} active)` : ""}, ` +
      `${m.family}, ${m.layers} layers, ${m.attention.toUpperCase()}, up to ${f.count(m.max_position_embeddings, "tokens")}`
    : "";
  const g = gpusById.get(form.gpu.value);
  $("#gpu-info").textContent = g
    ? `${f.gib(g.memory_bytes)}, ${f.bytesPerSecond(g.memory_bandwidth_bytes_per_s)}, ` +
      `bf16 ${f.flopsPerSecond(g.peak_flops && g.peak_flops.bf16)} dense, ${g.interconnect || "no interconnect listed"}`
    : "";
}

// ---------------------------------------------------------------- wiring

function wire() {
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    ask(readForm());
  });
  for (const radio of form.querySelectorAll('input[name="task"]')) {
    radio.addEventListener("change", () => {
      showTaskFields();
      ask(readForm());
    });
  }
  for (const radio of form.querySelectorAll('input[name="model_source"]')) radio.addEventListener("change", showTaskFields);
  form.model.addEventListener("input", describeInputs);
  form.gpu.addEventListener("change", describeInputs);
  $("#phase").addEventListener("change", () => ask(readForm()));
  document.addEventListener("toggle", onToggle, true); // toggle does not bubble: listen while it is captured
  for (const button of document.querySelectorAll("button.copy")) {
    button.addEventListener("click", async () => {
      const input = $(`#${button.dataset.copy}`);
      try {
        await navigator.clipboard.writeText(input.value);
      } catch {
        input.select();
        document.execCommand("copy");
      }
      button.textContent = "Copied";
      setTimeout(() => (button.textContent = "Copy"), 1500);
    });
  }
}

async function start() {
  wire();
  const st = fromQuery(location.search);
  try {
    await loadCatalogs();
  } catch {
    // the inputs still work as free text; the API's answers say what is wrong
  }
  writeForm(st);
  describeInputs();
  ask(readForm());
}

start();
