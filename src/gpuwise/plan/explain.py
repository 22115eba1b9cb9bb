"""`gpuwise explain TERM`: what a concept means, its numbers on a GPU (and a model), and the command that shows it.

The words live in `catalog/data/glossary.toml` (title, aliases, text, see_also, command templates, sources). Every
number is computed here, from the catalogs and the same estimator functions the other commands use, never typed:
`explain roofline` prints the ridge point `gpuwise roofline` uses, `explain kv-cache` the KV bytes `gpuwise fit`
counts. Without a GPU the numbers are for `DEFAULT_GPU`, and the output says so; model numbers need a model.

Kept light on purpose: the glossary and GPU catalog are small TOML files, the estimators are imported only when
a term needs them, and nothing here imports torch.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ..catalog._toml import load_toml
from ..catalog.gpus import GPU, get_gpu
from ..catalog.models import LoadedModel, load_model
from ..errors import GpuwiseError, suggest
from ..estimate.pipeline import bubble_fraction
from ..units import GB, fmt_count, fmt_gib

DEFAULT_GPU = "h100-sxm"
"""GPU whose numbers are shown when none is given (the articles' running example)."""
MODEL_PLACEHOLDER = "MODEL"
"""What `{model}` becomes in the command templates when no model is given."""
WIDTH = 100
"""Columns of the plain-text output."""

# Example settings behind the computed numbers, each said in the line that uses it.
EXAMPLE_DP = 8
"""Data-parallel GPUs for the ZeRO / FSDP bytes per parameter (one 8-GPU server)."""
EXAMPLE_HSDP_GPUS, EXAMPLE_HSDP_GROUP = 64, 8
EXAMPLE_SEQ = 4096
"""Tokens per training sequence for FLOPs and activation examples (`gpuwise train`'s default --seq)."""
EXAMPLE_DECODE_CONTEXT = 2048
"""Cached tokens per sequence for decode intensity (`gpuwise roofline`'s default --seq)."""
EXAMPLE_DECODE_BATCH = 64
EXAMPLE_LONG_SEQ = 131072
EXAMPLE_CP = 8
EXAMPLE_TP = 8
EXAMPLE_EP = 8
EXAMPLE_MFU = 0.40
"""REFERENCE.md: 30%+ MFU is good, 40%+ excellent (Llama 3 405B: 38-43%)."""
BUBBLE_EXAMPLES = ((4, 1, 1), (4, 4, 1), (8, 8, 1), (8, 64, 1), (8, 64, 2))
"""(stages p, micro-batches m, chunks per GPU v)."""
ACCUMULATION_EXAMPLE = (256, 2, 8)
"""(global batch, micro-batch, data-parallel GPUs), as in the gradient-accumulation command template."""
PEAK_ORDER = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True, slots=True)
class Explanation:
    term: str
    """Canonical term id (one of TERMS)."""
    title: str
    text: str
    """The glossary's explanation, whitespace collapsed to single spaces."""
    see_also: tuple[str, ...]
    commands: tuple[str, ...]
    """Command templates filled with the model (or MODEL) and the GPU id."""
    numbers: dict[str, float | str]
    """Computed values, keys naming their units (`_bytes`, `_s`, `_flop_per_byte`); 'gpu' / 'model' say for what."""
    facts: tuple[str, ...] = ()
    """The numbers in words, one line each (what `render` prints)."""
    sources: tuple[str, ...] = ()
    """Where the facts in `text` come from."""
    aliases: tuple[str, ...] = ()
    gpu_is_default: bool = False
    """True when the GPU numbers are for DEFAULT_GPU because none was given."""


# ----------------------------------------------------------------------------------------------------------------
# The glossary


def _key(name: str) -> str:
    """Lookup key: case, spaces, '-' and '_' ignored ('ZeRO-3' = 'zero3', 'KV cache' = 'kv-cache')."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@lru_cache(maxsize=1)
def _glossary() -> dict[str, dict]:
    return dict(load_toml("glossary.toml")["term"])


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Lookup key -> term id, for ids and aliases (ids win over aliases)."""
    idx = {_key(t): t for t in _glossary()}
    for term, row in _glossary().items():
        for alias in row.get("aliases", []):
            idx.setdefault(_key(alias), term)
    return idx


TERMS: tuple[str, ...] = tuple(sorted(_glossary()))


def resolve(term: str) -> str:
    """The canonical id of a term or alias; GpuwiseError with close matches when unknown."""
    if not isinstance(term, str) or not _key(term):
        raise GpuwiseError("no term given; `gpuwise explain --list` lists them")
    hit = _index().get(_key(term))
    if hit is not None:
        return hit
    names = list(TERMS) + [a for row in _glossary().values() for a in row.get("aliases", [])]
    raise GpuwiseError(f"unknown term '{term}'.{suggest(term, names)} `gpuwise explain --list` lists the terms.")


# ----------------------------------------------------------------------------------------------------------------
# Computed numbers. A provider returns facts: (key or None, value, line or None). A key puts the value in
# `numbers`; a line is shown to the user. Providers abstain (return nothing) where the catalog has no value.

Fact = tuple[str | None, float | str | None, str | None]


def _tf(x: float) -> str:
    return f"{x / 1e12:,.4g}"


def _gbs(x: float) -> str:
    return f"{x / GB:,.4g} GB/s"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _gpu_fact(g: GPU) -> Fact:
    return ("gpu", g.id, None)


def _model_fact(m: LoadedModel) -> Fact:
    return ("model", m.id, None)


def _need_model(what: str) -> Fact:
    return (None, None, f"Pass a model for {what}.")


def _params(m: LoadedModel) -> int:
    from ..model.params import param_counts

    return param_counts(m.spec).total


def _weight_bytes(m: LoadedModel, fmt: str) -> int:
    from ..quant.formats import get_weight_format

    return get_weight_format(fmt).weight_bytes(m.spec)


def _ridge(g: GPU, dtype: str) -> float | None:
    from ..estimate.roofline import ridge_point

    peak, bw = g.peak(dtype), g.memory_bandwidth_bytes_per_s
    return ridge_point(peak, bw) if peak and bw else None


def _compute_dtype(g: GPU) -> str | None:
    """bf16, or fp16 where the GPU has no bf16 (V100, T4): what `gpuwise roofline` uses by default."""
    return "bf16" if "bf16" in g.peak_flops else ("fp16" if "fp16" in g.peak_flops else None)


def _decode_intensity(m: LoadedModel, g: GPU, batch: int) -> tuple[float, float] | None:
    """(FLOP per byte of one decode step, achievable ridge) as `gpuwise roofline --phase decode` computes them."""
    if g.memory_bandwidth_bytes_per_s is None or _compute_dtype(g) is None:
        return None
    from .roofline import RooflineRequest, roofline

    rf = roofline(RooflineRequest(model=m, gpu=g, phase="decode", batch=batch, seq=EXAMPLE_DECODE_CONTEXT)).roofline
    flops = sum(op.flops for op in rf.ops)
    nbytes = sum(op.bytes for op in rf.ops)
    return flops / nbytes, rf.achievable_ridge


def _state_bytes_per_param(framework: str, sharding: str, num_gpus: int, shard_group: int | None = None) -> float:
    """Model-state bytes per parameter on one GPU (bf16 mixed precision, AdamW), from the memory model."""
    from ..estimate.layout import Layout
    from ..estimate.model_states import bytes_per_param

    layout = Layout(num_gpus=num_gpus, sharding=sharding, shard_group=shard_group)
    return sum(bytes_per_param(framework=framework, precision="bf16", optimizer="adamw", layout=layout).values())


def _pcie_one_way(g: GPU) -> float | None:
    """PCIe x16 bytes/s in one direction for the GPU's PCIe generation (catalog network defaults)."""
    from ..catalog.devices import pcie_x16_bytes_per_s

    return pcie_x16_bytes_per_s(g)


def _layer_activation_bytes(m: LoadedModel, *, seq: int, t: int = 1, sp: bool = False, recompute: str) -> float:
    """Korthikanti et al. activation bytes of all layers for one sequence (16-bit), per tensor-parallel rank."""
    from ..estimate.activations import korthikanti_layer_bytes

    s = m.spec
    return s.num_layers * korthikanti_layer_bytes(seq, 1, s.hidden_size, s.num_heads, t=t, sp=sp, recompute=recompute)


def _n_precision(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ..dtypes import get_dtype
    from ..quant.formats import get_weight_format

    out: list[Fact] = []
    sizes = {d: get_dtype(d).bytes for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")}
    sizes["fp4"] = get_weight_format("fp4").bits / 8
    for d, b in sizes.items():
        out.append((f"bytes_per_value_{d}", b, None))
    out.append((None, None, "Bytes per value: " + ", ".join(f"{d} {b:g}" for d, b in sizes.items())
                + " (tf32 is stored as fp32)."))
    out.append(_gpu_fact(g))
    peaks = [(d, g.peak(d)) for d in PEAK_ORDER if g.peak(d)]
    for d, p in peaks:
        out.append((f"peak_{d}_flops_per_s", p, None))
    if peaks:
        missing = [d for d in PEAK_ORDER if not g.peak(d)]
        line = f"{g.name} dense peaks (TFLOP/s; int8 TOP/s): " + ", ".join(f"{d} {_tf(p)}" for d, p in peaks) + "."
        if missing:
            line += f" No {', '.join(missing)} figure in the catalog."
        out.append((None, None, line))
    if m is not None:
        out.append(_model_fact(m))
        parts = []
        for fmt in ("fp32", "bf16", "fp8", "nf4"):
            b = _weight_bytes(m, fmt)
            out.append((f"weights_{fmt}_bytes", b, None))
            parts.append(f"{fmt} {fmt_gib(b, 1)}")
        out.append((None, None, f"{m.id} weights: " + ", ".join(parts) + " (nf4: 4-bit with block scales)."))
    return out


def _n_tensor_cores(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    fp32, dt = g.peak("fp32"), _compute_dtype(g)
    if g.sm_count:
        out.append(("sm_count", g.sm_count, f"{g.name}: {g.sm_count} SMs."))
    if fp32 and dt:
        ratio = g.peak(dt) / fp32
        out.append((f"{dt}_tensor_over_fp32_ratio", ratio,
                    f"{dt} tensor peak {_tf(g.peak(dt))} TFLOP/s vs fp32 (no tensor cores) {_tf(fp32)} TFLOP/s: "
                    f"{ratio:.1f}x."))
    if fp32 and g.peak("tf32"):
        out.append(("tf32_over_fp32_ratio", g.peak("tf32") / fp32,
                    f"tf32 tensor peak {_tf(g.peak('tf32'))} TFLOP/s: {g.peak('tf32') / fp32:.1f}x fp32."))
    return out


def _n_hbm(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g), ("memory_bytes", g.memory_bytes, None)]
    bw = g.memory_bandwidth_bytes_per_s
    kind = g.memory_type or "memory"
    line = f"{g.name}: {fmt_gib(g.memory_bytes, 1)} of {kind}"
    if bw:
        out.append(("memory_bandwidth_bytes_per_s", bw, None))
        out.append(("full_memory_read_s", g.memory_bytes / bw, None))
        line += f" at {_gbs(bw)}: reading all of it once takes {1e3 * g.memory_bytes / bw:.1f} ms"
    out.append((None, None, line + "."))
    if m is None:
        out.append(_need_model("its decode speed limit"))
        return out
    w = _weight_bytes(m, "bf16")
    out += [_model_fact(m), ("weights_bf16_bytes", w, None)]
    if bw:
        t = w / bw
        out += [("decode_min_time_per_token_s", t, None), ("decode_max_tokens_per_s", 1 / t, None)]
        out.append((None, None, f"{m.id} in bf16 ({fmt_gib(w, 1)}): every token at batch 1 reads all weights, so at "
                                f"least {1e3 * t:.2f} ms per token, at most {1 / t:,.0f} tokens/s per sequence "
                                "(datasheet bandwidth, weights only; real kernels reach less)."))
    if w > g.memory_bytes:
        out.append((None, None, f"The bf16 weights alone exceed one {g.id}: split them over GPUs or quantize."))
    return out


def _n_nvlink(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    ic, pcie = g.interconnect_bytes_per_s, _pcie_one_way(g)
    if ic and g.nvlink:
        out += [("interconnect_bytes_per_s", ic, None), ("nvlink_one_way_bytes_per_s", ic / 2, None)]
        out.append((None, None, f"{g.name}: {g.interconnect}, {_gbs(ic)} both directions together, "
                                f"{_gbs(ic / 2)} each way."))
    else:
        out.append((None, None, f"{g.name}: no NVLink in the catalog ({g.interconnect or 'PCIe'})."))
    if pcie:
        out.append(("pcie_one_way_bytes_per_s", pcie, None))
        line = f"PCIe {g.pcie_gen}.0 x16: {_gbs(pcie)} each way"
        if ic and g.nvlink:
            out.append(("nvlink_over_pcie_ratio", ic / 2 / pcie, None))
            line += f"; NVLink is {ic / 2 / pcie:.1f}x faster"
        out.append((None, None, line + "."))
    if m is not None:
        from ..estimate.comm import topology

        topo = topology(g, num_gpus=EXAMPLE_DP)
        grads = 2 * _params(m)  # bf16 gradients
        t = topo.collective_s("all_reduce", grads, EXAMPLE_DP)
        out += [_model_fact(m), ("grad_all_reduce_8_gpus_s", t, None)]
        out.append((None, None, f"All-reducing {m.id}'s bf16 gradients ({fmt_gib(grads, 1)}) over {EXAMPLE_DP} GPUs "
                                f"on {topo.intra.name} (NCCL bus bandwidth {_gbs(topo.intra.busbw_bytes_per_s)}): "
                                f"{1e3 * t:,.0f} ms."))
    return out


def _n_mig(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    if not g.mig_profiles:
        return out + [("mig_profiles", "", f"{g.name}: no MIG profiles in the catalog (not MIG-capable).")]
    names = ", ".join(f"{p.name} (up to {p.max_instances})" if p.max_instances else p.name for p in g.mig_profiles)
    out.append(("mig_profiles", ", ".join(p.name for p in g.mig_profiles), f"{g.name} MIG profiles: {names}."))
    most = max((p.max_instances or 0) for p in g.mig_profiles)
    if most:
        out.append(("mig_max_instances", most, None))
    if m is not None:
        w = _weight_bytes(m, "bf16")
        fits = [p for p in g.mig_profiles if p.memory_bytes > w]
        out.append(_model_fact(m))
        if fits:
            smallest = min(fits, key=lambda p: (p.memory_bytes, p.compute_fraction))
            out.append(("smallest_mig_profile_for_bf16_weights", smallest.name,
                        f"{m.id}'s bf16 weights ({fmt_gib(w, 1)}) alone need at least a {smallest.name} instance; "
                        "the KV cache and runtime need more (gpuwise fit)."))
        else:
            out.append((None, None, f"{m.id}'s bf16 weights ({fmt_gib(w, 1)}) do not fit any MIG instance."))
    return out


def _n_mfu(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    dt = _compute_dtype(g)
    if dt is None:
        return out
    peak = g.peak(dt)
    out.append((f"peak_{dt}_flops_per_s", peak, f"MFU denominator on {g.id}: dense {dt} peak {_tf(peak)} TFLOP/s "
                                                "per GPU."))
    if m is None:
        return out + [_need_model("its FLOPs per token and tokens/s at a given MFU")]
    from ..estimate.flops import step_flops
    from ..model.params import param_counts

    per_token = step_flops(m.spec, seq=EXAMPLE_SEQ, global_batch=1).model_per_token
    active = param_counts(m.spec).active
    rate = EXAMPLE_MFU * peak / per_token
    out += [_model_fact(m), ("model_flops_per_token", per_token, None), ("six_n_flops_per_token", 6 * active, None),
            (f"tokens_per_s_per_gpu_at_{round(100 * EXAMPLE_MFU)}pct_mfu", rate, None)]
    out.append((None, None, f"{m.id}: {per_token / 1e9:,.1f} GFLOP of model FLOPs per training token at "
                            f"{EXAMPLE_SEQ:,}-token sequences (6N with N = {fmt_count(active)} active parameters: "
                            f"{6 * active / 1e9:,.1f}); at {EXAMPLE_MFU:.0%} MFU one {g.id} trains {rate:,.0f} "
                            "tokens/s."))
    return out


def _n_hfu(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [_need_model("its hardware/model FLOPs ratio under recomputation")]
    from ..estimate.flops import step_flops

    out: list[Fact] = [_model_fact(m)]
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
        return out + [_need_model("its model-state memory per GPU")]
    n = _params(m)
    out += [_model_fact(m), _gpu_fact(g)]
    out += [(f"model_state_bytes_{k}", b * n, None) for _, k, b in rows]
    out.append((None, None, f"{m.id} ({fmt_count(n)} parameters): " + ", ".join(
        f"{label} {fmt_gib(b * n, 1)}" for label, _, b in rows) + f" per GPU, of {fmt_gib(g.memory_bytes, 0)} on a "
        f"{g.id} (activations not included)."))
    return out


def _n_zero(g: GPU, m: LoadedModel | None) -> list[Fact]:
    rows = [(label, s, _state_bytes_per_param("deepspeed", s, EXAMPLE_DP))
            for label, s in (("DDP", "ddp"), ("ZeRO-1", "zero1"), ("ZeRO-2", "zero2"), ("ZeRO-3", "zero3"))]
    return _sharding_lines(m, g, rows, f"{EXAMPLE_DP} data-parallel GPUs, DeepSpeed bf16 + AdamW")


def _n_fsdp(g: GPU, m: LoadedModel | None) -> list[Fact]:
    rows = [(label, s, _state_bytes_per_param("fsdp", s, EXAMPLE_DP))
            for label, s in (("DDP", "ddp"), ("full shard", "fsdp-full"), ("grad-op", "fsdp-grad-op"))]
    return _sharding_lines(m, g, rows, f"{EXAMPLE_DP} GPUs, PyTorch FSDP2 bf16 + AdamW (fp32 shards and gradients; "
                                       "grad-op also holds the gathered bf16 weights)")


def _n_hsdp(g: GPU, m: LoadedModel | None) -> list[Fact]:
    n, k = EXAMPLE_HSDP_GPUS, EXAMPLE_HSDP_GROUP
    rows = [("FSDP over all", "fsdp-full", _state_bytes_per_param("fsdp", "fsdp-full", n)),
            (f"HSDP groups of {k}", "hsdp", _state_bytes_per_param("fsdp", "hsdp", n, k))]
    return _sharding_lines(m, g, rows, f"{n} GPUs, FSDP2 bf16 + AdamW")


def _n_data_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    per = _state_bytes_per_param("deepspeed", "ddp", EXAMPLE_DP)
    most = g.memory_bytes / per
    out: list[Fact] = [_gpu_fact(g), ("model_state_bytes_per_param_ddp", per, None),
                       ("max_params_ddp_states_only", most, None)]
    out.append((None, None, f"DDP keeps {per:g} bytes per parameter on every GPU (bf16 + AdamW): one {g.id} "
                            f"({fmt_gib(g.memory_bytes, 0)}) holds the states of at most {fmt_count(most)} parameters, "
                            "before any activations."))
    if m is not None:
        n = _params(m)
        out += [_model_fact(m), ("model_state_bytes_ddp", per * n, None)]
        verdict = "fits" if per * n < g.memory_bytes else "does not fit"
        out.append((None, None, f"{m.id}: {fmt_gib(per * n, 1)} of model states per GPU: {verdict} without "
                                "sharding."))
    return out


def _n_tensor_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ..catalog.devices import network_defaults

    per_node = int(network_defaults()["gpus_per_node"]["default"])
    out: list[Fact] = [_gpu_fact(g), ("gpus_per_node", per_node, None)]
    if g.interconnect_bytes_per_s and g.nvlink:
        out.append((None, None, f"{g.id}: {g.interconnect} at {_gbs(g.interconnect_bytes_per_s / 2)} each way, "
                                f"{per_node} GPUs per server by default: TP up to {per_node}."))
    else:
        out.append((None, None, f"{g.id} has no NVLink in the catalog: TP's per-layer all-reduces go over PCIe."))
    if m is None:
        return out + [_need_model("the tensor-parallel degrees it allows")]
    from ..estimate.layout import divisors

    s = m.spec
    ok = [t for t in divisors(s.num_heads) if t <= per_node
          and (s.mla is not None or s.num_kv_heads % t == 0)
          and (not s.intermediate_size or s.intermediate_size % t == 0)]
    w = _weight_bytes(m, "bf16")
    out += [_model_fact(m), ("valid_tp_degrees", ", ".join(map(str, ok)), None), ("weights_bf16_bytes", w, None)]
    kv = "" if s.mla is not None else f", {s.num_kv_heads} KV heads"
    out.append((None, None, f"{m.id} ({s.num_heads} attention heads{kv}): TP degrees up to {per_node}: "
                            f"{', '.join(map(str, ok))}; bf16 weights {fmt_gib(w, 1)}, about "
                            f"{fmt_gib(w / max(ok), 1)} per GPU at TP {max(ok)}."))
    return out


def _n_sequence_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ..estimate.activations import korthikanti_layer_bytes

    t = EXAMPLE_TP
    # Per token, per hidden unit, per layer, without the attention-score term (s = b = h = 1, selective).
    base = korthikanti_layer_bytes(1, 1, 1, 1, recompute="selective")
    tp = korthikanti_layer_bytes(1, 1, 1, 1, t=t, recompute="selective")
    sp = korthikanti_layer_bytes(1, 1, 1, 1, t=t, sp=True, recompute="selective")
    out: list[Fact] = [("activation_bytes_per_token_hidden_layer_no_tp", base, None),
                       (f"activation_bytes_per_token_hidden_layer_tp{t}", tp, None),
                       (f"activation_bytes_per_token_hidden_layer_tp{t}_sp", sp, None)]
    out.append((None, None, f"Activation bytes per token, per hidden unit and layer (Korthikanti et al., no "
                            f"attention-score term): no TP {base:g}, TP {t} {tp:g}, TP {t} + SP {sp:g}."))
    if m is not None:
        a = _layer_activation_bytes(m, seq=EXAMPLE_SEQ, t=t, recompute="selective")
        b = _layer_activation_bytes(m, seq=EXAMPLE_SEQ, t=t, sp=True, recompute="selective")
        out += [_model_fact(m), (f"activation_bytes_tp{t}", a, None), (f"activation_bytes_tp{t}_sp", b, None)]
        out.append((None, None, f"{m.id}, one {EXAMPLE_SEQ:,}-token sequence, all layers, per GPU: TP {t} "
                                f"{fmt_gib(a, 2)}, TP {t} + SP {fmt_gib(b, 2)}."))
    return out


def _bubble_lines(examples: tuple[tuple[int, int, int], ...]) -> list[Fact]:
    out: list[Fact] = []
    parts = []
    for p, mb, v in examples:
        f = bubble_fraction(p, mb, v)
        key = f"bubble_fraction_p{p}_m{mb}" + (f"_v{v}" if v > 1 else "")
        out.append((key, f, None))
        parts.append(f"p={p}, m={mb}" + (f", v={v}" if v > 1 else "") + f": {_pct(f)}")
    out.append((None, None, "Idle share of a step, (p-1)/(m+p-1) (interleaved: (p-1)/v over m + (p-1)/v): "
                + "; ".join(parts) + "."))
    return out


def _n_pipeline_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out = _bubble_lines(BUBBLE_EXAMPLES[1:4])
    if m is None:
        return out + [_need_model("the pipeline degrees that split its layers evenly")]
    from ..estimate.layout import divisors

    ok = [d for d in divisors(m.spec.num_layers) if d > 1]
    out += [_model_fact(m), ("num_layers", m.spec.num_layers, None), ("even_pp_degrees", ", ".join(map(str, ok)), None)]
    out.append((None, None, f"{m.id} has {m.spec.num_layers} layers: even pipeline splits at --pp "
                            f"{', '.join(map(str, ok)) or '(none)'}."))
    return out


def _n_bubble(g: GPU, m: LoadedModel | None) -> list[Fact]:
    return _bubble_lines(BUBBLE_EXAMPLES)


def _n_context_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [_need_model("its per-GPU activations at long context")]
    s, c = EXAMPLE_LONG_SEQ, EXAMPLE_CP
    keep = _layer_activation_bytes(m, seq=s, recompute="full")
    out: list[Fact] = [_model_fact(m), ("layer_input_bytes_long_seq", keep, None),
                       (f"layer_input_bytes_long_seq_cp{c}", keep / c, None)]
    if m.spec.max_position_embeddings:
        out.append(("max_position_embeddings", m.spec.max_position_embeddings, None))
    out.append((None, None, f"{m.id}, one {s:,}-token sequence: the layer inputs alone (what full recomputation "
                            f"keeps) take {fmt_gib(keep, 1)}; CP {c} leaves {fmt_gib(keep / c, 1)} per GPU."))
    return out


def _n_expert_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [_need_model("its experts and expert memory per GPU")]
    from ..model.params import param_counts

    out: list[Fact] = [_model_fact(m)]
    moe = m.spec.moe
    if moe is None or not m.spec.is_moe:
        return out + [("num_experts", 0, f"{m.id} is a dense model: no routed experts, EP does not apply.")]
    c = param_counts(m.spec)
    e = EXAMPLE_EP
    out += [("num_experts", moe.num_experts, None), ("experts_per_token", moe.top_k, None),
            ("routed_expert_params", c.routed_experts, None), ("active_params", c.active, None),
            (f"routed_expert_bf16_bytes_per_gpu_ep{e}", 2 * c.routed_experts / e, None)]
    out.append((None, None, f"{m.id}: {moe.num_experts} routed experts per MoE layer, {moe.top_k} per token; "
                            f"{fmt_count(c.routed_experts)} of {fmt_count(c.total)} parameters are routed experts, "
                            f"{fmt_count(c.active)} active per token; EP {e} leaves "
                            f"{fmt_gib(2 * c.routed_experts / e, 1)} of bf16 experts per GPU."))
    return out


def _n_arithmetic_intensity(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    dt = _compute_dtype(g)
    r = _ridge(g, dt) if dt else None
    if r is None:
        return out + [(None, None, f"{g.id}: no {dt or 'bf16'} peak or bandwidth in the catalog, no ridge point.")]
    out.append((f"ridge_{dt}_flop_per_byte", r, f"{g.id} ridge point ({dt}): {_tf(g.peak(dt))} TFLOP/s / "
                                                f"{_gbs(g.memory_bandwidth_bytes_per_s)} = {r:.0f} FLOP/byte."))
    if m is None:
        return out + [_need_model("its decode intensity")]
    out.append(_model_fact(m))
    for batch in (1, EXAMPLE_DECODE_BATCH):
        got = _decode_intensity(m, g, batch)
        if got is None:
            continue
        ai, _ = got
        bound = "compute" if ai >= r else "memory"
        out.append((f"decode_intensity_batch{batch}_flop_per_byte", ai,
                    f"{m.id} decode step, batch {batch}, {EXAMPLE_DECODE_CONTEXT:,} cached tokens: {ai:.1f} FLOP/byte "
                    f"({ai / r:.1%} of the ridge): {bound}-bound."))
    return out


def _n_roofline(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    bw = g.memory_bandwidth_bytes_per_s
    ridges = [(d, _ridge(g, d)) for d in PEAK_ORDER if _ridge(g, d)]
    if not ridges:
        return out + [(None, None, f"{g.id}: no peak or bandwidth in the catalog, no roofline.")]
    out.append(("memory_bandwidth_bytes_per_s", bw, None))
    for d, r in ridges:
        out.append((f"ridge_{d}_flop_per_byte", r, None))
    out.append((None, None, f"{g.id} ridge points (datasheet peak / {_gbs(bw)}, FLOP/byte): "
                + ", ".join(f"{d} {r:,.0f}" for d, r in ridges) + "."))
    if m is not None:
        got = _decode_intensity(m, g, 1)
        if got is not None:
            ai, achievable = got
            dt = _compute_dtype(g)
            out += [_model_fact(m), ("decode_intensity_batch1_flop_per_byte", ai, None),
                    (f"achievable_ridge_{dt}_flop_per_byte", achievable, None)]
            bound = "compute" if ai >= achievable else "memory"
            out.append((None, None, f"{m.id} decode at batch 1: {ai:.1f} FLOP/byte against an achievable ridge "
                                    f"of {achievable:.0f}: {bound}-bound."))
    return out


def _n_activation_checkpointing(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [_need_model("its activation memory with and without recomputation")]
    from ..estimate.flops import step_flops

    n = m.spec.num_layers
    every = max(1, round(math.sqrt(n)))
    out: list[Fact] = [_model_fact(m), ("num_layers", n, None), ("sqrt_checkpoint_interval_layers", every, None)]
    act = {mode: _layer_activation_bytes(m, seq=EXAMPLE_SEQ, recompute=mode) for mode in ("none", "selective", "full")}
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


def _n_kv_cache(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [_need_model("its KV bytes per token")]
    from ..dtypes import kv_dtype
    from ..estimate.kv_cache import kv_bytes_per_token, kv_cache_bytes

    bf16, fp8 = kv_dtype("bf16").bytes, kv_dtype("fp8").bytes
    per_tok = kv_bytes_per_token(m.spec, bf16)
    out: list[Fact] = [_model_fact(m), ("kv_bytes_per_token_bf16", per_tok, None)]
    line = f"{m.id} KV cache (vLLM layout): {per_tok / 1024:,.1f} KiB per token in bf16"
    for ctx in (EXAMPLE_SEQ, 32768):
        b = kv_cache_bytes(m.spec, context=ctx, batch=1, bytes_per_element=bf16)
        out.append((f"kv_bytes_per_sequence_{ctx}_bf16", b, None))
        line += f"; {fmt_gib(b, 2)} per {ctx:,}-token sequence"
    out.append((None, None, line + f" (fp8: x{fp8 / bf16:g})."))
    w = _weight_bytes(m, "bf16")
    one = kv_cache_bytes(m.spec, context=32768, batch=1, bytes_per_element=bf16)
    left = g.memory_bytes - w
    out += [_gpu_fact(g)]
    if left > 0:
        n = int(left // one)
        out.append(("max_sequences_32768_after_bf16_weights", n,
                    f"On a {g.id}, the {fmt_gib(left, 1)} left after the bf16 weights hold at most {n} sequences of "
                    "32,768 tokens (no activations or runtime counted; gpuwise fit counts them)."))
    else:
        out.append((None, None, f"The bf16 weights alone exceed one {g.id}: no room for a KV cache on one GPU."))
    return out


def _n_quantization(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [_need_model("its weight size in each format")]
    out: list[Fact] = [_model_fact(m), _gpu_fact(g)]
    parts = []
    for fmt in ("bf16", "fp8", "int8", "awq", "nf4", "Q4_K_M"):
        b = _weight_bytes(m, fmt)
        out.append((f"weights_{fmt.lower()}_bytes", b, None))
        parts.append(f"{fmt} {fmt_gib(b, 1)}")
    out.append((None, None, f"{m.id} weights: " + ", ".join(parts) + f" (one {g.id}: {fmt_gib(g.memory_bytes, 0)})."))
    return out


def _n_gradient_accumulation(g: GPU, m: LoadedModel | None) -> list[Fact]:
    gb, mb, dp = ACCUMULATION_EXAMPLE
    steps = gb // (mb * dp)
    out: list[Fact] = [("accumulation_steps_example", steps,
                        f"Global batch {gb} with micro-batch {mb} on {dp} data-parallel GPUs: {gb} / ({mb} x {dp}) = "
                        f"{steps} accumulation steps per optimizer step.")]
    f = bubble_fraction(4, steps)
    out.append(("bubble_fraction_p4_example", f, f"With 4 pipeline stages those {steps} micro-batches leave a bubble "
                                                 f"of {_pct(f)}."))
    return out


def _n_offload(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out: list[Fact] = [_gpu_fact(g)]
    pcie, bw = _pcie_one_way(g), g.memory_bandwidth_bytes_per_s
    if pcie:
        out.append(("pcie_one_way_bytes_per_s", pcie, None))
        line = f"{g.id}: PCIe {g.pcie_gen}.0 x16 moves {_gbs(pcie)} each way"
        if bw:
            out.append(("hbm_over_pcie_ratio", bw / pcie, None))
            line += f", {bw / pcie:.0f}x less than its memory bandwidth ({_gbs(bw)})"
        out.append((None, None, line + "."))
    if m is None:
        return out + [_need_model("how much host memory and PCIe traffic offloading it takes")]
    from ..estimate.layout import Layout
    from ..estimate.model_states import bytes_per_param

    d = bytes_per_param(framework="deepspeed", precision="bf16", optimizer="adamw", layout=Layout(num_gpus=1))
    n = _params(m)
    host = (d["master_weights"] + d["optimizer"]) * n
    each_way = d["grads"] * n  # bf16 gradients down, updated bf16 weights back up
    out += [_model_fact(m), ("offloaded_optimizer_bytes", host, None), ("pcie_bytes_each_way_per_step", each_way, None)]
    line = (f"{m.id}: ZeRO-Offload keeps {fmt_gib(host, 1)} of fp32 master weights and Adam states in host memory "
            f"and moves {fmt_gib(each_way, 1)} each way per step (bf16 gradients down, weights up)")
    if pcie:
        out.append(("pcie_transfer_s_per_step", each_way / pcie, None))
        line += f": on a single GPU at least {each_way / pcie:.2f} s of PCIe transfer per step"
    out.append((None, None, line + "."))
    return out


_NUMBERS: dict[str, Callable[[GPU, LoadedModel | None], list[Fact]]] = {
    "precision": _n_precision, "tensor-cores": _n_tensor_cores, "hbm": _n_hbm, "nvlink": _n_nvlink, "mig": _n_mig,
    "mfu": _n_mfu, "hfu": _n_hfu, "zero": _n_zero, "fsdp": _n_fsdp, "hsdp": _n_hsdp,
    "data-parallelism": _n_data_parallelism, "tensor-parallelism": _n_tensor_parallelism,
    "sequence-parallelism": _n_sequence_parallelism, "pipeline-parallelism": _n_pipeline_parallelism,
    "bubble": _n_bubble, "context-parallelism": _n_context_parallelism, "expert-parallelism": _n_expert_parallelism,
    "arithmetic-intensity": _n_arithmetic_intensity, "roofline": _n_roofline,
    "activation-checkpointing": _n_activation_checkpointing, "kv-cache": _n_kv_cache,
    "quantization": _n_quantization, "gradient-accumulation": _n_gradient_accumulation, "offload": _n_offload,
}


# ----------------------------------------------------------------------------------------------------------------
# The question and its presenters


def explain(term: str, *, model: str | None = None, gpu: str | None = None) -> Explanation:
    """Explain TERM (an id or alias); numbers for `gpu` (default DEFAULT_GPU) and, when given, `model`."""
    tid = resolve(term)
    row = _glossary()[tid]
    g = get_gpu(gpu if gpu is not None else DEFAULT_GPU)
    m = load_model(model) if model is not None else None
    facts = _NUMBERS[tid](g, m) if tid in _NUMBERS else []
    numbers: dict[str, float | str] = {}
    lines: list[str] = []
    for key, value, line in facts:
        if key is not None and value is not None:
            numbers[key] = value
        if line is not None:
            lines.append(line)
    commands = tuple(c.format(model=m.id if m is not None else MODEL_PLACEHOLDER, gpu=g.id)
                     for c in row.get("commands", []))
    return Explanation(term=tid, title=row["title"], text=" ".join(row["text"].split()),
                       see_also=tuple(row.get("see_also", [])), commands=commands, numbers=numbers,
                       facts=tuple(lines), sources=tuple(row.get("sources", [])),
                       aliases=tuple(row.get("aliases", [])), gpu_is_default=gpu is None and "gpu" in numbers)


def _wrap(text: str, indent: str = "", subsequent: str | None = None) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent=indent,
                         subsequent_indent=indent if subsequent is None else subsequent,
                         break_long_words=False, break_on_hyphens=False)


def _command_lines(cmd: str) -> list[str]:
    """A command on one line, or broken with shell continuations (still pastes) when wider than WIDTH."""
    if len(cmd) + 2 <= WIDTH:
        return ["  " + cmd]
    parts = textwrap.wrap(cmd, width=WIDTH - 8, break_long_words=False, break_on_hyphens=False)
    return ["  " + parts[0] + " \\"] + ["      " + p + " \\" for p in parts[1:-1]] + ["      " + parts[-1]]


def render(e: Explanation) -> str:
    """Plain text: title, explanation, computed numbers, commands, see also, sources; wrapped to WIDTH columns."""
    out = [e.title, "=" * min(len(e.title), WIDTH), *_wrap(e.text)]
    if e.facts:
        where = []
        if "gpu" in e.numbers:
            where.append(str(e.numbers["gpu"]) + (" (default GPU; pass --gpu for another)" if e.gpu_is_default else ""))
        if "model" in e.numbers:
            where.append(str(e.numbers["model"]))
        head = "Numbers, computed from the catalog" + (f" for {' and '.join(where)}" if where else "") + ":"
        out += ["", *_wrap(head)]
        for line in e.facts:
            out += _wrap(line, "  - ", "    ")
    if e.commands:
        out += ["", "See it for your model:"]
        for c in e.commands:
            out += _command_lines(c)
    if e.see_also:
        out += ["", *_wrap("See also: " + ", ".join(e.see_also), "", "  ")]
    if e.sources:
        out += ["", "Sources:"]
        for s in e.sources:
            out += _wrap(s, "  - ", "    ")
    return "\n".join(out)


def to_dict(e: Explanation) -> dict:
    """The `--json` document (schema_version as every gpuwise document)."""
    from ..schema import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "command": "explain", "term": e.term, "title": e.title, "text": e.text,
            "aliases": list(e.aliases), "numbers": dict(e.numbers), "facts": list(e.facts),
            "gpu_is_default": e.gpu_is_default, "commands": list(e.commands), "see_also": list(e.see_also),
            "sources": list(e.sources)}


def list_terms() -> str:
    """`gpuwise explain` with no term: every term, its title and the other names it answers to."""
    width = max(len(t) for t in TERMS) + 2
    out = ["Terms (gpuwise explain TERM; other accepted names in brackets):"]
    for t in TERMS:
        row = _glossary()[t]
        aliases = row.get("aliases", [])
        line = f"  {t.ljust(width)}{row['title']}" + (f" [{', '.join(aliases)}]" if aliases else "")
        out += _wrap(line, "", " " * (width + 2))
    return "\n".join(out)
