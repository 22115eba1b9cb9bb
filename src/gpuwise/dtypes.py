"""Numeric formats: element sizes of floating-point dtypes and of KV-cache element types.

Bits are floats (a GGUF Q8_0 KV element is 8.5 bits: 34 bytes per block of 32), never integer
division. Weight quantization formats, which depend on the tensor, live in `gpuwise.quant`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UnknownFormatError, suggest


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    bits: float
    description: str

    @property
    def bytes(self) -> float:
        return self.bits / 8


_DTYPES = {
    "fp32": DType("fp32", 32, "IEEE float32"),
    "tf32": DType("tf32", 32, "float32 storage; TF32 is a tensor-core math mode, not a storage format"),
    "bf16": DType("bf16", 16, "bfloat16: 8-bit exponent like fp32, 7-bit mantissa"),
    "fp16": DType("fp16", 16, "IEEE float16: 5-bit exponent, 10-bit mantissa"),
    "fp8_e4m3": DType("fp8_e4m3", 8, "float8 e4m3 (weights/activations; Hopper+, Ada)"),
    "fp8_e5m2": DType("fp8_e5m2", 8, "float8 e5m2 (wider range, gradients)"),
    "int8": DType("int8", 8, "8-bit integer"),
    # llama.cpp KV cache types (-ctk/-ctv): GGML block formats, bits include the per-block fp16 scale.
    "q8_0": DType("q8_0", 34 * 8 / 32, "GGML Q8_0: 32 int8 + one fp16 scale per block (8.5 bits)"),
    "q5_1": DType("q5_1", 24 * 8 / 32, "GGML Q5_1 (6.0 bits)"),
    "q5_0": DType("q5_0", 22 * 8 / 32, "GGML Q5_0 (5.5 bits)"),
    "q4_1": DType("q4_1", 20 * 8 / 32, "GGML Q4_1 (5.0 bits)"),
    "q4_0": DType("q4_0", 18 * 8 / 32, "GGML Q4_0 (4.5 bits)"),
    "iq4_nl": DType("iq4_nl", 18 * 8 / 32, "GGML IQ4_NL (4.5 bits)"),
}

_ALIASES = {
    "float32": "fp32", "f32": "fp32", "float": "fp32", "fp32": "fp32",
    "bfloat16": "bf16", "bf16": "bf16",
    "float16": "fp16", "f16": "fp16", "half": "fp16", "fp16": "fp16",
    "fp8": "fp8_e4m3", "f8": "fp8_e4m3", "float8": "fp8_e4m3", "e4m3": "fp8_e4m3", "fp8e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "e5m2": "fp8_e5m2", "fp8e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2", "i8": "int8",
}

KV_DTYPES = ("fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")


def canonical(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    return key


def get_dtype(name: str) -> DType:
    """A dtype by name, case-insensitive, with the usual aliases (f16, float16, bfloat16, fp8, ...)."""
    key = canonical(name)
    if key not in _DTYPES:
        names = sorted(set(_DTYPES) | set(_ALIASES))
        raise UnknownFormatError(f"unknown dtype '{name}'.{suggest(name, names)} Known: {', '.join(sorted(_DTYPES))}")
    return _DTYPES[key]


def kv_dtype(name: str) -> DType:
    """A KV-cache element type: float dtypes (vLLM's fp8 too) or llama.cpp's -ctk/-ctv block types."""
    d = get_dtype(name)
    if d.name not in KV_DTYPES:
        raise UnknownFormatError(f"'{name}' is not a KV-cache type; use one of: {', '.join(KV_DTYPES)}")
    return d


def torch_dtype_to_name(value: str | None) -> str | None:
    """'bfloat16' (config.json torch_dtype) -> 'bf16'; None for missing or unknown."""
    if not value:
        return None
    key = canonical(value.replace("torch.", ""))
    return key if key in _DTYPES else None


PEAK_OPERAND_BYTES = {"fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                      "fp4": 0.5}
"""Bytes of one GEMM operand element at each peak of the GPU catalog (`GPU.peak_flops` keys, whose suffix names the
accumulator or the unit: fp16_fp16acc, fp64_tensor): tf32 reads fp32 storage; fp4 (e2m1) packs two values per byte
(block scales not counted)."""


def peak_operand_bytes(peak: str) -> float:
    """Bytes per operand element for a GPU catalog peak key (bf16, fp8, fp16_fp16acc ...): what a GEMM at that peak
    reads."""
    base = peak.split("_", 1)[0]
    if base not in PEAK_OPERAND_BYTES:
        raise UnknownFormatError(f"unknown peak dtype '{peak}'; known: {', '.join(PEAK_OPERAND_BYTES)}")
    return PEAK_OPERAND_BYTES[base]

