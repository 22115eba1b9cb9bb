"""The operations of one transformer block (and of the LM head) as kernels: GEMM shapes, attention, streaming.

Shared by the training step time, the inference latency and the roofline, so that all three see the same
decomposition. Counts are per rank: matrices split over tensor parallelism (`tp`), routed experts over expert
parallelism (`ep`). `tokens` is the GEMM row count (micro-batch x sequence / cp in training, batch x prompt in
prefill, batch in decode).

Streaming (memory-bound) traffic of the forward pass, in bytes per element of the tensor it touches, counted
kernel by kernel (`STREAM_BYTES`), for two kernel styles:

- `eager` (PyTorch modules without torch.compile: Hugging Face, FSDP/torchtitan and DeepSpeed defaults). An RMSNorm
  is six kernels through fp32: upcast (read 2, write 4), square (4, 4), mean (read 4), scale (4, 4), downcast (4, 2)
  and weight (2, 2): 36 bytes per element. RoPE on q and k: rotate-half (slice, negate, cat), two multiplies and an
  add, about 12 bytes per element. SwiGLU: silu (2, 2) then multiply (4, 2): 10 bytes per intermediate element.
  Residual add: 6 bytes per element. Head-major copies of q, k, v for the attention kernel: 4 bytes per element.
- `fused` (Megatron-LM with Transformer Engine): one norm kernel (read 2, write 2), fused RoPE (4), fused
  SwiGLU (read 4, write 2), residual add (6), no layout copies.

Backward streams about twice the forward traffic (it reads the saved input and the incoming gradient and
writes a gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.attention_kernels import band_pairs
from ..errors import InvalidArgument
from ..model.spec import LINEAR, NONE, SLIDING, ModelSpec
from .kv_cache import layer_state_bytes

PERMUTE_BYTES = 8.0
"""Bytes per (token x hidden) element of an MoE layer's permute + unpermute per routed copy and per token: each
reads (2 B) and writes (2 B) the element once on the way in and once on the way out (fused permute kernels:
Transformer Engine's under Megatron-Core's --moe-permute-fusion, vLLM's and SGLang's fused MoE)."""

UNFUSED_PERMUTE_BYTES = 14.5
"""The same with PyTorch's index ops as torchtitan runs them: the gather in, the atomic `index_add_` out (the copies
already weighted) and their backward kernels. Measured on an H200 (benchmarks/results/h200-sxm/moe-layer-profile.json:
Qwen3-30B-A3B and GPT-OSS-20B layers at 4,096 and 16,384 tokens, forward + backward): 13.9-14.8 bytes' worth of the
copy rate per element and pass, 1.7-1.8x the bytes moved. torch.compile is assumed to leave them as they are (not
measured). The kernels lean to the forward (about 2.6 : 1), where gpuwise splits the permute's time 1 : 2 as it
does every streaming kernel's, so a recomputed forward is charged slightly less."""

MEGATRON_UNFUSED_PERMUTE_BYTES = 24.3
"""Megatron-Core's permute and unpermute without --moe-permute-fusion (moe_utils.py `permute` / `unpermute`):
`index_select` in, the copies multiplied by their routing probabilities, then `scatter_add_` into a zeroed output,
and their backward. Measured on the same H200 (benchmarks/moe_permute.py, moe-permute-bf16.json: Qwen3-30B-A3B,
GPT-OSS-20B and DeepSeek-V3 shapes at 4,096 and 16,384 tokens): 22.9-26.1 bytes' worth per element and pass (median
24.3) with bf16 probabilities; with --moe-router-dtype fp32 the weighted copies are promoted to fp32 before the
scatter-add and it costs 31.0-33.4 (moe-permute-fp32.json; gpuwise has no router dtype option and takes bf16)."""

MEGATRON_EXPERT_BIAS_BYTES = {"bf16": ((17.7, 2, 1), (47.0, 4, 2)), "fp32": ((46.2, 2, 2), (82.6, 5, 3))}
"""By the routing probabilities' dtype, (forward, backward) of Megatron-Core's expert output bias outside Transformer
Engine's op fuser, each (bytes' worth of the copy bandwidth per element of the routed copies' fc2 output, kernels per
local expert, kernels more): TEGroupedMLP's `_apply_bias` (megatron/core/transformer/moe/experts.py @core_v0.17.0)
splits the output by expert, adds `b * p` to each expert's rows in a Python loop, concatenates and casts back; the
flex dispatcher's HybridEP and DeepEP take fp32 probabilities (token_dispatcher.py: 'HybridEP only supports float32
probs'), so the products and the sum are fp32. Measured on a lent H200 (benchmarks/megatron_expert_extras.py,
benchmarks/results/h200-sxm/megatron-expert-extras.json: the code as written, gpt-oss's 2,880 hidden, 4 and 16 local
experts x 1,024 and 4,096 rows, autograd for the backward, device time behind a GPU sleep), the kernels' fixed cost
(`DeviceProfile.kernel_overhead_s` each) taken out, over the 4.13 TB/s copy rate: forward 17.6-18.1 (bf16) and
45.9-47.0 (fp32), backward 41.9-52.6 and 72.4-92.9 (more at 1,024 rows: the bias gradient's row sums), the medians
here. Counted from the code and PyTorch's autograd formulas they were 12 / 16 and 28 / 40: eager kernels move more
than the tensors they touch (as the unfused permute's 1.7-1.8x, `UNFUSED_PERMUTE_BYTES`). The kernel counts are
counted (forward 2 per expert + the concatenation and cast; backward the bias's and the probabilities' gradients,
grad * p and grad * b, and the split's)."""

MEGATRON_GLU_CLAMP_BYTES = ((15.5, 3), (37.4, 9))
"""(forward, backward) of Megatron-Core clamping a gated activation's halves before its fused kernel, each (bytes' worth
of the copy bandwidth per element of the experts' fc1 output, copies x 2 x expert width; kernels):
`weighted_bias_quick_geglu_impl` (megatron/core/fusions/fused_bias_geglu.py @core_v0.17.0) runs `input.chunk(2, -1)`,
`clamp` of each half and `torch.cat`; the backward is PyTorch's clamp gradient, `where` over a mask of `le` (the gate
half, clamped above) or of `ge`, `le` and `logical_and` (the linear half, both sides), and the chunk's gradient
concatenated: three kernels forward, seven and two scalar fills backward (counted). Measured on a lent H200
(benchmarks/megatron_expert_extras.py `clamp_*`, benchmarks/results/h200-sxm/megatron-glu-clamp.json: the code as
written, 4 and 16 local experts x 1,024 and 4,096 rows of 2 x 2,880), the kernels' fixed cost taken out, over the
4.13 TB/s copy rate: forward 15.4-16.1, backward 36.9-37.8, the medians here (counted from the tensors they were 8 and
15)."""

# Bytes per element moved by the streaming kernels of one block, forward (see the module docstring).
STREAM_BYTES = {
    "eager": {"norm": 36.0, "rope": 12.0, "act_gated": 10.0, "act": 4.0, "residual": 6.0, "attn_copy": 4.0},
    "fused": {"norm": 4.0, "rope": 4.0, "act_gated": 6.0, "act": 4.0, "residual": 6.0, "attn_copy": 0.0},
}


@dataclass(frozen=True, slots=True)
class Gemm:
    name: str
    m: int
    n: int
    k: int
    count: int = 1
    """How many such GEMMs (local experts)."""
    weight: bool = True
    """The B operand is a weight (quantized in inference, frozen under LoRA)."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


EXPERT_GEMMS = frozenset({"experts_up", "experts_down", "shared_up", "shared_down", "shared_gate"})
"""An MoE layer's expert GEMMs (routed and shared): its work between the dispatch and the combine."""
ROUTED_GEMMS = frozenset({"experts_up", "experts_down"})
"""The routed experts' GEMMs (a framework's grouped GEMM), without the shared experts' dense ones."""


@dataclass(frozen=True, slots=True)
class BlockOps:
    gemms: tuple[Gemm, ...]
    attention_flops: float
    """Forward score + value FLOPs of this rank."""
    attention_io_elements: float
    """Q, K, V and output elements the attention kernel reads and writes (K/V of the whole context)."""
    stream_bytes: float
    """Bytes read + written by the streaming kernels (norms, residuals, RoPE, activation, layout copies)."""
    kernels: int
    """Kernels launched by the forward pass of the block: its GEMMs, the attention kernel and the streaming ones
    (norms, two residual adds, RoPE, the activation; for MoE also top-k, permute and unpermute)."""
    recurrent_flops: float = 0.0
    """A hybrid model's recurrent layer: its scan's FLOPs (4 x head_dim x state_dim per token and head)."""
    recurrent_state_bytes: float = 0.0
    """A recurrent layer in decode: bytes of recurrent state (and convolution window) read and written."""
    recurrent_kind: str | None = None
    """The recurrent mixer's kind (`LinearMixerSpec.kind`), None for an attention or mixer-less layer."""
    expert_stream_bytes: float = 0.0
    """Of `stream_bytes`, those of an MoE layer's expert activations (routed and shared): the part of the streaming
    work that runs inside the experts, after the dispatch and before the combine."""


def _moe_expert_tokens(spec: ModelSpec, tokens: int, ep: int) -> tuple[int, int]:
    """(local experts, tokens per local expert) with balanced routing."""
    moe = spec.moe
    local = max(1, moe.num_experts // ep)
    per_expert = max(1, round(tokens * moe.top_k * ep / moe.num_experts))
    return local, per_expert


def raise_untimed_linear(spec: ModelSpec) -> None:
    """A parallel hybrid (Falcon-H1: attention and a Mamba-2 mixer side by side in one layer) is not timed: said in
    one line rather than costing the layer as attention alone."""
    kind = spec.linear.name if spec.linear else "recurrent"
    raise InvalidArgument(f"{spec.family}: its {kind} layers run beside attention in the same layer, which is not "
                          "timed yet: `gpuwise fit` answers memory (weights, KV cache and recurrent state); speed, "
                          "training memory and plans are not available for this model")


def raise_untimed_varying(spec: ModelSpec) -> None:
    """Layers of different attention shapes (Gemma 4): the kernel models assume one; said in one line."""
    raise InvalidArgument(f"{spec.family}: its layers differ in attention shape (head size, KV heads, shared K/V, "
                          "per-layer inputs), which the speed models do not cover yet: `gpuwise fit` answers memory "
                          "(weights and KV cache, layer by layer); speed, training memory and plans are not available "
                          "for this model")


def block_ops(spec: ModelSpec, layer: int, *, tokens: int, keys: float, tp: int = 1, ep: int = 1, etp: int | None = None,
              kv_rows: float | None = None, active_experts: float | None = None, style: str = "eager",
              permute_bytes: float = PERMUTE_BYTES, sequences: int | None = None) -> BlockOps:
    """Forward kernels of block `layer` for `tokens` query rows, each attending to `keys` keys on average.

    `kv_rows`: K/V rows (tokens) the attention kernel reads in all; decode reads each sequence's whole cache
    (batch x context); None: each K/V row once (prefill and training, where flash kernels are compute-bound).

    `active_experts`: in decode, the expected number of distinct routed experts the batch touches (their weights
    are read once each); None uses balanced routing over all local experts.

    `permute_bytes`: an MoE layer's permute + unpermute bytes per element (`PERMUTE_BYTES` fused, or
    `UNFUSED_PERMUTE_BYTES`).

    `sequences`: in decode, the sequences whose recurrent state a hybrid model's linear layer reads and writes once
    each (one token each); None: a chunked scan over the `tokens` (prefill, training).

    A layer is a token mixer (attention, or a hybrid model's recurrent mixer, or none: Nemotron-H's MLP and MoE
    layers) and a feed-forward part (absent in Nemotron-H's mixer layers, `ModelSpec.ffn_layers`).
    """
    if spec.varying_attention:
        raise_untimed_varying(spec)
    if spec.parallel_hybrid:
        raise_untimed_linear(spec)  # Falcon-H1: attention and a Mamba-2 mixer side by side, not modelled
    h = spec.hidden_size
    kind = spec.layer_types[layer]
    attends = kind not in (LINEAR, NONE)
    gemms: list[Gemm] = []
    mla = spec.mla
    nh = spec.num_heads
    score_dim = value_dim = kv_width = q_width = rope_elems = extra_norms = 0.0
    mixer_kernels = 1 if attends else 0  # the attention kernel
    if attends and mla is not None:
        if mla.q_lora_rank:
            gemms += [Gemm("q_a", tokens, mla.q_lora_rank, h), Gemm("q_b", tokens, nh * mla.qk_head_dim // tp, mla.q_lora_rank)]
        else:
            gemms.append(Gemm("q", tokens, nh * mla.qk_head_dim // tp, h))
        gemms += [Gemm("kv_a", tokens, mla.kv_lora_rank + mla.qk_rope_head_dim, h),
                  Gemm("kv_b", tokens, nh * (mla.qk_nope_head_dim + mla.v_head_dim) // tp, mla.kv_lora_rank),
                  Gemm("o", tokens, h, nh * mla.v_head_dim // tp)]
        score_dim, value_dim = nh * mla.qk_head_dim / tp, nh * mla.v_head_dim / tp
        kv_width = (nh * (mla.qk_head_dim + mla.v_head_dim)) / tp
        q_width = nh * mla.qk_head_dim / tp
        rope_elems = nh * mla.qk_rope_head_dim / tp + mla.qk_rope_head_dim
        extra_norms = (mla.q_lora_rank or 0) + mla.kv_lora_rank
    elif attends:
        q = nh * spec.head_dim
        gate = q if spec.attn_output_gate else 0  # Qwen3-Next's q_proj also yields the output gate
        # fewer KV heads than TP ranks: each rank keeps (projects, caches and reads) one whole head, as vLLM,
        # SGLang and Megatron-Core replicate them
        kv_local = max(spec.num_kv_heads / tp, 1.0) * spec.head_dim
        gemms += [Gemm("qkv", tokens, max(1, (q + gate) // tp + round(2 * kv_local)), h),
                  Gemm("o", tokens, h, max(1, q // tp))]
        score_dim = value_dim = q / tp
        kv_width = 2 * kv_local
        q_width = q / tp
        rope_elems = q / tp + kv_local if spec.position == "rope" else 0.0
        extra_norms = q / tp + kv_local if spec.qk_norm != "none" else 0.0
    sb = STREAM_BYTES[style]
    act = 0.0
    scan_flops = state_bytes = 0.0
    if kind == LINEAR:
        lm = spec.linear
        assert lm is not None
        g, scan_flops, state_bytes, mixer_stream = _linear_mixer_ops(spec, tokens, tp, sequences)
        gemms += g
        act += mixer_stream
        mixer_kernels = LINEAR_MIXER_KERNELS[lm.kind] if sequences is None else LINEAR_MIXER_DECODE_KERNELS
    if attends and spec.attn_output_gate:
        act += sb["residual"] * q_width  # sigmoid(gate) x attention output, one pass
        mixer_kernels += 1
    gated = spec.gated_mlp
    mats = 3 if gated else 2
    moe = spec.moe
    act_bytes = sb["act_gated"] if gated else sb["act"]
    ffn = spec.has_ffn(layer)
    mlp_streaming = 0
    expert_act = 0.0
    if ffn and moe is not None and moe.moe_layers[layer]:
        e_i = moe.expert_intermediate_size
        # Expert TP below the dense TP (Megatron-Core's parallel folding, torchtitan's etp 1): each rank routes its
        # own tp / etp share of the tokens to whole (etp-split) experts instead of all tokens to tp-split ones.
        etp = tp if etp is None else etp
        local, per_expert = _moe_expert_tokens(spec, tokens * etp // tp, ep)
        if active_experts is not None:
            local = max(1, round(min(local, active_experts)))
            per_expert = max(1, round(tokens * moe.top_k / local))
        gemms.append(Gemm("router", tokens, moe.num_experts, h, weight=True))
        # permute (read each token, write its top-k copies in expert order) and unpermute (read the copies, write
        # their weighted sum): 2 (k + 1) elements of width h moved per token the rank routes, 2 bytes each way
        act += permute_bytes * (moe.top_k + 1) * h * etp / tp
        gemms += [Gemm("experts_up", per_expert, (mats - 1) * e_i // etp, h, local),
                  Gemm("experts_down", per_expert, h, e_i // etp, local)]
        expert_act = act_bytes * moe.top_k * e_i / tp
        if moe.shared_intermediate_size:
            s_i = moe.shared_intermediate_size
            gemms += [Gemm("shared_up", tokens, (mats - 1) * s_i // tp, h), Gemm("shared_down", tokens, h, s_i // tp)]
            expert_act += act_bytes * s_i / tp
            if moe.shared_expert_gate:  # Qwen-MoE's sigmoid gate on the shared expert's output: one column
                gemms.append(Gemm("shared_gate", tokens, 1, h))
        act += expert_act
        mlp_streaming = 4 + (1 if moe.shared_intermediate_size else 0)  # top-k, permute, activation, unpermute;
        # the shared experts' activation
    elif ffn:
        i = spec.intermediate_size
        gemms += [Gemm("mlp_up", tokens, (mats - 1) * i // tp, h), Gemm("mlp_down", tokens, h, i // tp)]
        act += act_bytes * i / tp
        mlp_streaming = 1  # the activation
    # a residual add after each part: two in a transformer block, one in Nemotron-H's single-part layers
    residuals = (1 if kind != NONE else 0) + (1 if ffn else 0)
    # Norms and residuals run on the full hidden width (replicated over TP without sequence parallelism).
    stream = (sb["norm"] * (spec.norms_per_layer * h + extra_norms) + sb["residual"] * residuals * h
              + sb["rope"] * rope_elems + sb["attn_copy"] * (q_width + kv_width) + act)
    io = tokens * (q_width + value_dim) + (tokens if kv_rows is None else kv_rows) * kv_width if attends else 0.0
    return BlockOps(gemms=tuple(gemms), attention_flops=2.0 * (score_dim + value_dim) * keys * tokens,
                    attention_io_elements=io, stream_bytes=stream * tokens,
                    kernels=(len(gemms) + mixer_kernels + spec.norms_per_layer + residuals
                             + (1 if rope_elems else 0) + mlp_streaming),
                    recurrent_flops=scan_flops, recurrent_state_bytes=state_bytes,
                    recurrent_kind=spec.linear.kind if kind == LINEAR and spec.linear else None,
                    expert_stream_bytes=expert_act * tokens)


LINEAR_MIXER_KERNELS = {"gated_deltanet": 7, "mamba2": 8}
"""Kernels one recurrent mixer launches beside its two projections in prefill (vLLM's and SGLang's Triton ports of
flash-linear-attention and mamba_ssm): the causal convolution, the gating (Gated DeltaNet's beta and decay; Mamba-2's
dt softplus), the chunked scan (Gated DeltaNet: chunk_local_cumsum, the fused kkt / solve_tril / WY kernel, the state
recurrence and the output, four; Mamba-2: chunk cumsum, chunk state, state passing, BMM and chunk scan, five) and the
gated RMSNorm."""

LINEAR_MIXER_DECODE_KERNELS = 3
"""In decode: the convolution's one-step update, the state update (fused_recurrent_gated_delta_rule,
selective_state_update) and the gated RMSNorm."""


def _linear_mixer_ops(spec: ModelSpec, tokens: int, tp: int,
                      sequences: int | None) -> tuple[list[Gemm], float, float, float]:
    """(projection GEMMs, scan FLOPs, recurrent-state bytes, streaming bytes per token) of a hybrid model's
    recurrent layer on one rank (heads split over TP).

    Projections (params.py `_linear_mixer`): Gated DeltaNet's in_proj_qkvz and in_proj_ba (q, k, v, the output gate
    z, and beta and the decay input per value head); Mamba-2's in_proj (z, x, B, C and dt per head); out_proj back
    to the hidden width. The scan is counted as the kernel benchmarks count it, 4 x head_dim x state_dim FLOPs per
    token and head (the state's update and its read-out; flashinfer's delta-rule benchmarks, vLLM's SSD ones). In
    decode (`sequences`) each sequence's state is read and written once per token: state_bytes. Streaming: the causal
    convolution reads and writes its channels (4 bytes each), the gated RMSNorm reads the output and the gate and
    writes the result (6 bytes per inner channel)."""
    lm = spec.linear
    assert lm is not None
    h = spec.hidden_size
    gemms = [Gemm("mixer_in", tokens, max(1, lm.in_proj_width // tp), h),
             Gemm("mixer_out", tokens, h, max(1, lm.inner // tp))]
    heads = lm.num_heads / tp
    scan = 4.0 * lm.head_dim * lm.state_dim * heads * tokens
    state = 2.0 * sequences * layer_state_bytes(spec, tp) if sequences is not None else 0.0
    stream = (4.0 * lm.conv_dim + 6.0 * lm.inner) / tp
    return gemms, scan, state, stream


@dataclass(frozen=True, slots=True)
class UnfusedAttention:
    """Attention computed with the score matrix in memory (Megatron-LM before flash attention, eager PyTorch)."""

    scores: Gemm
    """Q K^T per (sequence, head): seq x keys x head dim, batched over micro-batch x local heads."""
    values: Gemm
    """P V per (sequence, head): seq x value dim x keys."""
    score_elements: float
    """Elements of the score matrix (micro-batch x local heads x seq x keys)."""


def unfused_attention(spec: ModelSpec, *, seq: int, keys: int, batch: int, tp: int = 1) -> UnfusedAttention:
    """The two batched GEMMs and the score matrix of unfused attention; causal masking still computes every score."""
    heads = max(1, spec.num_heads // tp)
    if spec.mla is not None:
        dk, dv = spec.mla.qk_head_dim, spec.mla.v_head_dim
    else:
        dk = dv = spec.head_dim
    count = batch * heads
    return UnfusedAttention(scores=Gemm("attn_scores", seq, keys, dk, count, weight=False),
                            values=Gemm("attn_values", seq, dv, keys, count, weight=False),
                            score_elements=float(count) * seq * keys)


def keys_per_query(spec: ModelSpec, layer: int, context: int, *, causal: bool = True) -> float:
    """Mean keys a query of a `context`-token sequence attends to in block `layer` (training / prefill)."""
    window = spec.sliding_window if spec.layer_types[layer] == SLIDING else None
    if not causal:
        return float(min(context, window) if window else context)
    if window is None or window >= context:
        return (context + 1) / 2
    return band_pairs(0, context, window) / context


def attention_head_dim(spec: ModelSpec) -> int:
    """The q.k head size a flash-attention kernel runs (MLA: the no-RoPE and RoPE parts together), which sets its
    FLOP rate (`kernels.attention_s`)."""
    return spec.mla.qk_head_dim if spec.mla is not None else spec.head_dim


def head_gemm(spec: ModelSpec, tokens: int, tp: int = 1) -> Gemm:
    """The LM head (vocabulary-parallel over tp)."""
    return Gemm("lm_head", tokens, max(1, spec.vocab_size // tp), spec.embed_proj_dim or spec.hidden_size)


def recurrent_blocks(spec: ModelSpec, sequences: int, tp: int = 1) -> int:
    """Thread blocks that carry a recurrent layer's states through a prefill or training scan on one GPU: one per
    sequence, head and 64 value channels (flash-linear-attention's chunk_fwd_h grid), for `GDN_CHUNK_SERIAL_S`."""
    lm = spec.linear
    if lm is None or sequences <= 0:
        return 0
    return sequences * max(1, lm.num_heads // tp) * -(-lm.head_dim // 64)


def block_parts(spec: ModelSpec, layer: int) -> int:
    """Parts of block `layer` that each end in a tensor-parallel all-reduce: its token mixer and its feed-forward
    part (two in a transformer block, one in Nemotron-H's layers)."""
    return (spec.layer_types[layer] != NONE) + spec.has_ffn(layer)


def block_signature(spec: ModelSpec, layer: int) -> tuple:
    """Blocks with the same signature have the same kernels (dense/MoE, the mixer: full/sliding attention, recurrent
    or none, and whether a feed-forward part follows)."""
    moe = spec.moe is not None and spec.moe.moe_layers[layer]
    return (moe, spec.layer_types[layer], spec.has_ffn(layer))
