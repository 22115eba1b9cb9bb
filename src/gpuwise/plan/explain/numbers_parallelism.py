"""Numbers for the parallelism terms: data, tensor, sequence, pipeline (and its bubble), context and expert
parallelism. The degrees a model allows come from the layout rules `gpuwise train` and the planner check
(estimate/parallel.py), the bubble from estimate/pipeline.py, the bytes from the memory model."""

from __future__ import annotations

from ...catalog.gpus import GPU
from ...catalog.models import LoadedModel
from ...estimate.pipeline import bubble_fraction
from ...units import fmt_count, fmt_gib
from .examples import BUBBLE_EXAMPLES, EXAMPLE_CP, EXAMPLE_DP, EXAMPLE_EP, EXAMPLE_LONG_SEQ, EXAMPLE_SEQ, EXAMPLE_TP
from .facts import (Fact, Provider, gbs, gpu_fact, layer_activation_bytes, model_fact, need_model, params, pct,
                    state_bytes_per_param, weight_bytes)


def _data_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    per = state_bytes_per_param("deepspeed", "ddp", EXAMPLE_DP)
    most = g.memory_bytes / per
    out: list[Fact] = [gpu_fact(g), ("model_state_bytes_per_param_ddp", per, None),
                       ("max_params_ddp_states_only", most, None)]
    out.append((None, None, f"DDP keeps {per:g} bytes per parameter on every GPU (bf16 + AdamW): one {g.id} "
                            f"({fmt_gib(g.memory_bytes, 0)}) holds the states of at most {fmt_count(most)} parameters, "
                            "before any activations."))
    if m is not None:
        n = params(m)
        out += [model_fact(m), ("model_state_bytes_ddp", per * n, None)]
        verdict = "fits" if per * n < g.memory_bytes else "does not fit"
        out.append((None, None, f"{m.id}: {fmt_gib(per * n, 1)} of model states per GPU: {verdict} without "
                                "sharding."))
    return out


def _tensor_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ...estimate.comm import default_gpus_per_node

    per_node = default_gpus_per_node(g)
    out: list[Fact] = [gpu_fact(g), ("gpus_per_node", per_node, None)]
    if g.interconnect_bytes_per_s and g.nvlink:
        out.append((None, None, f"{g.id}: {g.interconnect} at {gbs(g.interconnect_bytes_per_s / 2)} each way, "
                                f"{per_node} GPUs per server by default: TP up to {per_node}."))
    else:
        out.append((None, None, f"{g.id} has no NVLink in the catalog: TP's per-layer all-reduces go over PCIe."))
    if m is None:
        return out + [need_model("the tensor-parallel degrees it allows")]
    from ...estimate.parallel import valid_tp_degrees

    s = m.spec
    ok = valid_tp_degrees(s, per_node)
    w = weight_bytes(m, "bf16")
    out += [model_fact(m), ("valid_tp_degrees", ", ".join(map(str, ok)), None), ("weights_bf16_bytes", w, None)]
    kv = "" if s.mla is not None else f", {s.num_kv_heads} KV heads"
    out.append((None, None, f"{m.id} ({s.num_heads} attention heads{kv}): TP degrees up to {per_node}: "
                            f"{', '.join(map(str, ok))}; bf16 weights {fmt_gib(w, 1)}, about "
                            f"{fmt_gib(w / max(ok), 1)} per GPU at TP {max(ok)}."))
    return out


def _sequence_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    from ...estimate.activations import korthikanti_layer_bytes

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
        a = layer_activation_bytes(m, seq=EXAMPLE_SEQ, t=t, recompute="selective")
        b = layer_activation_bytes(m, seq=EXAMPLE_SEQ, t=t, sp=True, recompute="selective")
        out += [model_fact(m), (f"activation_bytes_tp{t}", a, None), (f"activation_bytes_tp{t}_sp", b, None)]
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
        parts.append(f"p={p}, m={mb}" + (f", v={v}" if v > 1 else "") + f": {pct(f)}")
    out.append((None, None, "Idle share of a step, (p-1)/(m+p-1) (interleaved: (p-1)/v over m + (p-1)/v): "
                + "; ".join(parts) + "."))
    return out


def _pipeline_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    out = _bubble_lines(BUBBLE_EXAMPLES[1:4])
    if m is None:
        return out + [need_model("the pipeline degrees that split its layers evenly")]
    from ...estimate.layout import divisors

    ok = [d for d in divisors(m.spec.num_layers) if d > 1]
    out += [model_fact(m), ("num_layers", m.spec.num_layers, None), ("even_pp_degrees", ", ".join(map(str, ok)), None)]
    out.append((None, None, f"{m.id} has {m.spec.num_layers} layers: even pipeline splits at --pp "
                            f"{', '.join(map(str, ok)) or '(none)'}."))
    return out


def _bubble(g: GPU, m: LoadedModel | None) -> list[Fact]:
    return _bubble_lines(BUBBLE_EXAMPLES)


def _context_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [need_model("its per-GPU activations at long context")]
    s, c = EXAMPLE_LONG_SEQ, EXAMPLE_CP
    keep = layer_activation_bytes(m, seq=s, recompute="full")
    out: list[Fact] = [model_fact(m), ("layer_input_bytes_long_seq", keep, None),
                       (f"layer_input_bytes_long_seq_cp{c}", keep / c, None)]
    if m.spec.max_position_embeddings:
        out.append(("max_position_embeddings", m.spec.max_position_embeddings, None))
    out.append((None, None, f"{m.id}, one {s:,}-token sequence: the layer inputs alone (what full recomputation "
                            f"keeps) take {fmt_gib(keep, 1)}; CP {c} leaves {fmt_gib(keep / c, 1)} per GPU."))
    return out


def _expert_parallelism(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [need_model("its experts and expert memory per GPU")]
    from ...model.params import param_counts

    out: list[Fact] = [model_fact(m)]
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


NUMBERS: dict[str, Provider] = {
    "data-parallelism": _data_parallelism, "tensor-parallelism": _tensor_parallelism,
    "sequence-parallelism": _sequence_parallelism, "pipeline-parallelism": _pipeline_parallelism,
    "bubble": _bubble, "context-parallelism": _context_parallelism, "expert-parallelism": _expert_parallelism,
}
