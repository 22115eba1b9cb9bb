"""Training step time: compute per stage, exposed communication, pipeline bubble, optimizer step.

Per micro-batch and pipeline stage, every block's kernels are timed on the device (`kernels.py`): forward GEMMs,
backward GEMMs (input gradient and weight gradient, the latter skipped for frozen LoRA bases), flash attention
forward and backward (or, with `attention="unfused"`, batched score GEMMs and softmax / dropout kernels over the
score matrix), streaming kernels, plus recomputation (full: the block's forward again; selective: the
attention core). Communication is timed on the topology (`comm.py`) and counted where it is exposed:

- TP/SP collectives (two per block forward, two backward) sit on the critical path: no overlap by default; with
  `tp_overlap` (Megatron-LM's --tp-comm-overlap, Transformer Engine userbuffers) only what exceeds the block's
  GEMMs in that pass shows.
- CP ring attention (p2p, Megatron's default) passes K/V chunks while attention computes: only what exceeds the
  attention time shows; all-gather (PyTorch's context_parallel, torchtitan) and all-to-all (Ulysses) exchanges
  sit before and after the attention kernels, exposed.
- EP all-to-all (dispatch and combine, forward and backward): across nodes the copies for other nodes leave through
  each rank's NIC while NVLink carries the rest (`Topology.expert_all_to_all_s`; the flex dispatcher sends a token
  to each node once); exposed, or with `moe_a2a_overlap` only what exceeds the block's compute.
- PP send/recv of activations and gradients: once per micro-batch, direction and model chunk (v with the
  interleaved schedule), waited for; with `overlap_p2p_communication` (Megatron's overlap_p2p_comm) the interleaved
  schedule runs each beside the next chunk's compute and only what exceeds that chunk's forward or backward shows.
- DP gradient all-reduce / reduce-scatter overlaps the last micro-batch's backward (bucketed): what exceeds it
  shows, and at least the last bucket (one block's gradients); with sharded gradients (ZeRO-2, ZeRO-3/FSDP full
  shard) it runs in every micro-batch's backward. ZeRO-3/FSDP all-gathers each block's parameters
  in forward and backward of every micro-batch and reduce-scatters its gradients, prefetched one block ahead:
  what exceeds the compute of the block shows, plus the first gather. FSDP without resharding (grad-op,
  no-reshard) gathers once per step and keeps the parameters through the micro-batches.

A dropless MoE layer launched eagerly by Megatron-Core also waits once per forward for its routed token counts on
the host, and gpt-oss's once more for its GLU offset (`MOE_SYNC_GAP_S` each, breakdown `host_sync`), unless EP
overlap or a CUDA graph over the whole iteration remove the waits, or experts padded to capacity the first
(`moe_host_syncs`).

The step is (m + (p - 1) / v) times the slowest stage's micro-batch time (1F1B and GPipe: v = 1), plus the
data-parallel communication left exposed, plus the optimizer step (memory-bound: it streams the states once).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.attention_kernels import band_work, flash_tiles, sink_backward_s
from ..catalog.devices import DeviceProfile, host_copy_bytes_per_s, host_op_time_ratio, network_defaults
from ..catalog.gpus import GPU
from ..memo import remember
from ..errors import InvalidArgument
from ..model.spec import LINEAR, SLIDING, ModelSpec
from ..units import GB
from .comm import Topology
from .flops import gemm_dtype
from .job import TrainJob, fp8_gemm_needs_transpose, fp8_kernels_of, pipeline_keeps_unsharded, routed_experts_16bit
from .kernels import RECURRENT_BACKWARD_RATIO, attention_s, matmul_s, memory_s, recurrent_scan_s
from .layer_ops import (EXPERT_GEMMS, ROUTED_GEMMS, MEGATRON_EXPERT_BIAS_BYTES, MEGATRON_GLU_CLAMP_BYTES,
                        MEGATRON_UNFUSED_PERMUTE_BYTES, PERMUTE_BYTES, UNFUSED_PERMUTE_BYTES, attention_head_dim,
                        block_ops, block_parts, block_signature, head_gemm, keys_per_query, raise_untimed_linear,
                        recurrent_blocks, unfused_attention)
from .layout import Layout
from . import muon
from .model_states import ModelStates, stage_tensors
from .pipeline import (bubble_fraction, bubble_time_s, distinct_stages, job_bf16_layers, stage_blocks,
                       stage_layers, unpaired_share)
from .recompute import (expert_recompute_share, module_share, op_policy_keeps_matmuls, op_saved_matmul_share,
                        recompute_plan)

LOSS_BYTES_PER_LOGIT = 12.0
"""Cross-entropy streams each logit about three times: the forward reads 16-bit logits and writes fp32
log-probabilities (2 + 4 bytes), the backward reads those and writes the 16-bit gradient (4 + 2)."""

@dataclass(frozen=True, slots=True)
class Fp8Quantize:
    """What quantizing one 16-bit element to fp8 costs a kernel family, in bytes at the copy bandwidth."""

    cast: float
    """The amax reduction and the scaled cast of a tensor (a per-tensor or per-block scale)."""
    transpose: float
    """The transposed fp8 copy a Hopper backward GEMM needs (fp8 tensor cores take K-major operands only)."""
    kernels: int
    """Kernels per cast."""


FP8_QUANTIZE = {
    # Transformer Engine (Megatron-Core; DeepSpeed and Accelerate through TE): one kernel fuses the amax into the
    # cast (read 2 bytes, write 1), the cast-transpose writes the transposed copy (read 1, write 1).
    "te": Fp8Quantize(cast=3.0, transpose=2.0, kernels=1),
    # torchao's float8 under torch.compile (torchtitan, FSDP2, torchtune with compile): measured on an H200
    # (benchmarks/results/h200-sxm/fp8-linear.json, Llama-3.1-8B's four block linears at 8,192 tokens): the compiled
    # layer's fp8 time less its three fp8 GEMMs, per element of input, weight and output gradient each cast and
    # transposed once, is 7.1-11.7 bytes (median 8.6) at the 4.13 TB/s copy rate, against 3 + 2 for fused kernels
    # at full bandwidth: the amax is a separate reduction pass before the cast (5 bytes), at ~80% of the copy rate.
    "compiled": Fp8Quantize(cast=6.6, transpose=2.0, kernels=2),
    # torchao's float8 without torch.compile, measured there too: `torch.max(torch.abs(t))`, then
    # `(t.float() * scale).clamp(...).to(float8)` is six kernels moving 33 bytes per element, timed at 42-48 (median
    # 45) bytes' worth of the copy rate; the transposed fp8 copy (`t.t().contiguous()`, PyTorch's strided copy of
    # one-byte elements) at 23-24 (median 23.5). The fp8 layer runs 0.56-0.76x as fast as bf16 there (1.45-1.52x
    # compiled).
    "eager": Fp8Quantize(cast=45.0, transpose=23.5, kernels=6),
}
"""Quantization cost per fp8 kernel family (`fp8_quantize_kind`)."""

NVFP4_QUANTIZE = {
    # Transformer Engine's NVFP4BlockScaling (Megatron-Core): each activation and gradient quantized once into a
    # rowwise and a columnwise copy (the latter through a 16 x 16 random Hadamard transform, gradients with
    # stochastic rounding), a global amax pass first; weights in 16 x 16 blocks. Measured on a B300 by Transformer
    # Engine's GEMM profiling tutorial (docs/examples/gemm_profiling/gemm_profiling.rst @ 1609c890: a 5B model's
    # twelve linears at 15,872 tokens, te.Linear autocast against pre-quantized operands): 2.689 ms of quantization
    # per layer, MXFP8's 1.823 ms, for 2,483M elements each quantized for both usages: at the B300's copy rate, 7.35
    # bytes per element where MXFP8 takes 5.17 (the fp8 "te" family's 3 + 2 above prices MXFP8 within 1%).
    "te": Fp8Quantize(cast=4.75, transpose=2.6, kernels=2),
    # torchao's NVFP4 training (torchtitan's converter): Triton kernels, timed on a GB200 by torchao
    # (benchmarks/prototype/nvfp4_training/README.md @ 004e6a2e, 2048 x 28,672): the RHT amax pass 46.0 us, the
    # fused columnwise-RHT + rowwise quantize 117.3 us (round to nearest, activations) or 166.6 us (stochastic
    # rounding, gradients), the weight's 2D quantize 232.2 us: 19.6, 25.5 and 27.9 bytes per element at the copy
    # rate, priced at their activation/gradient mean, 22.5 (the weight, re-quantized in every pass, is a small share
    # of the elements)
    "compiled": Fp8Quantize(cast=16.0, transpose=6.5, kernels=3),
}
"""Quantization cost per NVFP4 kernel family: Transformer Engine's ("te") or torchao's (the torchtitan converter,
compiled; eager is the same Triton kernels). Only each family's sum (7.35, 22.5 bytes per element) is measured;
its split into the rowwise (cast) and columnwise (transpose) copies is ours, the rowwise about two thirds as in
the fp8 families. Every activation, gradient and weight pays both (`fp8_quantize_s`), so the split moves time
between the forward and the backward (and recomputed forwards), not the sum."""
NVFP4_QUANTIZE["eager"] = NVFP4_QUANTIZE["compiled"]


GROUPED_MM_EFFICIENCY = 0.90
"""PyTorch's grouped GEMM (`torch._grouped_mm`, a CUTLASS kernel that packs every expert's tiles into shared waves)
runs at this share of the rate gpuwise gives one GEMM of the same tiles: the median over 90 measured points on an
H200 (benchmarks/results/h200-sxm/moe-grouped-gemm.json: five MoE models' expert GEMMs, 256-16,384 rows per expert,
forward, input and weight gradient; torch 2.11), quartiles 0.85 and 0.94. Priced so, the points fit within 5.2%
(median; 13.7% p90)."""


def gemm_passes_s(profile: DeviceProfile, g, dtype: str, e: float, *, grouped: bool = False
                  ) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) seconds of a block GEMM `g` (layer_ops `Gemm`, `count` of them):
    one kernel each, or for routed experts under `grouped` (torchtitan's `torch._grouped_mm`) one grouped kernel
    whose tiles share waves, at `GROUPED_MM_EFFICIENCY`. Transformer Engine's grouped linear (Megatron-Core) runs
    cuBLAS per expert, on four streams that were measured to overlap little (the same H200 run)."""
    if grouped and g.count > 1:
        return tuple(matmul_s(profile, m, n, k, dtype, e, batch=g.count) / GROUPED_MM_EFFICIENCY
                     for m, n, k in ((g.m, g.n, g.k), (g.m, g.k, g.n), (g.k, g.n, g.m)))
    return tuple(g.count * matmul_s(profile, m, n, k, dtype, e)
                 for m, n, k in ((g.m, g.n, g.k), (g.m, g.k, g.n), (g.k, g.n, g.m)))


def fp8_quantize_s(profile: DeviceProfile, q: Fp8Quantize, gemms, *, weight_cached: bool = False,
                   transpose_cached: bool = True) -> tuple[float, float, float]:
    """(forward, backward, once per step) seconds quantizing the operands of fp8 weight GEMMs `gemms` (layer_ops
    `Gemm`s, m x n x k, `count` each): the forward casts each input and weight, the backward each output gradient,
    plus transposed copies of input, output gradient and weight. `weight_cached`: the weights' casts and transposes
    are made once per optimizer step (Transformer Engine under Megatron-Core; the transposes in every backward
    without `transpose_cached`) rather than in every micro-batch (torchao's float8)."""
    cast_f = cast_b = weight_f = weight_b = 0.0
    casts = 0
    for g in gemms:
        act_in, act_out, weight = g.m * g.k * g.count, g.m * g.n * g.count, g.k * g.n * g.count
        cast_f += q.cast * act_in
        cast_b += q.cast * act_out + q.transpose * (act_in + act_out)
        weight_f += q.cast * weight
        weight_b += q.transpose * weight
        casts += g.count
    kernels = casts * q.kernels
    once = 0.0
    if weight_cached:  # once per optimizer step: one cast-transpose kernel per weight
        if not transpose_cached:  # Hopper without the transpose cache: rebuilt in every backward
            cast_b, weight_b = cast_b + weight_b, 0.0
        once = memory_s(profile, weight_f + weight_b) + casts * profile.kernel_overhead_s
    else:  # again in every micro-batch's forward and backward (torchao's float8)
        cast_f, cast_b = cast_f + weight_f, cast_b + weight_b
    return (memory_s(profile, cast_f) + kernels * profile.kernel_overhead_s,
            memory_s(profile, cast_b) + 2 * kernels * profile.kernel_overhead_s, once)


def fp8_quantize_kind(backend: str, compile: bool) -> str:
    """Which kernels quantize fp8 GEMM operands: Transformer Engine's, or torchao's float8 compiled or eager
    (`backend`: `TrainJob.fp8_kernels`)."""
    if backend == "te":
        return "te"
    return "compiled" if compile else "eager"


# torch.optim's foreach AdamW (torch/optim/adam.py _multi_tensor_adam, decoupled weight decay): weight decay
# (p: read, write), lerp of m (m, g read; m written), v * beta2 (2), addcmul into v (v, g read; v written), sqrt of v
# into a temporary (2), its division and its eps addition (2 + 2), addcdiv into p (p, m, temporary read; p written):
# 20 element reads and writes per parameter, where the fused kernel makes 7 (p, g, m, v read; p, m, v written).
# Measured on an H100 (benchmarks/results/h100-sxm/kernels-*.json): 82 ms of optimizer kernels for 2.80B parameters,
# 20 x 4 B x 2.80B at the calibrated 3.0 TB/s is 75 ms.
FOREACH_ADAMW_EXTRA_ACCESSES = 20 - 7

OVERLAP_SLOWDOWN = 0.189
"""Compute slows by 18.9% while a collective overlaps it (NCCL/RCCL kernels occupy SMs and share HBM bandwidth):
the average over GPT and Llama training on H100, A100, MI250 and MI210 measured by arXiv 2507.03114; an
overlapped collective adds this share of the time it runs beside compute."""

STEP_HOST_OVERHEAD_S = 0.005
"""Per-step host work outside the kernels (data-loader handoff, logging, zero_grad, Python): 5 ms, small
next to multi-second steps; it matters only for tiny models."""


@dataclass(slots=True)  # not frozen: built per configuration, and frozen __init__ costs 3x
class StepTime:
    step_time_s: float
    breakdown: dict[str, float]
    """Seconds per step by cause; sums to `step_time_s`."""
    microbatch_s: float
    """Forward + backward of one micro-batch on the slowest stage, with its exposed per-micro-batch comm."""
    num_microbatches: int
    bubble_fraction: float
    """Idle share of the pipeline: (p - 1) / v / (m + (p - 1) / v)."""
    slowest_stage: int

    @property
    def bound(self) -> str:
        """The largest part of the breakdown."""
        return max(self.breakdown, key=self.breakdown.get)


@dataclass(frozen=True, slots=True)
class _BlockTime:
    forward: float
    backward: float
    recompute: float
    attention_forward: float
    attention_backward: float
    gemm_forward: float
    gemm_backward: float
    weight_cast: float
    """Quantizing the block's weights to fp8 (and transposing them) once per optimizer step, where they are cached
    over the micro-batches (`TrainJob.fp8_weight_cache`); 0 where each pass does it (counted in forward and
    backward)."""
    expert_forward: float = 0.0
    """Of `forward`, an MoE layer's experts (routed and shared: GEMMs, fp8 casts, activation), the work between its
    dispatch and its combine; 0 for other layers."""
    expert_dgrad: float = 0.0
    """Of `backward`, the experts' input gradients (and the activation's backward)."""
    expert_wgrad: float = 0.0
    """Of `backward`, the experts' weight gradients."""
    other_wgrad: float = 0.0
    """Of `backward`, the weight gradients of the rest of the block (attention, router, dense MLP)."""
    recompute_expert: float = 0.0
    """Of `recompute` under Megatron's recompute modules, what is rebuilt inside the experts' backward (their FLOP
    share, `recompute.expert_recompute_share`, and the moe_act module's activation)."""


_CACHE: dict = {}


def _unfused_attention_s(profile: DeviceProfile, spec: ModelSpec, *, seq_local: int, context: int, batch: int,
                         tp: int, dtype: str, e: float) -> tuple[float, float]:
    """(forward, backward) seconds of attention with the score matrix in memory.

    Forward: Q K^T and P V as batched GEMMs, plus a fused scale-mask-softmax (read and write the scores) and,
    with attention dropout, a dropout kernel (read, write, and a 1-byte mask). Backward: four batched GEMMs
    (dP, dV, dQ, dK), the dropout backward (read gradient and mask, write) and the softmax backward (read
    gradient and probabilities, write): Megatron-LM's scaled_upper_triang_masked_softmax path.
    """
    ua = unfused_attention(spec, seq=seq_local, keys=context, batch=batch, tp=tp)
    sc, va = ua.scores, ua.values
    drop = spec.attention_dropout > 0
    fwd_stream = ua.score_elements * (2 * e + ((2 * e + 1) if drop else 0.0))
    bwd_stream = ua.score_elements * (3 * e + ((2 * e + 1) if drop else 0.0))
    kernels = 2 if drop else 1
    fwd = (matmul_s(profile, sc.m, sc.n, sc.k, dtype, e, batch=sc.count)
           + matmul_s(profile, va.m, va.n, va.k, dtype, e, batch=va.count)
           + memory_s(profile, fwd_stream) + kernels * profile.kernel_overhead_s)
    bwd = (matmul_s(profile, sc.m, sc.n, va.n, dtype, e, batch=sc.count)      # dP = dO V^T
           + matmul_s(profile, sc.n, va.n, sc.m, dtype, e, batch=sc.count)    # dV = P^T dO
           + matmul_s(profile, sc.m, sc.k, sc.n, dtype, e, batch=sc.count)    # dQ = dS K
           + matmul_s(profile, sc.n, sc.k, sc.m, dtype, e, batch=sc.count)    # dK = dS^T Q
           + memory_s(profile, bwd_stream) + kernels * profile.kernel_overhead_s)
    return fwd, bwd


def _expert_extras_s(profile: DeviceProfile, spec: ModelSpec, ops, probs: str) -> tuple[float, float, float]:
    """(forward, backward, the clamp's forward) seconds of an MoE layer's expert output bias
    (`MEGATRON_EXPERT_BIAS_BYTES`, in the routing probabilities' dtype `probs`) and clamped gated activation
    (`MEGATRON_GLU_CLAMP_BYTES`) as Megatron-Core runs them outside Transformer Engine's op fuser; zeros for a layer
    without them."""
    moe = spec.moe
    down = next((g for g in ops.gemms if g.name == "experts_down"), None)
    if moe is None or down is None:
        return 0.0, 0.0, 0.0
    rows, local = down.m * down.count, down.count
    bias, clamp = [0.0, 0.0], [0.0, 0.0]  # forward, backward
    for i in (0, 1):
        if moe.expert_bias:
            nbytes, per_expert, more = MEGATRON_EXPERT_BIAS_BYTES[probs][i]
            bias[i] = (memory_s(profile, nbytes * rows * down.n)
                       + (per_expert * local + more) * profile.kernel_overhead_s)
        if moe.clamped_glu and spec.gated_mlp:
            nbytes, kernels = MEGATRON_GLU_CLAMP_BYTES[i]
            clamp[i] = memory_s(profile, nbytes * rows * 2 * down.k) + kernels * profile.kernel_overhead_s
    return bias[0] + clamp[0], bias[1] + clamp[1], clamp[0]


def _block_time(profile: DeviceProfile, spec: ModelSpec, layer: int, *, tokens: int, seq_local: int, cp: int,
                tp: int, ep: int, dtype: str, e: float, recompute: str, frozen_base: bool, framework: str,
                attention: str = "flash", compile: bool = False, etp: int | None = None,
                whole_sequence: bool = False, sdpa_flash: bool | None = None,
                weight_cached: bool = False, transpose_cached: bool = True,
                fp8_kernels: str | None = None, permute_fused: bool = False, flash_attn: bool = False,
                extras_unfused: str | None = None, triton_attn: bool = False,
                attn_package: str | None = None) -> _BlockTime:
    """`whole_sequence`: each attention kernel covers the whole context (Ulysses all-to-all CP: all tokens, 1/cp of
    the heads) rather than one rank's chunk of it. `sdpa_flash`: attention runs SDPA's FlashAttention-2 kernels
    (`TrainJob.sdpa_runs_flash`; None: every framework but Megatron). `weight_cached`: fp8 weights quantized once per
    optimizer step (`TrainJob.fp8_weight_cache`), their transposes too with `transpose_cached`. `fp8_kernels`: who
    quantizes fp8 operands, "te" or "torchao" (`TrainJob.fp8_kernels`; None: the framework's own). `permute_fused`:
    an MoE layer's permute and unpermute run as fused kernels (`TrainJob.moe_permute_fused`). `flash_attn`: the
    flash-attn package's kernels rather than SDPA's flash backend (`TrainJob.flash_attn_package`), its Triton ones
    with `triton_attn` (`TrainJob.flash_attn_triton`), or FlashAttention-3 / -4 with `attn_package`
    (`TrainJob.attn_package`). `extras_unfused`:
    an expert bias and a clamped activation run as PyTorch ops of their own, with routing probabilities of this
    dtype (`TrainJob.expert_extras_unfused`); None: fused or absent."""
    fp8_kernels = fp8_kernels_of(framework, fp8_kernels)
    if sdpa_flash is None:
        sdpa_flash = framework != "megatron"
    key = (id(profile), id(spec), block_signature(spec, layer), tokens, seq_local, cp, tp, ep, dtype, e, recompute,
           frozen_base, framework, attention, compile, etp, whole_sequence, sdpa_flash, weight_cached, transpose_cached,
           fp8_kernels, permute_fused, flash_attn, extras_unfused, triton_attn, attn_package)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit[0]
    return remember(_CACHE, key, _time_block(profile, spec, layer, tokens, seq_local, cp, tp, ep, dtype, e, recompute,
                                             frozen_base, framework, attention, compile, etp, whole_sequence,
                                             sdpa_flash, weight_cached, transpose_cached, fp8_kernels, permute_fused,
                                             flash_attn, extras_unfused, triton_attn, attn_package),
                    profile, spec)


def _time_block(profile: DeviceProfile, spec: ModelSpec, layer: int, tokens: int, seq_local: int, cp: int, tp: int,
                ep: int, dtype: str, e: float, recompute: str, frozen_base: bool, framework: str,
                attention: str, compile: bool, etp: int | None, whole_sequence: bool = False,
                sdpa_flash: bool = False, weight_cached: bool = False,
                transpose_cached: bool = True, fp8_kernels: str = "te", permute_fused: bool = False,
                flash_attn: bool = False, extras_unfused: str | None = None, triton_attn: bool = False,
                attn_package: str | None = None) -> _BlockTime:
    if spec.parallel_hybrid:
        raise_untimed_linear(spec)
    if spec.hybrid and recompute_plan(recompute).kind == "op":
        raise InvalidArgument(f"{spec.family}: torchtitan's per-op checkpointing (--ac selective) has no policy for "
                              "its recurrent layers; use --ac full or none (or another framework's checkpointing)")
    if cp > 1 and spec.layer_types[layer] == LINEAR:
        raise InvalidArgument(f"{spec.family}: context parallelism over its recurrent layers (their state passed from "
                              "rank to rank) is not modelled; use --cp 1")
    context = seq_local * cp
    keys = keys_per_query(spec, layer, context)
    # the keys one attention kernel iterates over: a rank's chunk (ring or gathered K/V attended chunk by chunk), the
    # whole context under all-to-all CP, at most a sliding window
    kernel_seq = context if whole_sequence else seq_local
    window = spec.sliding_window if spec.layer_types[layer] == SLIDING else None
    if window:
        kernel_seq = min(kernel_seq, window)
    # Transformer Engine's fused kernels (Megatron) and torch.compile's generated ones stream each tensor about
    # once; eager PyTorch runs every pointwise op as its own kernel. Attention: SDPA's FlashAttention-2 kernels or
    # the device's best (Transformer Engine's, SDPA's cuDNN backend).
    style = "fused" if framework == "megatron" or compile else "eager"
    # each rank: its seq/cp queries against the keys they attend to over the whole context (the load-balanced
    # split of Megatron-Core and torchtitan gives every rank 1/cp of the causal work)
    permute_bytes = PERMUTE_BYTES if permute_fused else (
        MEGATRON_UNFUSED_PERMUTE_BYTES if framework == "megatron" else UNFUSED_PERMUTE_BYTES)
    ops = block_ops(spec, layer, tokens=tokens, keys=keys, tp=tp, ep=ep, etp=etp, style=style,
                    permute_bytes=permute_bytes)
    fwd_gemm = bwd_gemm = 0.0
    exp_f = exp_d = exp_w = other_w = 0.0  # the experts' share (EXPERT_GEMMS), the others' weight gradients
    grouped = framework == "torchtitan"  # its experts run as torch._grouped_mm
    routed_16bit = routed_experts_16bit(framework, dtype in ("fp8", "fp4"))
    for g in ops.gemms:
        g_dtype = gemm_dtype(profile.gpu.peak_flops, "bf16") if routed_16bit and g.name in ROUTED_GEMMS else dtype
        fwd, dgrad, wgrad = gemm_passes_s(profile, g, g_dtype, e, grouped=grouped)
        wgrad = 0.0 if (frozen_base and g.weight) else wgrad
        fwd_gemm += fwd
        bwd_gemm += dgrad + wgrad
        if g.name in EXPERT_GEMMS:
            exp_f, exp_d, exp_w = exp_f + fwd, exp_d + dgrad, exp_w + wgrad
        else:
            other_w += wgrad
    if ops.attention_flops <= 0:  # a hybrid's recurrent or feed-forward-only layer
        attn_f = attn_b = 0.0
    elif attention == "unfused":
        attn_f, attn_b = _unfused_attention_s(profile, spec, seq_local=seq_local, context=context,
                                              batch=tokens // seq_local, tp=tp, dtype=dtype, e=e)
    else:
        attn_bytes = ops.attention_io_elements * e
        # fp8 recipes keep attention in 16 bits; fp32 training runs it at the fp32 (TF32) rate, no flash kernel
        attn_dtype = dtype if dtype in ("fp32", "tf32") else "bf16"
        hd = attention_head_dim(spec)
        # the kernel's thread blocks: a tile of 128 query (key) rows per sequence and head on the GPU; all-to-all CP
        # gives each rank the whole sequence and 1/cp of the heads
        queries = context if whole_sequence else seq_local
        heads = spec.num_heads / (tp * (cp if whole_sequence else 1))
        tiles = flash_tiles(tokens // seq_local, heads, queries)
        # a sliding window's kernel runs every key tile its band touches (`band_work`)
        work = ops.attention_flops * band_work(window, queries)
        attn_f = attention_s(profile, work, attn_bytes, backward=False, dtype=attn_dtype,
                             sdpa=sdpa_flash, seq=kernel_seq, head_dim=hd, tiles=tiles, flash_attn=flash_attn,
                             triton=triton_attn, package=attn_package)
        attn_b = attention_s(profile, 2.5 * work, 2 * attn_bytes, backward=True, dtype=attn_dtype,
                             sdpa=sdpa_flash, seq=kernel_seq, head_dim=hd, tiles=tiles, flash_attn=flash_attn,
                             triton=triton_attn, package=attn_package)
        if spec.attention_sinks and framework == "megatron":  # Transformer Engine runs sinks on cuDNN only
            attn_b += sink_backward_s("cudnn", (tokens // seq_local) * heads * queries)
    scan_f = scan_b = 0.0
    if ops.recurrent_kind is not None:  # the chunked scan, its backward RECURRENT_BACKWARD_RATIO x as long
        scan_f = recurrent_scan_s(profile, ops.recurrent_kind, ops.recurrent_flops, 0.0, seq_len=seq_local,
                                  blocks=recurrent_blocks(spec, tokens // seq_local, tp))
        scan_b = RECURRENT_BACKWARD_RATIO * (scan_f - profile.kernel_overhead_s) + profile.kernel_overhead_s
    # the streaming kernels' fixed time (each GEMM's is in matmul_s, the attention kernel's in attention_s, the
    # scan's in recurrent_scan_s)
    mixer = 1 if (ops.attention_flops > 0 or ops.recurrent_kind is not None) else 0
    stream = (memory_s(profile, ops.stream_bytes * e / 2)
              + (ops.kernels - len(ops.gemms) - mixer) * profile.kernel_overhead_s)
    cast_f = cast_b = weight_cast = 0.0
    if dtype in ("fp8", "fp4"):  # every weight GEMM's operands quantized (forward) and transposed (backward)
        quantize = (NVFP4_QUANTIZE if dtype == "fp4" else FP8_QUANTIZE)[fp8_quantize_kind(fp8_kernels, compile)]
        quantized = [g for g in ops.gemms if g.weight and not (routed_16bit and g.name in ROUTED_GEMMS)]
        cast_f, cast_b, weight_cast = fp8_quantize_s(profile, quantize, quantized, weight_cached=weight_cached,
                                                     transpose_cached=transpose_cached)
        experts = [g for g in quantized if g.name in EXPERT_GEMMS]
        if experts:
            e_cast_f, e_cast_b, _ = fp8_quantize_s(profile, quantize, experts, weight_cached=weight_cached,
                                                   transpose_cached=transpose_cached)
            exp_f, exp_d = exp_f + e_cast_f, exp_d + e_cast_b
    routed_act_f = 0.0  # the routed experts' activation forward: what Megatron's moe_act module runs again
    if ops.expert_stream_bytes:  # the experts' activation, forward and backward
        act_s = memory_s(profile, ops.expert_stream_bytes * e / 2)
        exp_f, exp_d = exp_f + act_s, exp_d + 2 * act_s
        moe = spec.moe
        routed = moe.top_k * moe.expert_intermediate_size
        routed_act_f = act_s * routed / (routed + moe.shared_intermediate_size)
    extra_f = extra_b = 0.0
    if extras_unfused is not None:  # Megatron-Core's expert bias and activation clamp as PyTorch ops (gpt-oss)
        extra_f, extra_b, clamp_f = _expert_extras_s(profile, spec, ops, extras_unfused)
        exp_f, exp_d = exp_f + extra_f, exp_d + extra_b
        routed_act_f += clamp_f
    if spec.hidden_dropout > 0:  # two residual dropouts: read + write h, write a 1-byte mask
        stream += memory_s(profile, 2 * tokens * spec.hidden_size * (2 * e + 1))
    forward = fwd_gemm + attn_f + scan_f + stream + cast_f + extra_f
    backward = bwd_gemm + attn_b + scan_b + 2 * stream + cast_b + extra_b
    kind = recompute_plan(recompute).kind
    rec_expert = 0.0
    if kind == "none":
        rec = 0.0
    elif kind == "selective":
        rec = attn_f
    elif kind == "op":  # everything but the attention core and the kept matmuls runs again
        keeps = op_policy_keeps_matmuls(framework, "nvfp4" if dtype == "fp4" else dtype)
        rec = max(0.0, forward - attn_f - fwd_gemm * op_saved_matmul_share(spec, layer, keeps))
    elif kind == "modules":  # the named submodules' share of the block's forward FLOPs
        rec = forward * module_share(spec, recompute, context, layer)
        rec_expert = rec * expert_recompute_share(spec, recompute, context, layer)
        modules = recompute_plan(recompute).modules
        if "moe_act" in modules and "moe" not in modules:
            rec += routed_act_f  # a streaming op: no FLOPs to share; rebuilt inside the experts' backward
            rec_expert += routed_act_f
    else:  # a whole block again (the stage scales it by the share of blocks checkpointed whole)
        rec = forward
    return _BlockTime(forward, backward, rec, attn_f, attn_b, fwd_gemm, bwd_gemm, weight_cast,
                      expert_forward=exp_f, expert_dgrad=exp_d, expert_wgrad=exp_w, other_wgrad=other_w,
                      recompute_expert=rec_expert)


MOE_SYNC_GAP_S = 0.62e-3
"""Device time lost at each forward of a dropless MoE layer in eager Megatron-Core, per micro-batch: the routed
token counts are copied to the host (Transformer Engine's grouped GEMM takes its per-expert splits as a Python list;
the dispatcher sizes its buffers from them), the host waits for the device to drain, and the device then idles
while the host launches the kernels after the wait. From Megatron-Bridge's Qwen3-30B-A3B on 16 H100 (TP 1, EP 16,
HybridEP, micro-batch 1, 64 micro-batches of 48 MoE layers, forced-balance routing, Transformer Engine graphs over
moe_router and moe_preprocess only, EP overlap off): a 24.7138 s steady-window step, and in a rank-0 Nsight Systems
run of the same job a GPU-active interval union of 22.821 s: 1.89 s with no kernel running = 0.62 ms per MoE layer
and micro-batch (an estimate from two runs, good to about +-0.1 ms); the host sat 3.109 s in HybridEP's metadata
preprocessing, where it waits (0.670 s with EP overlap on). Source: github NVIDIA-NeMo/Megatron-Bridge
skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md @067f987df03b8355b03192d88d70f1709fedf51a, 'HybridEP
production-shape validation'. One job, on an x86 host and Hopper: the gap is host latency, so it is taken as the
same on other GPUs driven by x86 hosts and scaled by the host's time per operation on others (Grace, 2.75x:
`catalog.devices.host_op_time_ratio`)."""


def moe_host_syncs(spec: ModelSpec, job: TrainJob) -> tuple[int, int]:
    """Host waits for the device in one forward of an eager Megatron-Core MoE layer, and in one recomputation of (part
    of) it by Megatron-Core's recompute modules, each costing `moe_sync_gap_s`:

    - its routed token counts copied to the host (`tokens_per_expert.tolist()`), unless the experts are padded to
      capacity (--moe-pad-expert-input-to-capacity: static shapes);
    - gpt-oss's GLU outside Transformer Engine's op fuser (`MoESpec.clamped_glu`: Megatron-Core's quick-GELU GLU,
      `weighted_bias_quick_geglu_impl` in megatron/core/fusions/fused_bias_geglu.py, core_v0.15.0 to main) builds
      `torch.tensor(linear_offset, device=input.device)` on every call, a copy from a Python number that waits for the
      device (measured: 50.6 ms behind a 50 ms GPU sleep, benchmarks/results/h200-sxm/megatron-expert-extras.json).

    The `moe` module recomputes the whole layer (both waits again), `moe_act` the experts' activation (the GLU's).
    None with EP overlap (--overlap-moe-expert-parallel-comm: the host waits while the other micro-batch's queued
    backward keeps the device busy, Megatron's combined 1F1B schedule) or where the layer runs as a CUDA graph (a
    whole-iteration graph, or scope moe, which needs padded experts: a graph holds no wait). Other frameworks: not
    measured, not charged."""
    if spec.moe is None or job.framework != "megatron" or job.moe_a2a_overlap \
            or job.cuda_graph_scope & {"full_iteration", "moe"}:
        return 0, 0
    tokens = 0 if job.moe_pad_expert_input_to_capacity else 1
    offset = 1 if (spec.moe.clamped_glu and spec.gated_mlp and job.expert_extras_unfused is not None) else 0
    plan = recompute_plan(job.recompute)
    modules = plan.modules if plan.kind == "modules" else frozenset()
    again = tokens + offset if "moe" in modules else (offset if "moe_act" in modules else 0)
    return tokens + offset, again


def moe_sync_gap_s(spec: ModelSpec, job: TrainJob, gpu: GPU) -> float:
    """`MOE_SYNC_GAP_S` on `gpu`'s host (x`host_op_time_ratio`) where an eager Megatron-Core MoE layer waits for the
    device at all (`moe_host_syncs`); 0 where it does not."""
    if moe_host_syncs(spec, job) == (0, 0):
        return 0.0
    return MOE_SYNC_GAP_S * host_op_time_ratio(gpu)


def _exposed(comm: float, window: float) -> float:
    """Time a collective adds to compute it overlaps: what exceeds the window, or, when it hides, the slowdown its
    NCCL kernels cause by taking SMs and memory bandwidth from the compute they run beside (OVERLAP_SLOWDOWN)."""
    return max(comm - window, OVERLAP_SLOWDOWN * min(comm, window))


def _ep_overlap_exposed(bt: _BlockTime, a2a: float, *, recompute: float = 0.0, recompute_expert_share: float = 0.0,
                        delay_wgrad: bool = False) -> float:
    """Exposed expert-parallel all-to-all of one MoE layer per micro-batch under Megatron-Core's EP overlap
    (--overlap-moe-expert-parallel-comm): the combined 1F1B schedule runs one micro-batch's forward of the layer
    beside another's backward, each split into attention, dispatch, experts and combine
    (megatron/core/models/common/model_chunk_schedule_plan.py, `TransformerLayerSchedulePlan.run`). Each all-to-all
    can hide only behind the compute issued beside it:

        comm stream:     combine(B)    dispatch(F)       dispatch(B)       combine(F)
        compute stream:  attention(F)  experts dgrad(B)  experts wgrad(B)  experts(F)  attention(B)

    where dispatch(F) needs attention(F), dispatch(B) the experts' dgrad (and their wgrad too unless
    --delay-wgrad-compute moves it after: `delay_wgrad`, `TrainJob.delay_wgrad_compute`), experts(F) dispatch(F),
    combine(F) experts(F), attention(B) dispatch(B); the next layer's attention(F) waits for combine(F) and its
    combine(B) for attention(B) (its input gradients only, under delayed weight gradients: the attention's wgrad
    runs after, `backward_dw`). `recompute`: forward work recomputed inside the backward (Megatron's recompute
    modules), `recompute_expert_share` of it inside the experts' backward (`_BlockTime.recompute_expert`), the
    rest inside the attention's. A chain of such layers is timed on the two streams; what a layer adds beyond its
    compute is exposed, and the comm that ran beside compute slows it by `OVERLAP_SLOWDOWN`. The schedule gives the
    all-to-alls less room than the whole block's compute, which is how gpuwise priced the overlap before 2026-11-27
    (docs/performance.md, "EP overlap, paired")."""
    attn_f = max(0.0, bt.forward - bt.expert_forward)
    attn_b = max(0.0, bt.backward - bt.expert_dgrad - bt.expert_wgrad)
    exp_f, exp_d, exp_w = bt.expert_forward, bt.expert_dgrad, bt.expert_wgrad
    attn_w = min(bt.other_wgrad, attn_b) if delay_wgrad else 0.0  # after the attention's dgrad, off the path
    attn_b += recompute * (1 - recompute_expert_share)  # a recompute module is rebuilt inside its own node's backward
    exp_d += recompute * recompute_expert_share
    if not delay_wgrad:
        exp_d, exp_w = exp_d + exp_w, 0.0

    def chain(layers: int) -> float:
        comp = comm = f_ready = b_ready = 0.0  # stream free times; the forward input and backward gradient ready
        for _ in range(layers):
            combine_b = max(comm, b_ready) + a2a
            att_f = max(comp, f_ready) + attn_f
            dgrad = max(att_f, combine_b) + exp_d
            dispatch_f = max(combine_b, att_f) + a2a
            wgrad = dgrad + exp_w
            dispatch_b = max(dispatch_f, dgrad) + a2a
            experts_f = max(wgrad, dispatch_f) + exp_f
            combine_f = max(dispatch_b, experts_f) + a2a
            att_b = max(experts_f, dispatch_b) + attn_b - attn_w  # its input gradients
            comp, comm, f_ready, b_ready = att_b + attn_w, combine_f, combine_f, att_b
        return max(comp, comm)

    compute = attn_f + attn_b + exp_f + exp_d + exp_w
    exposed = max(0.0, (chain(4) - chain(2)) / 2 - compute)
    return exposed + OVERLAP_SLOWDOWN * min(max(0.0, 4 * a2a - exposed), compute)


def _copy_exposed(copy: float, window: float) -> float:
    """A host copy overlapped with compute: the copy engines need no SMs, so only what exceeds the window shows."""
    return max(0.0, copy - window)


def _offload_s(profile: DeviceProfile, offload: frozenset[str], trained: float, params: float, working_bytes: float,
               grad_bytes: float, host_bytes: float, fwd_window: float, bwd_window: float,
               host_grads: float = 0.0) -> float:
    """Exposed seconds of CPU offload per step (ZeRO-Offload's schedule, without its delayed parameter update).

    Optimizer offload: the gradient shards go to the host during the backward (hidden behind it up to its length),
    the CPU optimizer reads and writes the host states (`host_bytes`, less `host_grads`, the gradients DeepSpeed
    reduces into host memory, which it reads once) and reads the gradients and writes the new working weights, at
    the rate published DeepSpeed CPU Adam steps reach (devices.toml `host_memory_gb_s_per_gpu`, also used for FSDP2's
    CPU AdamW, unmeasured), and the updated weights come back before the next forward. Parameter offload: the shards
    come to the GPU for the forward and again for the backward, prefetched behind that compute.
    """
    pcie = host_copy_bytes_per_s(profile)
    host = float(network_defaults()["host_memory_gb_s_per_gpu"]) * GB
    t = 0.0
    if "optimizer" in offload:
        down = trained * grad_bytes / pcie
        cpu = (2 * (host_bytes - host_grads) + trained * (grad_bytes + working_bytes)) / host
        up = trained * working_bytes / pcie
        t += _copy_exposed(down, bwd_window) + cpu + up
    if "params" in offload:
        per_pass = params * working_bytes / pcie
        t += _copy_exposed(per_pass, fwd_window) + _copy_exposed(per_pass, bwd_window)
    return t


def float8_tp_all_gathers(job: TrainJob, gemm: str) -> bool:
    """Whether the tensor-parallel all-gathers move fp8: torchtitan's float8 training with TP applies torchao's float8
    tensor-parallel styles whenever its recipe is tensorwise, its default (torchtitan's parallelize: the
    `enable_float8_tensorwise_tp` of a float8 converter without a rowwise recipe, `TrainJob.float8_recipe`); `gemm`:
    the dtype the GEMMs run in (`flops.gemm_dtype`), fp8 only where the GPU has fp8 tensor cores."""
    return job.framework == "torchtitan" and gemm == "fp8" and job.torchao_float8_recipe == "tensorwise"


def step_time(spec: ModelSpec, layout: Layout, job: TrainJob, *, profile: DeviceProfile, topo: Topology,
              micro_batch: int, num_microbatches: int, states: ModelStates) -> StepTime:
    """Seconds per optimizer step on the slowest pipeline stage (see the module docstring).

    `states`: the model states of the memory model's peak rank (`TrainMemory.states`), for the sizes that data
    parallelism moves and the optimizer streams: parameters and trainable parameters on the rank (before ZeRO/FSDP
    sharding), bytes per working parameter and gradient element, optimizer-state bytes, and what sits in host memory
    (offload), which the CPU optimizer step streams.
    """
    framework, recompute, offload, attention = job.framework, job.recompute, job.offload, job.attention
    plan = recompute_plan(recompute)
    moe_rerun = 1.0 if plan.kind == "modules" and "moe" in plan.modules else 0.0  # Megatron's moe recompute module
    frozen_base, tp_overlap = job.frozen_base, job.tp_comm_overlap
    params_on_rank, trainable_params = states.params_on_rank, states.trainable_params
    working_bytes, grad_bytes = states.working_bytes_per_param, states.grad_bytes_per_param
    optimizer_bytes, host_bytes = states.optimizer + states.master_weights, states.cpu
    dtype = gemm_dtype(profile.gpu.peak_flops, job.precision)
    e = job.element_bytes
    tp, cp, ep, pp, dp = layout.tp, layout.cp, layout.ep, layout.pp, layout.dp
    seq_local = job.seq // cp
    tokens = micro_batch * seq_local
    h = spec.hidden_size
    n = layout.num_gpus
    m = num_microbatches
    inner = {"tp": 1, "cp": tp, "pp": tp * cp * ep}  # placement: TP, CP, (EP,) PP, DP outward; EP: `expert_tp`
    layers = stage_layers(layout, spec.num_layers)

    tp_ar = topo.collective_s("all_reduce", tokens * h * e, tp, inner["tp"]) if tp > 1 else 0.0
    tp_moe = tp_ar  # a routed-expert part's pair: torchtitan's MoE TP styles never gather fp8
    if tp > 1 and float8_tp_all_gathers(job, dtype):
        # torchao's Float8ColwiseParallel / Float8RowwiseParallel (torchtitan's TP under tensorwise float8) cast a
        # sharded activation, and the gradient bound for an all-gather, to fp8 before gathering it: each all-gather
        # moves 1 byte per element; the reduce-scatters of partial sums stay 16-bit
        tp_ar = (topo.collective_s("reduce_scatter", tokens * h * e, tp, inner["tp"])
                 + topo.collective_s("all_gather", tokens * h * 1.0, tp, inner["tp"]))
    kv_dim = (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) if spec.mla else 2 * spec.num_kv_heads * spec.head_dim
    cp_step = topo.collective_s("send_recv", tokens * kv_dim * e / tp, cp, inner["cp"]) if cp > 1 else 0.0
    cp_type = job.cp_comm_type or ("p2p" if framework == "megatron" else "allgather")
    cp_fwd = cp_bwd = 0.0  # exposed per block, all-gather and all-to-all kinds
    if cp > 1 and cp_type == "allgather":  # gather the context's K/V; the backward gathers again, scatters dK/dV
        ag = topo.collective_s("all_gather", cp * tokens * kv_dim * e / tp, cp, inner["cp"])
        cp_fwd, cp_bwd = ag, ag + topo.collective_s("reduce_scatter", cp * tokens * kv_dim * e / tp, cp, inner["cp"])
    elif cp > 1 and cp_type == "a2a":  # q, k, v in and the output back, each way
        q_dim = (spec.num_heads * (spec.mla.qk_head_dim if spec.mla else spec.head_dim))
        moved = tokens * (2 * q_dim + kv_dim) * e / tp
        cp_fwd = cp_bwd = topo.collective_s("all_to_all", moved, cp, inner["cp"])
    a2a = 0.0
    if ep > 1 and spec.moe is not None:
        # each rank dispatches its etp / tp share of the tokens; the EP ranks sit next to the expert-TP ranks
        # (Megatron-Core's folded expert rank order tp-ep-dp, torchtitan's EP over dp_shard x cp inside TP): stride
        # etp, whatever cp is (`Layout.expert_dp`)
        a2a = topo.expert_all_to_all_s(tokens * layout.expert_tp // tp * h * e, spec.moe.top_k, ep,
                                       layout.expert_tp, per_node=job.moe_token_dispatcher == "flex",
                                       backend=job.flex_backend)
    # Each hop is one send/recv; the pipeline runs at the pace of its slowest hop, so the level is the one the
    # whole pipeline group spans (a node boundary anywhere in it is on every micro-batch's path).
    pp_p2p = topo.collective_s("send_recv", tokens * h * e / (tp if layout.sp else 1), pp, inner["pp"]) if pp > 1 else 0.0

    sync_gap = moe_sync_gap_s(spec, job, profile.gpu)
    fwd_syncs, rec_syncs = moe_host_syncs(spec, job)
    sdpa_flash = job.sdpa_flash_on(profile.gpu)
    stage_fb: dict[int, tuple[float, dict[str, float]]] = {}
    weight_casts: dict[int, float] = {}  # fp8 weights quantized once per step, per stage (TrainJob.fp8_weight_cache)
    # kept in bf16 under the quantized recipe, on the ranks that hold them
    bf16_layers = job_bf16_layers(layout, spec.num_layers, job)
    bf16_dtype = gemm_dtype(profile.gpu.peak_flops, "bf16")
    for stage in distinct_stages(spec, layers, bf16_layers):  # the others repeat one of these
        parts = dict(forward=0.0, backward=0.0, recompute=0.0, tp_comm=0.0, cp_comm=0.0, ep_comm=0.0, pp_comm=0.0)
        blocks = stage_blocks(spec, layers, stage, bf16_layers)
        whole = plan.full_fraction(sum(c for _, c in blocks))  # blocks run again in full (their comm too)
        scale = whole if plan.kind in ("layer", "block") else 1.0
        for layer, reps in blocks:
            bt = _block_time(profile, spec, layer, tokens=tokens, seq_local=seq_local, cp=cp, tp=tp, ep=ep,
                             dtype=bf16_dtype if layer in bf16_layers else dtype, e=e, recompute=recompute,
                             frozen_base=frozen_base, framework=framework,
                             attention=attention, compile=job.compile, etp=layout.expert_tp,
                             whole_sequence=cp_type == "a2a", sdpa_flash=sdpa_flash,
                             weight_cached=job.fp8_weight_cache, fp8_kernels=job.fp8_kernels,
                             permute_fused=job.moe_permute_fused, flash_attn=job.flash_attn_package,
                             triton_attn=job.flash_attn_triton, attn_package=job.attn_package,
                             extras_unfused=job.expert_extras_unfused,
                             transpose_cached=job.fp8_transpose_cache
                             or not fp8_gemm_needs_transpose(profile.gpu.architecture))
            parts["forward"] += reps * bt.forward
            weight_casts[stage] = weight_casts.get(stage, 0.0) + reps * bt.weight_cast
            parts["backward"] += reps * bt.backward
            parts["recompute"] += reps * bt.recompute * scale
            k = block_parts(spec, layer)  # an all-reduce (or its SP pair) after each part, each way
            moe_part = spec.moe is not None and spec.moe.moe_layers[layer] and spec.has_ffn(layer)
            pairs = (k - 1) * tp_ar + tp_moe if moe_part else k * tp_ar  # the collective pairs of one pass
            if tp_overlap:  # split GEMMs pipeline the collectives (Megatron --tp-comm-overlap): what exceeds them
                fwd_tp = _exposed(pairs, bt.gemm_forward)
                parts["tp_comm"] += reps * (fwd_tp + _exposed(pairs, bt.gemm_backward)
                                            + fwd_tp * whole)
            else:
                parts["tp_comm"] += reps * (2 * pairs + pairs * whole)
            if cp > 1 and bt.attention_forward > 0:  # ring: cp - 1 exchanges per pass, overlapped with the
                # attention of the step before
                if cp_type == "p2p":
                    parts["cp_comm"] += reps * (_exposed((cp - 1) * cp_step, bt.attention_forward)
                                                + _exposed(2 * (cp - 1) * cp_step, bt.attention_backward))
                else:  # before and after the attention kernels, on the critical path
                    parts["cp_comm"] += reps * (cp_fwd + cp_bwd + cp_fwd * whole)
            if a2a and spec.moe.moe_layers[layer]:
                if job.moe_a2a_overlap:  # another micro-batch's layer computes meanwhile, except for the warm-up
                    # forwards and cool-down backwards, which run alone
                    paired = _ep_overlap_exposed(
                        bt, a2a, recompute=0.0 if whole else bt.recompute, delay_wgrad=job.delay_wgrad_compute,
                        recompute_expert_share=bt.recompute_expert / bt.recompute if bt.recompute else 0.0)
                    alone = unpaired_share(layout, stage, m)
                    parts["ep_comm"] += reps * ((1 - alone) * paired + alone * 4 * a2a
                                                + _exposed(2 * a2a, bt.forward) * whole)
                else:  # a recomputed layer (whole, or Megatron's moe module) dispatches and combines again
                    parts["ep_comm"] += reps * (4 * a2a + 2 * a2a * (whole + (1 - whole) * moe_rerun))
            if sync_gap and spec.moe.moe_layers[layer]:  # each forward of the layer (and its recomputations)
                parts["host_sync"] = parts.get("host_sync", 0.0) + reps * sync_gap * (
                    fwd_syncs * (1 + whole) + rec_syncs * (1 - whole))
        if stage == 0:
            parts["forward"] += memory_s(profile, tokens * h * e)  # embedding gather
        if stage == pp - 1:
            hg = head_gemm(spec, tokens, tp)
            # fp8 recipes leave the output layer in 16 bits (torchao's float8 skips it, Transformer Engine's
            # output_layer is not an fp8 module)
            hd = gemm_dtype(profile.gpu.peak_flops, "bf16") if dtype in ("fp8", "fp4") else dtype
            parts["forward"] += matmul_s(profile, hg.m, hg.n, hg.k, hd, e) \
                + memory_s(profile, tokens * hg.n * LOSS_BYTES_PER_LOGIT / 2)
            parts["backward"] += matmul_s(profile, hg.m, hg.k, hg.n, hd, e) \
                + matmul_s(profile, hg.k, hg.n, hg.m, hd, e) + memory_s(profile, tokens * hg.n * LOSS_BYTES_PER_LOGIT / 2)
        if pp > 1 and layout.schedule == "interleaved" and framework == "megatron" and job.overlap_p2p_communication:
            # Megatron's interleaved 1F1B posts each chunk's send/recv and waits for it only before the chunk that
            # needs it (TrainJob.overlap_p2p_communication): the exchange runs beside the next chunk's forward or
            # backward
            v = layout.vpp
            parts["pp_comm"] += v * (_exposed(pp_p2p, parts["forward"] / v)
                                     + _exposed(pp_p2p, (parts["backward"] + parts["recompute"]) / v))
        elif pp > 1:
            # activations forward and gradients backward at each of the rank's v model chunks
            parts["pp_comm"] += 2 * pp_p2p * (layout.vpp if layout.schedule == "interleaved" else 1)
        stage_fb[stage] = (sum(parts.values()), parts)

    slowest = max(stage_fb, key=lambda s: stage_fb[s][0])
    mb_time, parts = stage_fb[slowest]
    v = layout.vpp if layout.schedule == "interleaved" else 1
    breakdown = {k: m * val for k, val in parts.items()}
    breakdown["forward"] += weight_casts.get(slowest, 0.0)  # on the first micro-batch only
    breakdown["bubble"] = bubble_time_s(pp, v, mb_time)

    sh = layout.sharding_spec
    group = layout.shard_size
    blocks = max(1, max(layers))
    fwd_window, bwd_window = parts["forward"], parts["backward"]
    # Two reductions share the backward: the dense weights' over the dp x cp ranks that hold them (outermost, so their
    # stride is the model-parallel ranks, tp x pp, and they cross nodes as soon as the job does) and the routed
    # experts' over the expert data-parallel ranks, tp x cp x dp / (ep x etp) of them, the ep x etp ranks of an
    # expert group being innermost (Megatron-Core's parallel folding, torchtitan's EP mesh): an expert-DP group
    # strides over whole EP groups, across nodes once EP fills a node.
    expert_trained, expert_held = states.expert_trainable_params, states.expert_params_on_rank
    edp = layout.expert_dp
    # (trained parameters, held parameters, ranks holding them, ranks sharding them, stride, bytes an FSDP gather moves)
    dense_held = params_on_rank - expert_held
    flows = [(trainable_params - expert_trained, dense_held, dp * cp, group, n // (dp * cp),
              dense_held * working_bytes - states.fp8_gathered_params * (working_bytes - 1))]  # torchao float8
    if expert_held > 0:  # frozen experts (LoRA) are still gathered under FSDP / ZeRO-3
        flows.append((expert_trained, expert_held, edp, layout.expert_shard_size, n // edp, expert_held * working_bytes))
    dp_exposed = 0.0
    if trainable_params > 0 and any(ranks > 1 for _, _, ranks, _, _, _ in flows):
        if sh.params:  # ZeRO-3 / FSDP / HSDP: gather each block's weights per micro-batch, reduce-scatter grads
            gather = rs = hsdp = 0.0
            for trained, _, ranks, shards, stride, gathered in flows:
                gather += topo.collective_s("all_gather", gathered, shards, stride)
                rs += topo.collective_s("reduce_scatter", trained * grad_bytes, shards, stride)
                if ranks // shards > 1:  # HSDP: all-reduce the gradient shards across replicas
                    hsdp += topo.collective_s("all_reduce", trained * grad_bytes / shards, ranks // shards,
                                              stride * shards)
            if sh.keep_unsharded or pipeline_keeps_unsharded(framework, pp, sh.params):
                # grad-op / no-reshard, and FSDP2 under torch.distributed.pipelining: gathered in the first forward
                # and kept unsharded (with unsharded gradients) through the step's micro-batches; the memory model
                # holds that copy at the peak.
                gathers = _exposed(gather, fwd_window) + gather / blocks
                reduces = _exposed(rs, bwd_window)
            else:
                # Gradients stay sharded, so every micro-batch's backward reduce-scatters them (torchtitan, FSDP1,
                # DeepSpeed ZeRO-3: no_sync is incompatible with sharded gradients). The backward's all-gathers and
                # reduce-scatters share the network and hide behind the same backward compute, once.
                gathers = m * (_exposed(gather, fwd_window) + 2 * gather / blocks)
                reduces = m * _exposed(gather + rs, bwd_window)
            dp_exposed += gathers + reduces + rs / blocks + hsdp
        else:  # DDP / ZeRO-1/2: the gradients of all replicas are reduced once per step
            op = "reduce_scatter" if (sh.grads or sh.optimizer) else "all_reduce"
            reduce = sum(topo.collective_s(op, trained * grad_bytes, ranks, stride)
                         for trained, _, ranks, _, stride, _ in flows)
            # ZeRO-2 keeps only its gradient shard: it reduce-scatters at every micro-batch's backward (DeepSpeed
            # refuses no_sync under ZeRO-2/3); DDP and ZeRO-1 accumulate full gradients and reduce once.
            times = m if sh.grads else 1
            dp_exposed += times * _exposed(reduce, bwd_window) + reduce / blocks
            if sh.optimizer:  # the updated parameters gathered back after the step
                ag = sum(topo.collective_s("all_gather", held_params * working_bytes, ranks, stride)
                         for _, held_params, ranks, _, stride, _ in flows)
                # Megatron overlaps it with the next forward (--overlap-param-gather); DeepSpeed waits for it.
                dp_exposed += _exposed(ag, fwd_window) + ag / blocks if framework == "megatron" else ag
    breakdown["dp_comm"] = dp_exposed

    # Optimizer step: stream master weights, states and gradients (read + write), write the working copy. Each rank
    # steps its shard: the dense weights' over the dense group, the experts' over their own (`flows`).
    shard = group if sh.optimizer else 1
    stepped = sum(trained / (shards if sh.optimizer else 1) for trained, _, _, shards, _, _ in flows)
    opt = 0.0
    if optimizer_bytes > 0 and "optimizer" not in offload:
        streamed = 2 * optimizer_bytes + (grad_bytes + working_bytes) * stepped
        if job.optimizer_foreach and job.optimizer == "adamw":
            streamed += FOREACH_ADAMW_EXTRA_ACCESSES * states.optimizer / 2
        opt = memory_s(profile, streamed)
        if job.optimizer == "muon" and not frozen_base:  # Newton-Schulz on whole matrices (estimate/muon.py)
            expert_ranks = layout.expert_shard_size if sh.optimizer else 1
            # every stage steps at once after the flush: the step waits for the stage with the most of it
            opt += max(muon.orthogonalize_s(profile, stage_tensors(spec, layout, st).groups,
                                            dtype=muon.ns_dtype(profile.gpu.peak_flops), ranks=shard,
                                            expert_ranks=expert_ranks, ep=ep)
                       for st in distinct_stages(spec, layers))
    breakdown["optimizer"] = opt
    if offload - {"activations"}:
        held_shard = sum(held / (shards if sh.params else 1) for _, held, _, shards, _, _ in flows)
        breakdown["offload"] = _offload_s(profile, offload, stepped, held_shard, working_bytes, grad_bytes, host_bytes,
                                          fwd_window, bwd_window, host_grads=states.cpu_grads)
    breakdown["overhead"] = STEP_HOST_OVERHEAD_S
    total = sum(breakdown.values())
    return StepTime(step_time_s=total, breakdown=breakdown, microbatch_s=mb_time, num_microbatches=m,
                    bubble_fraction=bubble_fraction(pp, m, v), slowest_stage=slowest)
