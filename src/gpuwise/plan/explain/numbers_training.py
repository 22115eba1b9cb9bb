"""Numbers for the training terms: MFU and HFU, ZeRO / FSDP / HSDP model-state sharding, activation checkpointing,
gradient accumulation, offload and optimizer states. FLOPs, model-state bytes and activation bytes come from the
estimators `gpuwise train` uses (imported when a term needs them)."""

from __future__ import annotations

import math

from ...catalog.devices import pcie_x16_bytes_per_s
from ...catalog.gpus import GPU
from ...catalog.models import LoadedModel
from ...estimate.pipeline import bubble_fraction
from ...units import fmt_bytes, fmt_count, fmt_gib
from .examples import (ACCUMULATION_EXAMPLE, ACCUMULATION_PP, EXAMPLE_DP, EXAMPLE_HSDP_GPUS, EXAMPLE_HSDP_GROUP,
                       EXAMPLE_MFU, EXAMPLE_SEQ)
from .facts import (Fact, Provider, gbs, gpu_fact, layer_activation_bytes, model_fact, need_model, params, pct,
                    state_bytes_per_param, tflops)


def _mfu(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ...estimate.flops import gemm_dtype, step_flops

    out: list[Fact] = [gpu_fact(g)]
    dt = gemm_dtype(g.peak_flops, "bf16")  # what `gpuwise train` divides by for bf16 training
    peak = g.peak(dt)
    if not peak:
        return out
    out.append((f"peak_{dt}_flops_per_s", peak, f"MFU denominator on {g.id}: dense {dt} peak {tflops(peak)} TFLOP/s "
                                                "per GPU."))
    if m is None:
        return out + [need_model("its FLOPs per token and tokens/s at a given MFU")]
    from ...model.params import param_counts

    per_token = step_flops(m.spec, seq=EXAMPLE_SEQ, global_batch=1).model_per_token
    active = param_counts(m.spec).active
    rate = EXAMPLE_MFU * peak / per_token
    out += [model_fact(m), ("model_flops_per_token", per_token, None), ("six_n_flops_per_token", 6 * active, None),
            (f"tokens_per_s_per_gpu_at_{round(100 * EXAMPLE_MFU)}pct_mfu", rate, None)]
    out.append((None, None, f"{m.id}: {per_token / 1e9:,.1f} GFLOP of model FLOPs per training token at "
                            f"{EXAMPLE_SEQ:,}-token sequences (6N with N = {fmt_count(active)} active parameters: "
                            f"{6 * active / 1e9:,.1f}); at {EXAMPLE_MFU:.0%} MFU one {g.id} trains {rate:,.0f} "
                            "tokens/s."))
    return out


def _hfu(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [need_model("its hardware/model FLOPs ratio under recomputation")]
    from ...estimate.flops import step_flops

    out: list[Fact] = [model_fact(m)]
    parts = []
    for mode in ("selective", "full"):
        f = step_flops(m.spec, seq=EXAMPLE_SEQ, global_batch=1, recompute=mode)
        ratio = f.hardware / f.model
        out.append((f"hfu_over_mfu_{mode}_recompute", ratio, None))
        parts.append(f"{mode} recompute {ratio:.3f}")
    out.append((None, None, f"{m.id} at {EXAMPLE_SEQ:,} tokens, HFU / MFU: " + ", ".join(parts) + "."))
    return out


def _sharding_lines(m: LoadedModel | None, g: GPU, rows: list[tuple[str, str, float]], what: str) -> list[Fact]:
    """rows: (label, key suffix, bytes per parameter) -> facts, with the model's GiB per GPU when a model is given."""
    out: list[Fact] = [(f"model_state_bytes_per_param_{k}", b, None) for _, k, b in rows]
    out.append((None, None, f"Model-state bytes per parameter per GPU, {what}: "
                + ", ".join(f"{label} {b:g}" for label, _, b in rows) + "."))
    if m is None:
        return out + [need_model("its model-state memory per GPU")]
    n = params(m)
    out += [model_fact(m), gpu_fact(g)]
    out += [(f"model_state_bytes_{k}", b * n, None) for _, k, b in rows]
    out.append((None, None, f"{m.id} ({fmt_count(n)} parameters): " + ", ".join(
        f"{label} {fmt_gib(b * n, 1)}" for label, _, b in rows) + f" per GPU, of {fmt_gib(g.memory_bytes, 0)} on a "
        f"{g.id} (activations not included)."))
    return out


def _zero(g: GPU, m: LoadedModel | None) -> list[Fact]:
    rows = [(label, s, state_bytes_per_param("deepspeed", s, EXAMPLE_DP))
            for label, s in (("DDP", "ddp"), ("ZeRO-1", "zero1"), ("ZeRO-2", "zero2"), ("ZeRO-3", "zero3"))]
    return _sharding_lines(m, g, rows, f"{EXAMPLE_DP} data-parallel GPUs, DeepSpeed bf16 + AdamW")


def _fsdp(g: GPU, m: LoadedModel | None) -> list[Fact]:
    rows = [(label, s, state_bytes_per_param("fsdp", s, EXAMPLE_DP))
            for label, s in (("DDP", "ddp"), ("full shard", "fsdp-full"), ("grad-op", "fsdp-grad-op"))]
    return _sharding_lines(m, g, rows, f"{EXAMPLE_DP} GPUs, PyTorch FSDP2 bf16 + AdamW (fp32 shards and gradients; "
                                       "grad-op also holds the gathered bf16 weights)")


def _hsdp(g: GPU, m: LoadedModel | None) -> list[Fact]:
    n, k = EXAMPLE_HSDP_GPUS, EXAMPLE_HSDP_GROUP
    rows = [("FSDP over all", "fsdp-full", state_bytes_per_param("fsdp", "fsdp-full", n)),
            (f"HSDP groups of {k}", "hsdp", state_bytes_per_param("fsdp", "hsdp", n, k))]
    return _sharding_lines(m, g, rows, f"{n} GPUs, FSDP2 bf16 + AdamW")


def _activation_checkpointing(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [need_model("its activation memory with and without recomputation")]
    from ...estimate.flops import step_flops

    n = m.spec.num_layers
    every = max(1, round(math.sqrt(n)))
    out: list[Fact] = [model_fact(m), ("num_layers", n, None), ("sqrt_checkpoint_interval_layers", every, None)]
    act = {mode: layer_activation_bytes(m, seq=EXAMPLE_SEQ, recompute=mode) for mode in ("none", "selective", "full")}
    out += [(f"activation_bytes_{mode}_recompute", b, None) for mode, b in act.items()]
    f = step_flops(m.spec, seq=EXAMPLE_SEQ, global_batch=1, recompute="full")
    out.append(("full_recompute_extra_flops_fraction", f.recompute / f.model, None))
    out.append((None, None, f"{m.id}, one {EXAMPLE_SEQ:,}-token sequence, 16-bit activations of all layers "
                            f"(Korthikanti et al.): no recompute {fmt_gib(act['none'], 2)} with the attention scores "
                            f"stored, {fmt_gib(act['selective'], 2)} without them (selective recompute, or flash "
                            f"attention); full recompute {fmt_gib(act['full'], 2)} and "
                            f"{f.recompute / f.model:.0%} more FLOPs."))
    out.append((None, None, f"sqrt({n} layers) = {math.sqrt(n):.1f}: a checkpoint every ~{every} layers."))
    return out


def _gradient_accumulation(g: GPU, m: LoadedModel | None) -> list[Fact]:
    gb, mb, dp = ACCUMULATION_EXAMPLE
    steps = gb // (mb * dp)
    out: list[Fact] = [("accumulation_steps_example", steps,
                        f"Global batch {gb} with micro-batch {mb} on {dp} data-parallel GPUs: {gb} / ({mb} x {dp}) = "
                        f"{steps} accumulation steps per optimizer step.")]
    p = ACCUMULATION_PP
    f = bubble_fraction(p, steps)
    out.append((f"bubble_fraction_p{p}_example", f, f"With {p} pipeline stages those {steps} micro-batches leave a "
                                                 f"bubble of {pct(f)}."))
    return out


def _offload(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g)]
    pcie, bw = pcie_x16_bytes_per_s(g), g.memory_bandwidth_bytes_per_s
    if pcie:
        out.append(("pcie_one_way_bytes_per_s", pcie, None))
        line = f"{g.id}: PCIe {g.pcie_gen}.0 x16 moves {gbs(pcie)} each way"
        if bw:
            out.append(("hbm_over_pcie_ratio", bw / pcie, None))
            line += f", {bw / pcie:.0f}x less than its memory bandwidth ({gbs(bw)})"
        out.append((None, None, line + "."))
    if m is None:
        return out + [need_model("how much host memory and PCIe traffic offloading it takes")]
    from ...estimate.layout import Layout
    from ...estimate.job import job_default
    from ...estimate.model_states import bytes_per_param

    d = bytes_per_param(framework="deepspeed", precision=job_default("precision"), optimizer=job_default("optimizer"),
                        layout=Layout(num_gpus=1))
    n = params(m)
    host = (d["master_weights"] + d["optimizer"]) * n
    each_way = d["grads"] * n  # bf16 gradients down, updated bf16 weights back up
    out += [model_fact(m), ("offloaded_optimizer_bytes", host, None), ("pcie_bytes_each_way_per_step", each_way, None)]
    line = (f"{m.id}: ZeRO-Offload keeps {fmt_gib(host, 1)} of fp32 master weights and Adam states in host memory "
            f"and moves {fmt_gib(each_way, 1)} each way per step (bf16 gradients down, weights up)")
    if pcie:
        out.append(("pcie_transfer_s_per_step", each_way / pcie, None))
        line += f": on a single GPU at least {each_way / pcie:.2f} s of PCIe transfer per step"
    out.append((None, None, line + "."))
    return out


def _optimizer_states(g: GPU, m: LoadedModel | None) -> list[Fact]:
    """States of each optimizer for the model (the memory model's own rule per tensor: Muon's split between its
    matrices and AdamW's rest is exact), and Muon's Newton-Schulz work on the GPU."""
    from ...estimate import muon
    from ...estimate.job import TrainJob
    from ...estimate.layout import Layout
    from ...estimate.model_states import model_states, stage_tensors

    if m is None:
        return [(None, None, "Optimizer-state bytes per trained parameter in FP32: AdamW 8, 8-bit AdamW ~2.03, "
                             "SGD 4, Muon 4 on its matrices (8 on the AdamW rest), Adafactor a row and a column "
                             "per matrix."), need_model("its optimizer-state memory and Muon's work per step")]
    layout = Layout(num_gpus=1)
    n = params(m)
    out: list[Fact] = [model_fact(m), gpu_fact(g)]
    parts = []
    for name in ("adamw", "adamw-8bit", "adafactor", "sgd", "muon"):
        framework = "deepspeed" if name == "adamw-8bit" else "megatron"  # Megatron runs no bitsandbytes optimizer
        b = model_states(m.spec, layout, 0, TrainJob(framework=framework, optimizer=name)).optimizer
        out.append((f"optimizer_state_bytes_{name.replace('-', '_')}", b, None))
        parts.append(f"{name} {fmt_bytes(b)}")
    out.append((None, None, f"{m.id} ({fmt_count(n)} parameters), optimizer states on one GPU (FP32, unsharded): "
                            + ", ".join(parts) + "; the FP32 master weights and the gradients come on top."))
    groups = stage_tensors(m.spec, layout, 0).groups
    flops = muon.orthogonalize_flops(groups)
    out.append(("muon_newton_schulz_flops_per_step", flops, None))
    if g.peak_flops:
        from ...catalog.devices import default_profile

        s = muon.orthogonalize_s(default_profile(g), groups, dtype=muon.ns_dtype(g.peak_flops), ranks=1,
                                 expert_ranks=1, ep=1)
        out.append(("muon_newton_schulz_s_per_step_one_gpu", s, None))
        out.append((None, None, f"Muon's {muon.NS_STEPS} Newton-Schulz iterations: {flops / 1e12:,.0f} TFLOP per step, "
                                f"{s:.2f} s on one {g.id}; a distributed optimizer over N GPUs gives each 1/N of it."))
    return out


NUMBERS: dict[str, Provider] = {
    "mfu": _mfu, "hfu": _hfu, "zero": _zero, "fsdp": _fsdp, "hsdp": _hsdp,
    "activation-checkpointing": _activation_checkpointing, "gradient-accumulation": _gradient_accumulation,
    "offload": _offload, "optimizer-states": _optimizer_states,
}
