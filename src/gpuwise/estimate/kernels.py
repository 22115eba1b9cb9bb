"""Time of one kernel on a device: GEMMs, flash attention, and memory-bound (streaming) kernels.

A GEMM (m x k) @ (k x n) runs as output tiles of `profile.tile` (rows x cols), one thread block per tile and one
block per SM at a time, in waves. Its compute time is the number of waves times the time one SM takes for a
full tile at the large-GEMM efficiency, so partial tiles (tile quantization) and a last, partly empty wave
(wave quantization) cost what they cost on the GPU (NVIDIA, "Matrix Multiplication Background User's Guide").
The kernel also has to stream its operands from DRAM; the time is the larger of the two (the roofline), plus
the fixed per-kernel overhead. For small m (decode) the weights dominate the bytes and the GEMM is memory-bound.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..catalog.attention_kernels import (
    PLATEAU_HEAD_DIM,
    PLATEAU_SEQ,
    flash_attn_triton_share,
    package_rate,
    tiles_over_curves,
)
from ..catalog.attention_kernels import shape as attention_shape
from ..catalog.devices import DeviceProfile


def memory_s(profile: DeviceProfile, nbytes: float) -> float:
    """Streaming `nbytes` through DRAM once (read + write counted by the caller)."""
    return nbytes / profile.bandwidth if nbytes > 0 else 0.0


@lru_cache(maxsize=1 << 16)
def matmul_s(profile: DeviceProfile, m: int, n: int, k: int, dtype: str, operand_bytes: float,
             weight_bytes: float | None = None, batch: int = 1, grouped: bool = False, split_k: bool = True
             ) -> float:
    """Time of one GEMM (or one batched GEMM of `batch` independent products, one kernel); `operand_bytes` per
    element of A, C (and B unless `weight_bytes`, for quantized B). `grouped`: a grouped kernel's GEMM (a serving
    engine's fused MoE), which keeps whole-k tiles even when one expert is active (no split-k). `split_k`: the
    split-k rule below (`SPLIT_K_RULE`); False prices whole-k tiles everywhere (the tests compare both)."""
    flops_rate = profile.matmul_flops(dtype)
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    b_bytes = operand_bytes if weight_bytes is None else weight_bytes
    nbytes = batch * ((m * k + m * n) * operand_bytes + k * n * b_bytes)
    mem = nbytes / profile.gemm_bandwidth
    if flops_rate is None:
        return mem + profile.gemm_fixed_s
    sms = profile.gpu.sm_count or 1
    best = math.inf
    split_k = split_k and batch == 1 and not grouped and dtype in ("bf16", "fp16") and b_bytes >= 2  # cuBLAS, 16-bit
    # cuBLAS picks among tile shapes; take the one with the least padded work (the big tile and two smaller).
    tm, tn = profile.tile
    for a, b in ((tm, tn), (tm, tn // 2), (tm // 2, tn // 2)):
        tiles = batch * math.ceil(m / a) * math.ceil(n / b)
        waves = math.ceil(tiles / sms)
        depth = k
        if tiles < sms and split_k:  # one partial wave: the library splits k over the idle SMs (SPLIT_K_RULE)
            depth = math.ceil(k / (sms // tiles))
        best = min(best, waves * sms * a * b * depth)
    compute = 2.0 * best / flops_rate
    return max(compute, mem) + profile.gemm_fixed_s


SPLIT_K_RULE = "cuBLAS and hipBLASLt split k over the SMs a one-wave GEMM leaves idle"
"""`matmul_s(split_k=True)`, the default. A GEMM whose output tiles fill less than one wave (a decode step's few rows
against a narrow weight) runs with its k dimension split over the SMs that would idle (cuBLAS's and hipBLASLt's
split-K / stream-K kernels), so it keeps every SM busy: each tile's k is cut into sms // tiles slices. One 16-bit
GEMM only, what was measured: a batched or grouped kernel (the experts' fused MoE GEMMs, `grouped`, even with one
expert active) keeps whole-k tiles, as Triton's fused_moe does (its programs loop over the whole k), and so do the
quantized GEMMs of the serving engines (block-scaled fp8 in Triton or DeepGEMM, CUTLASS scaled_mm, int4 kernels),
which gpuwise has not measured at one row. gpuwise's own H200 one-row GEMMs
(benchmarks/results/h200-sxm/kernel-floor.json, x[1, k] @ w[k, n] in a CUDA graph past L2) run memory-bound at every
measured shape: 8.65 us at k 4,096 x n 2,048 and 6.0 us at 2,048 x 2,048, where one wave of whole-k tiles priced
them at 17.0 and 10.8 us (+97%, +79%); with it every shape lies within 14%. `split_k=False` turns the rule off for
one call (the tests compare both); it is part of `matmul_s`'s cache key, so nothing else needs clearing."""


RECURRENT_SCAN_FLOPS = {"gated_deltanet": 32.8e12, "mamba2": 49.5e12}
"""FLOP/s of a hybrid model's chunked scan on an H100 SXM in prefill, counted as its benchmarks count it (4 x head_dim
x state_dim per token and head):

- Gated DeltaNet, flash-linear-attention's Triton kernels (what vLLM and SGLang ship): flashinfer PR #3788's
  comparison on an H100 80GB HBM3, Qwen3.5-397B's shape at TP 1 (16 key and 64 value heads of 128): 1,045 us at
  8,192 tokens and 8,633 us at 65,536 against flashinfer's 0.404 ms at 85.0 TFLOP/s and 3.022 ms at 91.0 in that
  count: 32.9 and 31.9 TFLOP/s (30.7 at 2,048 tokens, 32 for four sequences of 2,048); 32.8 taken. With 8 value
  heads (TP 8) the same kernels run about 1.8x slower per head: too few thread blocks, the chunks' serial latency
  (`GDN_CHUNK_SERIAL_S`) sets their time.
- Mamba-2, vLLM's SSD kernels (mamba_chunk_scan_combined): vLLM PR #27299's microbenchmark on one H100 at
  granite-4.0-h-small's shape (128 heads of 64, one group, state 128), 1.07-1.29e7 tokens/s from 4,096 to 262,144
  tokens, median 1.18e7: 49.5 TFLOP/s.

Other GPUs: the kernels are bound by how many thread blocks run at once, not by the matrix peak (flashinfer PR #4078
times the same Triton kernels on a B300 at 2.065 ms where PR #3866's H100 took 1.954 ms, at 8 value heads per GPU),
so the rate scales with the SM count (132 on an H100 SXM; a B300's 148 make it 12% faster than that measurement
says), and never beyond the ratio of the 16-bit matrix peaks, since their dot products run on the tensor cores
(`recurrent_scan_rate`). Neither rule is checked on a GPU other than those two; llama.cpp's own kernels are priced
the same, unmeasured."""

RECURRENT_BACKWARD_RATIO = 1.9
"""A chunked scan's backward over its forward: flash-linear-attention's chunked delta rule on an A100 (TileOPs PR
#633, batch 2, 4 heads, fp16) 0.731 ms against 0.383 ms at 16,384 tokens (1.91; 1.70 at 8,192, where both are
latency-bound). Taken for Mamba-2's SSD too, whose backward has the same chunked structure (no measurement)."""

RECURRENT_SCAN_REFERENCE = (132, 989.5e12)
"""The H100 SXM the scan rates were measured on: SMs, dense bf16 FLOP/s."""


def recurrent_scan_rate(profile: DeviceProfile, kind: str) -> float:
    """FLOP/s of the chunked scan of a recurrent layer of `kind` on the profile's GPU (`RECURRENT_SCAN_FLOPS`)."""
    sms, peak_ref = RECURRENT_SCAN_REFERENCE
    gpu = profile.gpu
    peak = gpu.peak_flops.get("bf16") or gpu.peak_flops.get("fp16") or gpu.peak_flops.get("fp32")
    return RECURRENT_SCAN_FLOPS[kind] * min((gpu.sm_count or sms) / sms, (peak / peak_ref) if peak else 1.0)


GDN_CHUNK = 64
"""Tokens per chunk of flash-linear-attention's gated delta rule (its chunked kernels' BT): the scan passes the state
chunk to chunk, and the forward keeps one row of the intra-chunk matrix A per token and head (activations)."""

GDN_CHUNK_SERIAL_S = 1.9e-6
"""Gated DeltaNet's chunked kernels carry the state from one 64-token chunk to the next in order, one thread block per
sequence, head and 64 value channels: with few such blocks (few heads per GPU, one sequence) the scan takes this long
per chunk whatever its FLOPs. flashinfer PR #3866 times flash-linear-attention's kernels on an H100 at Qwen3.5-397B's
TP-8 shape (8 value heads of 128: 16 blocks on 132 SMs, one sequence): 1.954 ms at 65,536 tokens (1,024 chunks:
1.91 us each), 0.259 ms at 8,192 (2.02 us); PR #4078 has a B300 at 2.065 ms for the first (2.02 us): a latency, the
same on both GPUs. At TP 1 (64 heads, 128 blocks) the same kernels take 8.633 ms, their FLOPs' time."""


def recurrent_scan_s(profile: DeviceProfile, kind: str, flops: float, state_bytes: float, *,
                     seq_len: int | None = None, blocks: int = 0) -> float:
    """A hybrid model's recurrent layer's scan: the chunked kernels over `flops` (prefill, training forward) at the
    measured rate of their family scaled to the GPU (`recurrent_scan_rate`), or in decode the single-step update,
    bound by reading and writing the `state_bytes` of recurrent state; with the fixed cost of one kernel.

    `seq_len`, `blocks` (Gated DeltaNet in prefill and training): the sequences' length and the thread blocks that
    carry their states (sequences x heads on the GPU x value channels / 64): the chunks run one after another,
    `GDN_CHUNK_SERIAL_S` each, in as many waves as the blocks need."""
    if flops <= 0 and state_bytes <= 0:
        return 0.0
    compute = flops / recurrent_scan_rate(profile, kind) if flops > 0 else 0.0
    if kind == "gated_deltanet" and seq_len and blocks:
        waves = math.ceil(blocks / (profile.gpu.sm_count or RECURRENT_SCAN_REFERENCE[0]))
        compute = max(compute, math.ceil(seq_len / GDN_CHUNK) * GDN_CHUNK_SERIAL_S * waves)
    return max(compute, state_bytes / profile.bandwidth) + profile.kernel_overhead_s


def attention_s(profile: DeviceProfile, flops: float, nbytes: float, *, backward: bool, dtype: str = "bf16",
                sdpa: bool = False, seq: float | None = None, bandwidth: float | None = None,
                head_dim: int | None = None, tiles: float | None = None, flash_attn: bool = False,
                triton: bool = False, package: str | None = None) -> float:
    """A flash-attention kernel: `flops` at the flash efficiency of the 16-bit peak, or its IO if larger.

    `flops` for the backward pass is the usual 2.5x the forward (recomputing the scores plus four matmuls).
    `sdpa`: PyTorch's scaled_dot_product_attention (FlashAttention-2 kernels) instead of the device's best kernel;
    with `flash_attn`, the flash-attn package's kernels (`DeviceProfile.flash_attn_*`, where they differ from SDPA's);
    with `triton` too, that package's Triton kernels (llm-foundry's attn_impl triton) at a share of its
    FlashAttention-2 rate (`attention_kernels.flash_attn_triton_share`). `package`: a flash-attn package kernel
    transformers calls by that name (flash_attention_3 on Hopper, flash_attention_4 on Blackwell), at its published
    share of the device's best kernel along its own family's curve (`attention_kernels.package_rate`); with `sdpa`
    (SDPA's kernels) it does not apply, and `TrainJob.sdpa_runs_flash` never sets both.
    `seq`: keys each query block iterates over in one call (the sequence, or a context-parallel chunk of it); the
    profile's efficiency is the long-sequence plateau, scaled down at short lengths by the kernel family's measured
    curve (`catalog.attention_kernels`). None: the plateau. `head_dim`: the q.k head size; below 128 the same
    family's measured head-dim-64 curve blends in (`attention_kernels.shape`); None: 128, the plateau's.
    `bandwidth`: bytes/s its IO streams at (a paged decode kernel's, `DeviceProfile.paged_decode_bandwidth`); None:
    the profile's copy bandwidth. `tiles`: the kernel's thread blocks, batch x heads on the GPU x ceil(queries /
    128) (`attention_kernels.tiles_over_curves`: fewer than the curves were measured with leave part of the SMs
    idle); None: as many as the curves'.
    """
    bw = bandwidth or profile.bandwidth
    peak = profile.gpu.peak_flops.get(dtype) or profile.gpu.peak_flops.get("fp16") or profile.gpu.peak_flops.get("fp32")
    if peak is None:
        return nbytes / bw if nbytes > 0 else 0.0
    if sdpa:
        eff = profile.sdpa_backward_efficiency if backward else profile.sdpa_forward_efficiency
        own = profile.flash_attn_backward_efficiency if backward else profile.flash_attn_forward_efficiency
        if flash_attn and own is not None:
            eff = own
        if triton:
            eff *= flash_attn_triton_share(backward=backward)
    else:
        eff = profile.attention_backward_efficiency if backward else profile.attention_forward_efficiency
    family = profile.sdpa_kernel if sdpa else profile.attention_kernel
    if package is not None and not sdpa:
        share, family = package_rate(package, backward=backward)
        eff *= share
    if seq is not None or head_dim is not None:
        eff *= attention_shape(family,
                               PLATEAU_SEQ if seq is None else seq, backward=backward,
                               head_dim=PLATEAU_HEAD_DIM if head_dim is None else head_dim)
    if tiles is not None:
        eff *= tiles_over_curves(tiles, backward=backward, head_dim=PLATEAU_HEAD_DIM if head_dim is None else head_dim,
                                 sms=profile.gpu.sm_count)
    return max(flops / (peak * eff), nbytes / bw) + profile.kernel_overhead_s
