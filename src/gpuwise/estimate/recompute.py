"""Activation checkpointing modes, as each framework defines them (docs/training-memory.md, "Checkpointing").

A mode is a string (`TrainJob.recompute`):

- `none`: every block keeps what its ops save for the backward.
- `selective` (Megatron-LM `--recompute-granularity selective`): the attention core is recomputed (its score
  matrix is not kept; with flash attention there is none, so it saves next to nothing).
- `full` (Megatron `--recompute-granularity full --recompute-method uniform --recompute-num-layers 1`, torchtitan
  `mode = "full"`, torchtune `enable_activation_checkpointing`, transformers `gradient_checkpointing`): each block
  keeps its input only and runs its forward again in the backward.
- `op`: torchtitan's per-op selective checkpointing (`mode = "selective"`, `selective_ac_option = "op"`,
  torchtitan/models/llama3/infra/parallelize.py `_save_list`): a block keeps its input and the outputs of the ops on
  the save list (matmuls, SDPA, reduce-scatter, max) except every second matmul, counted in forward order; the rest
  is recomputed.
- `layer:N` (torchtitan `selective_ac_option = "N"`): every N-th block is checkpointed in full, the others keep all.
- `block:K` (Megatron `--recompute-method block --recompute-num-layers K`): the first K blocks of each pipeline stage
  are checkpointed in full, the others keep all.
- `uniform:K` (Megatron `--recompute-method uniform --recompute-num-layers K`): the blocks are checkpointed in
  groups of K; each group keeps its input and recomputes K blocks at once in the backward.
- `selective:M1+M2` (Megatron-Core `--recompute-granularity selective --recompute-modules M1 M2`): the named
  submodules of every block keep their input only: `core_attn` (the attention core), `mlp` (a dense block's MLP:
  Megatron-Core's TransformerLayer skips it in MoE layers, `if not isinstance(self.mlp, MoELayer)` since core_v0.12),
  `moe` (the MoE layer), `shared_experts`, `mla_up_proj` (MLA's query and key/value up-projections),
  `moe_act` (the routed experts' activation function: its output, fc2's input, and what the activation itself saves
  are dropped after fc2's forward and rebuilt from the kept fc1 output, Megatron-Core's CheckpointWithoutOutput in
  TEGroupedMLP), `layernorm` (already input-only in Megatron's fused norms). `selective` alone is
  `selective:core_attn`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument
from ..model.spec import ModelSpec

PLAIN = ("none", "selective", "full", "op")
COUNTED = ("layer", "block", "uniform")
MODULES = ("core_attn", "mlp", "moe", "shared_experts", "mla_up_proj", "moe_act", "layernorm")
VALID = "none, selective, full, op, layer:N, block:K, uniform:K or selective:M1+M2 (M: " + ", ".join(MODULES) + ")"
MODULE_TERMS = {"core_attn": ("softmax_stats", "flash_output"), "mlp": ("mlp",),
                "moe": ("routed_experts", "shared_experts", "expert_inputs"),
                "shared_experts": ("shared_experts",), "mla_up_proj": ("qkv",), "moe_act": (), "layernorm": ()}
"""The saved-tensor terms (estimate/activations.layer_terms) each recomputed module no longer keeps (moe_act changes
what the routed experts keep rather than dropping a term: activations._ffn_terms)."""
MODULE_FLOPS = {"core_attn": ("attention_scores", "attention_values"),
                "mlp": ("mlp",),
                "moe": ("router", "routed_experts", "shared_experts"), "shared_experts": ("shared_experts",),
                "mla_up_proj": ("qkv",), "moe_act": (), "layernorm": ()}
"""The forward FLOPs (estimate/flops.FlopsBreakdown keys) each recomputed module runs again (mla_up_proj: all of
the QKV projections, an upper bound; moe_act: none, its streaming time is the step model's, `step_time`)."""


@dataclass(frozen=True, slots=True)
class RecomputePlan:
    kind: str
    """none, selective, full, op, layer, block or uniform."""
    n: int = 1
    """layer: checkpoint every n-th block; block: the first n blocks of a stage; uniform: groups of n blocks."""
    modules: frozenset = frozenset()
    """kind modules: the submodules recomputed (Megatron-Core's recompute_modules)."""

    def full_blocks(self, blocks: int) -> int:
        """Blocks of a stage of `blocks` that keep only their input (checkpointed whole)."""
        if self.kind in ("full", "uniform"):
            return blocks
        if self.kind == "layer":
            return blocks // self.n
        if self.kind == "block":
            return min(self.n, blocks)
        return 0

    def checkpointed_share(self, blocks: int) -> float:
        """Share of a stage's blocks run under a checkpoint (whole, or per-op under `op`): they save no 16-bit
        weight copies (autocast's casts are made again in the recompute)."""
        return 1.0 if self.kind == "op" else self.full_fraction(blocks)

    def full_fraction(self, blocks: int) -> float:
        """Share of a stage's blocks whose forward runs again in the backward."""
        return self.full_blocks(blocks) / blocks if blocks else 0.0


def framework_mode(mode: str, framework: str) -> str:
    """What `mode` means under `framework`: torchtitan's `selective` is its per-op policy (op); elsewhere the
    attention core (Megatron's meaning)."""
    return "op" if mode == "selective" and framework == "torchtitan" else mode


_PLANS: dict[str, RecomputePlan] = {}


def recompute_plan(mode: str) -> RecomputePlan:
    """The parsed mode (cached); one clear error for anything else."""
    hit = _PLANS.get(mode)
    if hit is not None:
        return hit
    if not isinstance(mode, str):
        raise InvalidArgument(f"--recompute: unknown mode {mode!r}; valid: {VALID}")
    if mode in PLAIN:
        plan = RecomputePlan(mode)
    elif mode.startswith("selective:"):
        names = frozenset(x for x in mode.split(":", 1)[1].replace(",", "+").split("+") if x)
        bad = sorted(names - set(MODULES))
        if bad or not names:
            raise InvalidArgument(f"--recompute: unknown module '{bad[0] if bad else mode}'; valid: {VALID}")
        plan = RecomputePlan("selective") if names == {"core_attn"} else RecomputePlan("modules", modules=names)
    else:
        kind, _, count = mode.partition(":")
        if kind not in COUNTED or not count.isdigit() or not 1 <= int(count) <= 1 << 16:
            raise InvalidArgument(f"--recompute: unknown mode '{mode}'; valid: {VALID} (N, K: whole numbers >= 1)")
        plan = RecomputePlan(kind, int(count))
        if kind == "uniform" and plan.n == 1:
            plan = RecomputePlan("full")
    if len(_PLANS) < 1024:
        _PLANS[mode] = plan
    return plan


@dataclass(frozen=True, slots=True)
class Matmul:
    """One matmul of a block in forward order: its output width per token and how tensor parallelism splits it."""

    out: int
    k: int
    """Its input width (the reduction dimension): FLOPs per token are 2 k out."""
    tp: str
    """column (output split over TP), row (output a full-width partial sum on each rank) or none (replicated)."""
    bias: bool = False
    """A linear with a bias runs as aten.addmm, which is not on the per-op save list (nor counted with the mms)."""


def block_matmuls(spec: ModelSpec, layer: int) -> tuple[Matmul, ...]:
    """The aten.mm calls of block `layer` in forward order, as a PyTorch-native (torchtitan) block issues them.

    Attention: q, k, v, output (MLA: q_a, q_b or q, kv_a, kv_b, output). Dense gated MLP: w1 (gate), w3 (up), w2
    (down); an ungated MLP: fc1, fc2. A MoE block: the router's matmul and the shared experts' (the routed experts
    run grouped matmuls, which are not aten.mm and not on the save list).
    """
    h = spec.hidden_size
    a = spec.num_heads
    mm: list[Matmul] = []
    if spec.mla is not None:
        m = spec.mla
        if m.q_lora_rank:
            mm += [Matmul(m.q_lora_rank, h, "none"), Matmul(a * m.qk_head_dim, m.q_lora_rank, "column")]
        else:
            mm.append(Matmul(a * m.qk_head_dim, h, "column"))
        mm += [Matmul(m.kv_lora_rank + m.qk_rope_head_dim, h, "none"),
               Matmul(a * (m.qk_head_dim - m.qk_rope_head_dim + m.v_head_dim), m.kv_lora_rank, "column"),
               Matmul(h, a * m.v_head_dim, "row")]
    else:
        kv = spec.num_kv_heads * spec.head_dim
        q = a * spec.head_dim
        b = spec.qkv_bias
        mm += [Matmul(q, h, "column", b), Matmul(kv, h, "column", b), Matmul(kv, h, "column", b),
               Matmul(h, q, "row", spec.o_bias)]

    def mlp(width: int) -> list[Matmul]:
        b = spec.mlp_bias
        if spec.gated_mlp:
            return [Matmul(width, h, "column", b), Matmul(width, h, "column", b), Matmul(h, width, "row", b)]
        return [Matmul(width, h, "column", b), Matmul(h, width, "row", b)]

    moe = spec.moe
    if moe is not None and moe.moe_layers[layer]:
        mm.append(Matmul(moe.num_experts, h, "none"))
        if moe.shared_intermediate_size:
            mm += mlp(moe.shared_intermediate_size)
    else:
        mm += mlp(spec.intermediate_size)
    return tuple(mm)


def _mms(spec: ModelSpec, layer: int) -> tuple[Matmul, ...]:
    """The block's matmuls the per-op policy counts (aten.mm: linears without a bias)."""
    return tuple(m for m in block_matmuls(spec, layer) if not m.bias)


def op_policy_keeps_matmuls(framework: str, precision: str) -> bool:
    """Whether torchtitan's per-op policy keeps matmul outputs: it saves every second aten.mm / aten.linear and the
    compute-intensive aten ops (torchtitan/distributed/activation_checkpoint.py `_get_default_save_ops`, the
    mm_count rule), but torchao's NVFP4 linears run as one opaque custom op (`nvfp4_linear`, torchtitan's
    components/quantization/nvfp4.py) that the list does not name: under NVFP4 no linear's output is kept and every
    linear runs again in the backward."""
    return not (framework == "torchtitan" and precision == "nvfp4")


def op_saved_per_token(spec: ModelSpec, layer: int, *, e: float, tp: int, sp: bool,
                       keeps_matmuls: bool = True) -> float:
    """Bytes per token block `layer` keeps under torchtitan's per-op policy, on one TP rank.

    The block input (split by sequence parallelism), the outputs of the odd-numbered matmuls (1st, 3rd, ...; a
    row-parallel output is a full-width partial sum before its reduction; none without `keeps_matmuls`,
    `op_policy_keeps_matmuls`), the attention output and its fp32 log-sum-exp per head, and with sequence
    parallelism the two reduce-scatter outputs.
    """
    split = tp if sp and tp > 1 else 1
    saved = e * spec.hidden_size / split
    for i, m in enumerate(_mms(spec, layer), start=1):
        if i % 2 and keeps_matmuls:
            saved += e * m.out / (tp if m.tp == "column" else 1)
    v_width = spec.num_heads * (spec.mla.v_head_dim if spec.mla is not None else spec.head_dim)
    saved += (e * v_width + 4 * spec.num_heads) / tp
    if split > 1:
        saved += 2 * e * spec.hidden_size / tp
    return saved


def op_saved_matmul_flops_per_token(spec: ModelSpec, keeps_matmuls: bool = True) -> float:
    """Forward FLOPs per token of the matmuls whose outputs the per-op policy keeps (the odd-numbered ones of every
    block; none without `keeps_matmuls`): what its recomputation does not run again (everything else in the blocks
    but the attention core is)."""
    if not keeps_matmuls:
        return 0.0
    return sum(2 * m.k * m.out for layer in range(spec.num_layers)
               for i, m in enumerate(_mms(spec, layer), start=1) if i % 2)


def op_saved_matmul_share(spec: ModelSpec, layer: int, keeps_matmuls: bool = True) -> float:
    """Share of block `layer`'s matmul FLOPs whose outputs the per-op policy keeps (routed experts, never kept,
    counted in the whole; 0 without `keeps_matmuls`)."""
    if not keeps_matmuls:
        return 0.0
    total = sum(m.out * m.k for m in block_matmuls(spec, layer))
    mms = _mms(spec, layer)
    moe = spec.moe
    if moe is not None and moe.moe_layers[layer]:
        total += moe.top_k * (3 if spec.gated_mlp else 2) * spec.hidden_size * moe.expert_intermediate_size
    return sum(m.out * m.k for i, m in enumerate(mms, start=1) if i % 2) / total if total else 0.0


def module_share(spec: ModelSpec, mode: str, seq: int, layer: int | None = None) -> float:
    """Share of the blocks' forward FLOPs over `seq` tokens that Megatron's recompute_modules run again (0 for other
    modes; the attention core's share grows with the sequence); `layer`: of that block's alone (a hybrid's Mamba
    layer recomputes no MoE)."""
    from .flops import forward_flops  # flops imports this module

    parts = forward_flops(spec, seq, layer=layer).as_dict()
    blocks = sum(parts.values()) - parts["lm_head"]
    done = recomputed_flops(spec, mode, blocks_forward=blocks, attention_core=0.0, tokens=0.0, parts=parts)
    return done / blocks if blocks and recompute_plan(mode).kind == "modules" else 0.0


EXPERT_FLOPS = ("mlp", "routed_experts", "shared_experts")
"""The forward FLOPs (estimate/flops.FlopsBreakdown keys) that an MoE layer runs between its dispatch and its combine,
Megatron-Core's `mlp` node under EP overlap."""


def expert_recompute_share(spec: ModelSpec, mode: str, seq: int, layer: int) -> float:
    """Of the forward FLOPs block `layer` runs again under Megatron's recompute modules, the experts' share (their
    `mlp`, `moe`, `shared_experts` modules: rebuilt inside the experts' backward); the rest (core_attn, mla_up_proj,
    the router) is rebuilt inside the attention's. 0 for other modes."""
    if recompute_plan(mode).kind != "modules":
        return 0.0
    from .flops import forward_flops  # flops imports this module

    parts = forward_flops(spec, seq, layer=layer).as_dict()
    done = recomputed_flops(spec, mode, blocks_forward=0.0, attention_core=0.0, tokens=0.0, parts=parts)
    experts = {k: v for k, v in parts.items() if k in EXPERT_FLOPS}
    return recomputed_flops(spec, mode, blocks_forward=0.0, attention_core=0.0, tokens=0.0,
                            parts=experts) / done if done else 0.0


def recomputed_flops(spec: ModelSpec, mode: str, *, blocks_forward: float, attention_core: float, tokens: float,
                     pp: int = 1, parts: dict[str, float] | None = None, keeps_matmuls: bool = True) -> float:
    """Forward FLOPs run again in the backward under `mode`, given the blocks' forward FLOPs (LM head excluded), their
    attention core's, the tokens and the forward FLOPs by operation (`parts`); block:K counts K blocks on each of `pp`
    stages; `keeps_matmuls`: the per-op policy keeps matmul outputs (`op_policy_keeps_matmuls`)."""
    plan = recompute_plan(mode)
    if plan.kind == "modules":
        keys = {k for m in plan.modules for k in MODULE_FLOPS[m]}
        return sum((parts or {}).get(k, 0.0) for k in keys)
    if plan.kind == "selective":
        return attention_core
    if plan.kind == "op":
        return max(0.0, blocks_forward - attention_core
                   - op_saved_matmul_flops_per_token(spec, keeps_matmuls) * tokens)
    blocks = spec.num_layers
    whole = min(blocks, plan.n * pp) if plan.kind == "block" else plan.full_blocks(blocks)
    return blocks_forward * whole / blocks if blocks else 0.0
