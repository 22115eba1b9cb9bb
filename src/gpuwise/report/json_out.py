"""JSON projections of result objects: the machine contract behind `--json`.

Every document carries `schema_version`; keys name their units (`_bytes`, `_s`), and plain keys that
the issues fixed (`params`, `memory`, `gpu_memory` ...) are documented in docs/json-schema.md.
Unknown values are null, never 0. Bump SCHEMA_VERSION on any incompatible change.
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING, Any

from ..catalog.gpus import GPU
from ..catalog.models import CatalogEntry
from ..estimate.kv_cache import state_bytes_per_sequence
from ..model.params import param_counts
from ..schema import SCHEMA_VERSION, dumps  # noqa: F401 (dumps: the presenters' import)
from ..schema import num as _num
from ..schema import envelope
from ..schema import rounded as _round

if TYPE_CHECKING:  # types only: `gpuwise fit` must not load the training estimators
    from ..plan.fit import FitResult
    from ..plan.train import TrainPerf, TrainResult


def _moment_dtypes(req) -> dict | None:
    """AdamW's moment dtypes under Megatron's precision-aware optimizer (a train or plan request), None when unset."""
    if not (req.exp_avg_dtype or req.exp_avg_sq_dtype):
        return None
    return {"exp_avg": req.exp_avg_dtype, "exp_avg_sq": req.exp_avg_sq_dtype}


def fit_to_dict(r: FitResult, fix=None) -> dict[str, Any]:
    """`gpuwise fit --json`; `cheapest_fix` (null when it fits or no remedy does): the change `gpuwise doctor`
    heads its answer with."""
    return {**_fit_dict(r), **_fix_dict(r, fix, r.estimate.memory.total)}


def _fix_dict(r, fix, needed: float) -> dict[str, Any]:
    return {"cheapest_fix": None if r.fits or fix is None else remedy_to_dict(fix, needed)}


def remedy_to_dict(x, needed: float) -> dict[str, Any]:
    """One `gpuwise doctor` remedy; `needed`: the memory of the job as given (for `saved_bytes`)."""
    return {"name": x.name, "change": x.change, "options": {k: list(v) if isinstance(v, tuple) else v
                                                             for k, v in x.options.items()},
            "memory_per_gpu": _num(x.memory_bytes), "saved_bytes": _num(needed - x.memory_bytes),
            "time_s": None if x.step_time_s is None else round(x.step_time_s, 6),
            "slowdown": None if x.slowdown is None else round(x.slowdown, 4), "fits": x.fits,
            "tight": x.tight, "changes_job": x.changes_job, "note": x.note or None}


def _fit_dict(r: FitResult) -> dict[str, Any]:
    req = r.request
    m = r.estimate.memory
    spec = req.model.spec
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "fit",
        "model": {
            "id": req.model.id,
            "hf_id": req.model.hf_id,
            "family": spec.family,
            "source": req.model.source,
            "attention": spec.attention_kind,
            "layers": spec.num_layers,
            "max_position_embeddings": spec.max_position_embeddings,
        },
        "gpu": gpu_ref(req.gpu),
        "engine": req.engine,
        "num_gpus": req.num_gpus,
        "weights_format": r.weights.name,
        "kv_dtype": r.kv.name,
        "context": r.context,
        "batch": req.batch,
        "params": r.params.total,
        "active_params": r.params.active,
        "kv_cache_bytes_per_token": _num(r.kv_cache_bytes_per_token),
        "recurrent_state_bytes_per_sequence": _num(state_bytes_per_sequence(r.request.model.spec)),
        "memory": {
            "weights": _num(m.weights),
            "kv_cache": _num(m.kv_cache),
            "activations": _num(m.activations),
            "overhead": _num(m.overhead),
            "total": _num(m.total),
        },
        "gpu_memory": req.gpu.memory_bytes,
        "memory_budget": _num(r.estimate.budget_bytes),
        "headroom_bytes": _num(r.estimate.headroom_bytes),
        "fits": r.fits,
        "max_context": r.max_context,
        "max_context_limited_by": r.max_context_limited_by,
        "max_batch": r.max_batch,
        "min_gpus": r.min_gpus,
        "min_mig_profile": r.min_mig_profile,
        # byte counts as integers, fractions (gpu_memory_utilization 0.9) as they are
        "engine_details": {k: (_num(v) if k.endswith("_bytes") else _round(v)) if isinstance(v, float) else v
                           for k, v in r.estimate.details.items()},
        "assumptions": list(r.assumptions),
    }


def train_to_dict(r: TrainResult, fix=None) -> dict[str, Any]:
    """`gpuwise train --json`; `cheapest_fix` as in fit_to_dict."""
    return {**_train_dict(r), **_fix_dict(r, fix, r.memory.total)}


def _train_dict(r: TrainResult) -> dict[str, Any]:
    req = r.request
    spec = req.model.spec
    lay = r.layout
    mem = r.memory
    from ..estimate.pipeline import stage_layers

    return {
        "schema_version": SCHEMA_VERSION,
        "command": "train",
        "model": {"id": req.model.id, "hf_id": req.model.hf_id, "family": spec.family, "source": req.model.source,
                  "layers": spec.num_layers},
        "gpu": gpu_ref(req.gpu),
        "num_gpus": req.num_gpus,
        "framework": r.framework,
        "framework_reason": r.framework_reason,
        "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "vpp": lay.vpp, "cp": lay.cp, "ep": lay.ep,
                   "etp": lay.expert_tp, "sp": lay.sp, "sharding": lay.sharding, "shard_size": lay.shard_size,
                   "schedule": lay.schedule, "layers_per_stage": list(stage_layers(lay, spec.num_layers))},
        "seq": req.seq,
        "global_batch": req.global_batch,
        "micro_batch": req.micro_batch,
        "num_microbatches": r.num_microbatches,
        "tokens_per_step": req.seq * req.global_batch,
        "precision": req.precision,
        "fp8_backend": req.job.fp8_kernels if req.job.quantized_gemms else None,
        "float8_recipe": req.job.torchao_float8_recipe,
        "attention_kernel": req.job.attention_kernel(req.gpu),
        "layers_in_bf16": sorted(req.job.bf16_layers(spec.num_layers)),
        "optimizer": req.optimizer,
        "optimizer_impl": req.job.torch_optimizer_impl,
        "adam_moment_dtypes": _moment_dtypes(req),
        "compile": {"blocks": req.compile, "loss": req.job.compile_loss},
        "cuda_graph_scope": sorted(req.job.cuda_graph_scope),
        "moe": None if spec.moe is None else {
            "token_dispatcher": req.moe_token_dispatcher, "flex_dispatcher_backend": req.job.flex_backend,
            "a2a_overlap": req.moe_a2a_overlap,
            "delay_wgrad_compute": req.delay_wgrad_compute,
            "pad_expert_input_to_capacity": req.moe_pad_expert_input_to_capacity,
            "permute_fused": req.job.moe_permute_fused,
            "te_op_fuser": req.use_transformer_engine_op_fuser,
            "grouped_experts": req.job.framework == "torchtitan"},
        "recompute": req.job.recompute,
        "offload": list(req.offload),
        "finetune": {"mode": req.finetune, "lora_rank": req.lora_rank if req.finetune != "full" else None,
                     "lora_targets": req.lora_targets if req.finetune != "full" else None,
                     "lora_dropout": req.lora_dropout if req.finetune != "full" else None,
                     "kbit_upcast": req.job.kbit_upcast if req.finetune == "qlora" else None},
        "params": r.params.total,
        "active_params": r.params.active,
        "params_on_gpu": _num(mem.states.params_on_rank),
        "trainable_params_on_gpu": _num(mem.states.trainable_params),
        "memory_per_gpu": mem.as_dict(),
        "memory_peak": {"pipeline_stage": mem.stage, "moment": mem.moment,
                        "in_flight_microbatches": mem.activation_in_flight,
                        "meaning": "total = what nvidia-smi shows at the peak; torch_reserved = "
                                   "torch.cuda.max_memory_reserved (the caching allocator's peak); torch_allocated = "
                                   "max_memory_allocated; fits compares required (allocated + runtime) with the GPU"},
        "memory_torch": {"reserved": _num(mem.torch_reserved), "allocated": _num(mem.torch_allocated),
                         "required": _num(mem.required)},
        "memory_moments_allocated": {k: _num(v) for k, v in mem.moments.items()},
        "activations_per_microbatch": _num(mem.activations_per_microbatch),
        "buffers": {k: _num(v) for k, v in mem.buffer_parts.items()},
        "cpu_memory_per_gpu_bytes": _num(mem.cpu),
        "flops": {
            "convention": req.flops_convention,
            "model_per_step": _num(r.flops.model),
            "hardware_per_step": _num(r.flops.hardware),
            "model_per_token": _num(r.flops.model_per_token),
            "recompute_per_step": _num(r.flops.recompute),
            "forward_per_step_by_operation": {k: _num(v) for k, v in r.flops.forward.as_dict().items()},
        },
        "gpu_memory": req.gpu.memory_bytes,
        "headroom_bytes": _num(r.headroom_bytes),
        "fits": r.fits,
        "tight": r.tight,
        "max_micro_batch": r.max_micro_batch,
        **train_perf_to_dict(r.perf),
        "memory_confidence": memory_confidence_to_dict(r),
        "speed_confidence": confidence_to_dict(r),
        "assumptions": list(r.assumptions),
    }



def profile_to_dict(p) -> dict[str, Any]:
    return {"gpu": p.gpu.id, "matmul_efficiency": dict(p.matmul_efficiency),
            "matmul_shape_efficiency": p.matmul_shape_efficiency,
            "matmul_memory_efficiency": (p.gemm_bandwidth / p.gpu.memory_bandwidth_bytes_per_s
                                         if p.gpu.memory_bandwidth_bytes_per_s else None),
            "memory_efficiency": p.memory_efficiency,
            "attention_forward_efficiency": p.attention_forward_efficiency,
            "attention_backward_efficiency": p.attention_backward_efficiency,
            "sdpa_forward_efficiency": p.sdpa_forward_efficiency,
            "sdpa_backward_efficiency": p.sdpa_backward_efficiency,
            "flash_attn_forward_efficiency": p.flash_attn_forward_efficiency,
            "flash_attn_backward_efficiency": p.flash_attn_backward_efficiency,
            "attention_kernel": p.attention_kernel, "sdpa_kernel": p.sdpa_kernel,
            "kernel_overhead_s": p.kernel_overhead_s, "gemm_overhead_s": p.gemm_fixed_s, "sources": dict(p.sources)}


def topology_to_dict(t) -> dict[str, Any]:
    return {"gpus_per_node": t.gpus_per_node,
            "intra_node": {"link": t.intra.name, "busbw_bytes_per_s": _num(t.intra.busbw_bytes_per_s),
                           "latency_s": t.intra.latency_s},
            "inter_node": {"link": t.inter.name, "busbw_bytes_per_s": _num(t.inter.busbw_bytes_per_s),
                           "latency_s": t.inter.latency_s}}


def _band_dict(c, names: dict[str, str]) -> dict[str, Any]:
    """The fields a speed or memory confidence band shares in JSON."""
    return {"category": c.category, "category_name": names.get(c.category, c.category),
            "held_out_runs": c.runs, "band_of_category": c.of_category,
            "median_abs_error": round(c.median_abs_error, 4), "p90_abs_error": round(c.p90_abs_error, 4),
            "bias": round(c.bias, 4)}


def confidence_to_dict(r: TrainResult) -> dict[str, Any]:
    from ..plan.confidence import CATEGORY_NAMES
    from ..plan.train import train_confidence

    c = train_confidence(r)
    return {**_band_dict(c, CATEGORY_NAMES), "attention_flops_share": round(c.attention_share, 4),
            "band": "category" if c.error_range is None else "attention_dominated",
            "error_range": None if c.error_range is None else [round(v, 4) for v in c.error_range],
            "outside_validated": list(c.outside),
            "note": "from published runs held out of all tuning (validation/speed_sources); error = predicted / "
                    "published throughput - 1, bias > 0: those runs ran slower than predicted"}


def memory_confidence_to_dict(r: TrainResult) -> dict[str, Any]:
    from ..plan.confidence import MEMORY_CATEGORY_NAMES, train_memory_confidence

    c = train_memory_confidence(r)
    return {**_band_dict(c, MEMORY_CATEGORY_NAMES), "held_out_verdicts": c.verdicts,
            "wrong_verdicts": c.wrong_verdicts, "outside_validated": list(c.outside),
            "note": "from published peaks held out of all tuning (validation/memory_sources); error = predicted / "
                    "published peak per GPU - 1, bias < 0: those runs peaked higher than predicted"}


def train_perf_to_dict(p: TrainPerf) -> dict[str, Any]:
    st = p.step
    return {
        "step_time_s": _round(st.step_time_s),
        "mfu": _round(p.mfu, 4),
        "hfu": _round(p.hfu, 4),
        "mfu_denominator": {"dtype": p.peak_dtype, "peak_flops_per_gpu": _num(p.peak_flops_per_gpu),
                            "gpu": p.profile.gpu.name, "note": "dense datasheet peak of the GEMM dtype"},
        "tokens_per_s": _round(p.tokens_per_s),
        "tokens_per_s_per_gpu": _round(p.tokens_per_s_per_gpu),
        "time_breakdown_s": {k: _round(v) for k, v in st.breakdown.items()},
        "bound": st.bound,
        "bubble_fraction": _round(st.bubble_fraction, 4),
        "microbatch_time_s": _round(st.microbatch_s),
        "slowest_stage": st.slowest_stage,
        "train_tokens": p.train_tokens,
        "train_time_s": _round(p.train_time_s),
        "gpu_hours": _round(p.gpu_hours),
        "usd_per_gpu_hour": p.usd_per_gpu_hour,
        "usd_source": p.usd_source,
        "cost_usd": _round(p.cost_usd),
        "energy_kwh": _round(p.energy_kwh),
        "energy_note": "estimate: every GPU at its TDP (or --power-limit) for the whole run (an upper bound)",
        "device_profile": profile_to_dict(p.profile),
        "topology": topology_to_dict(p.topology),
    }


def infer_to_dict(r) -> dict[str, Any]:
    req = r.request
    spec = req.model.spec

    def pass_dict(p) -> dict[str, Any]:
        return {"time_s": _round(p.seconds), "bound": p.bound, "flops": _num(p.flops), "bytes": _num(p.bytes),
                "gemm_s": _round(p.gemm_s), "attention_s": _round(p.attention_s), "stream_s": _round(p.stream_s),
                "comm_s": _round(p.comm_s), "host_s": _round(p.host_s), "overhead_s": _round(p.overhead_s)}

    return {
        "schema_version": SCHEMA_VERSION,
        "command": "infer",
        "model": {"id": req.model.id, "hf_id": req.model.hf_id, "family": spec.family, "layers": spec.num_layers},
        "gpu": gpu_ref(req.gpu),
        "num_gpus": req.num_gpus,
        "engine": req.engine,
        "weights_format": r.memory.weights.name,
        "kv_dtype": r.memory.kv.name,
        "compute_dtype": r.compute_dtype,
        "batch": req.batch,
        "samples": req.samples,
        "prompt_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens,
        "fits": r.memory.fits,
        "memory_per_gpu_bytes": _num(r.memory.estimate.memory.total),
        "max_batch": r.memory.max_batch,
        "ttft_s": _round(r.ttft_s),
        "tpot_s": _round(r.tpot_s),
        "request_s": _round(r.request_s),
        "output_tokens_per_s_per_sequence": _round(r.output_tokens_per_s_per_sequence),
        "output_tokens_per_s": _round(r.output_tokens_per_s),
        "requests_per_s": _round(r.requests_per_s),
        "compute_bound_batch": r.compute_bound_batch,
        "prefill": pass_dict(r.prefill),
        "decode_first_step": pass_dict(r.decode_first),
        "decode_last_step": pass_dict(r.decode_last),
        "usd_per_gpu_hour": r.usd_per_gpu_hour,
        "usd_source": r.usd_source,
        "usd_per_million_output_tokens": _round(r.usd_per_million_output_tokens),
        "samples_curve": [{"samples": p.samples, "time_s": _round(p.seconds),
                           "time_per_sample_s": _round(p.seconds_per_sample), "fits": p.fits}
                          for p in r.samples_curve],
        "engine_source": r.engine.source,
        "device_profile": profile_to_dict(r.profile),
        "serving": serving_to_dict(r.serving) if r.serving is not None else None,
        "assumptions": list(r.assumptions),
    }


def serving_to_dict(sv) -> dict[str, Any]:
    """`infer` under load: latencies in seconds as {mean, p50, p90, p99}; throughputs per second."""
    res, wl, lim = sv.result, sv.load.workload, sv.load.limits

    def st(x) -> dict[str, Any]:
        return {k: _round(getattr(x, k)) for k in ("mean", "p50", "p90", "p99")}

    return {
        "request_rate": None if math.isinf(wl.request_rate) else wl.request_rate,
        "request_rate_is_inf": math.isinf(wl.request_rate),
        "max_concurrency": wl.max_concurrency,
        "num_prompts": len(wl.prompt_tokens),
        "lengths_source": sv.load.lengths_source,
        "completed": res.completed,
        "ttft_s": st(res.ttft_s), "tpot_s": st(res.tpot_s), "itl_s": st(res.itl_s), "e2e_s": st(res.e2e_s),
        "duration_s": _round(res.duration_s),
        "request_throughput_per_s": _round(res.request_throughput),
        "output_tokens_per_s": _round(res.output_throughput),
        "total_tokens_per_s": _round(res.total_throughput),
        "goodput_requests_per_s": _round(sv.goodput),
        "slo_ttft_s": sv.slo_ttft_s, "slo_tpot_s": sv.slo_tpot_s,
        "mean_running_requests": _round(res.mean_running), "max_running_requests": res.max_running,
        "max_num_seqs": lim.max_num_seqs, "max_num_batched_tokens": lim.max_num_batched_tokens,
        "scheduler_limits_reason": sv.load.limits_reason,
        "kv_capacity_tokens": sv.kv_capacity_tokens, "kv_capacity_reason": sv.kv_capacity_reason,
        "peak_kv_usage": _round(res.peak_kv_usage), "preemptions": res.preemptions, "steps": res.steps,
        "kv_usage_timeline": [{"time_s": _round(t), "usage": _round(u)} for t, u in res.kv_usage_timeline],
        "assumptions": list(sv.assumptions),
    }


def roofline_to_dict(r) -> dict[str, Any]:
    """`gpuwise roofline --json` (`plot`: the file `--plot` wrote, or null)."""
    rf = r.roofline
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "roofline",
        "model": {"id": r.model.id, "hf_id": r.model.hf_id},
        "gpu": gpu_ref(r.gpu),
        "phase": r.phase, "batch": r.batch, "seq": r.seq, "dtype": rf.dtype,
        "peak_flops": _num(rf.peak_flops),
        "bandwidth_bytes_per_s": _num(rf.bandwidth_bytes_per_s),
        "ridge_flops_per_byte": _round(rf.ridge, 4),
        "achievable_flops": _num(rf.achievable_flops),
        "achievable_bandwidth_bytes_per_s": _num(rf.achievable_bandwidth_bytes_per_s),
        "achievable_ridge_flops_per_byte": _round(rf.achievable_ridge, 4),
        "ops": [{"name": op.name, "flops": _num(op.flops), "bytes": _num(op.bytes),
                 "intensity_flops_per_byte": _round(op.intensity, 4) if op.bytes else None,
                 "bound": rf.bound(op), "time_s": _round(op.time_s)} for op in rf.ops],
        "total_time_s": _round(sum(op.time_s for op in rf.ops)),
        "plot": r.plot,
    }


def gpu_to_dict(g: GPU) -> dict[str, Any]:
    return {
        "id": g.id, "name": g.name, "vendor": g.vendor, "segment": g.segment, "architecture": g.architecture,
        "memory_gb": g.memory_gb, "memory_bytes": g.memory_bytes, "memory_source": g.memory_bytes_source,
        "memory_bandwidth_bytes_per_s": _num(g.memory_bandwidth_bytes_per_s),
        "peak_flops": {k: _num(v) for k, v in g.peak_flops.items()}, "host_cpu": g.host_cpu,
        "interconnect": g.interconnect, "interconnect_bytes_per_s": _num(g.interconnect_bytes_per_s),
        "nvlink": g.nvlink, "tdp_w": g.tdp_w, "power_limit_w": g.power_limit_w,
        "mig_profiles": [{"name": p.name, "memory_gb": p.memory_gb} for p in g.mig_profiles],
        "price_usd": g.price_usd, "price_note": g.price_note, "sources": list(g.sources),
    }


def model_entry_to_dict(e: CatalogEntry) -> dict[str, Any]:
    from ..catalog.models import entry_spec

    spec = entry_spec(e)
    c = param_counts(spec)
    return {
        "id": e.id, "hf_id": e.hf_id, "family": e.family, "params": c.total, "active_params": c.active,
        "layers": spec.num_layers, "hidden_size": spec.hidden_size, "attention": spec.attention_kind,
        "max_position_embeddings": spec.max_position_embeddings, "source": e.source,
    }


def plan_train_command(r, p) -> tuple[dict, str]:
    """(the `gpuwise train` options, as JSON values, that evaluate plan `p`; the command line that runs them):
    `train` reports the plan's memory and step time for them."""
    from ..fields import command_line, to_argv
    from ..plan.train import TrainRequest

    options = p.train_options(r.request)
    argv = to_argv(TrainRequest, options, keep=("num_gpus", "seq", "global_batch", "micro_batch"))
    return ({k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
            command_line("train", r.request.model.id, r.request.gpu.id, argv))


def plan_to_dict(r) -> dict:
    """`gpuwise plan --json`: the ranked layouts (best first) and the search's own figures."""
    from ..plan.planner import describe

    plans = []
    for p in r.plans:
        lay = p.layout
        plans.append({
            "summary": describe(p),
            "tp": lay.tp, "pp": lay.pp, "vpp": lay.vpp, "cp": lay.cp, "ep": lay.ep, "etp": lay.expert_tp, "dp": lay.dp,
            "sp": lay.sp, "sharding": lay.sharding, "shard_group": lay.shard_size if lay.sharding == "hsdp" else None,
            "offload": list(getattr(p, "offload", ()) or ()), "pp_first_layers": lay.pp_first_layers, "pp_last_layers": lay.pp_last_layers,
            "micro_batch": p.micro_batch, "num_microbatches": p.step.num_microbatches, "recompute": p.recompute,
            "step_time_s": round(p.step_time_s, 6), "mfu": None if p.mfu is None else round(p.mfu, 4),
            "memory_per_gpu": _num(p.memory_bytes), "bottleneck": p.bottleneck,
            "bubble_fraction": round(p.step.bubble_fraction, 4),
            "time_breakdown_s": {k: round(v, 6) for k, v in p.step.breakdown.items()},
        })
        plans[-1]["train_options"], plans[-1]["train_command"] = plan_train_command(r, p)
    return {
        "schema_version": SCHEMA_VERSION, "command": "plan",
        "model": {"id": r.request.model.id, "hf_id": r.request.model.hf_id}, "gpu": gpu_ref(r.request.gpu),
        "num_gpus": r.request.num_gpus, "seq": r.request.seq, "global_batch": r.request.global_batch, "framework": r.request.framework,
        "objective": r.request.objective, "compile": r.request.compile,
        "adam_moment_dtypes": _moment_dtypes(r.request),
        "moe": {"token_dispatcher": r.request.moe_token_dispatcher,
                "flex_dispatcher_backend": r.request.job().flex_backend, "a2a_overlap": r.request.moe_a2a_overlap,
                "delay_wgrad_compute": r.request.delay_wgrad_compute,
                "pad_expert_input_to_capacity": r.request.moe_pad_expert_input_to_capacity,
                "permute_fused": r.request.job().moe_permute_fused,
                "te_op_fuser": r.request.use_transformer_engine_op_fuser},
        "cuda_graph_scope": sorted(r.request.job().cuda_graph_scope),
        "fp8_backend": r.request.job().fp8_kernels if r.request.job().quantized_gemms else None,
        "float8_recipe": r.request.job().torchao_float8_recipe,
        "tp_comm_overlap": r.request.tp_comm_overlap, "fp8_param_gather": r.request.fp8_param_gather,
        "grad_reduce_in_fp32": r.request.grad_reduce_in_fp32,
        "mfu_denominator": {"flops_per_s_per_gpu": r.mfu_denominator, "what": "dense peak of the GEMM dtype"},
        "plans": plans, "why": r.why, "evaluated": r.evaluated, "timed": r.timed, "feasible": r.feasible,
        "search_time_s": round(r.search_time_s, 4),
        "evaluated_per_s": round(r.evaluated / r.search_time_s) if r.search_time_s > 0 else None,
    }



def doctor_to_dict(r) -> dict:
    """`gpuwise doctor --json`: the verdict, each remedy with its predicted memory and time, the combination.
    Training: `step_time_s` is the step; inference (`task` "infer"): `tpot_s`, the time per output token."""

    def remedy(x) -> dict:
        return remedy_to_dict(x, r.needed_bytes)

    infer = hasattr(r, "tpot_s")
    doc = {
        "schema_version": SCHEMA_VERSION, "command": "doctor", "task": "infer" if infer else "train",
        "model": {"id": r.request.model.id, "hf_id": r.request.model.hf_id}, "gpu": gpu_ref(r.request.gpu),
        "num_gpus": r.request.num_gpus, "capacity_bytes": _num(r.capacity_bytes),
        "predicted_bytes": _num(r.predicted_bytes), "observed_bytes": _num(r.observed_bytes),
        "offset_bytes": _num(r.offset_bytes), "fits": r.fits, "verdict": r.verdict,
    }
    if infer:
        doc["tpot_s"] = None if r.tpot_s is None else round(r.tpot_s, 6)
    else:
        doc["step_time_s"] = round(r.base.perf.step.step_time_s, 6)
    doc["remedies"] = [remedy(x) for x in r.remedies]
    doc["combination"] = remedy(r.combination) if r.combination is not None else None
    roomy = getattr(r, "roomy", None)
    doc["roomy"] = remedy(roomy) if roomy is not None else None
    return doc


def pick_to_dict(r) -> dict:
    """`gpuwise pick --json`: accepted candidates best first, and every rejection with its rule."""

    def cand(c) -> dict:
        return {"gpu": c.gpu.id, "gpu_name": c.gpu.name, "count": c.count, "fits": c.fits,
                "memory_per_gpu": _num(c.memory_bytes), "memory_capacity": _num(c.gpu.memory_bytes),
                "tokens_per_s": _round(c.tokens_per_s, 3), "usd_per_hour": _round(c.usd_per_hour, 4),
                "usd_per_million_tokens": _round(c.usd_per_million_tokens, 6),
                "kwh_per_million_tokens": _round(c.kwh_per_million_tokens, 6), "price_source": c.price_source,
                "setup": c.setup, "interconnect": c.interconnect,
                "latency_s": {k: _round(v, 6) for k, v in c.latency.items()},
                "run_hours": _round(c.run_hours, 3), "run_usd": _round(c.run_usd, 2), "rule": c.rule,
                "reason": c.reason or None}

    req = r.request
    return {"schema_version": SCHEMA_VERSION, "command": "pick", "model": {"id": req.model.id, "hf_id": req.model.hf_id},
            "task": req.task, "objective": req.objective, "budget_usd_per_hour": req.budget_usd_per_hour,
            "headroom": req.headroom, "ranked": [cand(c) for c in r.ranked], "why": r.why, "accepted": r.accepted,
            "rejected": [cand(c) for c in r.rejected], "search_time_s": round(r.search_time_s, 4)}


def gpu_ref(gpu: GPU) -> dict:
    """The GPU an answer is for, the same object in every command's JSON (docs/json-schema.md): its catalog id, name,
    the memory gpuwise plans with and where that number comes from."""
    return {"id": gpu.id, "name": gpu.name, "memory_bytes": gpu.memory_bytes, "memory_source": gpu.memory_bytes_source}


def runnable_to_dict(r) -> dict:
    """`gpuwise models --fits --json`: every model that runs (ranked), and those that do not."""
    return envelope(
        "models", gpu=gpu_to_dict(r.gpu), num_gpus=r.num_gpus, engine=r.engine, context=r.context,
        runnable=[{"id": x.model.id, "hf_id": x.model.hf_id, "num_gpus": x.num_gpus, "params": x.params,
                   "active_params": x.active_params,
                   "weights_format": x.weights.name, "weight_bytes": x.weight_bytes,
                   "bits_per_weight": round(x.bits_per_weight, 3), "context": x.context, "max_context": x.max_context,
                   "decode_tokens_per_s": x.decode_tokens_per_s, "note": x.note or None} for x in r.runnable],
        detailed_rows=r.top, not_fitting=list(r.not_fitting), speed_unknown=r.speed_unknown,
        search_time_s=round(r.search_time_s, 4))
