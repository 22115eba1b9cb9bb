"""Reading and setting the fp32-matmul mode across torch's old and new APIs (torch 2.13 raises on a mix)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuwise.measure._deps import float32_matmul_precision, set_tf32


def test_new_knob_read_first_and_restored() -> None:
    restore = set_tf32(torch, True)
    try:
        assert float32_matmul_precision(torch) == "high"
        inner = set_tf32(torch, False)
        assert float32_matmul_precision(torch) == "highest"
        inner()
        assert float32_matmul_precision(torch) == "high"
    finally:
        restore()
    assert float32_matmul_precision(torch) in ("highest", "high", "medium")


def test_the_mix_transformers_creates_does_not_raise() -> None:
    """transformers sets the new knob (TrainingArguments(tf32=...)); the legacy getter then raises in 2.13."""
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("this torch has only the legacy API")
    before_new = matmul.fp32_precision
    torch.backends.fp32_precision = "tf32" if hasattr(torch.backends, "fp32_precision") else None
    try:
        matmul.fp32_precision = "tf32"
        assert float32_matmul_precision(torch) == "high"
        matmul.fp32_precision = "none"  # follow the global knob: the legacy getter may raise; never propagated
        assert float32_matmul_precision(torch) in (None, "highest", "high", "medium")
    finally:
        matmul.fp32_precision = before_new
        if hasattr(torch.backends, "fp32_precision"):
            torch.backends.fp32_precision = "none"
