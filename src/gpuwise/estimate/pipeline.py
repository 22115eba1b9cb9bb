"""Pipeline parallelism: which layers each stage holds, how many micro-batches a stage keeps in flight, the bubble.

One home for the pipeline's arithmetic, shared by the memory model (in-flight activations), the step-time model
(the bubble), the planner (which splits to search) and the launch recipes (model chunks per virtual stage):

- `stage_layers`: transformer layers per stage, even or with the first and last stage short (Megatron-LM's
  --decoder-first/last-pipeline-num-layers, Llama 3 405B's split); `pp_splits` lists the splits the planner tries.
- `stage_blocks` / `distinct_stages`: the block kinds on a stage, and the stages whose memory and time differ.
- `in_flight_microbatches`: what 1F1B, GPipe and the interleaved schedule keep alive at a stage's peak.
- `bubble_fraction` / `bubble_time_s`: the idle share of a step and the time it costs.
- `virtual_stage_layers`: the layers of each model chunk under the interleaved schedule.
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import InvalidArgument
from ..memo import remember
from ..model.spec import ModelSpec
from .layer_ops import block_signature
from .layout import Layout, divisors, nearby


def stage_layers(layout: Layout, num_layers: int) -> tuple[int, ...]:
    """Transformer layers on each pipeline stage (first stage first)."""
    if layout.pp == 1:
        return (num_layers,)
    return _stage_layers(layout.pp, layout.pp_first_layers, layout.pp_last_layers, num_layers)


@lru_cache(maxsize=4096)
def _stage_layers(pp: int, first: int | None, last: int | None, num_layers: int) -> tuple[int, ...]:
    fixed = (first or 0) + (last or 0)
    middle_stages = pp - (first is not None) - (last is not None)
    rest = num_layers - fixed
    if rest < 0 or (middle_stages == 0 and rest != 0) or (middle_stages and rest % middle_stages):
        hint = "" if first or last else "; or set --pp-first-layers/--pp-last-layers for an uneven split"
        raise InvalidArgument(
            f"--pp {pp} does not split {num_layers} layers evenly (first={first}, last={last}){hint}; "
            f"valid --pp values nearby: {nearby(pp, divisors(num_layers))}")
    per = rest // middle_stages if middle_stages else 0
    if middle_stages and per < 1:
        raise InvalidArgument(f"--pp {pp}: the middle stages would hold no layers")
    stages = [per] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return tuple(stages)


def _warm_up(layout: Layout, stage: int, num_microbatches: int) -> tuple[int, int, int]:
    """(forward passes a rank of `stage` runs before its first backward, its forward passes in all, model chunks per
    rank), in Megatron-Core's counting: 1F1B warms up with p - i - 1 micro-batches, the interleaved schedule with
    (p - i - 1) x 2 + (v - 1) x p chunk-micro-batches of m v, GPipe with all of them."""
    p, m = layout.pp, num_microbatches
    interleaved = layout.vpp > 1 or layout.schedule == "interleaved"
    v = layout.vpp if interleaved else 1
    total = m * v
    if layout.schedule == "gpipe":
        return total, total, v
    warm = (p - stage - 1) * 2 + (v - 1) * p if interleaved else p - stage - 1
    return min(warm, total), total, v


def in_flight_microbatches(layout: Layout, stage: int, num_microbatches: int) -> float:
    """Micro-batches whose activations a pipeline stage holds at its peak, in units of the stage's full layers: its
    warm-up forwards and the one more its first backward waits for (`_warm_up`).

    GPipe runs every forward before any backward: all m. 1F1B (PipeDream-flush, Narayanan et al. 2021):
    stage i (0-based) holds min(p - i, m). Interleaved with v chunks per rank (Megatron-LM): the first stage
    warms up with (p - 1) x 2 + (v - 1) x p + 1 chunk-micro-batches of L / (p v) layers, i.e. p + (p - 1) / v
    stage-micro-batches: the factor 1 + (p - 1) / (p v) of Korthikanti et al. 2022 and Megatron-LM's
    theoretical_memory_usage.py.
    """
    if layout.pp == 1:
        return 1.0
    warm, total, v = _warm_up(layout, stage, num_microbatches)
    return min(total, warm + 1) / v


def unpaired_share(layout: Layout, stage: int, num_microbatches: int) -> float:
    """Share of a stage's forward (and as many backward) chunk passes that a schedule pairing one micro-batch's
    forward with another's backward (Megatron-Core's combined 1F1B, EP overlap) runs alone: the warm-up forwards and
    the cool-down backwards (`_warm_up`); without pipelining the first forward and the last backward."""
    if layout.pp == 1:
        return 1.0 / max(1, num_microbatches)
    warm, total, _ = _warm_up(layout, stage, num_microbatches)
    return max(1, warm) / total


def loss_in_flight(layout: Layout, num_microbatches: int) -> float:
    """Micro-batches whose logits (and LM-head input) the last stage holds at once. GPipe runs every forward before
    any backward: all m. 1F1B runs each micro-batch's backward on the last stage right after its forward: one. So
    does the interleaved schedule for the last model chunk, the one with the loss (Megatron-Core's
    forward_backward_pipelining_with_interleaving: the last rank's (v - 1) p warm-up forwards stop before chunk
    v - 1, and in the steady state the forward of chunk v - 1 for micro-batch k is followed by its backward), unless
    the warm-up covers every chunk-micro-batch (all forwards run first: all m)."""
    if layout.pp == 1:
        return 1.0
    warm, total, _ = _warm_up(layout, layout.pp - 1, num_microbatches)
    return float(num_microbatches) if warm >= total else 1.0


def bubble_fraction(pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Idle share of a pipeline step: (p-1)/v idle micro-batch slots out of m + (p-1)/v; (p-1)/(m+p-1) for 1F1B
    and GPipe (Narayanan et al. 2021, section 2.2)."""
    idle = (pp - 1) / vpp
    return idle / (num_microbatches + idle)


def bubble_time_s(pp: int, vpp: int, microbatch_s: float) -> float:
    """Seconds a step idles in the pipeline bubble: (p - 1) / v micro-batch slots of the slowest stage's forward +
    backward time (1F1B and GPipe: v = 1)."""
    return (pp - 1) / vpp * microbatch_s


def pp_splits(layers: int, pp: int) -> list[tuple[int | None, int | None]]:
    """(first, last) stage layer counts that `stage_layers` accepts and the planner tries: an even split, or, where
    the layers do not divide, the middle stages at the rounded-up share and the end stages (which also hold the
    embedding, and the LM head and the loss) short by the rest, the last by the larger half: DeepSeek-V3's 61 layers
    over 16 stages come out 3 + 14 x 4 + 2, the split NVIDIA's DGX Cloud recipe runs (decoder first / last pipeline
    num layers 3 and 2). A prime layer count (61) divides over no degree but its own, so without such splits the
    planner never tried pipeline parallelism for it."""
    if pp == 1:
        return [(None, None)]
    if pp > layers:
        return []
    if layers % pp == 0:
        return [(None, None)]
    per = -(-layers // pp)
    short = pp * per - layers
    first_cut, last_cut = short // 2, short - short // 2
    if last_cut >= per:
        return []
    return [(per - first_cut, per - last_cut)]


def torchtitan_split(num_stages: int, num_layers: int, input_weight: int, output_weight: int) -> tuple[int, ...] | None:
    """Transformer layers per stage as torchtitan 0.2.2 splits them (generate_llm_fqn_per_model_part in
    torchtitan/distributed/pipeline_parallel.py): the embedding counts as `input_weight` layers and the norm + output
    as `output_weight`, the effective layers go out evenly with the remainder on the first stages. None where
    torchtitan raises."""
    if num_stages == 1:
        return (num_layers,)
    effective = num_layers + input_weight + output_weight
    if num_stages > effective:
        return None
    per, extra = divmod(effective, num_stages)
    if per == 0 or input_weight > per or output_weight > per:
        return None
    out, used = [], 0
    for s in range(num_stages):
        n = per + (1 if s < extra else 0)
        if s == 0:
            n -= input_weight
        elif s == num_stages - 1:
            n -= output_weight
        n = max(0, min(n, num_layers - used))
        out.append(n)
        used += n
    return tuple(out) if used == num_layers else None


def torchtitan_default_ends(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, int] | None:
    """(first, last) pipeline-rank layer counts torchtitan gives a model whose layers do not divide over its pp x vpp
    stages when no split is configured (`torchtitan_split` with the embedding and the head weighed as one layer
    each, its defaults; rank r holds stages r, r + pp, ...), or None: the layers divide (the even split, which
    `stage_layers` makes), or the split leaves middle ranks unequal (not a layout `stage_layers` can hold).

    For Llama 3.1 405B (126 layers) on PP 8 this is 15, 16 x 6, 15 with one stage per rank and 7, 8 x 14, 7 with
    two; torchtitan 2024-12's rule (parallelisms/pipelining_utils.py generate_split_points @9dec370: L // S for the
    first stage, one more for the middle ones while the remainder lasts, the rest for the last) cuts it the same."""
    stages = pp * vpp
    if pp < 2 or stages > num_layers or num_layers % stages == 0:
        return None
    sizes = torchtitan_split(stages, num_layers, 1, 1)
    if sizes is None:
        return None
    ranks = [sum(sizes[r + c * pp] for c in range(vpp)) for r in range(pp)]
    if len(set(ranks[1:-1])) > 1 or min(ranks) < 1:
        return None
    return ranks[0], ranks[-1]


_STAGE_BLOCKS: dict = {}


def stage_blocks(spec: ModelSpec, per_stage: tuple[int, ...], stage: int,
                 bf16: frozenset[int] = frozenset()) -> tuple[tuple[int, int], ...]:
    """(first layer, count) of each block kind on pipeline stage `stage`, given the layers per stage (cached); the
    layers in `bf16` (kept in bf16 under a quantized recipe, `TrainJob.bf16_layers`) are kinds of their own."""
    key = (id(spec), per_stage, stage, bf16)
    hit = _STAGE_BLOCKS.get(key)
    if hit is not None:
        return hit[0]
    first = sum(per_stage[:stage])
    kinds: dict[tuple, list[int]] = {}
    for layer in range(first, first + per_stage[stage]):
        kinds.setdefault((block_signature(spec, layer), layer in bf16), [layer, 0])[1] += 1
    return remember(_STAGE_BLOCKS, key, tuple((f, c) for f, c in kinds.values()), spec)


_DISTINCT: dict = {}


def distinct_stages(spec: ModelSpec, per_stage: tuple[int, ...], bf16: frozenset[int] = frozenset()) -> tuple[int, ...]:
    """The first stage of each class (same block kinds, same first / last role, same layers kept in `bf16`), in
    order."""
    key = (id(spec), per_stage, bf16)
    hit = _DISTINCT.get(key)
    if hit is not None:
        return hit[0]
    seen, out, first = set(), [], 0
    for stage, count in enumerate(per_stage):
        sig = (stage == 0, stage == len(per_stage) - 1,
               tuple((block_signature(spec, i), i in bf16) for i in range(first, first + count)))
        first += count
        if sig not in seen:
            seen.add(sig)
            out.append(stage)
    return remember(_DISTINCT, key, tuple(out), spec)


def virtual_stage_layers(layout: Layout, num_layers: int) -> tuple[int, ...]:
    """Transformer layers on each model chunk, in the order both torchtitan and Megatron-LM number virtual stages:
    chunk c of pipeline rank r is stage c x pp + r. Middle ranks split their layers evenly over the vpp chunks; an
    uneven first (last) rank spreads its layers as evenly as it can, the extra ones away from the embedding (head)."""
    per_rank = stage_layers(layout, num_layers)
    v = layout.vpp
    chunks_of_rank = []
    for r, n in enumerate(per_rank):
        base, extra = divmod(n, v)
        counts = [base] * v
        order = range(v - 1, v - 1 - extra, -1) if r == 0 else range(extra)
        for c in order:
            counts[c] += 1
        chunks_of_rank.append(counts)
    return tuple(chunks_of_rank[s % layout.pp][s // layout.pp] for s in range(layout.pp * v))


def job_bf16_layers(layout: Layout, num_layers: int, job) -> frozenset[int]:
    """The layers `job` keeps in bf16 (`TrainJob.bf16_layers`) on the ranks that hold them (`rank_bf16_layers`)."""
    return rank_bf16_layers(layout, num_layers, job.bf16_layers(num_layers))


def bf16_layers_key(layout: Layout, job) -> tuple:
    """What `job_bf16_layers` depends on beyond the model and the stage split, for the memo keys that hold it."""
    start, end = job.num_layers_at_start_in_bf16, job.num_layers_at_end_in_bf16
    return start, end, layout.vpp if start or end else None


def rank_bf16_layers(layout: Layout, num_layers: int, bf16: frozenset[int]) -> frozenset[int]:
    """The layers kept in bf16 (`TrainJob.bf16_layers`, global numbers) in `stage_blocks`' numbering, where rank r
    holds one run of layers from sum(per_stage[:r]): under interleaving rank r holds the chunks c x pp + r
    (`virtual_stage_layers`), so the first and last layers sit on several ranks; each rank gets as many as it really
    holds, marked at the front of its run (its blocks alike but for that, only the count matters)."""
    if not bf16 or layout.vpp <= 1:
        return bf16
    counts = [0] * layout.pp
    g = 0
    for s, n in enumerate(virtual_stage_layers(layout, num_layers)):
        counts[s % layout.pp] += sum(1 for i in range(g, g + n) if i in bf16)
        g += n
    out: set[int] = set()
    first = 0
    for r, n in enumerate(stage_layers(layout, num_layers)):
        out.update(range(first, first + counts[r]))
        first += n
    return frozenset(out)
