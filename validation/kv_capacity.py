"""The KV pool as vLLM (and SGLang) size it, against their own startup logs (`validation/serving_sources/kv_capacity.toml`, issue 19).

Each row gives the model, GPU, tensor parallelism, vLLM version and the options the run set (gpu_memory_utilization,
max_model_len, max_num_seqs, max_num_batched_tokens) and what vLLM logged: the KV cache in GiB ("Available KV cache
memory"), in tokens ("GPU KV cache size") or in blocks ("# GPU blocks"), or that it refused to start for want of KV
room. gpuwise predicts with `gpuwise fit --engine vllm` at the row's options (context = max_model_len, or the
model's maximum, as vLLM checks one such sequence). Errors are predicted / logged - 1; a refused start must be
predicted not to fit, a start to fit. Same split rule as the other sources (serving_sources/README.md).

    python -m validation.kv_capacity [--rows]
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

from gpuwise.catalog._toml import tomllib
from validation.serving import MODEL_REFS, SOURCES

GiB = 1 << 30
TARGET = 0.05
"""Issue 19: within 5% of the logged KV cache, every refused start predicted as such. Held to it: vLLM, whose rule
is modelled version by version; SGLang's rows (two) are printed beside it."""
KV_REFUSALS = ("No available memory for the cache blocks", "larger than the maximum number of tokens",
               "KV cache is needed", "No KV cache room", "KV cache memory is needed")
"""A refused start counts as a KV-capacity refusal when its quoted log carries one of vLLM's KV messages (a start
that died later, e.g. out of memory while warming up the sampler, is not one)."""
MORE_MODELS = {
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic": "llama-3.3-70b", "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "Qwen/Qwen2.5-72B-Instruct": "qwen2.5-72b", "Qwen/Qwen2.5-32B-Instruct": "qwen2.5-32b",
    "Qwen/Qwen2-7B-Instruct": "qwen2-7b", "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16": "llama-3.1-8b",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": "deepseek-r1-distill-qwen-14b", "Qwen/QwQ-32B": "qwen2.5-32b",
    "openai/gpt-oss-20b": "gpt-oss-20b", "openai/gpt-oss-120b": "gpt-oss-120b",
}
GPUS = (("H100", "h100-sxm"), ("H200", "h200-sxm"), ("A100 80GB", "a100-sxm-80gb"), ("A100 40GB", "a100-sxm-40gb"),
        ("L40S", "l40s"), ("L4 ", "l4"), ("RTX 3090", "rtx-3090"), ("RTX 4090", "rtx-4090"))
WEIGHTS = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "gptq-int4": "gptq", "mxfp4": "mxfp4-experts"}


@dataclass(frozen=True, slots=True)
class Scored:
    engine: str
    split: str
    name: str
    metric: str
    logged: float | None
    predicted: float
    verdict_ok: bool | None

    @property
    def error(self) -> float | None:
        return None if self.logged is None else self.predicted / self.logged - 1


def load() -> list[dict]:
    with open(SOURCES / "kv_capacity.toml", "rb") as fh:
        return tomllib.load(fh)["run"]


def score(rows: list[dict]) -> tuple[list[Scored], list[tuple[str, str]]]:
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.kv_cache import kv_bytes_per_token
    from gpuwise.plan.fit import FitRequest, fit

    out, skipped = [], []
    for row in rows:
        sglang = row.get("engine") == "sglang"
        ref = MODEL_REFS.get(row["model"]) or MORE_MODELS.get(row["model"])
        gpu = next((gid for key, gid in GPUS if key in row["gpu"] + " "), None)
        w = WEIGHTS.get(row.get("weights", ""))
        why = ("model has no catalog config" if ref is None else "GPU not in the catalog" if gpu is None
               else f"weights {row.get('weights')!r} not modelled" if w is None
               else "data parallel with expert parallelism" if row.get("dp", 1) not in (1, None) else None)
        if why:
            skipped.append((row["name"], why))
            continue
        refused = row.get("outcome") == "refused"
        if refused and not any(m in row.get("source", "") + row.get("notes", "") for m in KV_REFUSALS):
            skipped.append((row["name"], "refused for another reason than KV room"))
            continue
        version = str(row.get("engine_version", "unknown"))
        if not sglang and not version[:1].isdigit():
            skipped.append((row["name"], "vLLM version not stated"))
            continue
        if not sglang and tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) < (0, 10):
            skipped.append((row["name"], "vLLM before 0.10 (V0 engine): not modelled"))
            continue
        try:
            model = load_model(ref)
        except Exception:
            skipped.append((row["name"], f"model {ref} is not in the catalog"))
            continue
        ctx = row.get("max_model_len") or model.spec.max_position_embeddings
        kv = "fp8" if str(row.get("kv_dtype", "auto")).startswith("fp8") else None
        try:
            if sglang:  # SGLang starts whatever the context (it caps requests by the pool): the verdict is a pool
                r = fit(FitRequest(model=model, gpu=get_gpu(gpu), num_gpus=int(row.get("tp", 1)), weights=w,
                                   kv_dtype=kv, context=1, batch=1, engine="sglang",
                                   mem_fraction_static=row.get("mem_fraction_static",
                                                               row.get("gpu_memory_utilization"))))
            else:
                r = fit(FitRequest(model=model, gpu=get_gpu(gpu), num_gpus=int(row.get("tp", 1)), weights=w,
                                   kv_dtype=kv, context=int(ctx), batch=1, engine="vllm",
                                   gpu_memory_utilization=row.get("gpu_memory_utilization"),
                                   max_num_seqs=row.get("max_num_seqs"),
                                   max_num_batched_tokens=row.get("max_num_batched_tokens"),
                                   vllm_version=".".join(version.split(".")[:2])))
        except Exception as exc:  # listed, not hidden
            skipped.append((row["name"], f"{type(exc).__name__}: {exc}"))
            continue
        pool = r.estimate.details["kv_pool_bytes"]
        per_token = kv_bytes_per_token(model.spec, r.kv.bytes, "sglang" if sglang else "vllm", int(row.get("tp", 1)))
        ok = (not r.fits) if refused else r.fits
        if refused:
            out.append(Scored(row["engine"], row["split"], row["name"], "refused", None, pool / GiB, ok))
        elif "kv_cache_gib" in row:
            out.append(Scored(row["engine"], row["split"], row["name"], "kv_cache_gib", float(row["kv_cache_gib"]), pool / GiB, ok))
        elif "kv_cache_tokens" in row:
            out.append(Scored(row["engine"], row["split"], row["name"], "kv_cache_tokens", float(row["kv_cache_tokens"]),
                              pool / per_token, ok))
        elif "gpu_blocks" in row:
            out.append(Scored(row["engine"], row["split"], row["name"], "gpu_blocks", float(row["gpu_blocks"]),
                              pool / per_token / 16, ok))
        else:
            out.append(Scored(row["engine"], row["split"], row["name"], "started", None, pool / GiB, ok))
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    scored, skipped = score(load())
    print("KV pool against the engines' startup logs (vLLM, SGLang; error = predicted / logged - 1; verdict: start "
          "or refusal):")
    if "--rows" in argv:
        for s in sorted(scored, key=lambda s: (s.split, s.name)):
            err = "" if s.error is None else f"{100 * s.error:+7.1f}%"
            print(f"  {s.split:11} {s.name[:80]:80} {s.metric:15} {s.logged if s.logged is not None else '':>10} "
                  f"{s.predicted:>10.4g} {err:>8} {'ok' if s.verdict_ok else 'WRONG'}")
    status = 0
    for engine, split in (("all", "calibration"), ("all", "held-out"), ("vllm", "calibration"), ("vllm", "held-out"),
                          ("sglang", "calibration"), ("sglang", "held-out")):
        part = [s for s in scored if s.split == split and engine in ("all", s.engine)]
        if not part:
            continue
        errs = [abs(s.error) for s in part if s.error is not None]
        wrong = [s.name for s in part if not s.verdict_ok]
        med = statistics.median(errs) if errs else float("nan")
        print(f"  {engine:6} {split:12} rows {len(part):3}  measured {len(errs):3}  median |error| {100 * med:5.1f}%  "
              f"worst {100 * max(errs, default=0):5.1f}%  wrong verdicts {len(wrong)}")
        for n in wrong:
            print(f"    wrong verdict: {n}")
        if split == "held-out" and (wrong or (engine == "vllm" and (not errs or med > TARGET))):
            status = 1
    for name, why in skipped:
        print(f"  not scored: {name}: {why}")
    return status


if __name__ == "__main__":
    sys.exit(main())
