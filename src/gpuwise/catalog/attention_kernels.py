"""How a flash-attention kernel's throughput falls at short sequences and small heads (`data/attention_kernels.toml`).

The device profile holds each GPU's attention efficiency on long sequences at head dimension 128 (the plateau);
`shape` scales it to a kernel whose queries iterate over `seq` keys with heads of `head_dim`, from the
FlashAttention-3 paper's H100 measurements per kernel family.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ._toml import load_toml

FAMILIES = ("fa2", "cudnn", "fa3")
PLATEAU_SEQ = 16384
TILE_ROWS = 128
"""Query (forward) or key (backward) rows per thread block of a flash kernel: the unit of its parallel work."""
REFERENCE_TILES = 2048
"""Thread blocks of the curves' harness at head dim 128 (16k tokens per batch, 16 heads); its head-dim-64 and -256
panels ran 32 and 8 heads: 4,096 and 1,024 blocks."""
REFERENCE_SMS = 132
"""SMs of the H100 SXM the tile factor was measured on: other GPUs are compared per SM."""
PLATEAU_HEAD_DIM = 128
PANELS = ((64, "_hd64"), (PLATEAU_HEAD_DIM, ""), (256, "_hd256"))
"""The head dimensions the paper charts, with their rows' key suffix in attention_kernels.toml."""


@lru_cache(maxsize=1)
def _data() -> dict:
    return load_toml("attention_kernels.toml")


def interp_log2(seqs: list[int], values: list[float], seq: float) -> float:
    """Linear in log2(seq) between measured points (sequence lengths here, node counts in `estimate.comm`); the end
    values outside them."""
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


def _throughput(family: str, seq: float, backward: bool, causal: bool, suffix: str = "") -> float:
    """The paper's TFLOP/s at `seq`; `suffix` picks the head-dim panel (`PANELS`)."""
    data = _data()
    seqs, row = data["seq"], data[family]
    fwd, fwd_causal = row["forward" + suffix], row["forward_causal" + suffix]
    if not backward:
        return interp_log2(seqs, fwd_causal if causal else fwd, seq)
    if "backward" + suffix in row:
        bwd = interp_log2(seqs, row["backward" + suffix], seq)
    else:  # no backward chart at this head size: the 128 backward times this panel's forward over the 128 forward
        bwd = (interp_log2(seqs, row["backward"], seq) * interp_log2(seqs, fwd, seq)
               / interp_log2(seqs, row["forward"], seq))
    if causal:  # the forward's masking penalty at the same length and head size
        bwd *= interp_log2(seqs, fwd_causal, seq) / interp_log2(seqs, fwd, seq)
    return bwd


def _at_head_dim(family: str, seq: float, backward: bool, causal: bool, head_dim: float) -> float:
    """Linear in the head dimension between the charted panels; the nearest panel outside them."""
    (lo_dim, lo_key), (hi_dim, hi_key) = PANELS[0], PANELS[-1]
    if head_dim <= lo_dim:
        return _throughput(family, seq, backward, causal, lo_key)
    if head_dim >= hi_dim:
        return _throughput(family, seq, backward, causal, hi_key)
    for (d0, k0), (d1, k1) in zip(PANELS, PANELS[1:]):
        if head_dim <= d1:
            a, b = _throughput(family, seq, backward, causal, k0), _throughput(family, seq, backward, causal, k1)
            return a + (head_dim - d0) / (d1 - d0) * (b - a)
    raise AssertionError(head_dim)  # pragma: no cover - the panels cover every head size


@lru_cache(maxsize=4096)
def shape(family: str, seq: float, *, backward: bool, causal: bool = True,
          head_dim: float = PLATEAU_HEAD_DIM) -> float:
    """Throughput of `family` at `seq` keys per query and heads of `head_dim` over its long-sequence (16k) throughput
    at head dimension 128: at most ~1 up to head dim 128 (FA3 and cuDNN exceed it with larger heads)."""
    if family not in FAMILIES:
        raise KeyError(family)
    return (_at_head_dim(family, seq, backward, causal, head_dim)
            / _throughput(family, PLATEAU_SEQ, backward, causal))


def flash_tiles(sequences: float, heads: float, rows: float) -> float:
    """Thread blocks of one flash-attention kernel: a tile of TILE_ROWS query rows per sequence and head on the GPU
    (`rows` queries per sequence)."""
    return sequences * heads * math.ceil(rows / TILE_ROWS)


@lru_cache(maxsize=4096)
def tile_factor(tiles: float, *, backward: bool) -> float:
    """Throughput of a flash kernel running `tiles` thread blocks (batch x heads on the GPU x ceil(rows /
    TILE_ROWS)) on an H100's 132 SMs over its throughput at 2,048 (<= 1)."""
    t = _data()["tiles"]
    return interp_log2(t["tiles"], t["backward" if backward else "forward"], max(1.0, tiles))


def tiles_over_curves(tiles: float, *, backward: bool, head_dim: float = PLATEAU_HEAD_DIM,
                      sms: int | None = None) -> float:
    """What `tiles` thread blocks on a GPU of `sms` SMs (None: the H100's) cost over the blocks the sequence-length
    and head-dim curves were measured with (`REFERENCE_TILES` x 128 / head_dim: the panels' own head counts):
    compared per SM, the factor at the kernel's blocks over the factor at the curves'."""
    per_sm = tiles * REFERENCE_SMS / (sms or REFERENCE_SMS)
    return (tile_factor(per_sm, backward=backward)
            / tile_factor(REFERENCE_TILES * PLATEAU_HEAD_DIM / max(1.0, head_dim), backward=backward))


def band_pairs(start: float, count: float, window: float) -> float:
    """(query, key) pairs a causal attention layer keeps for `count` queries after `start` earlier tokens, each query
    at position p attending to min(p + 1, `window`) keys (a window at least as long as the sequence: plain causal).
    The one home of that count: mean keys per query (`layer_ops.keys_per_query`, `flops`), a band's wasted tiles
    (`band_work`) and the serving simulation's prompt chunks (`estimate.serving`)."""
    end = start + count
    ramp_end = min(end, window)  # positions before the window fills attend to all keys before them
    pairs = (ramp_end * (ramp_end + 1) - start * (start + 1)) / 2 if start < ramp_end else 0.0
    return pairs + max(0, end - max(start, window)) * window


def band_work(window: float | None, context: float) -> float:
    """Score pairs a flash kernel computes over the pairs a causal sliding-window layer keeps (>= 1; 1 without a window
    or with one that covers the context). Each tile of `TILE_ROWS` query rows runs every key tile of `TILE_ROWS` that
    its band reaches, its own and the ceil((window - 1) / TILE_ROWS) before it, masking what lies outside: a 128-key
    window computes twice the pairs it keeps. Measured (benchmarks/results/h200-sxm/cudnn-sdpa.json: cuDNN 9.19, a
    128-key window at 4,096 and 8,192 tokens): forward + backward took 1.6-2.0x what the kept pairs were priced at,
    and with this factor stand to their price as full causal layers do. Tiles of 128 rows are cuDNN's, measured there
    only; held for every kernel family (FlashAttention's Hopper kernels also tile by 128 query rows). The window's
    kernel keeps its point on the sequence-length curve (`shape` at the window, clamped to 512), whose causal
    figures already hold some diagonal waste: the measured ratio, not a derivation, says the two together fit."""
    if not window or window >= context:
        return 1.0
    n = math.ceil(context / TILE_ROWS)  # query tiles
    m = math.ceil((window - 1) / TILE_ROWS)  # key tiles before a query tile's own that its band reaches
    early = min(n, m)  # the first tiles reach back only to the start
    tiles = early * (early + 1) / 2 + (n - early) * (m + 1)
    kept = band_pairs(0, context, window)
    return max(1.0, tiles * TILE_ROWS * TILE_ROWS / kept)


def flash_attn_triton_share(*, backward: bool) -> float:
    """flash-attn's Triton kernels (llm-foundry's attn_impl triton) as a share of FlashAttention-2's rate on the same
    GPU (attention_kernels.toml [flash_attn_triton]: a proxy from the FlashAttention-2 paper's A100 comparisons, no
    measurement of this kernel being published)."""
    row = _data()["flash_attn_triton"]
    return float(row["backward_vs_fa2" if backward else "forward_vs_fa2"])


def package_rate(package: str, *, backward: bool) -> tuple[float, str]:
    """(share of the device's best attention rate, the kernel family whose sequence curve it follows) of a flash-attn
    package kernel transformers calls by `package` (attention_kernels.toml [package.*]: flash_attention_3,
    flash_attention_4)."""
    row = _data()["package"][package]
    return float(row["backward_vs_best" if backward else "forward_vs_best"]), str(row["curve"])


def package_architectures(package: str) -> tuple[str, ...]:
    """The GPU architectures a package kernel runs on (and gpuwise has its rate for)."""
    return tuple(_data()["package"][package]["architectures"])


def sink_backward_s(family: str, rows: float) -> float:
    """Time attention sinks add to a flash backward of `rows` query rows x heads on the GPU, for `family`'s kernels
    (attention_kernels.toml `sink_backward_ns_per_row`; 0 where it is not measured)."""
    ns = _data().get(family, {}).get("sink_backward_ns_per_row", 0.0)
    return ns * 1e-9 * rows
