"""Serving under load against published benchmark runs (`validation/serving_sources/published.toml`, issue 19).

Each row states an engine, its version, the model, GPU, tensor parallelism, prompt and output lengths and the load
(a request rate or a concurrency) of a published benchmark, and the figures it printed (TTFT, TPOT, ITL, end to
end, throughput). gpuwise predicts them with `gpuwise infer --request-rate R | --max-concurrency N` and nothing
else: no efficiency, no per-row constant.

Errors are predicted / published - 1 for every metric, latencies and throughputs alike. Each row's part
(calibration or held-out) was fixed by a hash of its name before anything was scored (serving_sources/README.md);
constants may be chosen on calibration rows only.

    python -m validation.serving [--rows]
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuwise.catalog._toml import tomllib

HERE = Path(__file__).parent
ROOT = HERE.parent
SOURCES = HERE / "serving_sources"
HELD_OUT_MEDIAN_TARGET = 0.15
"""Issue 19: TTFT and TPOT within 15% median on the held-out part (MoE decode throughput within 20%)."""
MOE_THROUGHPUT_TARGET = 0.20

METRICS = {
    # published key: (category, how to read the prediction, scale to the published unit)
    "ttft_ms_mean": ("ttft", lambda s: s.ttft_s.mean, 1e3),
    "ttft_ms_median": ("ttft", lambda s: s.ttft_s.p50, 1e3),
    "ttft_ms_p99": ("ttft_p99", lambda s: s.ttft_s.p99, 1e3),
    "tpot_ms_mean": ("tpot", lambda s: s.tpot_s.mean, 1e3),
    "tpot_ms_median": ("tpot", lambda s: s.tpot_s.p50, 1e3),
    "itl_ms_mean": ("tpot", lambda s: s.itl_s.mean, 1e3),
    "itl_ms_median": ("tpot", lambda s: s.itl_s.p50, 1e3),
    "e2e_ms_mean": ("e2e", lambda s: s.e2e_s.mean, 1e3),
    "e2e_ms_median": ("e2e", lambda s: s.e2e_s.p50, 1e3),
    "request_throughput": ("throughput", lambda s: s.request_throughput, 1.0),
    "output_throughput": ("throughput", lambda s: s.output_throughput, 1.0),
    "total_throughput": ("throughput", lambda s: s.total_throughput, 1.0),
}


@dataclass(frozen=True, slots=True)
class Scored:
    category: str
    split: str
    name: str
    metric: str
    published: float
    predicted: float
    moe: bool
    lengths: str = "fixed"
    """'fixed' (the benchmark's own fixed lengths) or 'sharegpt' (a ShareGPT run priced with chat-like lengths of its
    printed means)."""

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def load() -> list[dict]:
    path = SOURCES / "published.toml"
    if not path.exists():
        return []
    with open(path, "rb") as fh:
        return tomllib.load(fh).get("run", [])


MODEL_REFS = {
    # a published checkpoint -> the catalog model of the same architecture (its weights format set from the row)
    "Qwen/Qwen3-0.6B": "qwen3-0.6b", "Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-14B": "qwen3-14b", "Qwen/Qwen3-14B-FP8": "qwen3-14b",
    "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "nvidia/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b", "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1", "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b", "nvidia/Llama-3.3-70B-Instruct-FP8": "llama-3.3-70b",
    "microsoft/Phi-4-mini-instruct": "phi-4-mini", "openai/gpt-oss-120b": "gpt-oss-120b",
    "zai-org/GLM-4.5-Air": "glm-4.5-air", "MiniMax-M2.7": "minimax-m2.7", "MiniMaxAI/MiniMax-M2.7": "minimax-m2.7",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-v3.1", "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-scout",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "qwen3-next-80b-a3b-thinking",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "nemotron-3-nano-30b-a3b",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8": "nemotron-3-nano-30b-a3b",
    "Qwen/Qwen3-4B": "qwen3-4b", "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
}
GPU_IDS = (("H100", "h100-sxm"), ("H200", "h200-sxm"), ("A100", "a100-sxm-80gb"), ("RTX 4090", "rtx-4090"),
           ("GB300", "gb300"), ("GB200", "gb200"), ("B200", "b200"), ("MI300X", "mi300x"), ("MI355X", "mi355x"),
           ("RTX 5090", "rtx-5090"), ("L4 ", "l4"))
"""A row's GPU text -> catalog id, by the first name it contains (H100 without a form factor is the SXM part, as
every source's node description is an 8-GPU HGX server)."""
ENGINE_MODELS = {"vllm": "vllm", "trtllm": "trtllm", "sglang": "sglang", "llamacpp": "llamacpp"}
WEIGHTS = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "mxfp4": "mxfp4-experts"}


def _sharegpt_means(row: dict) -> tuple[int, int] | None:
    """Mean prompt and output lengths of a ShareGPT run from the totals its benchmark printed (quoted in `source`)."""
    import re

    src = row.get("source", "")
    n = re.search(r"Successful requests:\s*([\d,]+)", src)
    p = re.search(r"Total input tokens:\s*([\d,]+)", src)
    o = re.search(r"Total generated tokens:\s*([\d,]+)", src)
    if not (n and p and o):
        return None
    k = int(n.group(1).replace(",", ""))
    return (round(int(p.group(1).replace(",", "")) / k), round(int(o.group(1).replace(",", "")) / k))


def _chat_file(n: int, mean_prompt: int, mean_output: int) -> str:
    """A JSONL lengths file of `n` chat-like requests with these means (gpuwise.plan.serve.chat_lengths: ShareGPT's
    published spread within vLLM bench's filter), written once per (n, means) to a temporary folder."""
    import json
    import tempfile

    from gpuwise.plan.serve import chat_lengths

    path = Path(tempfile.gettempdir()) / f"gpuwise-chat-{n}-{mean_prompt}-{mean_output}.jsonl"
    if not path.exists():
        prompts, outputs = chat_lengths(n, mean_prompt, mean_output)
        path.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) + "\n"
                                for p, o in zip(prompts, outputs)))
    return str(path)


def _uniform_file(n: int, row: dict, mean_prompt: int, mean_output: int) -> str:
    """A JSONL lengths file of `n` requests drawn as SGLang's `bench_serving --dataset-name random` draws them
    (sample_random_requests: each length uniform in [max(int(L x ratio), 1), L]), seeded, then scaled to the means
    of the totals the benchmark printed (the source's own draw is not known, its sums are)."""
    import json
    import random
    import tempfile

    ratio = float(row["random_range_ratio"])
    lens_in, lens_out = int(row["random_input_len"]), int(row["random_output_len"])
    path = Path(tempfile.gettempdir()) / f"gpuwise-uniform-{n}-{lens_in}-{lens_out}-{ratio:g}-{mean_prompt}-{mean_output}.jsonl"
    if not path.exists():
        rng = random.Random(0)
        draws = [(rng.randint(max(int(lens_in * ratio), 1), lens_in), rng.randint(max(int(lens_out * ratio), 1), lens_out))
                 for _ in range(n)]

        def scaled(values: list[int], mean: int) -> list[int]:
            k = mean * len(values) / max(1, sum(values))
            return [max(1, round(v * k)) for v in values]

        prompts = scaled([a for a, _ in draws], mean_prompt)
        outputs = scaled([b for _, b in draws], mean_output)
        path.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) + "\n"
                                for p, o in zip(prompts, outputs)))
    return str(path)


def resolve(row: dict) -> tuple[str, str, dict] | str:
    """(model, gpu id, `gpuwise infer` options) for a row, or why it is not scored (README states the rules)."""
    model = MODEL_REFS.get(row["model"])
    if model is None:
        return f"model {row['model']!r} has no catalog config"
    gpu = next((gid for key, gid in GPU_IDS if key.lower() in row["gpu"].lower()), None)
    if gpu is None:
        return f"GPU {row['gpu']!r} not mapped"
    w = WEIGHTS.get(str(row.get("weights", "")).lower())
    if w is None:
        return f"weights {row.get('weights')!r} not modelled for serving yet"
    ep = int(row.get("ep") or 1)
    if ep not in (1, int(row.get("tp", 1))):
        return "expert parallelism other than over all the GPUs is not modelled by `infer` yet"
    if "output_throughput_per_gpu" in row and "output_throughput" not in row and "ttft_ms_mean" not in row:
        return "per-GPU figures only"
    if row.get("dataset") == "sharegpt":
        means = _sharegpt_means(row)
        if means is None:
            return "ShareGPT run whose token totals are not printed"
        prompt, output = means
    elif str(row.get("dataset", "random")).startswith("random") and "prompt_tokens" in row:
        prompt, output = int(row["prompt_tokens"]), int(row["output_tokens"])
    elif row.get("dataset") == "random" and "random_range_ratio" in row:
        # the printed totals, as for ShareGPT; else the means of the draw (uniform on [max(int(L r), 1), L])
        ratio = float(row["random_range_ratio"])
        lens_in, lens_out = int(row["random_input_len"]), int(row["random_output_len"])
        prompt, output = _sharegpt_means(row) or (round((max(int(lens_in * ratio), 1) + lens_in) / 2),
                                                  round((max(int(lens_out * ratio), 1) + lens_out) / 2))
    else:
        return f"dataset {row.get('dataset')!r} without fixed lengths"
    opts = {"engine": ENGINE_MODELS[row["engine"]], "num_gpus": int(row.get("tp", 1)), "prompt_tokens": prompt,
            "output_tokens": output, "num_prompts": int(row.get("num_prompts") or 1000), "weights": w}
    if "trtllm-bench" in str(row.get("engine_options", "")) + row["name"]:
        opts["offline"] = True  # trtllm-bench drives the engine in process: no HTTP server in front of it
    if row.get("dp_attention"):
        opts["enable_dp_attention"] = True
    elif ep > 1:
        opts["enable_expert_parallel"] = True
    if row.get("dataset") == "sharegpt":
        opts["dataset_path"] = _chat_file(opts["num_prompts"], prompt, output)
    elif "random_range_ratio" in row and "prompt_tokens" not in row:
        opts["dataset_path"] = _uniform_file(opts["num_prompts"], row, prompt, output)
    if str(row.get("kv_dtype", "auto")).lower() in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        opts["kv_dtype"] = "fp8"  # otherwise the engine's default ("auto", or not stated): the model's dtype
    rate = row.get("request_rate")
    if rate is not None:
        opts["request_rate"] = math.inf if rate == "inf" else float(rate)
    if row.get("max_concurrency"):
        opts["max_concurrency"] = int(row["max_concurrency"])
    if "request_rate" not in opts and "max_concurrency" not in opts:
        opts["request_rate"] = math.inf
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if key in row:
            opts[key] = int(row[key])
    if "gpu_memory_utilization" in row:
        opts["gpu_memory_utilization"] = float(row["gpu_memory_utilization"])
    if opts["engine"] == "sglang":
        opts["sglang_version"] = _sglang_version(row)
    elif opts["engine"] == "vllm":
        opts.update(_vllm_version(row))
    return model, gpu, opts


def _vllm_version(row: dict) -> dict:
    """vLLM's version as `infer` options: `vllm_version` from 0.10 (the V1 engine, whose memory rule gpuwise models);
    an older or unprinted one is priced with the newest memory rule, as before 2026-11-28, and synchronous
    scheduling (asynchronous by default only since 0.14)."""
    found = _printed_version(row)
    if found and tuple(int(x) for x in found.split(".")[:2]) >= (0, 10):
        return {"vllm_version": found}
    return {"no_async_scheduling": True}


def _printed_version(row: dict) -> str | None:
    """The first x.y[.z] in the row's `engine_version` (e.g. '0.5.13' of '0.5.13.post1 (ROCm 7.2 image)')."""
    found = re.search(r"\d+\.\d+(?:\.\d+)?", str(row.get("engine_version") or ""))
    return found[0] if found else None


SGLANG_BEFORE_PREFILL_GRAPHS = "0.5.9"
"""Stands for an SGLang row whose version is not printed and whose date precedes v0.5.10 (released 2026-04-06, the
first to graph prefill by default): every version before 0.5.10 behaves alike in what gpuwise models."""


def _sglang_version(row: dict) -> str | None:
    """The row's SGLang version (the first x.y[.z] in its engine_version); when none is printed, 0.5.9 for a row
    dated before April 2026 and the newest (None) after."""
    found = _printed_version(row)
    if found:
        return found
    return SGLANG_BEFORE_PREFILL_GRAPHS if str(row.get("date", "")) < "2026-04" else None


def score(rows: list[dict]) -> tuple[list[Scored], list[tuple[str, str]]]:
    import gpuwise

    scored, skipped = [], []
    for row in rows:
        how = resolve(row)
        if isinstance(how, str):
            skipped.append((row["name"], how))
            continue
        model, gpu, opts = how
        try:
            r = gpuwise.infer(model, gpu=gpu, **opts)
        except Exception as exc:  # a row gpuwise cannot express yet is listed, not hidden
            skipped.append((row["name"], f"{type(exc).__name__}: {exc}"))
            continue
        res = r.serving.result
        moe = r.request.model.spec.moe is not None
        for key, (cat, read, scale) in METRICS.items():
            if key in row:
                scored.append(Scored(cat, row["split"], row["name"], key, float(row[key]), read(res) * scale, moe,
                                     "sharegpt" if row.get("dataset") == "sharegpt" else "fixed"))
    return scored, skipped


def _summary(scored: list[Scored]) -> list[str]:
    lines = [f"  {'category':12} {'part':12} {'figures':>7} {'median':>7} {'p90':>7} {'worst':>7} {'bias':>7}"]
    for split in ("calibration", "held-out"):
        part = [s for s in scored if s.split == split]
        cats = sorted({s.category for s in part}) + ["moe_throughput", "all"]
        for cat in cats:
            sel = (part if cat == "all" else [s for s in part if s.moe and s.category == "throughput"]
                   if cat == "moe_throughput" else [s for s in part if s.category == cat])
            if not sel:
                continue
            errs = sorted(abs(s.error) for s in sel)
            p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]
            bias = statistics.median(s.error for s in sel)
            lines.append(f"  {cat:12} {split:12} {len(sel):>7} {100 * statistics.median(errs):>6.1f}% "
                         f"{100 * p90:>6.1f}% {100 * errs[-1]:>6.1f}% {100 * bias:>+6.1f}%")
    return lines


def held_out_status(scored: list[Scored]) -> tuple[bool, str]:
    ho = [s for s in scored if s.split == "held-out"]
    lat = [abs(s.error) for s in ho if s.category in ("ttft", "tpot")]
    moe = [abs(s.error) for s in ho if s.moe and s.category == "throughput"]
    if not lat:
        return True, "held-out: no TTFT/TPOT figures yet"
    med = statistics.median(lat)
    ok = med <= HELD_OUT_MEDIAN_TARGET and (not moe or statistics.median(moe) <= MOE_THROUGHPUT_TARGET)
    msg = (f"held-out: TTFT/TPOT median |error| {100 * med:.1f}% (target <= {100 * HELD_OUT_MEDIAN_TARGET:.0f}%)"
           + (f", MoE throughput median {100 * statistics.median(moe):.1f}% (target <= "
              f"{100 * MOE_THROUGHPUT_TARGET:.0f}%)" if moe else ""))
    return ok, msg


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rows = load()
    scored, skipped = score(rows)
    print("Serving under load (error = predicted / published - 1, latencies and throughputs alike):")
    if "--rows" in argv:
        for s in sorted(scored, key=lambda s: (s.split, s.category, s.name)):
            print(f"  {s.split:11} {s.category:10} {s.name[:90]:90} {s.metric:18} {s.published:>10.4g} "
                  f"{s.predicted:>10.4g} {100 * s.error:>+7.1f}%")
    print("\n".join(_summary(scored)))
    for kind in ("fixed", "sharegpt"):
        for split in ("calibration", "held-out"):
            errs = [abs(s.error) for s in scored if s.lengths == kind and s.split == split]
            if errs:
                print(f"  lengths {kind:14} {split:12} {len(errs):>4} figures, median |error| "
                      f"{100 * statistics.median(errs):5.1f}%")
    for name, why in skipped:
        print(f"  not scored: {name}: {why}")
    ok, msg = held_out_status(scored)
    print(msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
