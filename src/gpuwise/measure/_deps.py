"""Optional dependencies of the measurement side, imported on demand, with one clear line when missing."""

from __future__ import annotations

import importlib
import os
import sys

from ..errors import GpuwiseError

EXTRA_HINT = 'pip install "gpuwise[measure]" (install torch first, see README)'


class MeasureUnavailable(GpuwiseError):
    """torch, a GPU, NVML or a torchrun environment that a measurement needs is missing."""


def require_torch(what: str):
    """The torch module, or MeasureUnavailable naming the command that needed it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise MeasureUnavailable(f"{what} needs PyTorch, which is not installed: {EXTRA_HINT}") from None
    except Exception as exc:  # a broken install: OSError from a missing CUDA library, a bad wheel, ...
        raise MeasureUnavailable(f"{what} needs PyTorch, which fails to import here ({exc.__class__.__name__}: "
                                 f"{str(exc).splitlines()[0][:200] if str(exc) else 'no message'})") from None


def cuda_if_imported():
    """torch.cuda if torch is already imported and sees a GPU, else None (never imports torch: the tracker must
    not pull torch into a process that has not loaded it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda


def resolve_device(torch, name: str | None, what: str):
    """A torch.device from 'cuda', 'cuda:N' or 'cpu' (None: the current CUDA device, else an error saying so).

    Never a silent fallback: asking for CUDA on a machine without one is an error, and so is no device given
    on a machine without CUDA (the caller must say --device cpu)."""
    if name is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        raise MeasureUnavailable(f"{what}: no CUDA GPU visible to PyTorch (torch {torch.__version__}, "
                                 f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                                 "pass --device cpu to measure the CPU")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise MeasureUnavailable(f"{what}: '{name}' is not a device (use cuda, cuda:N or cpu)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise MeasureUnavailable(f"{what}: --device {name}, but PyTorch sees no CUDA GPU "
                                     f"(torch {torch.__version__}, cuda {torch.version.cuda})")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise MeasureUnavailable(f"{what}: --device {name}, but only {torch.cuda.device_count()} GPU(s) visible")
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise MeasureUnavailable(f"{what}: device type '{dev.type}' is not supported (use cuda or cpu)")
    return dev


def float32_matmul_precision(torch) -> str | None:
    """How CUDA runs fp32 matmuls, in the legacy names: 'highest' (IEEE fp32), 'high' (TF32), 'medium'; None unknown.

    torch 2.9+ has a new knob (`torch.backends.cuda.matmul.fp32_precision`: 'ieee', 'tf32', or 'none' = follow the
    legacy setting), and torch 2.13 raises when the legacy getter is called after the new knob was set (transformers
    sets it for `TrainingArguments(tf32=...)`): read the new one first."""
    try:
        new = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
    except (AttributeError, RuntimeError):
        new = "none"
    if new == "tf32":
        return "high"
    if new == "ieee":
        return "highest"
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def set_tf32(torch, on: bool):
    """Let CUDA fp32 matmuls use TF32 tensor cores (or not); returns a function that restores the previous state.
    Uses the new knob where torch has it (see `float32_matmul_precision`)."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        before = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if on else "ieee"

        def restore() -> None:
            matmul.fp32_precision = before
        return restore
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if on else "highest")
    return lambda: torch.set_float32_matmul_precision(before)
