"""Training memory per GPU: model states + activations + buffers + runtime, at the peak rank and moment.

The peak moment is the backward pass, with every in-flight micro-batch's activations saved and, on the last pipeline
stage, the logits and loss gradients alive. The gradients are allocated in full from the second micro-batch of
gradient accumulation on, or always where the framework keeps a persistent gradient buffer
(`gradients_live_at_backward`); with one micro-batch under torch's trainers the backward's peak is the larger of its
start (no gradients) and its end (every gradient, the activations freed): `_backward_parts`. The optimizer step is
the other candidate (model states, gradients and the optimizer's temporaries, no activations); the larger of the
two is reported. Every
pipeline stage is evaluated and the largest reported, with its stage index; with 1F1B that is the first
stage (it holds p micro-batches), unless the last stage's logits outweigh it. The last stage holds one micro-batch's
logits under 1F1B and the interleaved schedule, all m under GPipe (`pipeline.loss_in_flight`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter

from ..memo import remember
from ..model.spec import ModelSpec
from ..units import MiB
from .activations import StageActivationTerms, stage_activation_terms
from .engines import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from .job import HF_TRAINERS, PYTORCH_NATIVE, TrainJob, pipeline_keeps_unsharded
from .recompute import recompute_plan
from .layout import Layout
from . import muon
from .model_states import ModelStates, model_states, stage_tensors
from .pipeline import (bf16_layers_key, distinct_stages, in_flight_microbatches, job_bf16_layers, loss_in_flight,
                       stage_layers)

# Caching-allocator allowance on top of the allocated peak: Megatron-LM's theoretical_memory_usage.py adds 5%
# ("buffer for optimizer and miscellaneous temporaries"). GMLake (Guo et al., ASPLOS 2024) measured 15% average
# fragmentation (up to 33%) across eight LLM trainings with recompute / offload / ZeRO: configurations within
# that margin of the card are reported as tight.
ALLOCATOR_FRACTION = 0.05
FRAGMENTATION_RISK = 0.15
# DeepSpeed ZeRO defaults (deepspeed/runtime/zero/config.py), in elements.
DEEPSPEED_REDUCE_BUCKET = 500_000_000
DEEPSPEED_PREFETCH_BUCKET = 50_000_000
# NCCL's communicator buffers: NCCL_BUFFSIZE 4 MiB per channel and peer direction; budget 32 channels x 2.
NCCL_BUFFER_BYTES = 32 * 2 * 4 * MiB


@dataclass(slots=True)  # not frozen: built per configuration, and frozen __init__ costs 3x
class TrainMemory:
    """Bytes on the reported GPU, by named part; `total` is what nvidia-smi would show at the peak."""

    params: float
    master_weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    buffers: float
    runtime: float
    allocator: float
    """Reserved but not allocated at the peak: `ALLOCATOR_FRACTION` of the allocated bytes, plus the gradient shards
    FSDP reduce-scatters on its own stream when the peak falls before any gradient exists (`_grads_on_side_stream`).
    In `total`, not in `required`."""
    stage: int
    """Pipeline stage of the reported rank (0 = first)."""
    moment: str
    """'backward' (the backward pass's peak: its start, or its end when it starts without gradients) or
    'optimizer-step'."""
    cpu: float
    """Host memory for offloaded states on this rank."""
    states: ModelStates
    buffer_parts: dict
    activation_in_flight: float
    activations_per_microbatch: float = 0.0
    """One micro-batch's saved activations on the reported stage (blocks and outside them, logits excluded),
    whatever moment the peak falls at."""
    moments: dict = field(default_factory=dict)
    """Bytes allocated (PyTorch's max_memory_allocated view) on the reported stage at each moment of a step:
    end_of_forward (every in-flight micro-batch's activations and saved logits held), backward_peak (plus the
    recompute working set and the loss's gradients) and optimizer_step (states, gradients and the optimizer's
    temporaries, no activations)."""

    @property
    def total(self) -> float:
        return self.sum_parts(self.params, self.master_weights, self.grads, self.optimizer, self.activations,
                              self.logits, self.buffers, self.runtime, self.allocator)

    @property
    def required(self) -> float:
        """What must fit on the GPU for the step to run: the total without the allocator's allowance. PyTorch's
        caching allocator frees its cached, unused blocks and retries before it raises an out-of-memory error
        (docs: CUDA semantics, memory management), so the allowance is headroom it uses when there is room, not a
        requirement; a total above the card with `required` below it is reported as tight."""
        return self.total - self.allocator

    @property
    def torch_reserved(self) -> float:
        """What torch.cuda.max_memory_reserved should show: everything but `runtime` (the CUDA context and NCCL's
        buffers live outside PyTorch's caching allocator)."""
        return self.total - self.runtime

    @property
    def torch_allocated(self) -> float:
        """What torch.cuda.max_memory_allocated should show: `torch_reserved` without the allocator's allowance
        (reserved but not handed out). cuBLAS's workspace, a few tens of MiB, is allocated inside and not counted."""
        return self.total - self.runtime - self.allocator

    @staticmethod
    def sum_parts(params: float, master_weights: float, grads: float, optimizer: float, activations: float,
                  logits: float, buffers: float, runtime: float, allocator: float) -> float:
        """The total, added in this order wherever it is computed (`LayoutMemory.peak` too): float addition
        depends on the order, and the planner's totals must equal `gpuwise train`'s exactly."""
        return params + master_weights + grads + optimizer + activations + logits + buffers + runtime + allocator

    def as_dict(self) -> dict[str, float]:
        keys = ("params", "master_weights", "grads", "optimizer", "activations", "logits", "buffers", "runtime",
                "allocator")
        out = {k: round(getattr(self, k)) for k in keys}
        out["total"] = round(self.total)
        return out


PERSISTENT_GRADIENT_BUFFERS: tuple[str, ...] = ("megatron", "deepspeed")
"""Frameworks whose gradients live in buffers allocated once for the run: Megatron-Core's DDP keeps every
parameter's main_grad in a contiguous buffer (megatron/core/distributed/param_and_grad_buffer.py), DeepSpeed ZeRO its
gradient partitions. The others (torch DDP / FSDP2, torchtitan, torchtune, the HF Trainer) allocate each gradient in
the backward and free it at zero_grad(set_to_none=True), torch's default since 2.0."""


def gradients_live_at_backward(framework: str, num_microbatches: int) -> bool:
    """Whether the gradients are allocated when a backward pass starts. With one micro-batch per optimizer step and
    gradients freed at zero_grad(set_to_none=True), they are not: each appears as its layer's backward runs, while
    that layer's activations are freed, so the start of the backward holds the activations and no gradients, and its
    end (the optimizer step) the gradients and no activations. Measured on an H100 (benchmarks/results/h100-sxm,
    gpuwise bench train): Llama-3.1-8B cut to 8 layers, 8,192 tokens, no recompute, peaks at 60.3 GiB allocated with
    one micro-batch and 70.7 GiB with two (gradients 10.4 GiB)."""
    return num_microbatches > 1 or framework in PERSISTENT_GRADIENT_BUFFERS


def _runtime(layout: Layout) -> float:
    """CUDA context, cuBLAS workspace and NCCL's buffers (with more than one GPU)."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + (NCCL_BUFFER_BYTES if layout.num_gpus > 1 else 0)


def _state_buffers(layout: Layout, states: ModelStates, *, framework: str, unit_params: float,
                   gathered_unit_bytes: float | None = None) -> dict[str, float]:
    """Buffers sized by the model states on one rank at the backward peak: gradient buckets, FSDP / ZeRO-3
    gathers and reduce-scatters (whatever the micro-batch)."""
    out: dict[str, float] = {}
    sh = layout.sharding_spec
    grad_bytes = states.grad_bytes_per_param
    frozen_units = states.trainable_params < 0.5 * states.params_on_rank  # LoRA: the blocks' weights are frozen
    if layout.dp > 1 and not sh.params:
        if framework == "deepspeed" and layout.sharding != "ddp":
            out["reduce_bucket"] = min(DEEPSPEED_REDUCE_BUCKET, states.trainable_params) * grad_bytes
        elif framework in (*HF_TRAINERS, *PYTORCH_NATIVE) and layout.sharding == "ddp":
            # torch DDP copies gradients into its buckets (gradient_as_bucket_view=False by default).
            out["ddp_buckets"] = states.grads
    if sh.params and layout.shard_size > 1:
        w = states.working_bytes_per_param
        if framework == "deepspeed":
            out["param_gather"] = 2 * min(unit_params, DEEPSPEED_PREFETCH_BUCKET) * w + unit_params * w
            out["reduce_bucket"] = min(DEEPSPEED_REDUCE_BUCKET, unit_params) * grad_bytes
        elif pipeline_keeps_unsharded(framework, layout.pp, sh.params) and not sh.keep_unsharded:
            # the stage's parameters stay unsharded through the micro-batches, and its unsharded gradients
            # accumulate in the reduce dtype (FSDP2's unsharded_accumulated_grad, fp32)
            out["param_gather"] = states.params_on_rank * w
            if not frozen_units:
                out["grad_accumulation"] = states.trainable_params * grad_bytes
        elif not sh.keep_unsharded:
            # FSDP2: the block in use and the one prefetched (one ahead, forward and backward), unsharded
            out["param_gather"] = 2 * (unit_params * w if gathered_unit_bytes is None else gathered_unit_bytes)
        if not frozen_units:  # the block's unsharded gradients in the compute dtype, and the copy reduce-scattered
            out["grad_reduce_scatter"] = unit_params * (w + grad_bytes)
    return out


def _token_buffers(spec: ModelSpec, layout: Layout, *, e: float, tokens: float) -> dict[str, float]:
    """Communication buffers proportional to the micro-batch's tokens (SP gathers, pipeline sends, CP and EP
    exchanges)."""
    out: dict[str, float] = {}
    h = spec.hidden_size
    if layout.tp > 1 and layout.sp:
        out["sp_all_gather"] = e * tokens * h  # the sequence-gathered input of the QKV / MLP matmuls
    if layout.pp > 1:
        out["pp_send_recv"] = 2 * e * tokens * h / (layout.tp if layout.sp else 1)
    if layout.cp > 1:
        kv = (spec.mla.kv_lora_rank if spec.mla else 2 * spec.num_kv_heads * spec.head_dim)
        out["cp_kv_exchange"] = 2 * e * tokens * kv / layout.tp  # the chunk being sent and the one received
    if layout.ep > 1 and spec.moe is not None:
        out["ep_all_to_all"] = 2 * spec.moe.top_k * e * tokens * h  # dispatch send and receive buffers
    return out


@dataclass(slots=True)  # not frozen: built per layout, and frozen __init__ costs 3x
class _Stage:
    """What one pipeline stage's memory holds whatever the micro-batch and recompute mode."""

    index: int
    states: ModelStates
    states_total: float
    states_total_no_grads: float
    """The model states without the gradients, added in `TrainMemory.total`'s order (a backward that starts with
    none allocated: `gradients_live_at_backward`)."""
    states_total_end: float
    """The model states at the end of a backward that started without gradients: all of them, less the transient
    16-bit weight copies (freed with the activations they were saved with)."""
    block_cast: float
    """autocast's 16-bit copies of the largest block's weights (ModelStates.block_casts): made again when a
    checkpointed block is rebuilt."""
    head_grads: float
    """The output layer's gradients: the first a backward makes, alive when the first block is rebuilt."""
    activations: StageActivationTerms
    state_buffers: dict[str, float]
    state_buffer_bytes: float
    """sum(state_buffers.values()): the micro-batch's token buffers are added to it in order."""
    step_buffers: float
    """Buffers alive at the optimizer step: the optimizer's temporaries and DDP's buckets."""
    step_allocated: float
    """Bytes allocated at the optimizer step (no activations)."""
    step_total: float
    """The stage's total when the optimizer step is its peak."""


class LayoutMemory:
    """Training memory of one layout and job, for any micro-batch and recompute mode.

    Holds what does not depend on them, for each distinct pipeline stage (`_Stage`, cached by `layout_memory`):
    model states, state-sized buffers, the optimizer-step total and the activations' per-token terms. `peak`
    adds what grows with the micro-batch (activations, logits, token buffers) and returns the most loaded
    stage's total; `at` gives that stage's breakdown. `train_memory` is `at`, and the planner, which asks for
    every micro-batch and recompute mode of a layout, calls `peak` on one `LayoutMemory`: one implementation.
    """

    __slots__ = ("spec", "layout", "job", "seq", "e", "offload_activations", "runtime", "stages")

    def __init__(self, spec: ModelSpec, layout: Layout, job: TrainJob, stages: tuple[_Stage, ...]) -> None:
        self.spec, self.layout, self.job, self.seq = spec, layout, job, job.seq
        self.e = job.element_bytes
        self.offload_activations = "activations" in job.offload
        self.runtime = _runtime(layout)
        self.stages = stages

    def at(self, micro_batch: int, num_microbatches: int, recompute: str | None = None) -> TrainMemory:
        """Memory on the most loaded GPU, by part (the stage and moment `peak` finds); `recompute` defaults to the
        job's."""
        recompute = self.job.recompute if recompute is None else recompute
        _, st, allocator = self.peak(micro_batch, num_microbatches, recompute)
        heads = loss_in_flight(self.layout, num_microbatches)
        act = st.activations.at(micro_batch, in_flight_microbatches(self.layout, st.index, num_microbatches),
                                recompute, self.offload_activations, at_loss=heads)
        states = st.states
        tokens = micro_batch * self.seq / self.layout.cp
        parts = {**st.state_buffers, **_token_buffers(self.spec, self.layout, e=self.e, tokens=tokens)}
        one = st.activations.at(micro_batch, 1.0, recompute, self.offload_activations, at_loss=1.0)
        buffers = sum(parts.values())
        saved_logits = 0.0
        if st.activations.logit_bytes is not None:
            saved_logits = tokens * st.activations.vocab * st.activations.logit_bytes[0] * heads / self.layout.tp
        grads_live = gradients_live_at_backward(self.job.framework, num_microbatches)
        checkpointed = recompute_plan(recompute).checkpointed_share(st.activations.num_layers)
        held, activations, logits, part, not_held, grads = _backward_parts(
            st, grads_live, act.layers + act.outside_layers, act.recompute_working, act.logits, checkpointed)
        backward_peak = held + activations + logits + buffers
        end_of_forward = (st.states_total if grads_live else st.states_total_no_grads) + act.total \
            - act.recompute_working + saved_logits + buffers - st.states.block_casts * checkpointed
        moments = {"end_of_forward": end_of_forward, "backward_peak": backward_peak,
                   "optimizer_step": st.step_allocated}
        common = dict(runtime=self.runtime, stage=st.index, cpu=states.cpu, states=states, buffer_parts=parts,
                      activation_in_flight=act.in_flight,
                      activations_per_microbatch=one.layers + one.outside_layers, moments=moments)
        if allocator is not None:
            return TrainMemory(params=states.params - not_held, master_weights=states.master_weights,
                               grads=grads, optimizer=states.optimizer,
                               activations=activations, logits=logits, buffers=buffers,
                               allocator=allocator, moment="backward", **common)
        return TrainMemory(params=states.params - states.transient_params, master_weights=states.master_weights,
                           grads=states.grads, optimizer=states.optimizer, activations=0.0, logits=0.0,
                           buffers=st.step_buffers, allocator=ALLOCATOR_FRACTION * st.step_allocated,
                           moment="optimizer-step", **common)

    def peak(self, micro_batch: int, num_microbatches: int,
             recompute: str | None = None) -> tuple[float, _Stage, float | None]:
        """(total bytes, stage, the allocator's allowance at the backward peak or None where the optimizer step is
        the peak) of the most loaded stage: the first of the distinct stages with the largest total.

        The planner's inner loop: no objects built. Parts are added in `TrainMemory.total`'s order (`states_total`
        is its first four), so that `at(...).total` equals this total exactly. `recompute` defaults to the job's (the
        planner asks for each mode on the job without recomputation: the stages hold the terms of every mode).
        """
        recompute = self.job.recompute if recompute is None else recompute
        tokens = micro_batch * self.seq / self.layout.cp
        token_buffers = _token_buffers(self.spec, self.layout, e=self.e, tokens=tokens).values()
        best: tuple[float, _Stage, float | None] | None = None
        grads_live = gradients_live_at_backward(self.job.framework, num_microbatches)
        side_stream = _grads_on_side_stream(self.layout, self.job.framework)
        plan = recompute_plan(recompute)
        heads = loss_in_flight(self.layout, num_microbatches)
        for st in self.stages:
            in_flight = in_flight_microbatches(self.layout, st.index, num_microbatches)
            layers, outside, working, logits, _, _ = st.activations.parts(micro_batch, in_flight, recompute,
                                                                          self.offload_activations, heads)
            buffers = sum(token_buffers, st.state_buffer_bytes)  # sum(buffer_parts.values()), in its order
            checkpointed = plan.checkpointed_share(st.activations.num_layers)
            loss_logits = logits
            held, activations, logits, part, _, _ = _backward_parts(
                st, grads_live, layers + outside, working, logits, checkpointed)
            backward = held + activations + logits + buffers
            if backward >= st.step_allocated:
                allocator = ALLOCATOR_FRACTION * backward
                if side_stream and part in ("start", "rebuild"):
                    allocator += st.states.grads
                elif side_stream and part == "end":
                    allocator = max(allocator, _side_stream_reserve(st, layers + outside, loss_logits, buffers,
                                                                    checkpointed) - backward)
                total = held + activations + logits + buffers + self.runtime + allocator
                if best is None or total > best[0]:
                    best = (total, st, allocator)
            elif best is None or st.step_total > best[0]:
                best = (st.step_total, st, None)
        assert best is not None
        return best


def _backward_parts(st: _Stage, grads_live: bool, saved: float, working: float, logits: float,
                    checkpointed: float) -> tuple[float, float, float, str, float, float]:
    """(model states, activations, logits, moment, 16-bit weight copies not held, gradients held) at a backward's
    peak, from the saved activations, one block's recompute working set, the loss's logits and gradients, and the
    share of the stage's blocks that are checkpointed (`RecomputePlan.checkpointed_share`).

    A checkpointed block saves no 16-bit weight copies (autocast's casts are made again when it is rebuilt). The
    loss's backward (the logits' gradients) comes first and is freed before the first block is rebuilt: the
    backward's start is the larger of the loss moment ("start": saved activations + logits) and the first rebuild
    ("rebuild": saved activations + one block's working set, that block's copies and the output layer's
    gradients). With the gradients live from the start (`gradients_live_at_backward`), every gradient is held at
    both ("all"). Without, the end is the other candidate ("end": every gradient and the first block's working set;
    the saved activations, and the 16-bit weight copies saved with them, freed): between them each block frees its
    activations as its gradients appear. Measured on an H100 and an H200: benchmarks/results/h100-sxm, h200-sxm
    (docs/training-memory.md)."""
    states = st.states
    dropped = states.block_casts * checkpointed
    recast = st.block_cast if checkpointed else 0.0
    grads = states.grads if grads_live else 0.0
    head = 0.0 if grads_live else st.head_grads
    loss = _held_at_loss(states, grads, checkpointed)
    # each sum in TrainMemory.total's order (params, master, grads, optimizer), so that `at` and `peak` agree exactly
    rebuild = states.params - (dropped - recast) + states.master_weights + (grads + head) + states.optimizer
    if rebuild + working > loss + logits:
        held, acts, logit_part, part, not_held, grads = rebuild, saved + working, 0.0, "rebuild", dropped - recast, \
            grads + head
    else:
        held, acts, logit_part, part, not_held = loss, saved, logits, "start", dropped
    if grads_live:
        return held, acts, logit_part, "all", not_held, grads
    if st.states_total_end + working > held + acts + logit_part:
        return st.states_total_end, working, 0.0, "end", states.transient_params, states.grads
    return held, acts, logit_part, part, not_held, grads


def _held_at_loss(states: ModelStates, grads: float, checkpointed: float) -> float:
    """Model states held at the loss moment (the backward's start): checkpointed blocks' 16-bit weight copies are not
    held; summed in TrainMemory.total's order (params, master, grads, optimizer), so `at` and `peak` agree exactly."""
    return states.params - states.block_casts * checkpointed + states.master_weights + grads + states.optimizer


def _side_stream_reserve(st: _Stage, saved: float, logits: float, buffers: float, checkpointed: float) -> float:
    """Reserved bytes when the gradients fill a side stream's pool (`_grads_on_side_stream`) and the allocated peak
    is the backward's end: the compute stream's pool keeps the high-water mark of the backward's start (the loss
    moment: states, saved activations, the loss's logits), its freed blocks cached for that stream only, beside the
    side stream's pool of every gradient; each with the allocator's allowance."""
    start = _held_at_loss(st.states, 0.0, checkpointed) + saved + logits + buffers
    return (1 + ALLOCATOR_FRACTION) * start + st.states.grads


def _grads_on_side_stream(layout: Layout, framework: str) -> bool:
    """Whether the gradients are reduce-scattered into shards on a stream of their own (FSDP / FSDP2 and the PyTorch
    trainers over them), so that the caching allocator, which keeps a pool per stream, serves them with new memory
    rather than with the activation blocks the compute stream frees as the backward goes."""
    return (layout.sharding_spec.grads and layout.shard_size > 1
            and framework not in PERSISTENT_GRADIENT_BUFFERS)


def required_bytes(total: float, stage: _Stage, allocator: float | None) -> float:
    """`TrainMemory.required` from `LayoutMemory.peak`'s tuple (total, stage, the allocator's allowance at the
    backward peak or None at the optimizer step): the planner's and `train`'s fit test, without building a
    `TrainMemory`."""
    return total - (allocator if allocator is not None else ALLOCATOR_FRACTION * stage.step_allocated)


_STAGES: dict = {}
_CLASS_FIELDS = attrgetter(*(f.name for f in fields(Layout) if f.name not in ("vpp", "schedule")))
"""The layout's fields that its stages' memory depends on: all but the schedule and the interleaving, which only
set the micro-batches in flight (read from the layout itself in `LayoutMemory.peak`)."""


def layout_memory(spec: ModelSpec, layout: Layout, job: TrainJob) -> LayoutMemory:
    """The layout's `LayoutMemory` for `job`. Its distinct stages (`_Stage`) are cached by the spec's id, the layout's
    fields but schedule and interleaving (`_CLASS_FIELDS`) and the job with its recompute mode left out (the stages
    hold the terms of every mode), so that the layouts differing only in those share them."""
    key = (id(spec), _CLASS_FIELDS(layout), job.framework, job.precision, job.optimizer, job.seq, job.finetune,
           job.lora_rank, job.lora_targets, job.offload, job.attention, job.compile, job.loss_chunks,
           job.fused_loss, job.compile_loss, job.norm_type, job.optimizer_in_backward, job.optimizer_impl,
           job.fp8_param_gather, job.grad_reduce_in_fp32, job.lora_dropout, job.kbit_upcast, job.fp8_saved, job.fp8_transpose_cache,
           job.exp_avg_dtype, job.exp_avg_sq_dtype, job.te_quantized, job.saved_input_bytes, job.expert_extras_unfused,
           bf16_layers_key(layout, job),
           job.recompute if recompute_plan(job.recompute).kind == "modules" else None)
    hit = _STAGES.get(key)
    if hit is not None:
        stages = hit[0]
    else:
        stages = remember(_STAGES, key, tuple(
            _stage(spec, layout, stage, job)
            for stage in distinct_stages(spec, stage_layers(layout, spec.num_layers), job_bf16_layers(
                layout, spec.num_layers, job))),
            spec)
    return LayoutMemory(spec, layout, job, stages)


def train_memory(spec: ModelSpec, layout: Layout, job: TrainJob, *, micro_batch: int,
                 num_microbatches: int) -> TrainMemory:
    """Memory on the most loaded GPU (every distinct pipeline stage evaluated), with the job's recompute mode.

    Stages holding the same kinds of blocks, neither first nor last, differ only in the micro-batches in flight,
    which never grow with the stage index: the first of them is the largest, the others are skipped.
    """
    return layout_memory(spec, layout, job).at(micro_batch, num_microbatches)


def _stage(spec: ModelSpec, layout: Layout, stage: int, job: TrainJob) -> _Stage:
    """The micro-batch-independent parts of pipeline stage `stage`."""
    framework, optimizer, offload = job.framework, job.optimizer, job.offload
    states = model_states(spec, layout, stage, job)
    terms = stage_activation_terms(spec, layout, stage, job)
    # FSDP units (torchtitan's wrapping): each block, the token embedding, and the final norm + LM head.
    held = stage_tensors(spec, layout, stage)
    unit = max(states.layer_params, held.embedding, held.head)
    # torchao's float8 all-gather gathers a block's matrices (all but its norms) in fp8, the embedding and head in bf16
    w = states.working_bytes_per_param
    gathered = max(states.layer_params, held.embedding * w, held.head * w) if states.fp8_gathered_params else None
    parts = _state_buffers(layout, states, framework=framework, unit_params=unit, gathered_unit_bytes=gathered)
    if job.finetune == "qlora":
        # The 4-bit base is dequantized to the compute dtype one matrix at a time, in the forward and again for the
        # input gradient (bitsandbytes MatMul4Bit, torchao NF4Tensor): the largest block matrix, one copy.
        largest = max((rt.numel / rt.tensor.experts for rt in held.groups
                       if rt.tensor.is_matrix and rt.tensor.layer is not None),
                      default=0.0)
        parts["nf4_dequant"] = largest * job.element_bytes
    # Optimizer step: torch's foreach AdamW allocates a temporary the size of one state (torch/optim/adam.py
    # _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)), foreach SGD an fp32 copy of the
    # gradients (weight decay); the fused kernels, Megatron's and DeepSpeed's optimizers update in place.
    temp = 0.0
    if job.optimizer_foreach and "optimizer" not in offload and not job.optimizer_in_backward:
        shard = layout.shard_size if layout.sharding_spec.optimizer else 1
        temp = states.optimizer / 2 if optimizer == "adamw" else 4 * states.trainable_params / shard
    if optimizer == "muon" and not job.frozen_base:  # (TrainJob refuses Muon with optimizer offload)
        temp += muon.workspace_bytes(held.groups, tp=layout.tp, etp=layout.expert_tp)  # Newton-Schulz buffers
    ddp = parts.get("ddp_buckets", 0.0)
    step = states.total - states.transient_params + temp + ddp
    step_total = TrainMemory.sum_parts(states.params - states.transient_params, states.master_weights, states.grads,
                                       states.optimizer, 0.0, 0.0, temp + ddp, _runtime(layout),
                                       ALLOCATOR_FRACTION * step)
    return _Stage(index=stage, states=states, states_total=states.total,
                  states_total_no_grads=states.params + states.master_weights + 0.0 + states.optimizer,
                  states_total_end=states.params - states.transient_params + states.master_weights + states.grads
                  + states.optimizer,
                  block_cast=states.block_casts * states.layer_params / max(held.params - held.embedding - held.head,
                                                                            states.layer_params, 1.0),
                  head_grads=states.grads * states.head_params / states.trainable_params
                  if states.trainable_params else 0.0,
                  activations=terms, state_buffers=parts,
                  state_buffer_bytes=sum(parts.values()), step_buffers=temp + ddp, step_allocated=step,
                  step_total=step_total)


def _stage_memory(spec: ModelSpec, layout: Layout, stage: int, job: TrainJob, *, micro_batch: int,
                  num_microbatches: int) -> TrainMemory:
    """Memory on a rank of pipeline stage `stage` (any stage, distinct or not; for checks of the grouping)."""
    lm = LayoutMemory(spec, layout, job, (_stage(spec, layout, stage, job),))
    return lm.at(micro_batch, num_microbatches)
