"""Which parallel layouts a model and a batch allow: one home for each rule, with one-line errors.

Every command that proposes or checks a training layout asks here: `gpuwise train` (`validate_layout`), the planner
(it searches only degrees these rules accept), `explain` (the TP degrees it lists) and `fit` (the TP degrees vLLM
serves with). Each check raises `InvalidArgument` naming the constraint and the valid values nearby.

- Tensor parallelism splits attention heads, key/value heads (query groups) and the MLP width evenly over the TP
  ranks, in training (`tp_conflict`: Megatron-Core divides num_query_groups by the TP size in its attention layer,
  torchtitan shards wk/wv by heads). vLLM instead replicates key/value heads when TP exceeds them
  (`serving_tp_conflict`).
- Context parallelism splits the sequence into 2 x cp chunks (the load-balanced causal split): `cp_splits`; sequence
  parallelism splits each CP rank's tokens over the TP ranks: `sp_splits`.
- Attention sinks under Megatron-Core take context parallelism only as all-to-all (`sinks_cp_problem`).
- Expert parallelism is carved out of the data-parallel x context-parallel ranks that hold the same dense weights
  (Megatron-Core's expert-data-parallel group, torchtitan's EP borrowing dp_shard x cp), and divides the experts.
- HSDP shard groups divide the data-parallel x context-parallel ranks and hold whole expert groups.
"""

from __future__ import annotations

from ..errors import InvalidArgument, require_positive_int
from ..model.spec import ModelSpec
from .layout import SCHEDULES, SHARDINGS, Layout, divisors, multiples_near, nearby


def tp_conflict(spec: ModelSpec, tp: int) -> tuple[str, int] | None:
    """What a training tensor-parallel degree `tp` fails to divide, as (what, size); None when `tp` is valid."""
    if spec.num_heads % tp:
        return "the number of attention heads", spec.num_heads
    if spec.mla is None and spec.num_kv_heads % tp:
        return "the number of key/value heads", spec.num_kv_heads
    if tp > 1 and spec.intermediate_size and spec.intermediate_size % tp:
        return "the MLP width", spec.intermediate_size
    lm = spec.linear
    if lm is not None and spec.num_linear_layers:  # a hybrid's recurrent layers split their heads and groups too
        if lm.num_heads % tp:
            return "the recurrent layers' heads", lm.num_heads
        if lm.num_groups % tp:
            return "the recurrent layers' key heads (groups)", lm.num_groups
    return None


def valid_tp_degrees(spec: ModelSpec, limit: int) -> list[int]:
    """The training TP degrees up to `limit` (divisors of the heads that pass `tp_conflict`)."""
    return [t for t in divisors(spec.num_heads) if t <= limit and tp_conflict(spec, t) is None]


def serving_tp_conflict(spec: ModelSpec, tp: int) -> str | None:
    """Why vLLM cannot serve the model with tensor parallelism `tp`, or None: the attention heads must divide, and
    the key/value heads must divide TP or be divided by it (vLLM replicates them when TP exceeds them)."""
    if spec.num_heads % tp:
        return f"--num-gpus to divide the {spec.num_heads} attention heads"
    kv = spec.num_kv_heads
    if spec.mla is None and ((tp < kv and kv % tp) or (tp >= kv and tp % kv)):
        return f"--num-gpus to divide the {kv} KV heads or be a multiple of them"
    return None


def cp_splits(seq: int, cp: int) -> bool:
    """Whether context parallelism `cp` splits `seq` tokens into 2 x cp equal chunks (the load-balanced causal
    split of Megatron-Core and torchtitan); cp = 1 always does."""
    return cp == 1 or seq % (2 * cp) == 0


def sinks_cp_problem(spec: ModelSpec, framework: str, cp: int, cp_comm_type: str | None) -> str | None:
    """Why Megatron-Core cannot run this model's attention sinks under context parallelism, or None. Transformer
    Engine runs sinks (softmax_type "learnable") only in cuDNN's fused attention, which takes context parallelism
    only with cp_comm_type a2a (transformer_engine/pytorch/attention/dot_product_attention/utils.py: FlashAttention
    off for sinks, FusedAttention off for sinks with CP other than a2a): with p2p (the default) or allgather no
    backend is left."""
    if not spec.attention_sinks or framework != "megatron" or cp <= 1 or (cp_comm_type or "p2p") == "a2a":
        return None
    return ("Transformer Engine runs this model's attention sinks only in cuDNN's fused attention, which takes "
            f"context parallelism only with --cp-comm-type a2a (not {cp_comm_type or 'p2p'})")


def sp_splits(seq: int, cp: int, tp: int) -> bool:
    """Whether sequence parallelism with TP `tp` splits each context-parallel rank's seq / cp tokens evenly over
    the TP ranks (Megatron-LM requires the sequence to divide by the TP size with --sequence-parallel)."""
    return tp == 1 or (seq // cp) % tp == 0


def ep_fits(spec: ModelSpec, ep: int, dp: int, cp: int) -> bool:
    """Whether expert parallelism `ep` divides the experts and the dp x cp ranks that hold the same dense weights."""
    if ep == 1:
        return True
    return spec.moe is not None and spec.is_moe and spec.moe.num_experts % ep == 0 and (dp * cp) % ep == 0


def hsdp_holds_experts(shard_group: int, ep: int) -> bool:
    """HSDP with expert parallelism: the shard group holds whole expert-parallel groups."""
    return ep == 1 or shard_group % ep == 0


def _require_divides(name: str, degree: int, what: str, total: int) -> None:
    if total % degree:
        raise InvalidArgument(f"--{name} {degree} does not divide {what} ({total}); valid --{name} values nearby: "
                              f"{nearby(degree, divisors(total))}")


def validate_layout(layout: Layout, spec: ModelSpec, *, seq: int, global_batch: int, micro_batch: int) -> None:
    """Check every constraint of the layout against the model and the batch (InvalidArgument on the first)."""
    from .pipeline import stage_layers  # local: `gpuwise fit` asks the TP rules above without the pipeline module

    for name in ("num_gpus", "tp", "pp", "vpp", "cp", "ep"):
        require_positive_int("--" + name.replace("_", "-"), getattr(layout, name), 1 << 20)
    if layout.sharding not in SHARDINGS:
        raise InvalidArgument(f"unknown sharding '{layout.sharding}'; valid: {', '.join(SHARDINGS)}")
    if layout.schedule not in SCHEDULES:
        raise InvalidArgument(f"unknown pipeline schedule '{layout.schedule}'; valid: {', '.join(SCHEDULES)}")
    conflict = tp_conflict(spec, layout.tp)
    if conflict is not None:
        what, total = conflict
        raise InvalidArgument(f"--tp {layout.tp} does not divide {what} ({total}); valid --tp values nearby: "
                              f"{nearby(layout.tp, valid_tp_degrees(spec, max(layout.tp, total)) or [1])}")
    if layout.pp > spec.num_layers:
        raise InvalidArgument(f"--pp {layout.pp} is deeper than the model's {spec.num_layers} layers; "
                              f"valid --pp values nearby: {nearby(layout.pp, divisors(spec.num_layers))}")
    if layout.pp == 1 and (layout.pp_first_layers is not None or layout.pp_last_layers is not None):
        raise InvalidArgument("--pp-first-layers/--pp-last-layers need pipeline parallelism (--pp > 1)")
    if layout.schedule == "interleaved" and layout.vpp == 1:
        raise InvalidArgument("the interleaved schedule needs --vpp > 1 (model chunks per pipeline rank)")
    if layout.vpp > 1 and layout.schedule != "interleaved":
        raise InvalidArgument(f"--vpp {layout.vpp} runs the interleaved schedule, not {layout.schedule}")
    stage_layers(layout, spec.num_layers)  # raises on uneven splits
    if layout.vpp > 1:
        if layout.pp == 1:
            raise InvalidArgument("--vpp needs pipeline parallelism (--pp > 1)")
        # The middle stages split into v equal chunks; the first and last stages may hold other counts (Megatron-LM's
        # --pipeline-model-parallel-layout; Llama 3 405B's first chunk holds only the embedding, its last only
        # the head), which the step model charges as they are. Two stages with both counts given have no middle
        # stage to check (DeepSeek-V3 on Megatron-Bridge: PP 2 x VP 8, layout 'Et*4|(t*4|)*14tmL', 32 + 29 layers).
        stages = stage_layers(layout, spec.num_layers)
        middle = stages[1:-1]
        explicit = layout.pp_first_layers is not None and layout.pp_last_layers is not None
        if middle or not explicit:
            per_stage = max(middle or (spec.num_layers // layout.pp,))
            _require_divides("vpp", layout.vpp, "the layers per (middle) pipeline stage", per_stage)
    model_parallel = layout.tp * layout.pp * layout.cp
    if layout.num_gpus % model_parallel:
        valid = multiples_near(layout.num_gpus, model_parallel)
        raise InvalidArgument(
            f"tp x pp x cp = {layout.tp} x {layout.pp} x {layout.cp} = {model_parallel} does not divide "
            f"--num-gpus {layout.num_gpus}; GPU counts that work: {nearby(layout.num_gpus, valid)}")
    if not cp_splits(seq, layout.cp):
        valid = [c for c in divisors(seq) if cp_splits(seq, c)]
        raise InvalidArgument(f"--cp {layout.cp}: the sequence ({seq}) must split into 2 x cp equal chunks "
                              f"(load-balanced causal attention); valid --cp values nearby: {nearby(layout.cp, valid)}")
    if layout.sp and not sp_splits(seq, layout.cp, layout.tp):
        raise InvalidArgument(f"--sp: the {seq // layout.cp} tokens per context-parallel rank do not divide by --tp "
                              f"{layout.tp} (sequence parallelism splits them over the TP ranks)")
    dp = layout.dp
    if layout.ep > 1:
        if not spec.is_moe:
            raise InvalidArgument("--ep needs a mixture-of-experts model; this one is dense")
        assert spec.moe is not None
        _require_divides("ep", layout.ep, "the number of experts", spec.moe.num_experts)
        etp = layout.expert_tp
        require_positive_int("--etp", etp, 1 << 16)
        if etp not in (1, layout.tp):
            raise InvalidArgument(f"--etp {etp}: expert tensor parallelism is 1 or the dense --tp ({layout.tp}), "
                                  f"as torchtitan allows (Megatron-Core allows others; not modelled)")
        folded = dp * layout.cp * layout.tp
        if folded % (layout.ep * etp):
            raise InvalidArgument(
                f"--ep {layout.ep} x --etp {etp} must divide tp x cp x dp = num_gpus / pp = {folded} (the ranks the "
                f"experts fold over); valid --ep nearby: "
                f"{nearby(layout.ep, [e for e in divisors(folded // etp) if spec.moe.num_experts % e == 0])}")
    elif layout.etp not in (None, 1, layout.tp):
        raise InvalidArgument("--etp applies to the routed experts of a MoE model with --ep")
    if layout.sharding == "hsdp":
        if layout.shard_group is None:
            raise InvalidArgument("HSDP (--fsdp hybrid) needs --shard-group K: the ranks that shard model states")
        _require_divides("shard-group", layout.shard_group, "the data-parallel x context-parallel degree", dp * layout.cp)
        if not hsdp_holds_experts(layout.shard_group, layout.ep):
            raise InvalidArgument(f"--shard-group {layout.shard_group} is not a multiple of --ep {layout.ep}: the "
                                  "experts are sharded within the HSDP group (torchtitan requires it)")
    elif layout.shard_group is not None:
        raise InvalidArgument("--shard-group only applies to --fsdp hybrid")
    if global_batch % dp:
        raise InvalidArgument(f"--global-batch {global_batch} is not a multiple of the data-parallel degree {dp}; "
                              f"valid batches nearby: {nearby(global_batch, multiples_near(global_batch, dp))}")
    per_rank = global_batch // dp
    if micro_batch > per_rank:
        raise InvalidArgument(f"--micro-batch {micro_batch} is larger than the per-rank batch "
                              f"global-batch / dp = {global_batch} / {dp} = {per_rank}")
    if per_rank % micro_batch:
        raise InvalidArgument(f"--micro-batch {micro_batch} does not divide the per-rank batch {per_rank}; "
                              f"valid micro-batches nearby: {nearby(micro_batch, divisors(per_rank))}")
