"""How a flash-attention kernel's throughput falls at short sequences (`data/attention_kernels.toml`).

The device profile holds each GPU's attention efficiency on long sequences (the plateau); `shape` scales it to a
kernel whose queries iterate over `seq` keys, from the FlashAttention-3 paper's H100 measurements per kernel family.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ._toml import load_toml

FAMILIES = ("fa2", "cudnn", "fa3")
PLATEAU_SEQ = 16384


@lru_cache(maxsize=1)
def _data() -> dict:
    return load_toml("attention_kernels.toml")


def _interp(seqs: list[int], values: list[float], seq: float) -> float:
    """Linear in log2(seq) between measured lengths; the end values outside them."""
    if seq <= seqs[0]:
        return float(values[0])
    if seq >= seqs[-1]:
        return float(values[-1])
    x = math.log2(seq)
    for i in range(1, len(seqs)):
        if seq <= seqs[i]:
            x0, x1 = math.log2(seqs[i - 1]), math.log2(seqs[i])
            t = (x - x0) / (x1 - x0)
            return values[i - 1] + t * (values[i] - values[i - 1])
    return float(values[-1])  # pragma: no cover - unreachable


def _throughput(family: str, seq: float, backward: bool, causal: bool) -> float:
    data = _data()
    seqs, row = data["seq"], data[family]
    fwd_key = "forward_causal" if causal else "forward"
    if not backward:
        return _interp(seqs, row[fwd_key], seq)
    bwd = _interp(seqs, row["backward"], seq)
    if causal:  # the forward's masking penalty at the same length
        bwd *= _interp(seqs, row["forward_causal"], seq) / _interp(seqs, row["forward"], seq)
    return bwd


@lru_cache(maxsize=4096)
def shape(family: str, seq: float, *, backward: bool, causal: bool = True) -> float:
    """Throughput of `family` at `seq` keys per query over its long-sequence (16k) throughput: at most ~1."""
    if family not in FAMILIES:
        raise KeyError(family)
    return _throughput(family, seq, backward, causal) / _throughput(family, PLATEAU_SEQ, backward, causal)
