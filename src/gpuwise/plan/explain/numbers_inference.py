"""Numbers for the serving terms: the KV cache (bytes per token and per sequence, as `gpuwise fit` counts them)
and quantization (the model's weights in each format)."""

from __future__ import annotations

from ...catalog.gpus import GPU
from ...catalog.models import LoadedModel
from ...units import KiB, fmt_gib
from .examples import EXAMPLE_KV_CONTEXT, EXAMPLE_SEQ
from .facts import Fact, Provider, gpu_fact, model_fact, need_model, weight_bytes


def _kv_cache(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [need_model("its KV bytes per token")]
    from ...dtypes import kv_dtype
    from ...estimate.kv_cache import kv_bytes_per_token, kv_cache_bytes

    bf16, fp8 = kv_dtype("bf16").bytes, kv_dtype("fp8").bytes
    per_tok = kv_bytes_per_token(m.spec, bf16)
    out: list[Fact] = [model_fact(m), ("kv_bytes_per_token_bf16", per_tok, None)]
    line = f"{m.id} KV cache (vLLM layout): {per_tok / KiB:,.1f} KiB per token in bf16"
    for ctx in (EXAMPLE_SEQ, EXAMPLE_KV_CONTEXT):
        b = kv_cache_bytes(m.spec, context=ctx, batch=1, bytes_per_element=bf16)
        out.append((f"kv_bytes_per_sequence_{ctx}_bf16", b, None))
        line += f"; {fmt_gib(b, 2)} per {ctx:,}-token sequence"
    out.append((None, None, line + f" (fp8: x{fp8 / bf16:g})."))
    w = weight_bytes(m, "bf16")
    long_ctx = EXAMPLE_KV_CONTEXT
    one = kv_cache_bytes(m.spec, context=long_ctx, batch=1, bytes_per_element=bf16)
    left = g.memory_bytes - w
    out += [gpu_fact(g)]
    if left > 0:
        n = int(left // one)
        out.append((f"max_sequences_{long_ctx}_after_bf16_weights", n,
                    f"On a {g.id}, the {fmt_gib(left, 1)} left after the bf16 weights hold at most {n} sequences of "
                    f"{long_ctx:,} tokens (no activations or runtime counted; gpuwise fit counts them)."))
    else:
        out.append((None, None, f"The bf16 weights alone exceed one {g.id}: no room for a KV cache on one GPU."))
    return out


def _quantization(g: GPU, m: LoadedModel | None) -> list[Fact]:
    if m is None:
        return [need_model("its weight size in each format")]
    out: list[Fact] = [model_fact(m), gpu_fact(g)]
    parts = []
    for fmt in ("bf16", "fp8", "int8", "awq", "nf4", "Q4_K_M"):
        b = weight_bytes(m, fmt)
        out.append((f"weights_{fmt.lower()}_bytes", b, None))
        parts.append(f"{fmt} {fmt_gib(b, 1)}")
    out.append((None, None, f"{m.id} weights: " + ", ".join(parts) + f" (one {g.id}: {fmt_gib(g.memory_bytes, 0)})."))
    return out


NUMBERS: dict[str, Provider] = {"kv-cache": _kv_cache, "quantization": _quantization}
