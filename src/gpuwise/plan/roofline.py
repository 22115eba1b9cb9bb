"""`gpuwise roofline`: where a model's operations sit on a GPU's roofline, for prefill or decode."""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.devices import device_profile
from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..dtypes import peak_operand_bytes
from ..errors import MAX_TOKENS, InvalidArgument, require_positive_int
from ..estimate.roofline import PHASES, Phase, Roofline
from ..estimate.roofline import roofline as _roofline


DEFAULT_SEQ = 2048
"""roofline's default tokens per sequence (cached for decode, the prompt for prefill)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineRequest:
    """A model's operations on a GPU's roofline: the options of `gpuwise roofline`."""

    model: LoadedModel
    gpu: GPU
    phase: Phase = "decode"
    """Prefill (the prompt at once) or decode (one token per sequence)."""
    batch: int = 1
    """Sequences."""
    seq: int = 2048  # DEFAULT_SEQ
    """Prefill: prompt tokens per sequence; decode: tokens already cached per sequence."""
    dtype: str | None = None
    """Peak to use: bf16, fp16, fp8, int8, tf32 or fp32 (default bf16, or fp16 where the GPU has no bf16)."""
    profile: str | None = None
    """Measured device profile (JSON, from `gpuwise calibrate`)."""

    def __post_init__(self) -> None:
        require_positive_int("--batch", self.batch, 1 << 20)
        require_positive_int("--seq", self.seq, MAX_TOKENS)
        if self.phase not in PHASES:
            raise InvalidArgument(f"--phase must be one of {', '.join(PHASES)}, got '{self.phase}'")
        if self.gpu.memory_bandwidth_bytes_per_s is None:
            raise InvalidArgument(f"{self.gpu.name} has no memory bandwidth in the catalog: no roofline")


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineResult:
    model: LoadedModel
    gpu: GPU
    phase: str
    batch: int
    seq: int
    roofline: Roofline
    plot: str | None = None
    """The plot file written for this result (by a presenter: `gpuwise roofline --plot`, `gpuwise.roofline(plot=)`)."""

    @property
    def title(self) -> str:
        """One line naming the model, GPU, phase, batch, tokens and peak dtype (the plot's title)."""
        return (f"{self.model.id} on {self.gpu.name}: {self.phase}, batch {self.batch}, {self.seq:,} tokens "
                f"({self.roofline.dtype})")


def default_dtype(gpu: GPU) -> str | None:
    """The peak a roofline uses unless --dtype says: bf16, or fp16 where the GPU has no bf16 (V100, T4); None when
    the catalog has neither."""
    return "bf16" if "bf16" in gpu.peak_flops else ("fp16" if "fp16" in gpu.peak_flops else None)


def roofline(req: RooflineRequest) -> RooflineResult:
    gpu = req.gpu
    dtype = req.dtype or default_dtype(gpu) or "fp16"
    if dtype not in gpu.peak_flops:
        have = ", ".join(gpu.peak_flops) or "none"
        raise InvalidArgument(f"{gpu.name} has no {dtype} peak in the catalog; known: {have}")
    e = peak_operand_bytes(dtype)
    rf = _roofline(req.model.spec, device_profile(gpu, req.profile), dtype=dtype, phase=req.phase, batch=req.batch,
                   seq=req.seq, weight_bytes_per_param=e, kv_bytes_per_element=max(e, 1.0))
    return RooflineResult(model=req.model, gpu=gpu, phase=req.phase, batch=req.batch, seq=req.seq, roofline=rf)
