"""Element sizes: every peak in the GPU catalog has an operand size (the roofline reads it)."""

from __future__ import annotations

import pytest

from gpuwise.catalog.gpus import all_gpus
from gpuwise.dtypes import get_dtype, peak_operand_bytes
from gpuwise.errors import UnknownFormatError


def test_every_catalog_peak_has_an_operand_size():
    keys = {k for g in all_gpus() for k in g.peak_flops}
    assert keys and all(peak_operand_bytes(k) > 0 for k in keys)


@pytest.mark.parametrize(("peak", "size"), [("bf16", 2), ("fp16_fp16acc", 2), ("fp8", 1), ("fp8_fp16acc", 1),
                                             ("tf32", 4), ("fp64_tensor", 8), ("fp4", 0.5), ("int8", 1)])
def test_operand_sizes(peak, size):
    assert peak_operand_bytes(peak) == size


def test_storage_and_peak_sizes_agree_where_both_exist():
    for name in ("fp32", "bf16", "fp16", "int8"):
        assert peak_operand_bytes(name) == get_dtype(name).bytes


def test_unknown_peak_is_one_line():
    with pytest.raises(UnknownFormatError, match="unknown peak dtype"):
        peak_operand_bytes("fp7")
