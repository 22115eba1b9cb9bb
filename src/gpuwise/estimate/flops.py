"""Training and inference FLOPs, operation by operation (issue 3, first part).

Every matmul of an (m x k) by (k x n) costs 2mkn FLOPs. Per token and layer, forward:
- QKV projections 2 h (q + 2 kv) (MLA: the q/kv down- and up-projections), output projection 2 q h;
- attention scores Q K^T and values P V: 2 n_heads head_dim per key each. Under the `full` convention every
  query attends to all `seq` keys (what torch's FlopCounterMode and several published MFU tables count);
  under `causal` a query at position i sees i+1 keys, (seq+1)/2 on average: half the score/value terms.
  Sliding-window layers see at most `window` keys under `causal` (`full` keeps the dense count, as
  FlopCounterMode does for masked attention);
- MLP 2 h I per matrix (3 matrices gated, 2 not); MoE: router 2 h E, top-k routed experts, shared experts;
- LM head 2 h V (embedding lookups are free).
Backward costs twice the forward of every matmul (input and weight gradients), so a training step is
3x forward ("6N per token" plus attention). Recompute (activation checkpointing) adds forward FLOPs that
count in hardware FLOPs (HFU) but not in model FLOPs (MFU): `selective` recomputes the attention
scores/values, `full` the whole layer forward.
Checked against FlopCounterMode on real transformers models in tests/estimate/test_flops_oracle.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..catalog.attention_kernels import band_pairs
from ..dtypes import peak_operand_bytes
from ..memo import remember
from ..model.spec import LINEAR, NONE, SLIDING, ModelSpec
from .job import CONVENTIONS, TrainJob
from .recompute import recompute_plan, recomputed_flops


@dataclass(frozen=True, slots=True)
class FlopsBreakdown:
    """Forward FLOPs per sequence of `seq` tokens, by operation (sums over layers)."""

    qkv: float = 0.0
    attention_scores: float = 0.0
    attention_values: float = 0.0
    attention_output: float = 0.0
    mlp: float = 0.0
    router: float = 0.0
    routed_experts: float = 0.0
    shared_experts: float = 0.0
    lm_head: float = 0.0
    recurrent_projections: float = 0.0
    """Hybrid models' recurrent layers: their input and output projections."""
    recurrent_scan: float = 0.0
    """Their scan, 4 x head_dim x state_dim per token and head (the count their kernels' benchmarks use)."""

    @property
    def total(self) -> float:
        return (self.qkv + self.attention_scores + self.attention_values + self.attention_output + self.mlp
                + self.router + self.routed_experts + self.shared_experts + self.lm_head
                + self.recurrent_projections + self.recurrent_scan)

    @property
    def attention_core(self) -> float:
        return self.attention_scores + self.attention_values

    @property
    def attention_share(self) -> float:
        """The attention core's share of these FLOPs (0 without any)."""
        return self.attention_core / self.total if self.total > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class StepFlops:
    forward: FlopsBreakdown
    """Forward FLOPs of one step (all sequences of the global batch)."""
    tokens: int
    recompute: float
    """Extra forward FLOPs spent on activation recomputation."""
    extra: dict = field(default_factory=dict)
    frozen_base: bool = False
    """LoRA / QLoRA: the base weights get no gradients, so the backward computes only input gradients."""

    @property
    def model(self) -> float:
        """Model FLOPs per step (forward + backward, no recompute): the MFU numerator.

        Full training: 3x forward (backward = input + weight gradients). Frozen base weights: the backward computes
        input gradients only, one forward's worth for every weight matmul, and still two for the attention core
        (which has no weights: gradients of Q and K, and of P and V), so 2x forward + the attention core (LoRA's
        adapters, a fraction of a percent, are not counted)."""
        if self.frozen_base:
            return 2 * self.forward.total + self.forward.attention_core
        return 3 * self.forward.total

    @property
    def hardware(self) -> float:
        """Hardware FLOPs per step (with recompute): the HFU numerator."""
        return self.model + self.recompute

    @property
    def model_per_token(self) -> float:
        return self.model / self.tokens


def _keys_per_query(seq: int, window: int | None, convention: str) -> float:
    """Mean number of keys a query attends to."""
    if convention == "full":
        return float(seq)
    if window is None or window >= seq:
        return (seq + 1) / 2
    # positions 0..W-1 see i+1 keys, the rest see W: mean over the sequence
    return band_pairs(0, seq, window) / seq


_KINDS: dict = {}


def _layer_kinds(spec: ModelSpec) -> tuple[tuple[str, bool, bool, int], ...]:
    """(mixer: full/sliding attention, linear or none; MoE; a feed-forward part; number of layers) for each kind of
    block in the model (cached)."""
    hit = _KINDS.get((id(spec),))
    if hit is not None:
        return hit[0]
    counts: dict[tuple[str, bool, bool], int] = {}
    for i in range(spec.num_layers):
        kind = (spec.layer_types[i], spec.moe is not None and bool(spec.moe.moe_layers[i]), spec.has_ffn(i))
        counts[kind] = counts.get(kind, 0) + 1
    return remember(_KINDS, (id(spec),), tuple((t, m, f, n) for (t, m, f), n in counts.items()), spec)


def forward_flops(spec: ModelSpec, seq: int, *, convention: str = "causal", lm_head_tokens: int | None = None,
                  layer: int | None = None) -> FlopsBreakdown:
    """Forward FLOPs for one sequence of `seq` tokens (logits for `lm_head_tokens`, default all); `layer`: that
    block's alone (no LM head)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}")
    h = spec.hidden_size
    mla = spec.mla
    if mla is not None:
        nh = spec.num_heads
        q_proj = (2 * h * mla.q_lora_rank + 2 * mla.q_lora_rank * nh * mla.qk_head_dim) if mla.q_lora_rank \
            else 2 * h * nh * mla.qk_head_dim
        kv_proj = 2 * h * (mla.kv_lora_rank + mla.qk_rope_head_dim) \
            + 2 * mla.kv_lora_rank * nh * (mla.qk_nope_head_dim + mla.v_head_dim)
        qkv = q_proj + kv_proj
        out = 2 * nh * mla.v_head_dim * h
        score_dim, value_dim = nh * mla.qk_head_dim, nh * mla.v_head_dim
    else:
        q = spec.num_heads * spec.head_dim
        kv = spec.num_kv_heads * spec.head_dim
        qkv = 2 * h * (q + 2 * kv)
        out = 2 * q * h
        score_dim = value_dim = q
    mats = 3 if spec.gated_mlp else 2
    if spec.attn_output_gate:  # Qwen3-Next's q_proj also yields the attention output's gate
        qkv += 2 * h * spec.num_heads * spec.head_dim
    totals = dict(qkv=0.0, attention_scores=0.0, attention_values=0.0, attention_output=0.0, mlp=0.0, router=0.0,
                  routed_experts=0.0, shared_experts=0.0, recurrent_projections=0.0, recurrent_scan=0.0)
    lm = spec.linear
    kinds = _layer_kinds(spec) if layer is None else (
        (spec.layer_types[layer], spec.moe is not None and bool(spec.moe.moe_layers[layer]), spec.has_ffn(layer), 1),)
    for kind, is_moe, ffn, n in kinds:
        if kind == LINEAR and lm is not None:  # the projections of layer_ops._linear_mixer_ops, and its scan
            totals["recurrent_projections"] += n * 2 * h * (lm.in_proj_width + lm.inner) * seq
            totals["recurrent_scan"] += n * 4 * lm.head_dim * lm.state_dim * lm.num_heads * seq
        elif kind != NONE:
            keys = _keys_per_query(seq, spec.sliding_window if kind == SLIDING else None, convention)
            totals["qkv"] += n * qkv * seq
            totals["attention_scores"] += n * 2 * score_dim * keys * seq
            totals["attention_values"] += n * 2 * value_dim * keys * seq
            totals["attention_output"] += n * out * seq
        moe = spec.moe
        if not ffn:
            continue
        if is_moe:
            totals["router"] += n * 2 * h * moe.num_experts * seq
            totals["routed_experts"] += n * moe.top_k * mats * 2 * h * moe.expert_intermediate_size * seq
            totals["shared_experts"] += n * mats * 2 * h * moe.shared_intermediate_size * seq
            if moe.shared_expert_gate:
                totals["shared_experts"] += n * 2 * h * seq
        else:
            totals["mlp"] += n * mats * 2 * h * spec.intermediate_size * seq
    if layer is not None:
        return FlopsBreakdown(**totals)
    emb = spec.embed_proj_dim or h
    head_tokens = seq if lm_head_tokens is None else lm_head_tokens
    lm_head = 2 * emb * spec.vocab_size * head_tokens
    if spec.embed_proj_dim:  # OPT-350m's project_in/out
        lm_head += 2 * 2 * h * emb * seq
    return FlopsBreakdown(lm_head=lm_head, **totals)


def step_flops(spec: ModelSpec, *, seq: int, global_batch: int, convention: str = "causal",
               recompute: str = "none", frozen_base: bool = False, pp: int = 1, keeps_matmuls: bool = True
               ) -> StepFlops:
    """FLOPs of one training step over `global_batch` sequences of `seq` tokens (cached); `frozen_base` for
    LoRA / QLoRA (see StepFlops.model); `pp` for recompute modes counted per pipeline stage (block:K);
    `keeps_matmuls`: the per-op policy keeps matmul outputs (`recompute.op_policy_keeps_matmuls`)."""
    recompute_plan(recompute)  # raises on an unknown mode
    key = (id(spec), seq, global_batch, convention, recompute, frozen_base, pp, keeps_matmuls)
    hit = _STEP_FLOPS.get(key)
    if hit is not None:
        return hit[0]
    flops = _step_flops(spec, seq, global_batch, convention, recompute, pp, keeps_matmuls)
    if frozen_base:
        flops = replace(flops, frozen_base=True)
    return remember(_STEP_FLOPS, key, flops, spec)


_STEP_FLOPS: dict = {}


def _step_flops(spec: ModelSpec, seq: int, global_batch: int, convention: str, recompute: str,
                pp: int = 1, keeps_matmuls: bool = True) -> StepFlops:
    one = forward_flops(spec, seq, convention=convention)
    fwd = FlopsBreakdown(**{k: v * global_batch for k, v in one.as_dict().items()})
    # the LM head is never checkpointed; the blocks' share follows the mode (estimate/recompute.py)
    extra = recomputed_flops(spec, recompute, blocks_forward=fwd.total - fwd.lm_head,
                             attention_core=fwd.attention_core, tokens=seq * global_batch, pp=pp,
                             parts=fwd.as_dict(), keeps_matmuls=keeps_matmuls)
    return StepFlops(forward=fwd, tokens=seq * global_batch, recompute=extra)


def job_flops(spec: ModelSpec, job: TrainJob, *, global_batch: int, pp: int = 1) -> StepFlops:
    """The FLOPs of one optimizer step of a training job: what `gpuwise train` and the planner count for MFU/HFU."""
    return step_flops(spec, seq=job.seq, global_batch=global_batch, convention=job.flops_convention,
                      recompute=job.recompute, frozen_base=job.frozen_base, pp=pp,
                      keeps_matmuls=job.op_keeps_matmuls)


def gemm_dtype(peaks: dict[str, float], precision: str) -> str:
    """The dtype key whose peak the training GEMMs run at (and the MFU denominator): tf32 for fp32 training, fp8
    for fp8, fp4 for NVFP4, fp16 for fp16, bf16 for bf16 mixed or pure (fp16 on GPUs without bf16)."""
    if precision == "fp32":
        return "tf32" if "tf32" in peaks else "fp32"
    if precision == "fp8" and "fp8" in peaks:
        return "fp8"
    if precision == "nvfp4" and "fp4" in peaks:
        return "fp4"
    if precision == "fp16":
        return "fp16"
    return "bf16" if "bf16" in peaks else "fp16"


_EVERY_PEAK = dict.fromkeys(("tf32", "bf16", "fp16", "fp8", "fp4"), 1.0)


def gemm_operand_bytes(precision: str) -> float:
    """Bytes per GEMM operand element of a training precision on a GPU with every tensor-core format: fp8 casts to
    1 byte, NVFP4 to half of one (its block scales not counted), fp32 reads 4 even as TF32, the 16-bit precisions 2."""
    return peak_operand_bytes(gemm_dtype(_EVERY_PEAK, precision))


def utilization(flops_per_step: float, step_time_s: float, num_gpus: int,
                peak_flops_per_gpu: float | None) -> float | None:
    """MFU when `flops_per_step` are model FLOPs (`StepFlops.model`), HFU when they are hardware FLOPs (with
    recomputation): flops / (step time x GPUs x peak), the peak being the dense FLOP/s of one GPU in the GEMM dtype
    (`gemm_dtype`; REFERENCE.md: "MFU must use the dense figure of the dtype actually used"). The one formula every
    MFU in gpuwise goes through; None when the peak is unknown."""
    if not peak_flops_per_gpu or step_time_s <= 0:
        return None
    return flops_per_step / (step_time_s * num_gpus * peak_flops_per_gpu)
