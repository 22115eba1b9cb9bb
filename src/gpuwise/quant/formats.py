"""Weight formats: floating point, bitsandbytes (NF4/FP4/LLM.int8), GPTQ, AWQ, FP8 checkpoints, GGUF.

`get_weight_format(name)` takes what users type (`bf16`, `float16`, `nf4`, `nf4-dq`, `gptq`,
`gptq-8bit-g32`, `awq`, `fp8`, `Q4_K_M`, `q5_k_m` ...) and returns a `WeightFormat` whose
`weight_bytes(spec)` sums, tensor by tensor, what that format stores: quantized 2-D linear weights
with their scales/zeros, and the tensors that the tool chain leaves in 16 bits (embeddings, lm_head,
norms). Storage layouts and their sources:

- bitsandbytes 4-bit (NF4/FP4): 4-bit codes + one fp32 absmax per block of 64 weights (4.5 bits);
  with double quantization the absmax is stored as 8 bits with one fp32 scale per 256 blocks
  (4 + 8/64 + 32/(64*256) = 4.127 bits). transformers keeps lm_head and embeddings unquantized
  (bitsandbytes docs; transformers `integrations/bitsandbytes.py`, `get_keys_to_not_convert`).
- LLM.int8(): int8 weights + one fp32 scale per output row (bitsandbytes `Int8Params.SCB`).
- GPTQ (AutoGPTQ / GPTQModel packing): `bits` per weight packed in int32, fp16 scales and
  `bits`-wide packed zeros per group of `group_size` input features per output column, and an int32
  `g_idx` per input feature.
- AWQ (AutoAWQ GEMM): the same per-group fp16 scales and packed zeros, no g_idx.
- FP8 checkpoints: 8-bit linear weights; DeepSeek-V3 style block scales (fp32 per 128x128) or one
  per tensor; embeddings, lm_head and norms in bf16.
- GGUF: per-tensor rules of llama.cpp, see `gguf.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..dtypes import _DTYPES, canonical
from ..errors import UnknownFormatError, suggest
from ..model.params import Tensor, tensor_inventory
from ..model.spec import ModelSpec
from . import gguf

_NOT_QUANTIZED = ("token_embd", "pos_embd", "output", "norm", "bias", "ffn_gate_inp", "ffn_gate_inp_shexp")


@dataclass(frozen=True, slots=True)
class WeightFormat:
    name: str
    """Canonical name: bf16, fp8, nf4, nf4-dq, int8, gptq-4bit-g128, awq-4bit-g128, gguf:Q4_K_M ..."""
    kind: str
    """'float', 'bnb', 'gptq', 'awq', 'fp8', 'gguf'."""
    description: str
    bits: float = 16.0
    """Bits of a quantized weight element (before scales)."""
    group_size: int = 0
    keep_dtype_bits: float = 16.0
    """Bits of the tensors the format leaves unquantized (embeddings, lm_head, norms)."""
    imatrix: bool = True
    """GGUF only: the file was made with an importance matrix (changes a few IQ/Q4_0 choices)."""
    experts_only: bool = False
    """Only the routed experts' matrices are quantized, the rest kept 16-bit (gpt-oss's MXFP4 checkpoints:
    transformers' mxfp4 integration swaps only the MoE experts; attention, router, embeddings stay bf16)."""

    @property
    def is_gguf(self) -> bool:
        return self.kind == "gguf"

    def matrix_bits(self, t: Tensor) -> float:
        """Bits per weight, scales and zeros included, for a quantized 2-D weight."""
        rows, cols = t.shape[0], t.shape[-1]  # (out_features, in_features)
        if self.kind == "float":
            return self.bits
        if self.kind == "bnb":
            if self.bits == 8:  # LLM.int8(): one fp32 scale per output row
                return 8 + 32 / cols
            if self.name.endswith("-dq"):
                return 4 + 8 / 64 + 32 / (64 * 256)
            return 4 + 32 / 64
        if self.kind in ("gptq", "awq"):
            g = self.group_size if self.group_size > 0 else cols  # -1 = one group per column
            extra = (16 + self.bits) / g
            if self.kind == "gptq":
                extra += 32 / rows  # g_idx: one int32 per input feature
            return self.bits + extra
        if self.kind == "fp8":
            return 8 + 32 / (128 * 128)  # block-wise fp32 scales (DeepSeek-V3 weight_block_size [128, 128])
        if self.kind == "int-sym":  # compressed-tensors pack-quantized: symmetric, one 16-bit scale per group
            g = self.group_size if self.group_size > 0 else cols
            return self.bits + 16 / g
        if self.kind == "microscaling":  # element bits + one scale per block (group_size elements)
            return self.bits + MICROSCALING_SCALE_BITS[self.name.split("-")[0]] / self.group_size
        raise AssertionError(self.kind)

    def weight_bytes(self, spec: ModelSpec) -> int:
        return _weight_bytes(self, spec)


@lru_cache(maxsize=512)
def _weight_bytes(fmt: WeightFormat, spec: ModelSpec) -> int:
    if fmt.kind == "gguf":
        pre, layers, post = weight_bytes_by_layer(fmt, spec)
        return int(round(pre + sum(layers) + post))
    # every block repeats the same few tensors: each kind's bytes once, times how many there are
    return int(round(sum(count * t.numel * _bits(fmt, t) / 8 for t, count in _tensor_kinds(spec))))


@lru_cache(maxsize=256)
def _tensor_kinds(spec: ModelSpec) -> tuple[tuple[Tensor, int], ...]:
    """The stored tensors grouped by (role, shape, experts), each group's first tensor with its count."""
    groups: dict[tuple, list] = {}
    for t in tensor_inventory(spec):
        g = groups.setdefault((t.role, t.shape, t.experts), [t, 0])
        g[1] += 1
    return tuple((t, n) for t, n in groups.values())


def _bits(fmt: WeightFormat, t: Tensor) -> float:
    """Bits per element of tensor `t` under a float / integer / microscaling format (not GGUF)."""
    if fmt.kind == "float":
        return fmt.bits
    if t.role in _NOT_QUANTIZED or not t.is_matrix or (fmt.experts_only and not t.role.endswith("_exps")):
        return fmt.keep_dtype_bits
    return fmt.matrix_bits(t)


@lru_cache(maxsize=512)
def tensor_bytes(fmt: WeightFormat, spec: ModelSpec) -> tuple[tuple[Tensor, float], ...]:
    """(tensor, bytes) for every stored tensor, in file order (GGUF: fused QKV as one attn_qkv)."""
    if fmt.kind == "gguf":
        ftype = fmt.name.split(":", 1)[1]
        return tuple(
            (t, float(gguf.tensor_bytes(gguf.tensor_type(ftype, t, spec, imatrix=fmt.imatrix), t.numel)))
            for t in gguf.gguf_tensors(spec)
        )
    return tuple((t, t.numel * _bits(fmt, t) / 8) for t in tensor_inventory(spec))


@lru_cache(maxsize=256)
def _gguf_groups(spec: ModelSpec) -> tuple[tuple[Tensor, ...], tuple[tuple[Tensor, ...], ...], tuple[Tensor, ...],
                                           tuple[int, ...]]:
    """A GGUF file's tensors split as weight_bytes_by_layer splits them (input side, each block, output side), and for
    each block the first block with the same tensors (roles, shapes, experts)."""
    pre: list[Tensor] = []
    post: list[Tensor] = []
    layers: list[list[Tensor]] = [[] for _ in range(spec.num_layers)]
    seen_blocks = False
    for t in gguf.gguf_tensors(spec):
        if t.layer is not None:
            layers[t.layer].append(t)
            seen_blocks = True
        elif t.role == "output" or seen_blocks:
            post.append(t)
        else:
            pre.append(t)
    first: dict[tuple, int] = {}
    same = tuple(first.setdefault(tuple((t.role, t.shape, t.experts) for t in ts), i) for i, ts in enumerate(layers))
    return tuple(pre), tuple(map(tuple, layers)), tuple(post), same


def _gguf_by_layer(fmt: WeightFormat, spec: ModelSpec) -> tuple[float, tuple[float, ...], float]:
    """weight_bytes_by_layer for a GGUF file, each kind of block typed once: llama.cpp's rules read a block's tensors
    and where the block sits in the stack (gguf.layer_class), nothing else that differs between blocks."""
    ftype = fmt.name.split(":", 1)[1]

    def size(ts: tuple[Tensor, ...]) -> float:
        return float(sum(gguf.tensor_bytes(gguf.tensor_type(ftype, t, spec, imatrix=fmt.imatrix), t.numel)
                         for t in ts))

    pre, layers, post, same = _gguf_groups(spec)
    done: dict[tuple, float] = {}
    out = []
    for i, ts in enumerate(layers):
        key = (same[i], gguf.layer_class(i, spec.num_layers))
        b = done.get(key)
        if b is None:
            b = done[key] = size(ts)
        out.append(b)
    return size(pre), tuple(out), size(post)


@lru_cache(maxsize=512)
def matrix_bytes_per_param(fmt: WeightFormat, spec: ModelSpec) -> float:
    """Bytes per parameter of the matrices a forward pass reads (every 2-D weight but the embedding tables): what the
    speed models charge per weight. GGUF files: each kind of block typed once, as in `_gguf_by_layer`."""
    skip = ("token_embd", "pos_embd")
    if fmt.kind != "gguf":
        pairs = [(t.numel, b) for t, b in tensor_bytes(fmt, spec) if t.is_matrix and t.role not in skip]
        return sum(b for _, b in pairs) / sum(n for n, _ in pairs)
    ftype = fmt.name.split(":", 1)[1]
    pre, layers, post, same = _gguf_groups(spec)
    params = total = 0.0
    done: dict[tuple, tuple[float, float]] = {}

    def stats(ts: tuple[Tensor, ...]) -> tuple[float, float]:
        mats = [t for t in ts if t.is_matrix and t.role not in skip]
        return (float(sum(t.numel for t in mats)),
                float(sum(gguf.tensor_bytes(gguf.tensor_type(ftype, t, spec, imatrix=fmt.imatrix), t.numel)
                          for t in mats)))

    for i, ts in enumerate(layers):
        key = (same[i], gguf.layer_class(i, spec.num_layers))
        if key not in done:
            done[key] = stats(ts)
        n, b = done[key]
        params, total = params + n, total + b
    for ts in (pre, post):
        n, b = stats(ts)
        params, total = params + n, total + b
    return total / params


@lru_cache(maxsize=512)
def weight_bytes_by_layer(fmt: WeightFormat, spec: ModelSpec) -> tuple[float, tuple[float, ...], float]:
    """(input side: embeddings etc., bytes of each block, output side: final norm + lm_head)."""
    if fmt.kind == "gguf":
        return _gguf_by_layer(fmt, spec)
    head_roles = ("output",)
    pre = post = 0.0
    layers = [0.0] * spec.num_layers
    seen_blocks = False
    for t, b in tensor_bytes(fmt, spec):
        if t.layer is not None:
            layers[t.layer] += b
            seen_blocks = True
        elif t.role in head_roles or seen_blocks:
            post += b
        else:
            pre += b
    return pre, tuple(layers), post


_FLOAT_ALIASES = {"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}
MICROSCALING = {  # name: (element bits, elements per scale, description)
    "mxfp4": (4, 32, "MXFP4 (OCP microscaling): FP4 E2M1 elements, one E8M0 scale per 32"),
    "mxfp8": (8, 32, "MXFP8 (OCP microscaling): FP8 E4M3 elements, one E8M0 scale per 32"),
    "nvfp4": (4, 16, "NVFP4: FP4 E2M1 elements, one FP8 E4M3 scale per 16 (and one fp32 per tensor)"),
}
"""Block-scaled formats: OCP Microscaling Formats (MX) v1.0 spec (block of 32, 8-bit shared exponent scale); NVFP4 per
NVIDIA's Blackwell documentation (block of 16, E4M3 scale, plus a per-tensor fp32 scale, negligible per element)."""
MICROSCALING_SCALE_BITS = {"mxfp4": 8, "mxfp8": 8, "nvfp4": 8}
_INT_SYM_PATTERN = re.compile(r"^int(4|8)-sym-g(\d{1,4})(-experts)?$")
"""Symmetric grouped integer weights, one 16-bit scale per group and no zero point (compressed-tensors'
pack-quantized W4A16/W8A16 with symmetric: true, as Kimi K2-Thinking and K2.5 ship their routed experts)."""
_QUANT_PATTERN = re.compile(r"^(gptq|awq)(?:[-_]?(?:int|w)?(\d+)(?:bit)?)?(?:[-_]?g(?:roup)?(-?\d+))?$")


def to_gguf(fmt: WeightFormat) -> WeightFormat:
    """The GGUF file type llama.cpp would load for a float format (bf16 -> gguf:BF16); others unchanged."""
    mapping = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}
    if fmt.kind == "float" and fmt.name in mapping:
        return get_weight_format("gguf:" + mapping[fmt.name])
    return fmt


def known_weight_formats() -> list[str]:
    return (["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", "nf4-dq", "fp4", "gptq", "gptq-8bit", "awq",
             "mxfp4", "mxfp4-experts", "nvfp4", "mxfp8", "int4-sym-g32", "int4-sym-g32-experts"]
            + list(gguf.FILE_TYPES))


def get_weight_format(name: str) -> WeightFormat:
    """A weight format by name, case-insensitive with the usual aliases."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownFormatError("empty weight format")
    raw = name.strip()
    key = raw.lower().replace("_", "-")
    up = raw.upper().replace("-", "_")
    explicit_gguf = up.startswith("GGUF:")
    if explicit_gguf:
        up = up[5:]
    # Plain f16/bf16/f32 are float formats unless asked as GGUF (llama.cpp maps them, see to_gguf()).
    if up in gguf.FILE_TYPES and (explicit_gguf or canonical(raw) not in _FLOAT_ALIASES):
        return WeightFormat(f"gguf:{up}", "gguf", f"GGUF {up} (llama.cpp mix; tensor types per llama-quant.cpp)",
                            bits=gguf.bits_per_weight(gguf.FILE_TYPES[up]))
    base = key.removesuffix("-experts")
    if base in MICROSCALING:
        bits, block, description = MICROSCALING[base]
        experts = key.endswith("-experts")
        return WeightFormat(key, "microscaling", description + ("; routed experts only, the rest bf16" if experts
                                                                 else "; embeddings, lm_head, router and norms bf16"),
                            bits=bits, group_size=block, experts_only=experts)
    if key in ("fp8", "fp8-e4m3", "float8", "f8", "e4m3", "fp8-e4m3fn"):
        return WeightFormat("fp8", "fp8", "FP8 e4m3 linear weights with block scales; embeddings/lm_head/norms bf16",
                            bits=8)
    dkey = canonical(raw)
    if dkey in _FLOAT_ALIASES:
        d = _DTYPES[dkey]
        return WeightFormat(d.name, "float", d.description, bits=d.bits)
    if key in ("nf4", "bnb-nf4", "4bit", "bnb-4bit", "nf4-no-dq"):
        return WeightFormat("nf4", "bnb", "bitsandbytes NF4, blocksize 64, fp32 absmax", bits=4)
    if key in ("nf4-dq", "nf4-double-quant", "nf4dq", "qlora", "bnb-nf4-dq"):
        return WeightFormat("nf4-dq", "bnb", "bitsandbytes NF4 with double quantization (QLoRA)", bits=4)
    if key in ("fp4", "bnb-fp4"):
        return WeightFormat("fp4", "bnb", "bitsandbytes FP4, blocksize 64, fp32 absmax", bits=4)
    if key in ("fp4-dq", "bnb-fp4-dq"):
        return WeightFormat("fp4-dq", "bnb", "bitsandbytes FP4 with double quantization", bits=4)
    if key in ("int8", "llm-int8", "bnb-int8", "8bit", "bnb-8bit", "i8"):
        return WeightFormat("int8", "bnb", "LLM.int8() (bitsandbytes): int8 weights + fp32 row scale", bits=8)
    if key in ("int4", "i4", "w4a16", "int4-g128"):
        return WeightFormat("awq-4bit-g128", "awq",
                            "int4 weight-only, group 128, fp16 scales and 4-bit zeros (AWQ layout)",
                            bits=4, group_size=128)
    m = _INT_SYM_PATTERN.match(key)
    if m:
        bits, group, experts = int(m.group(1)), int(m.group(2)), bool(m.group(3))
        return WeightFormat(key, "int-sym", f"int{bits} weight-only, symmetric, group {group}, 16-bit scales "
                            "(compressed-tensors pack-quantized)" + ("; routed experts only, the rest bf16" if experts
                                                                     else "; embeddings, lm_head and norms bf16"),
                            bits=bits, group_size=group, experts_only=experts)
    m = _QUANT_PATTERN.match(key)
    if m:
        kind = m.group(1)
        bits = int(m.group(2) or 4)
        group = int(m.group(3) or 128)
        if bits not in (2, 3, 4, 8):
            raise UnknownFormatError(f"{kind} supports 2, 3, 4 or 8 bits, got {bits}")
        if group == 0 or group < -1:
            raise UnknownFormatError(f"{kind} group size must be positive or -1, got {group}")
        return WeightFormat(f"{kind}-{bits}bit-g{group}", kind,
                            f"{kind.upper()} {bits}-bit, group {group}, fp16 scales", bits=bits, group_size=group)
    raise UnknownFormatError(
        f"unknown weight format '{name}'.{suggest(raw, known_weight_formats())} "
        f"Known: {', '.join(known_weight_formats()[:12])}, and GGUF types like Q4_K_M, Q8_0, IQ4_XS"
    )


def default_weight_format(spec: ModelSpec, engine: str) -> tuple[WeightFormat, str]:
    """The format an engine loads by default, and why (a reason string shown to the user)."""
    if engine == "llamacpp":
        return get_weight_format("Q4_K_M"), "llama.cpp default here: Q4_K_M, the most downloaded GGUF type"
    if spec.checkpoint_quant == "fp8":
        return get_weight_format("fp8"), "the checkpoint ships FP8 weights (quantization_config)"
    if spec.checkpoint_quant and spec.checkpoint_quant.startswith("int") and "-sym-g" in spec.checkpoint_quant:
        return (get_weight_format(spec.checkpoint_quant),
                "the checkpoint ships symmetric grouped integer weights (compressed-tensors quantization_config)")
    if spec.checkpoint_quant == "mxfp4":
        return (get_weight_format("mxfp4-experts"),
                "the checkpoint ships MXFP4 experts, the rest bf16 (quantization_config; transformers' and vLLM's "
                "mxfp4 support quantizes the MoE experts only)")
    from ..dtypes import torch_dtype_to_name

    native = torch_dtype_to_name(spec.torch_dtype)
    if engine in ("vllm", "sglang"):
        # vLLM (and SGLang) dtype="auto": fp32 checkpoints are served in fp16 (vllm/config/model.py _get_and_verify_dtype).
        if native in (None, "fp32"):
            return get_weight_format("fp16"), "vLLM dtype=auto serves fp32/unspecified checkpoints in fp16"
        return get_weight_format(native), f"vLLM dtype=auto keeps the checkpoint dtype ({native})"
    if native is None:
        return get_weight_format("fp32"), "config.json states no dtype; transformers then loads fp32"
    return get_weight_format(native), f"transformers dtype='auto' keeps the checkpoint dtype ({native})"
