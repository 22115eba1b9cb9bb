"""Numbers for the hardware terms: precision, tensor cores, HBM, NVLink (and PCIe), MIG, arithmetic intensity and
the roofline. GPU numbers come from the catalog; the ridge point and the decode intensity are computed as
`gpuwise roofline` computes them."""

from __future__ import annotations

from ...catalog.devices import pcie_x16_bytes_per_s
from ...catalog.gpus import GPU
from ...catalog.models import LoadedModel
from ...units import fmt_gib
from .examples import EXAMPLE_DECODE_BATCH, EXAMPLE_DP, decode_context
from .facts import Fact, Provider, gbs, gpu_fact, model_fact, need_model, params, tflops, weight_bytes

PEAK_ORDER = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
"""The precisions whose dense peaks and ridge points are listed, in this order."""


def ridge(g: GPU, dtype: str) -> float | None:
    """The ridge point (FLOP/byte) of the GPU's dense `dtype` peak over its memory bandwidth; None without either."""
    from ...estimate.roofline import ridge_point

    peak, bw = g.peak(dtype), g.memory_bandwidth_bytes_per_s
    return ridge_point(peak, bw) if peak and bw else None


def compute_dtype(g: GPU) -> str | None:
    """The peak `gpuwise roofline` uses by default (plan/roofline.default_dtype)."""
    from ..roofline import default_dtype

    return default_dtype(g)


def decode_intensity(m: LoadedModel, g: GPU, batch: int) -> tuple[float, float] | None:
    """(FLOP per byte of one decode step, achievable ridge) as `gpuwise roofline --phase decode` computes them."""
    if g.memory_bandwidth_bytes_per_s is None or compute_dtype(g) is None:
        return None
    from ..roofline import RooflineRequest, roofline

    rf = roofline(RooflineRequest(model=m, gpu=g, phase="decode", batch=batch, seq=decode_context())).roofline
    flops = sum(op.flops for op in rf.ops)
    nbytes = sum(op.bytes for op in rf.ops)
    return flops / nbytes, rf.achievable_ridge


def _precision(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ...dtypes import get_dtype
    from ...quant.formats import get_weight_format

    out: list[Fact] = []
    sizes = {d: get_dtype(d).bytes for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")}
    sizes["fp4"] = get_weight_format("fp4").bits / 8
    for d, b in sizes.items():
        out.append((f"bytes_per_value_{d}", b, None))
    out.append((None, None, "Bytes per value: " + ", ".join(f"{d} {b:g}" for d, b in sizes.items())
                + " (tf32 is stored as fp32)."))
    out.append(gpu_fact(g))
    peaks = [(d, g.peak(d)) for d in PEAK_ORDER if g.peak(d)]
    for d, p in peaks:
        out.append((f"peak_{d}_flops_per_s", p, None))
    if peaks:
        missing = [d for d in PEAK_ORDER if not g.peak(d)]
        line = f"{g.name} dense peaks (TFLOP/s; int8 TOP/s): " + ", ".join(f"{d} {tflops(p)}" for d, p in peaks) + "."
        if missing:
            line += f" No {', '.join(missing)} figure in the catalog."
        out.append((None, None, line))
    if m is not None:
        out.append(model_fact(m))
        parts = []
        for fmt in ("fp32", "bf16", "fp8", "nf4"):
            b = weight_bytes(m, fmt)
            out.append((f"weights_{fmt}_bytes", b, None))
            parts.append(f"{fmt} {fmt_gib(b, 1)}")
        out.append((None, None, f"{m.id} weights: " + ", ".join(parts) + " (nf4: 4-bit with block scales)."))
    return out


def _tensor_cores(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g)]
    fp32, dt = g.peak("fp32"), compute_dtype(g)
    if g.sm_count:
        out.append(("sm_count", g.sm_count, f"{g.name}: {g.sm_count} SMs."))
    if fp32 and dt:
        ratio = g.peak(dt) / fp32
        out.append((f"{dt}_tensor_over_fp32_ratio", ratio,
                    f"{dt} tensor peak {tflops(g.peak(dt))} TFLOP/s vs fp32 (no tensor cores) {tflops(fp32)} TFLOP/s: "
                    f"{ratio:.1f}x."))
    if fp32 and g.peak("tf32"):
        out.append(("tf32_over_fp32_ratio", g.peak("tf32") / fp32,
                    f"tf32 tensor peak {tflops(g.peak('tf32'))} TFLOP/s: {g.peak('tf32') / fp32:.1f}x fp32."))
    return out


def _hbm(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g), ("memory_bytes", g.memory_bytes, None)]
    bw = g.memory_bandwidth_bytes_per_s
    kind = g.memory_type or "memory"
    line = f"{g.name}: {fmt_gib(g.memory_bytes, 1)} of {kind}"
    if bw:
        out.append(("memory_bandwidth_bytes_per_s", bw, None))
        out.append(("full_memory_read_s", g.memory_bytes / bw, None))
        line += f" at {gbs(bw)}: reading all of it once takes {1e3 * g.memory_bytes / bw:.1f} ms"
    out.append((None, None, line + "."))
    if m is None:
        out.append(need_model("its decode speed limit"))
        return out
    w = weight_bytes(m, "bf16")
    out += [model_fact(m), ("weights_bf16_bytes", w, None)]
    if bw:
        t = w / bw
        out += [("decode_min_time_per_token_s", t, None), ("decode_max_tokens_per_s", 1 / t, None)]
        out.append((None, None, f"{m.id} in bf16 ({fmt_gib(w, 1)}): every token at batch 1 reads all weights, so at "
                                f"least {1e3 * t:.2f} ms per token, at most {1 / t:,.0f} tokens/s per sequence "
                                "(datasheet bandwidth, weights only; real kernels reach less)."))
    if w > g.memory_bytes:
        out.append((None, None, f"The bf16 weights alone exceed one {g.id}: split them over GPUs or quantize."))
    return out


def _nvlink(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g)]
    ic, pcie = g.interconnect_bytes_per_s, pcie_x16_bytes_per_s(g)
    if ic and g.nvlink:
        out += [("interconnect_bytes_per_s", ic, None), ("nvlink_one_way_bytes_per_s", ic / 2, None)]
        out.append((None, None, f"{g.name}: {g.interconnect}, {gbs(ic)} both directions together, "
                                f"{gbs(ic / 2)} each way."))
    else:
        out.append((None, None, f"{g.name}: no NVLink in the catalog ({g.interconnect or 'PCIe'})."))
    if pcie:
        out.append(("pcie_one_way_bytes_per_s", pcie, None))
        line = f"PCIe {g.pcie_gen}.0 x16: {gbs(pcie)} each way"
        if ic and g.nvlink:
            out.append(("nvlink_over_pcie_ratio", ic / 2 / pcie, None))
            line += f"; NVLink is {ic / 2 / pcie:.1f}x faster"
        out.append((None, None, line + "."))
    if m is not None:
        from ...estimate.comm import topology

        topo = topology(g, num_gpus=EXAMPLE_DP)
        grads = 2 * params(m)  # bf16 gradients
        t = topo.collective_s("all_reduce", grads, EXAMPLE_DP)
        out += [model_fact(m), ("grad_all_reduce_8_gpus_s", t, None)]
        out.append((None, None, f"All-reducing {m.id}'s bf16 gradients ({fmt_gib(grads, 1)}) over {EXAMPLE_DP} GPUs "
                                f"on {topo.intra.name} (NCCL bus bandwidth {gbs(topo.intra.busbw_bytes_per_s)}): "
                                f"{1e3 * t:,.0f} ms."))
    return out


def _mig(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g)]
    if not g.mig_profiles:
        return out + [("mig_profiles", "", f"{g.name}: no MIG profiles in the catalog (not MIG-capable).")]
    names = ", ".join(f"{p.name} (up to {p.max_instances})" if p.max_instances else p.name for p in g.mig_profiles)
    out.append(("mig_profiles", ", ".join(p.name for p in g.mig_profiles), f"{g.name} MIG profiles: {names}."))
    most = max((p.max_instances or 0) for p in g.mig_profiles)
    if most:
        out.append(("mig_max_instances", most, None))
    if m is not None:
        w = weight_bytes(m, "bf16")
        fits = [p for p in g.mig_profiles if p.memory_bytes > w]
        out.append(model_fact(m))
        if fits:
            smallest = min(fits, key=lambda p: (p.memory_bytes, p.compute_fraction))
            out.append(("smallest_mig_profile_for_bf16_weights", smallest.name,
                        f"{m.id}'s bf16 weights ({fmt_gib(w, 1)}) alone need at least a {smallest.name} instance; "
                        "the KV cache and runtime need more (gpuwise fit)."))
        else:
            out.append((None, None, f"{m.id}'s bf16 weights ({fmt_gib(w, 1)}) do not fit any MIG instance."))
    return out


def _arithmetic_intensity(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g)]
    dt = compute_dtype(g)
    r = ridge(g, dt) if dt else None
    if r is None:
        return out + [(None, None, f"{g.id}: no {dt or 'bf16'} peak or bandwidth in the catalog, no ridge point.")]
    out.append((f"ridge_{dt}_flop_per_byte", r, f"{g.id} ridge point ({dt}): {tflops(g.peak(dt))} TFLOP/s / "
                                                f"{gbs(g.memory_bandwidth_bytes_per_s)} = {r:.0f} FLOP/byte."))
    if m is None:
        return out + [need_model("its decode intensity")]
    out.append(model_fact(m))
    for batch in (1, EXAMPLE_DECODE_BATCH):
        got = decode_intensity(m, g, batch)
        if got is None:
            continue
        ai, _ = got
        bound = "compute" if ai >= r else "memory"
        out.append((f"decode_intensity_batch{batch}_flop_per_byte", ai,
                    f"{m.id} decode step, batch {batch}, {decode_context():,} cached tokens: {ai:.1f} FLOP/byte "
                    f"({ai / r:.1%} of the ridge): {bound}-bound."))
    return out


def _roofline(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [gpu_fact(g)]
    bw = g.memory_bandwidth_bytes_per_s
    ridges = [(d, ridge(g, d)) for d in PEAK_ORDER if ridge(g, d)]
    if not ridges:
        return out + [(None, None, f"{g.id}: no peak or bandwidth in the catalog, no roofline.")]
    out.append(("memory_bandwidth_bytes_per_s", bw, None))
    for d, r in ridges:
        out.append((f"ridge_{d}_flop_per_byte", r, None))
    out.append((None, None, f"{g.id} ridge points (datasheet peak / {gbs(bw)}, FLOP/byte): "
                + ", ".join(f"{d} {r:,.0f}" for d, r in ridges) + "."))
    if m is not None:
        got = decode_intensity(m, g, 1)
        if got is not None:
            ai, achievable = got
            dt = compute_dtype(g)
            out += [model_fact(m), ("decode_intensity_batch1_flop_per_byte", ai, None),
                    (f"achievable_ridge_{dt}_flop_per_byte", achievable, None)]
            bound = "compute" if ai >= achievable else "memory"
            out.append((None, None, f"{m.id} decode at batch 1: {ai:.1f} FLOP/byte against an achievable ridge "
                                    f"of {achievable:.0f}: {bound}-bound."))
    return out


NUMBERS: dict[str, Provider] = {
    "precision": _precision, "tensor-cores": _tensor_cores, "hbm": _hbm, "nvlink": _nvlink, "mig": _mig,
    "arithmetic-intensity": _arithmetic_intensity, "roofline": _roofline,
}
