"""GGUF (llama.cpp) weight sizes: block formats and the per-tensor type rules of each file type.

A GGUF "Q4_K_M" file is not 4.5 bits everywhere: llama.cpp's quantizer (`llama_tensor_get_type` in
src/llama-quant.cpp) keeps the output matrix at Q6_K, gives attn_v and ffn_down more bits in some
layers, keeps 1-D tensors (norms, biases), the MoE router and learned position embeddings in F32,
and falls back to another type when a row length is not a multiple of the block size. This module
reproduces those rules so that file sizes of real GGUF files come out within a few percent
(tests/quant/test_gguf_sizes.py checks published Llama-3 8B/70B sizes).

Block sizes and bytes per block are ggml's (ggml/src/ggml-common.h block structs, type traits).
"""

from __future__ import annotations

from ..model.params import Tensor, tensor_inventory
from ..model.spec import ModelSpec

# name -> (weights per block, bytes per block)
BLOCK_TYPES: dict[str, tuple[int, int]] = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
    "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
    "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
    "Q8_K": (256, 292),
    "IQ1_S": (256, 50), "IQ1_M": (256, 56), "IQ2_XXS": (256, 66), "IQ2_XS": (256, 74), "IQ2_S": (256, 82),
    "IQ3_XXS": (256, 98), "IQ3_S": (256, 110), "IQ4_NL": (32, 18), "IQ4_XS": (256, 136),
    "TQ1_0": (256, 54), "TQ2_0": (256, 66),
}

# llama.cpp file types (llama_ftype) -> the default tensor type (llama_model_quantize_impl).
FILE_TYPES: dict[str, str] = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q6_K": "Q6_K",
    "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K", "Q5_1": "Q5_1", "Q5_0": "Q5_0",
    "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q4_1": "Q4_1", "Q4_0": "Q4_0",
    "Q3_K_L": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_S": "Q3_K", "Q2_K": "Q2_K", "Q2_K_S": "Q2_K",
    "IQ4_XS": "IQ4_XS", "IQ4_NL": "IQ4_NL", "IQ3_M": "IQ3_S", "IQ3_S": "IQ3_S", "IQ3_XS": "IQ3_S",
    "IQ3_XXS": "IQ3_XXS", "IQ2_M": "IQ2_S", "IQ2_S": "IQ2_XS", "IQ2_XS": "IQ2_XS", "IQ2_XXS": "IQ2_XXS",
    "IQ1_M": "IQ1_M", "IQ1_S": "IQ1_S", "TQ1_0": "TQ1_0", "TQ2_0": "TQ2_0",
}

_IQ2_FAMILY = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M"}
_INCOMPATIBLE_FALLBACK = {
    "TQ1_0": "Q4_0", "TQ2_0": "Q4_0",
    "IQ2_XXS": "IQ4_NL", "IQ2_XS": "IQ4_NL", "IQ2_S": "IQ4_NL", "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL",
    "IQ1_S": "IQ4_NL", "IQ1_M": "IQ4_NL", "Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL", "IQ4_XS": "IQ4_NL",
    "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0",
}


def bits_per_weight(block_type: str) -> float:
    n, size = BLOCK_TYPES[block_type]
    return size * 8 / n


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp: the first and last eighth of the layers, and every third one in between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def gguf_tensors(spec: ModelSpec) -> list[Tensor]:
    """The inventory as a GGUF file lays it out: fused QKV models store one attn_qkv matrix."""
    out: list[Tensor] = []
    pending: dict[int, list[Tensor]] = {}
    for t in tensor_inventory(spec):
        if spec.fused_qkv and t.role in ("attn_q", "attn_k", "attn_v"):
            group = pending.setdefault(t.layer, [])
            group.append(t)
            if len(group) == 3:
                rows = sum(x.shape[0] for x in group)
                out.append(Tensor("attn_qkv", t.layer, (rows, group[0].shape[1])))
            continue
        out.append(t)
    return out


def _rule(ftype: str, base: str, t: Tensor, spec: ModelSpec, *, imatrix: bool, falcon: bool, big70b: bool) -> str:
    """llama_tensor_get_type for one 2-D tensor (condensed; same order of checks as llama.cpp).

    Follows current llama.cpp (2025-26), where attn_qkv and attn_kv_b are treated like attn_v; the
    rules gave the same types for Llama-family files made in the Llama-3 era (byte-exact matches).
    """
    new = base
    role = t.role
    n_layers = spec.num_layers
    i = t.layer if t.layer is not None else 0
    n_gqa = spec.num_heads // spec.num_kv_heads
    n_expert = spec.moe.num_experts if spec.moe is not None else 0
    has_output = not spec.tie_word_embeddings
    if role == "output" or (not has_output and role == "token_embd"):
        if falcon or t.shape[1] % BLOCK_TYPES[new][0] != 0:
            return "Q8_0"
        if ftype in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"):
            return "Q5_K"
        return "Q6_K" if new != "Q8_0" else new
    if role == "token_embd":
        if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            return "Q2_K"
        if ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            return "IQ3_S"
        if ftype in ("TQ1_0", "TQ2_0"):
            return "Q4_K"
        return new
    attn_v_like = role in ("attn_v", "attn_qkv", "attn_kv_b")  # category_is_attn_v in current llama.cpp
    if ftype in _IQ2_FAMILY:
        if attn_v_like:
            if n_gqa >= 4 or n_expert >= 4:
                return "Q4_K"
            return "IQ3_S" if ftype in ("IQ2_S", "IQ2_M") else "Q2_K"
        if n_expert == 8 and role == "attn_k":
            return "Q4_K"
        if role.startswith("ffn_down"):
            if i < n_layers // 8:
                return "IQ3_S" if ftype in ("IQ2_S", "IQ2_M") else "Q2_K"
            return new
        if role == "attn_output":
            if n_expert == 8:
                return "Q5_K"
            if ftype in ("IQ1_S", "IQ1_M"):
                return "IQ2_XXS"
            if ftype in ("IQ2_S", "IQ2_M"):
                return "IQ3_S"
        return new
    if attn_v_like:
        if ftype == "Q2_K":
            new = "Q4_K" if n_gqa >= 4 else "Q3_K"
        elif ftype == "Q2_K_S" and n_gqa >= 4:
            new = "Q4_K"
        elif ftype == "IQ3_XXS":
            new = "Q4_K" if n_gqa >= 4 else ("IQ3_XXS" if imatrix else "IQ3_S")
        elif ftype in ("IQ3_XS", "IQ3_S") and n_gqa >= 4:
            new = "Q4_K"
        elif ftype == "IQ3_M":
            new = "Q4_K"
        elif ftype == "Q3_K_M":
            new = "Q5_K" if i < 2 else "Q4_K"
        elif ftype == "Q3_K_L":
            new = "Q5_K"
        elif ftype in ("IQ4_NL", "IQ4_XS") and n_gqa >= 4:
            new = "Q5_K"
        elif ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, n_layers):
            new = "Q6_K"
        elif ftype == "Q4_K_S" and i < 4:
            new = "Q5_K"
        if big70b and new in ("Q3_K", "Q4_K"):
            new = "Q5_K"
        if n_expert == 8:
            new = "Q8_0"
        return new
    if role == "attn_k":
        if n_expert == 8:
            return "Q8_0"
        if ftype == "IQ3_XS":
            return "IQ3_XXS"
        if ftype == "IQ3_XXS":
            return "IQ2_S"
        return new
    if role == "attn_q":
        if ftype == "IQ3_XS":
            return "IQ3_XXS"
        if ftype == "IQ3_XXS":
            return "IQ2_S"
        return new
    if role.startswith("ffn_down"):
        if ftype == "Q2_K":
            return "Q3_K"
        if ftype == "Q2_K_S":
            return "Q4_K" if i < n_layers // 8 else new
        if ftype == "IQ3_XXS" and not imatrix:
            return "Q4_K" if i < n_layers // 8 else "Q3_K"
        if ftype == "Q3_K_M":
            if i < n_layers // 16:
                return "Q5_K"
            return "Q4_K" if (not falcon or use_more_bits(i, n_layers)) else "Q3_K"
        if ftype == "IQ3_M" and (i < n_layers // 8 or (n_expert == 8 and use_more_bits(i, n_layers))):
            return "Q4_K"
        if ftype == "Q3_K_L":
            return "Q4_K" if falcon else "Q5_K"
        if ftype == "Q4_K_M":
            if falcon:
                return "Q6_K" if i < n_layers // 16 else ("Q5_K" if use_more_bits(i, n_layers) else "Q4_K")
            return "Q6_K" if use_more_bits(i, n_layers) else new
        if i < n_layers // 8 and ftype in ("IQ4_NL", "IQ4_XS") and not imatrix:
            return "Q5_K"
        if ftype == "Q5_K_M" and use_more_bits(i, n_layers):
            return "Q6_K"
        if ftype == "Q4_K_S" and not falcon and i < n_layers // 8:
            return "Q5_K"
        if ftype in ("Q4_0", "Q5_0") and imatrix and i < n_layers // 8:
            return "Q4_1" if ftype == "Q4_0" else "Q5_1"
        return new
    if role == "attn_output":
        if not falcon:
            if n_expert == 8:
                if ftype in ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S",
                             "IQ3_M", "IQ4_XS"):
                    return "Q5_K"
                return new
            return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K",
                    "IQ3_M": "Q4_K"}.get(ftype, new)
        return "Q4_K" if ftype == "Q3_K_L" else new
    if role.startswith(("ffn_gate", "ffn_up")):
        if ftype == "IQ3_XS" and n_layers // 8 <= i < 7 * n_layers // 8:
            return "IQ3_XXS"
        return new
    return new


def tensor_type(ftype: str, t: Tensor, spec: ModelSpec, *, imatrix: bool = True) -> str:
    """The GGML type llama.cpp gives tensor `t` in a file of type `ftype` (e.g. 'Q4_K_M')."""
    base = FILE_TYPES[ftype]
    if len(t.shape) < 2 or t.role in ("norm", "bias", "ffn_gate_inp", "pos_embd"):
        return "F32"  # 1-D tensors, the MoE router and position embeddings stay F32 (convert_hf_to_gguf.py)
    if base in ("F32", "F16", "BF16"):
        return base
    n = spec.num_layers
    i = t.layer if t.layer is not None else 0
    # Everything the rules read: the tensor's role and shape, where its layer sits in the stack, and five of the
    # model's numbers; the same key gives the same type, so a model's repeated layers are typed once.
    key = (ftype, imatrix, t.role, t.shape, layer_class(i, n), spec.family, n, spec.num_heads // spec.num_kv_heads,
           spec.moe.num_experts if spec.moe is not None else 0, spec.tie_word_embeddings)
    new = _TYPES.get(key)
    if new is None:
        if len(_TYPES) > 200_000:
            _TYPES.clear()
        falcon = spec.family == "falcon"
        # LLM_TYPE_70B: llama.cpp's size class for 80-layer Llama 2/3 70B models.
        big70b = spec.family == "llama" and n == 80
        new = _rule(ftype, base, t, spec, imatrix=imatrix, falcon=falcon, big70b=big70b)
        row = t.shape[-1]  # ggml ne[0]: the contiguous (input) dimension
        if row % BLOCK_TYPES[new][0] != 0:
            new = _INCOMPATIBLE_FALLBACK.get(new, "F16")
            if row % BLOCK_TYPES[new][0] != 0:
                new = "F16"
        _TYPES[key] = new
    return new


def layer_class(i: int, n: int) -> tuple[bool, ...]:
    """Where block `i` of `n` sits, as far as the type rules ask (the first 2, 4, sixteenth and eighth of the stack,
    the last eighth, llama.cpp's use_more_bits): blocks alike in this and in their tensors get the same types."""
    return (i < 2, i < 4, i < n // 16, i < n // 8, i >= 7 * n // 8, use_more_bits(i, n))


_TYPES: dict[tuple, str] = {}
"""tensor_type's answers by what decides them (bounded: emptied past 200,000 keys)."""


def tensor_bytes(block_type: str, numel: int) -> int:
    n, size = BLOCK_TYPES[block_type]
    return -(-numel // n) * size
