"""`gpuwise bench train`'s report: measured next to predicted, with the errors, as text and as JSON.

Reads the result types (train_result.py, train_config.py); nothing measuring imports this module.
"""

from __future__ import annotations

from ..schema import SCHEMA_VERSION
from ..units import GiB
from .train_config import BenchConfig
from .train_result import BenchResult


def _rows(r: BenchResult) -> list[tuple[str, float | None, float | None, str]]:
    """(metric, measured, predicted, unit) for the comparison table."""
    m, p, cfg = r.measured, r.prediction, r.config
    tok_s = cfg.tokens_per_step / m.step_time_s
    rows = [("step time", m.step_time_s, p.perf.step.step_time_s if p else None, "s"),
            ("tokens/s", tok_s, p.perf.tokens_per_s if p else None, "tokens/s"),
            ("MFU", r.mfu, p.perf.mfu if p else None, "")]
    rows.append(("peak allocated", m.peak_allocated_bytes, p.memory.torch_allocated if p else None, "GiB"))
    rows.append(("peak reserved", m.peak_reserved_bytes, p.memory.torch_reserved if p else None, "GiB"))
    return rows


def _err(r: BenchResult, measured: float | None, predicted: float | None) -> float | None:
    if not r.comparable or measured is None or predicted is None or measured == 0:
        return None
    return (predicted - measured) / measured


def _fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "unknown"
    if unit == "GiB":
        return f"{x / GiB:,.2f} GiB"
    if unit == "":
        return f"{x:.1%}"
    if unit == "s":
        return f"{x * 1e3:,.1f} ms"
    return f"{x:,.0f} {unit}"


def render(r: BenchResult) -> str:
    cfg = r.config
    lines = [f"{cfg.model.id}: {r.measured.params_built / 1e6:,.2f}M parameters built, {cfg.world_size} rank(s) on "
             f"{r.device_name} ({r.device}, backend {r.backend}; {r.gpu_note})",
             f"layout: {cfg.describe()}; {cfg.steps} timed steps after {cfg.warmup_steps} warm-up", ""]
    rows = [("", "measured", "predicted", "error")]
    for name, meas, pred, unit in _rows(r):
        e = _err(r, meas, pred)
        rows.append((name, _fmt(meas, unit), _fmt(pred, unit), "n/a" if e is None else f"{e:+.1%}"))
    widths = [max(len(x[i]) for x in rows) for i in range(4)]
    for i, row in enumerate(rows):
        lines.append("  ".join(v.ljust(w) if j == 0 else v.rjust(w) for j, (v, w) in enumerate(zip(row, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    ts = sorted(r.measured.step_times_s)
    lines.append(f"\nstep times: median {ts[len(ts) // 2] * 1e3:,.1f} ms, min {ts[0] * 1e3:,.1f}, "
                 f"max {ts[-1] * 1e3:,.1f} (slowest rank per step)")
    if r.peak_flops_per_gpu:
        lines.append(f"MFU = {r.model_flops_per_step:.4g} model FLOPs per step / (step time x {cfg.world_size} x "
                     f"{r.peak_flops_per_gpu / 1e12:,.1f} TFLOP/s, {r.gpu.id} {r.prediction.perf.peak_dtype} dense)")
    else:
        lines.append("MFU: unknown (no catalog peak for this device)")
    if r.prediction_full is not None:
        pf, ps = r.prediction_full.perf.step.step_time_s, r.prediction.perf.step.step_time_s
        lines.append(f"full {cfg.full.id} ({cfg.full.spec.num_layers} layers): predicted {pf * 1e3:,.1f} ms per step; "
                     f"measured step scaled by the predicted ratio: {r.measured.step_time_s * pf / ps * 1e3:,.1f} ms")
    if r.prediction is not None:
        lines.append(f"prediction: gpuwise train {cfg.full.id} --gpu {r.gpu.id} " + _flags(cfg, r.gpu))
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def _flags(cfg: BenchConfig, gpu=None) -> str:
    o = cfg.train_options(gpu)
    out = [f"--num-gpus {o['num_gpus']}", f"--seq {o['seq']}", f"--global-batch {o['global_batch']}",
           f"--micro-batch {o['micro_batch']}", f"--precision {o['precision']}", f"--optimizer {o['optimizer']}",
           f"--optimizer-impl {o['optimizer_impl']}",
           f"--recompute {o['recompute']}", "--framework torchtitan", f"--sdpa-backend {o['sdpa_backend']}",
           f"--gpus-per-node {o['gpus_per_node']}"]
    if cfg.tp > 1:
        out.append(f"--tp {cfg.tp}" + (" --sp" if cfg.sp else ""))
    if "fsdp" in o:
        out.append(f"--fsdp {o['fsdp']}")
    if "zero" in o:
        out.append(f"--zero {o['zero']}")
    if cfg.model is not cfg.full:
        out.append(f"(with {cfg.layers} layers)")
    return " ".join(out)


def to_dict(r: BenchResult) -> dict:
    cfg = r.config
    comparison = {}
    for name, meas, pred, unit in _rows(r):
        key = {"step time": "step_time_s", "tokens/s": "tokens_per_s", "MFU": "mfu",
               "peak allocated": "peak_allocated_bytes", "peak reserved": "peak_reserved_bytes"}[name]
        comparison[key] = {"measured": meas, "predicted": pred, "error": _err(r, meas, pred)}
    return {
        "schema_version": SCHEMA_VERSION, "command": "bench train",
        "model": {"id": cfg.full.id, "layers_built": cfg.layers, "layers_full": cfg.full.spec.num_layers,
                  "params_built": r.measured.params_built},
        "device": r.device, "device_name": r.device_name, "gpu": r.gpu.id if r.gpu else None, "gpu_note": r.gpu_note,
        "backend": r.backend, "world_size": cfg.world_size,
        "layout": {"dp": cfg.dp, "tp": cfg.tp, "sp": cfg.sp, "sharding": cfg.sharding, "recompute": cfg.recompute,
                   "micro_batch": cfg.micro_batch, "accumulation": cfg.accumulation, "global_batch": cfg.global_batch,
                   "seq": cfg.seq, "precision": cfg.precision, "optimizer": cfg.optimizer,
                   "optimizer_impl": cfg.optimizer_impl},
        "steps": cfg.steps, "warmup_steps": cfg.warmup_steps, "step_times_s": list(r.measured.step_times_s),
        "comparison": comparison,
        "mfu_denominator": {"flops_per_s_per_gpu": r.peak_flops_per_gpu, "gpus": cfg.world_size,
                            "dtype": r.prediction.perf.peak_dtype if r.prediction else None, "what": "dense peak"},
        "model_flops_per_step": r.model_flops_per_step, "hardware_flops_per_step": r.hardware_flops_per_step,
        "full_model_predicted_step_time_s": r.prediction_full.perf.step.step_time_s if r.prediction_full else None,
        "notes": list(r.notes),
    }
