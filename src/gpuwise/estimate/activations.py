"""Activation memory: the bytes each transformer layer saves for its backward pass.

Per layer and token, every tensor an op keeps for its gradient is listed once (a tensor shared by two ops is
one storage). Terms are split into those TP divides (attention heads, MLP width) and those it replicates
unless sequence parallelism splits them along the sequence (norm inputs, block inputs, dropout masks).

Profiles (`framework`):
- `megatron`: fused kernels, the accounting of Korthikanti et al. 2022 ("Reducing Activation Recomputation in
  Large Transformer Models", section 4): per layer s b h (34 + 5 a s / h) bytes for GPT with 16-bit
  activations, dropout and materialized attention scores; s b h (10 + 24 / t + 5 a s / (h t)) with TP t,
  s b h (34 / t + 5 a s / (h t)) with TP + SP; selective recompute drops the 5 a s / h term; full recompute
  keeps the layer input 2 s b h. Generalized term by term to GQA, gated MLPs, MoE and flash attention
  (Transformer Engine's fused attention saves only the softmax statistics, fp32 per head and token), which is
  Megatron-Core's default: `korthikanti_layer_bytes` reproduces the paper's formulas exactly.
- `hf` and `deepspeed` (a transformers model, SDPA attention that runs the flash kernel on a GPU): RMSNorm
  keeps an fp32 copy of its input and the normalized 16-bit tensor; a gated MLP keeps gate, act, up and
  product. Checked against the bytes the real model saves (tests/estimate/test_activations_hf_oracle.py).
- `torchtitan` / `fsdp` / `torchtune`: PyTorch-native Llama-style blocks with flash SDPA: like `hf` (same op-level
  decomposition in eager PyTorch).
- `unsloth`: transformers + PEFT with Unsloth's Triton kernels (RMSNorm keeps its input and rstd, the LoRA MLP keeps
  its input and the gate and up outputs, RoPE in place): the same saved set as `compile`; its cross-entropy keeps
  the 16-bit logits and writes their gradient in place (unsloth/kernels/cross_entropy_loss.py).
- `compile` (torch.compile on the blocks): AOTAutograd's min-cut partitioner saves matmul and attention tensors and
  recomputes the pointwise ops from them in the backward: a norm keeps its input and its fp32 rstd (the normalized
  tensor, the matmuls' input, is recomputed), a gated MLP keeps its gate and up outputs (SiLU and the product are
  recomputed), an ungated one its first matmul's output.
- Checkpointing modes (none, selective, full, op, layer:N, block:K, uniform:K): estimate/recompute.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..memo import remember
from ..model.spec import LINEAR, NONE, ModelSpec
from .kernels import GDN_CHUNK
from .job import TrainJob, routed_experts_16bit
from .layer_ops import block_parts, block_signature
from .layout import Layout
from .model_states import LORA_TARGETS, adapter_input_bytes, adapter_inputs_per_token, lora_targets
from .pipeline import (bf16_layers_key, in_flight_microbatches, job_bf16_layers, loss_in_flight, stage_blocks,
                       stage_layers)
from .recompute import MODULE_TERMS, op_saved_per_token, recompute_plan


@dataclass(frozen=True, slots=True)
class LayerTerms:
    """Bytes per token saved by one layer for one micro-batch, before parallel splits."""

    replicated: dict[str, float]
    """Terms TP does not split (sequence parallelism does)."""
    split: dict[str, float]
    """Terms TP splits over heads / MLP width."""
    score_per_key: float = 0.0
    """Materialized attention probabilities: bytes per token per attended key (0 with flash attention)."""

    def per_token(self, tp: int = 1, sp: bool = False, keys: float = 0.0) -> float:
        rep = sum(self.replicated.values()) / (tp if sp else 1)
        return rep + (sum(self.split.values()) + self.score_per_key * keys) / tp


def _dims(spec: ModelSpec) -> tuple[int, int, int, int, int]:
    """(query, key, value, attention-output widths, heads): what attention keeps per token."""
    a = spec.num_heads
    if spec.mla is not None:
        m = spec.mla
        return a * m.qk_head_dim, a * m.qk_head_dim, a * m.v_head_dim, a * m.v_head_dim, a
    kv = spec.num_kv_heads * spec.head_dim
    return a * spec.head_dim, kv, kv, a * spec.head_dim, a


def _mlp_terms(spec: ModelSpec, width: int, e: float, lin_in: float, framework: str, compiled: bool = False,
               down_input: bool = True, act_in: float | None = None) -> float:
    """Bytes per token a dense MLP of `width` keeps beyond its input; `down_input` False: nothing keeps the fc2
    input for its own sake (a frozen fc2 without an adapter reading it); `act_in`: bytes per element of the
    activation function's saved input where Megatron stores it in fp8 (--activation-func-fp8-input-store)."""
    fc2 = lin_in * width if down_input else 0.0
    if compiled and framework != "megatron":  # matmul outputs only: the activation and product are recomputed
        return e * (2 if spec.gated_mlp else 1) * width
    if spec.gated_mlp:
        if framework == "megatron":  # fused SwiGLU: fc1 output (gate and up) and the fc2 input (kept for its grad)
            return (act_in or e) * 2 * width + fc2
        return e * 3 * width + fc2  # gate out (act input), act out, up out, product (fc2 input)
    if spec.activation == "relu" and framework != "megatron":
        return lin_in * width  # relu keeps its output, which is also the fc2 input
    if spec.activation == "gelu_new" and framework != "megatron":
        # transformers' NewGELUActivation is written out in Python ops: x, tanh(.), 0.5 x and 1 + tanh(.)
        return 4 * e * width + fc2
    return e * width + fc2  # activation input, activation output = fc2 input


def _norm_bytes(spec: ModelSpec, dim: int, e: float, framework: str, compiled: bool = False,
                frozen: bool = False, fused: bool = False) -> float:
    """Bytes per token one normalization over `dim` keeps (its output is counted by whoever reads it); `frozen`:
    its weight gets no gradient, so the normalized tensor that the weight multiplies is not kept for it; `fused`: a
    fused or compiled norm kernel (torchtitan's fused_rmsnorm and compiled_rmsnorm) keeps, like the compiled graph,
    its input and the fp32 statistics."""
    if (compiled or fused) and framework != "megatron":
        return e * dim + (8 if spec.norm == "layernorm" else 4)  # its input and fp32 statistics
    if framework == "megatron" or spec.norm == "layernorm":
        return e * dim + (0 if framework == "megatron" else 8)  # input (+ fp32 mean and rstd per token)
    if spec.family.startswith("gemma") or spec.family == "olmo2":
        return (4 if frozen else 8) * dim + 4  # fp32 input and fp32 normalized (the weight multiplies in fp32)
    return max(4, e) * dim + (0 if frozen else e) * dim + 4  # fp32 upcast of the input, normalized 16-bit, rsqrt


def layer_terms(spec: ModelSpec, layer: int, *, framework: str, e: float = 2.0, saved_input_bytes: float = 0.0,
                flash: bool = True, compiled: bool = False, frozen: frozenset[str] | None = None,
                stream: float | None = None, fp8_saved: frozenset[str] = frozenset(),
                fused_norm: bool = False, clamp_copy: bool = False, moe_act: bool = False) -> LayerTerms:
    """What layer `layer` saves per token, by term (bytes, 16-bit activations when e = 2); `saved_input_bytes`: the
    bytes per element of quantized saved linear inputs (Transformer Engine's fp8: 1; NVFP4: 0.5625;
    `TrainJob.saved_input_bytes`), 0 where they stay 16-bit; `compiled`: torch.compile's partitioner (module
    docstring); `fused_norm`: the norms run as fused kernels (`_norm_bytes`), the rest eager.

    `frozen` (LoRA on a frozen base, eager PyTorch): the adapted matrices (q, k, v, o, gate, up, down) whose LoRA
    branch reads their very input (lora_dropout 0). autograd keeps a matmul's input only for its weight's
    gradient, so a frozen matrix keeps none, and neither does a frozen norm its normalized output; an adapter's
    lora_A keeps the input it reads (a dropout's own copy when lora_dropout > 0, counted apart). None: every
    weight is trained. `stream`: bytes of the residual stream's and the MLP's elements when they differ from `e`
    (4 under a kbit-upcast QLoRA, TrainJob.kbit_upcast; the attention kernel still gets 16-bit q, k, v).
    `fp8_saved` (Megatron under fp8, TrainJob.fp8_saved): "activation" keeps the SwiGLU's input in fp8
    (--activation-func-fp8-input-store), "attention" keeps q, k, v and the output in fp8 (fp8 dot-product
    attention: Transformer Engine saves the fp8 tensors the kernel read and wrote)."""
    h = spec.hidden_size
    q, k, v, out, a = _dims(spec)
    lin_in = saved_input_bytes or e  # quantized copies of linear inputs (TrainJob.saved_input_bytes)
    megatron = framework == "megatron"
    compiled = compiled and not megatron
    if compiled:
        frozen = None  # the partitioner: what it keeps does not follow the weights' grads
    # Transformer Engine's Linear saves its input only when its weight needs a gradient (backward_needs_input),
    # like autograd: a frozen Megatron matrix keeps none either
    se = stream or e  # residual stream, norms, MLP
    lin_se = lin_in if stream is None else stream
    routed_16bit = routed_experts_16bit(framework, lin_in < e)
    keeps = (lambda *names: True) if frozen is None else (lambda *names: any(n in frozen for n in names))
    rep: dict[str, float] = {}
    split: dict[str, float] = {}
    rep["norm_inputs"] = spec.norms_per_layer * _norm_bytes(spec, h, se, framework, compiled, frozen is not None,
                                                            fused_norm)
    if not compiled:  # compiled: recomputed from the saved norm input
        # QKV input and MLP input (one for a parallel block, which every matrix reads)
        if spec.norms_per_layer == 1:
            inputs = 1 if keeps("q", "k", "v", "gate", "up") else 0
        else:
            inputs = (1 if keeps("q", "k", "v") else 0) + (1 if keeps("gate", "up") else 0)
        rep["linear_inputs"] = inputs * lin_se * h
    if spec.hidden_dropout > 0:  # one byte per element after each part (attention, MLP)
        rep["dropout_masks"] = block_parts(spec, layer) * h
    kind = spec.layer_types[layer]
    ffn = spec.has_ffn(layer)
    if kind in (LINEAR, NONE):  # a hybrid's recurrent layer, or a feed-forward-only one (Nemotron-H): no attention
        if kind == LINEAR:
            split["recurrent"] = linear_mixer_saved(spec, e, framework, lin_in if keeps("o") else 0.0)
        if ffn:
            _ffn_terms(spec, layer, rep, split, e, se, lin_in, lin_se, framework, compiled, keeps, megatron, fp8_saved,
                       clamp_copy, moe_act, routed_16bit)
        return LayerTerms(replicated=rep, split=split)
    if spec.qk_norm == "head":
        split["qk_norm"] = (_norm_bytes(spec, q, e, framework, compiled, fused=fused_norm)
                            + _norm_bytes(spec, k, e, framework, compiled, fused=fused_norm)
                            + (0 if compiled or fused_norm else 4 * (a + spec.num_kv_heads)))
    elif spec.qk_norm == "full":
        split["qk_norm"] = (_norm_bytes(spec, q, e, framework, compiled, fused=fused_norm)
                            + _norm_bytes(spec, k, e, framework, compiled, fused=fused_norm))
    if spec.mla is not None:
        m = spec.mla
        lat = (m.q_lora_rank or 0) + m.kv_lora_rank
        split["mla_latents"] = (_norm_bytes(spec, lat, e, framework, compiled, frozen is not None, fused_norm)
                                + (0 if compiled or not keeps("q", "v") else lin_in * lat))
    fp8_attention = flash and "attention" in fp8_saved
    split["qkv"] = (1.0 if fp8_attention else e) * (q + k + v)
    if flash or keeps("o"):
        # the output projection's input; the flash kernel keeps its output for its own backward, the same tensor
        # unless the projection keeps a quantized copy (Transformer Engine's fp8, NVFP4): then the 16-bit output
        # too ("flash_output", rebuilt when the attention core is recomputed; a gated output's own term counts it)
        split["attention_output"] = (1.0 if fp8_attention else lin_in) * out
        if flash and not fp8_attention and lin_in < e and not spec.attn_output_gate:
            split["flash_output"] = e * out
    if spec.attn_output_gate:  # Qwen3-Next: sigmoid(gate), and the gated output o_proj reads, beside the flash output
        split["output_gate"] = 2 * e * out
    score = 0.0
    if flash:
        split["softmax_stats"] = 4 * a  # fp32 log-sum-exp per head
    else:
        # softmax out (+ dropout mask and output); transformers' eager attention runs the softmax in fp32 and keeps
        # its fp32 output (the softmax's backward) and the 16-bit cast (the matmul with V)
        softmax = (4 + (e if se < 4 else 0)) if framework == "hf" else se  # fp32 q, k: fp32 scores, no cast
        score = a * (softmax + (1 + e if spec.attention_dropout > 0 else 0))
    if ffn:
        _ffn_terms(spec, layer, rep, split, e, se, lin_in, lin_se, framework, compiled, keeps, megatron, fp8_saved,
                   clamp_copy, moe_act, routed_16bit)
    return LayerTerms(replicated=rep, split=split, score_per_key=score)


def _ffn_terms(spec: ModelSpec, layer: int, rep: dict[str, float], split: dict[str, float], e: float, se: float,
               lin_in: float, lin_se: float, framework: str, compiled: bool, keeps, megatron: bool,
               fp8_saved: frozenset[str], clamp_copy: bool = False, moe_act: bool = False,
               routed_16bit: bool = False) -> None:
    """The feed-forward part's saved terms (dense MLP, or MoE router, expert inputs and experts), into `rep`/`split`.
    `routed_16bit`: the routed experts keep 16-bit inputs whatever the linears do (torchtitan's grouped experts,
    which its NVFP4 converter leaves alone).
    `clamp_copy`: Megatron-Core clamps a gated activation's halves outside its fused kernel (no op fuser, gpt-oss):
    the clamps keep the fc1 output and the fused activation its own clamped copy, one more 2 x width per copy.
    `moe_act`: Megatron's moe_act recompute module (CheckpointWithoutOutput around the experts' activation): each copy
    keeps only the checkpoint's input, the 16-bit fc1 output; fc2's input and what the activation saves itself (an fp8
    copy under --activation-func-fp8-input-store, the clamped copy) are rebuilt."""
    h = spec.hidden_size
    act_in = 1.0 if "activation" in fp8_saved else None
    moe = spec.moe
    if moe is not None and moe.moe_layers[layer]:
        rep["router"] = 4 * moe.num_experts + (0 if megatron else e * moe.num_experts)
        # tokens permuted to top_k experts: their input copies and the experts' MLP activations
        r_in, r_se = (e, se) if routed_16bit else (lin_in, lin_se)
        rep["expert_inputs"] = moe.top_k * r_in * h
        width = moe.expert_intermediate_size
        if megatron and moe_act:
            per_copy = _mlp_terms(spec, width, se, r_se, framework, compiled, False)
        else:
            per_copy = _mlp_terms(spec, width, se, r_se, framework, compiled, keeps("down"), act_in)
            if megatron and clamp_copy and moe.clamped_glu and spec.gated_mlp:
                per_copy += se * 2 * width
        split["routed_experts"] = moe.top_k * per_copy
        if moe.shared_intermediate_size:
            split["shared_experts"] = _mlp_terms(spec, moe.shared_intermediate_size, se, lin_se, framework, compiled,
                                                 keeps("down"), act_in)
    else:
        split["mlp"] = _mlp_terms(spec, spec.intermediate_size, se, lin_se, framework, compiled, keeps("down"), act_in)


def linear_mixer_saved(spec: ModelSpec, e: float, framework: str, lin_in: float | None = None) -> float:
    """Bytes per token a hybrid model's recurrent layer keeps for its backward beyond its input (counted with the
    linear inputs), before TP splits its heads: what each kernel's autograd function saves. `lin_in`: bytes per
    element of out_proj's saved input (1 under Transformer Engine's fp8; default `e`).

    Mamba-2, training path of mamba_ssm's `mamba_split_conv1d_scan_combined` (Megatron-Core's MambaMixer
    `_ssm_training`, transformers' cuda_kernels_forward): the in_proj output (z, x, B, C, dt) as one contiguous copy
    and the scan's output before the gate; the convolution is recomputed in the backward. Megatron runs its gated
    RMSNorm and out_proj outside the kernel (they keep their inputs, and the norm its rstd per group);
    transformers passes both into the kernel, which keeps the rstd only.

    Gated DeltaNet (flash-linear-attention's causal_conv1d and chunk_gated_delta_rule): the convolution keeps its
    input (q, k, v of `conv_dim`); q and k are repeated to the value heads before the kernel (Megatron-Core's
    `_prepare_input_for_gated_delta_rule`, transformers alike), which keeps them so, with v, its decay g (fp32),
    beta, its intra-chunk matrix A (`kernels.GDN_CHUNK` per head, in k's dtype: `solve_tril(...,
    output_dtype=k.dtype)`, 16-bit) and q's and k's l2norm rstd (fp32); the gated norm keeps the output, the gate z and
    its rstd, out_proj its input. Megatron-Core's GatedDeltaNet normalizes q and k
    outside the kernel (use_qk_l2norm_in_kernel False), which keeps them once more before the repeat."""
    lm = spec.linear
    assert lm is not None
    out_in = e if lin_in is None else lin_in
    if lm.kind == "mamba2":
        saved = e * lm.in_proj_width + e * lm.inner
        if framework == "megatron":
            saved += e * lm.inner + out_in * lm.inner
        return saved + 4 * lm.num_groups
    h, n = lm.num_heads, lm.state_dim
    saved = (e * (lm.conv_dim + 2 * h * n + lm.inner + 2 * lm.inner) + out_in * lm.inner
             + h * (4 + e + e * GDN_CHUNK + 4 + 8))
    if framework == "megatron":
        saved += e * 2 * lm.num_groups * n + 8 * lm.num_groups
    return saved


def adapters_keeping_input(job: TrainJob) -> frozenset[str] | None:
    """LoRA / QLoRA: the adapted matrices (short names) whose input their adapter keeps, the very tensor the frozen
    matrix reads: all of them when the adapters keep no copy of their own (`adapter_input_bytes` 0), none
    otherwise; None for full fine-tuning."""
    if not job.frozen_base:
        return None
    if adapter_input_bytes(job) > 0:
        return frozenset()
    roles = lora_targets(job.lora_targets)
    return frozenset(n for n, rs in LORA_TARGETS.items() if any(r in roles for r in rs))


def score_grad_bytes(framework: str, e: float) -> float:
    """Bytes per score element that a materialized softmax's backward holds at once: the gradient of its output
    and the one of its input. transformers' eager attention runs the softmax in fp32 (`softmax(..., dtype=float32)`),
    so both are fp32 there (the 16-bit gradient of the cast is freed once cast); Megatron's fused softmax and plain
    PyTorch work in the activation dtype."""
    return 8.0 if framework == "hf" else 2 * e


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False,
                            recompute: str = "none") -> float:
    """Korthikanti et al. 2022, eqs. 1-4 and section 5: activation bytes of one GPT layer (16-bit, dropout,
    materialized scores), per tensor-parallel rank."""
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    score = 0.0 if recompute == "selective" else 5 * a * s / h
    if sp:
        return s * b * h * (34 / t + score / t)
    return s * b * h * (10 + 24 / t + score / t)


@dataclass(slots=True)  # not frozen: built per configuration, and frozen __init__ costs 3x
class Activations:
    """Activation-side bytes on one rank at its peak (the start of a backward pass)."""

    layers: float
    """Saved by the transformer layers for every micro-batch in flight."""
    outside_layers: float
    """Embedding dropout masks, final norm, LM head input, rotary tables (first / last stage only)."""
    recompute_working: float
    """One layer's full activations, rebuilt during the backward under full recompute or offload."""
    logits: float
    """Logits and the loss workspace at the peak (last stage only)."""
    in_flight: float
    """Micro-batches in flight on this stage."""
    largest_layer: float
    """The stage's largest layer, for one micro-batch."""

    @property
    def total(self) -> float:
        return self.layers + self.outside_layers + self.recompute_working


def logits_bytes_per_element(framework: str, e: float, chunks: int = 1, fused: bool = False,
                             compiled: bool = False, loss_parallel: bool = False,
                             compiled_loss: bool = False) -> tuple[float, float]:
    """(saved, peak) bytes per logit element on the last stage.

    All keep the fp32 log-softmax for the backward (4 B). At the start of the backward, the fp32 gradients of the
    log-probabilities and of the logits (4 + 4 B): 12 B under torchtitan, which deletes `pred` before
    `loss.backward()`. `hf`/`deepspeed`: 14 B, the forward's peak in the transformers releases of the published runs
    (before 4.45 the model upcast its logits to fp32 and the loss copied the shifted ones: 2 + 4 + 4 + 4 B). Today's
    releases (the loss function upcasts, Trainer.compute_loss drops the outputs before the backward) peak at 12 B,
    measured on an H200 with transformers 5.17 (benchmarks/results/h200-sxm: hf-lora-*.json 1.5-9.5% over with 14,
    loss-memory-*.json); kept at 14 B until a run of today's releases is published. Megatron's fused vocab-parallel
    cross-entropy writes the gradient into its saved fp32 buffer and hands back a 16-bit one. A loss over `chunks`
    chunks (torchtune's CEWithChunkedOutputLoss) holds the backward's temporaries of one chunk at a time. A fused
    loss keeps none: one chunk's 16-bit logits, fp32 copy and fp32 gradient (2 + 4 + 4 B, and the 16-bit gradient's
    2) live at a time. torchtitan's loss parallel (TP > 1: cross-entropy on the vocabulary-sharded DTensor logits,
    torch/distributed/tensor/parallel/loss.py) runs the nll and log-softmax backward as plain tensor ops,
    `(grad_input + exp(x)) * grad_output` next to the saved log-probabilities: two fp32 temporaries more at its peak
    (16 B) than the fused CUDA kernels. torchtitan's compiled loss (`compiled_loss`: compile.components with
    "loss", the default since torchtitan PR #1608, 2025-08-20, and with training.compile from 2025-04-02, PR #1033;
    not from 2024-12-18 to 2025-04-02, PR #755, "compiling loss function causes CUDA errors") runs the upcast,
    log-softmax and nll as one Inductor graph: it keeps the 16-bit logits (and a log-sum-exp per row) and its
    backward writes the 16-bit gradient directly (e + e B, one chunk's gradient at a time when chunked).
    """
    if fused:
        return 0.0, 12.0 / (chunks if chunks > 1 else 8)
    if framework == "unsloth":
        return e, e
    if compiled_loss and framework == "torchtitan":
        return e, e + e / chunks
    if compiled and framework == "torchtune":
        # torchtune compiles the loss with the model (`compile: True`): the compiled cross-entropy keeps the 16-bit
        # logits and the per-row log-sum-exp, not the fp32 log-softmax; its fp32 gradient exists a chunk at a time
        return e, e + 8.0 / chunks
    if framework == "megatron":
        saved, peak = 4.0, 4.0 + e
    elif framework in ("torchtitan", "fsdp", "torchtune"):
        saved, peak = 4.0, 16.0 if loss_parallel and framework == "torchtitan" else 12.0
    else:
        saved, peak = 4.0, 4.0 + 8.0 + e
    return saved, saved + (peak - saved) / chunks


_PER_TOKEN: dict = {}


def _per_token(spec: ModelSpec, layer: int, framework: str, e: float, saved_input_bytes: float, flash: bool,
               compiled: bool, mode: str, tp: int, sp: bool, keys: float, frozen: frozenset[str] | None = None,
               stream: float | None = None, fp8_saved: frozenset[str] = frozenset(), fused_norm: bool = False,
               clamp_copy: bool = False, keeps_matmuls: bool = True) -> float:
    """Bytes per token saved by blocks of the kind of `layer` with nothing recomputed (`mode` none), the attention
    core recomputed (selective) or torchtitan's per-op policy (op; `keeps_matmuls`: it keeps matmul outputs);
    cached per block kind."""
    key = (id(spec), block_signature(spec, layer), framework, e, saved_input_bytes, flash, compiled, mode, tp, sp,
           keys, frozen, stream, fp8_saved, fused_norm, clamp_copy, keeps_matmuls)
    hit = _PER_TOKEN.get(key)
    if hit is not None:
        return hit[0]
    if mode == "op" and not spec.hybrid:  # (a hybrid is refused per-op checkpointing: estimate/step_time.py)
        value = op_saved_per_token(spec, layer, e=e, tp=tp, sp=sp, keeps_matmuls=keeps_matmuls)
    else:
        modules = recompute_plan(mode).modules
        terms = layer_terms(spec, layer, framework=framework, e=e, saved_input_bytes=saved_input_bytes, flash=flash,
                            compiled=compiled,
                            frozen=frozen, stream=stream, fp8_saved=fp8_saved, fused_norm=fused_norm,
                            clamp_copy=clamp_copy, moe_act="moe_act" in modules)
        if mode == "selective":  # the attention core runs again: its scores and its own 16-bit output are not kept
            terms = LayerTerms(terms.replicated, {k: v for k, v in terms.split.items() if k != "flash_output"}, 0.0)
        elif mode != "none":  # Megatron-Core's recompute_modules: each module keeps its input only
            plan = recompute_plan(mode)
            drop = {k for m in plan.modules for k in MODULE_TERMS[m]}
            score = 0.0 if "core_attn" in plan.modules else terms.score_per_key
            terms = LayerTerms({k: v for k, v in terms.replicated.items() if k not in drop},
                               {k: v for k, v in terms.split.items() if k not in drop}, score)
        value = terms.per_token(tp, sp, keys)
    return remember(_PER_TOKEN, key, value, spec)


@dataclass(frozen=True, slots=True)
class StageActivationTerms:
    """One pipeline stage's activations up to the micro-batch, the micro-batches in flight and the recompute mode:
    bytes per token of each block kind and of what sits outside the blocks. `at` finishes the sum. Cached by
    `stage_activation_terms` (shared by the layouts that differ only in schedule, interleaving or sharding); the
    memory model calls `parts` for every candidate micro-batch and recompute mode."""

    seq: int
    cp: int
    tp: int
    e: float
    """Bytes per activation element (4 under fp32, else 2)."""
    per_kind: tuple[tuple[float, int], ...]
    """(bytes per token, block count) of each block kind on the stage, nothing recomputed."""
    per_kind_selective: tuple[tuple[float, int], ...]
    """The same with the attention core recomputed (selective)."""
    per_kind_op: tuple[tuple[float, int], ...]
    """The same under torchtitan's per-op policy (op)."""
    per_kind_modules: tuple[tuple[float, int], ...]
    """The same with the job's Megatron recompute_modules recomputed (empty unless the job names some)."""
    num_layers: int
    seq_split: int
    """What sequence parallelism divides the replicated terms by (tp with SP, else 1)."""
    stored_per_token: float
    """Bytes per token and layer that full recompute keeps (the layer input)."""
    dropout_mask: bool
    """The first stage keeps the embedding dropout mask."""
    rope_dim: int
    """Head dimension of the cos and sin tables (0 without rotary embeddings)."""
    head_per_token: float
    """Last stage: final norm and LM head input, bytes per token before the SP split (0 elsewhere)."""
    logit_bytes: tuple[float, float] | None
    """Last stage: (saved, peak) bytes per logit element; None elsewhere."""
    score_grad_per_token: float
    """Materialized attention scores (no flash kernel): bytes per token of their gradients while one layer's
    softmax runs backward (its output's gradient and its input's), on top of everything saved; 0 with flash."""
    hidden: int
    vocab: int

    def at(self, micro_batch: int, in_flight: float, recompute: str = "none",
           offload_activations: bool = False, *, at_loss: float) -> Activations:
        """Activation bytes at the stage's peak, `in_flight` micro-batches of `micro_batch` sequences held and
        `at_loss` of them at the loss (`pipeline.loss_in_flight`)."""
        return Activations(*self.parts(micro_batch, in_flight, recompute, offload_activations, at_loss))

    def parts(self, micro_batch: int, in_flight: float, recompute: str, offload_activations: bool,
              at_loss: float) -> tuple[float, float, float, float, float, float]:
        """`Activations`' fields in order (layers, outside layers, recompute working set, logits, micro-batches in
        flight, largest layer), as a tuple: the memory model's inner loop reads them without building one.
        `at_loss`: micro-batches whose logits and LM-head input the last stage holds (one under 1F1B and the
        interleaved schedule, whose blocks can hold more; `pipeline.loss_in_flight`).

        Blocks checkpointed whole keep their input (`stored_per_token`); in the backward one of them (a group of K
        under uniform:K) is rebuilt in full at a time, the working set. Offloaded activations (torchtune's
        activation offloading, with or without checkpointing) leave the GPU as they are saved: what stays is the
        block computing and the one in transfer.
        """
        plan = recompute_plan(recompute)
        tokens = micro_batch * self.seq / self.cp
        full_layer = 0.0  # the largest block kind's bytes for one micro-batch
        all_layers = 0.0  # all the stage's blocks, one micro-batch
        kinds = {"selective": self.per_kind_selective, "modules": self.per_kind_modules}.get(plan.kind, self.per_kind)
        for i, (b, c) in enumerate(kinds):
            b *= tokens
            if i == 0 or b > full_layer:
                full_layer = b
            all_layers += b * c
        stored = self.stored_per_token * tokens
        whole = plan.full_blocks(self.num_layers)
        if plan.kind == "op":
            kept = sum(b * c for b, c in self.per_kind_op) * tokens
            working = full_layer
        elif whole:
            groups = -(-self.num_layers // plan.n) if plan.kind == "uniform" else whole
            kept = all_layers * (1 - whole / self.num_layers) + stored * groups
            working = full_layer * (plan.n if plan.kind == "uniform" else 1)
        else:
            kept, working = all_layers, 0.0
        working += self.score_grad_per_token * tokens
        if offload_activations:
            layers, working = 0.0, working + 2 * (full_layer if kept == all_layers else stored)
        else:
            layers = kept * in_flight
        outside = 0.0
        if self.dropout_mask:
            outside += tokens * self.hidden / self.seq_split * in_flight  # embedding dropout mask
        if self.rope_dim:
            outside += tokens / micro_batch * 2 * self.e * self.rope_dim  # cos and sin, shared by the layers
        logits = 0.0
        if self.logit_bytes is not None:
            # saved per micro-batch at the loss (GPipe's last stage holds all m); the loss gradients once
            outside += tokens * self.head_per_token / self.seq_split * at_loss
            saved, peak = self.logit_bytes
            logits = tokens * self.vocab * (saved * at_loss + peak - saved) / self.tp
        return layers, outside, working, logits, in_flight, full_layer


_STAGE_TERMS: dict = {}


def stage_activation_terms(spec: ModelSpec, layout: Layout, stage: int, job: TrainJob) -> StageActivationTerms:
    """The per-token terms of pipeline stage `stage`, cached by the spec's id, the layers per stage, the stage, TP,
    SP, CP, and the job's sequence, framework, precision, attention kernel, compile, the loss's chunks and
    compilation (what they depend on)."""
    per_stage = stage_layers(layout, spec.num_layers)
    sp = layout.sp and layout.tp > 1
    framework, seq, flash = job.framework, job.seq, job.flash
    compiled = job.compile or framework == "unsloth"  # Unsloth's kernels save what the partitioner would
    fused_norm = job.norm_type != "rmsnorm"
    modules = job.recompute if recompute_plan(job.recompute).kind == "modules" else None
    frozen = adapters_keeping_input(job)
    lora = adapter_input_bytes(job) > 0
    key = (id(spec), per_stage, stage, layout.tp, sp, layout.cp, seq, framework, job.precision, flash, compiled,
           job.loss_chunks, job.fused_loss, job.compile_loss, job.norm_type, modules, frozen,
           (job.lora_targets, job.lora_dropout) if lora else None, job.kbit_upcast, job.fp8_saved,
           job.saved_input_bytes, job.expert_extras_unfused, job.op_keeps_matmuls,
           bf16_layers_key(layout, job))
    hit = _STAGE_TERMS.get(key)
    if hit is not None:
        return hit[0]
    e = job.element_bytes
    stream = job.stream_bytes if job.kbit_upcast else None
    se = stream or e
    saved_in = job.saved_input_bytes
    tp = layout.tp
    keys = seq / layout.cp  # materialized scores: local queries against local keys
    # kept in bf16 (on the ranks that hold them): 16-bit saved inputs, plain matmuls, 16-bit attention
    bf16 = job_bf16_layers(layout, spec.num_layers, job)
    fp8_saved_bf16 = job.fp8_saved - {"attention"}  # (the SwiGLU's fp8 input store casts in any layer)
    blocks = stage_blocks(spec, per_stage, stage, bf16)

    def kinds(mode: str) -> tuple[tuple[float, int], ...]:
        return tuple((_per_token(spec, layer, framework, e, 0.0 if layer in bf16 else saved_in, flash, compiled,
                                 mode, tp, sp, keys, frozen, stream,
                                 fp8_saved_bf16 if layer in bf16 else job.fp8_saved, fused_norm,
                                 job.expert_extras_unfused is not None, layer in bf16 or job.op_keeps_matmuls)
                      + (adapter_inputs_per_token(spec, layer, job, tp) if lora else 0.0), count)
                     for layer, count in blocks)

    h = spec.hidden_size
    split = tp if sp else 1
    last = stage == layout.pp - 1
    return remember(_STAGE_TERMS, key, StageActivationTerms(
        seq=seq, cp=layout.cp, tp=tp, e=e, per_kind=kinds("none"), per_kind_selective=kinds("selective"),
        per_kind_op=kinds("op"), per_kind_modules=kinds(modules) if modules else (),
        num_layers=sum(c for _, c in blocks), seq_split=split, stored_per_token=se * h / split,
        dropout_mask=stage == 0 and spec.hidden_dropout > 0,
        rope_dim=spec.head_dim if spec.position == "rope" else 0,
        head_per_token=(_norm_bytes(spec, h, se, framework) + se * h) if last else 0.0,
        logit_bytes=logits_bytes_per_element(framework, e, job.loss_chunks, job.fused_loss, job.compile,
                                             loss_parallel=tp > 1, compiled_loss=job.compile_loss) if last else None,
        score_grad_per_token=0.0 if flash else score_grad_bytes(framework, e) * spec.num_heads * keys / tp,
        hidden=h,
        vocab=spec.vocab_size), spec)


def stage_activations(spec: ModelSpec, layout: Layout, stage: int, job: TrainJob, *, micro_batch: int,
                      num_microbatches: int) -> Activations:
    """Activation bytes on a rank of pipeline stage `stage` at its peak (the job's recompute mode and offload)."""
    terms = stage_activation_terms(spec, layout, stage, job)
    return terms.at(micro_batch, in_flight_microbatches(layout, stage, num_microbatches), job.recompute,
                    "activations" in job.offload, at_loss=loss_in_flight(layout, num_microbatches))
