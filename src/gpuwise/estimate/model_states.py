"""Model states per GPU: parameters, gradients, optimizer states and master weights.

Bytes per parameter follow each framework's precision layout (sources next to `precision_layout`), then
the sharding divides what it shards: ZeRO-1 the optimizer states and master weights, ZeRO-2 also the
gradients, ZeRO-3 / FSDP also the parameters (Rajbhandari et al. 2020, "ZeRO", section 5: with mixed-precision
Adam, 2 + 2 + 12 bytes per parameter; per GPU over N_d ranks DDP 16 P, ZeRO-1 4 P + 12 P / N_d,
ZeRO-2 2 P + 14 P / N_d, ZeRO-3 16 P / N_d). Tensor, pipeline and expert parallelism decide which
parameters a rank holds at all (`stage_tensors`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InvalidArgument
from ..memo import remember
from ..model.params import Tensor, tensor_inventory
from ..model.spec import ModelSpec
from . import muon
from .job import (FRAMEWORKS, HF_TRAINERS, NVFP4_WEIGHT_COPY_BYTES, OPTIMIZERS, PYTORCH_NATIVE, QUANTIZED_PRECISIONS,
                  STATE_DTYPE_BYTES, TrainJob, fp8_kernels_of)
from .layout import Layout
from .pipeline import bf16_layers_key, job_bf16_layers, stage_blocks, stage_layers

LORA_TARGETS = {"q": ("attn_q", "attn_q_a", "attn_q_b"), "k": ("attn_k", "attn_kv_a_mqa"), "v": ("attn_v", "attn_kv_b"),
                "o": ("attn_output",), "gate": ("ffn_gate", "ffn_gate_shexp"), "up": ("ffn_up", "ffn_up_shexp"),
                "down": ("ffn_down", "ffn_down_shexp")}

# bitsandbytes 8-bit optimizers (bitsandbytes/optim/optimizer.py, v0.44+): uint8 states quantized block-wise,
# one fp32 absmax per 256 elements and state; tensors under min_8bit_size = 4096 elements keep fp32 states.
BNB_BLOCK = 256
BNB_MIN_8BIT_SIZE = 4096


@dataclass(frozen=True, slots=True)
class PrecisionLayout:
    """Bytes per trainable parameter of each model state (before sharding)."""

    working: float
    """The copy the matmuls read: 16-bit weights, or fp32 ones under fp32 training."""
    master: float
    """fp32 master weights kept beside a 16-bit working copy (0 when the working copy is the master)."""
    grad: float
    state: float
    """Bytes of one optimizer state element (fp32, or the parameter dtype in pure 16-bit training)."""
    state_sq: float | None = None
    """Bytes of AdamW's second-moment element where it differs from `state` (Megatron's --exp-avg-sq-dtype)."""
    grad_copy: float = 0.0
    """An fp32 copy of 16-bit gradients kept by the optimizer (Megatron fp16), sharded with the optimizer."""
    fp8_cache: float = 0.0
    """fp8 weight copies cached for the step (Transformer Engine on Hopper: weight and its transpose)."""
    persistent_working: bool = True
    """False where the 16-bit copy exists only while a layer runs (FSDP2 all-gathers it from fp32 shards)."""


def precision_layout(framework: str, precision: str, *, te_fp8: bool | None = None, fp8_param_gather: bool = False,
                     grad_reduce_in_fp32: bool = True, fp8_weight_bytes: float = 2.0) -> PrecisionLayout:
    """Per-framework bytes per parameter.

    - fp32: 4 + 4 + fp32 states. bf16-pure: 2 + 2 + states in bf16 (torch optimizers keep the param dtype).
    - megatron bf16: 2 (bf16) + 4 (fp32 main_grad: arguments.py forces accumulate_allreduce_grads_in_fp32 for
      bf16) + 4 master + 8 = 18 B; fp16: 2 + 2 + 4 fp32 grad copy + 4 + 8 = 20 B (docs/source/distrib_optimizer.md:
      20 / 18 / 16 B per parameter, 4 + 16/d and 6 + 12/d with the distributed optimizer).
    - deepspeed: the ZeRO paper's 2 + 2 + 12 (bf16 gradients: grad_accum_dtype defaults to the model dtype).
    - torchtitan / fsdp (FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)): fp32 sharded
      parameters are the master, fp32 gradients, fp32 states; the bf16 copy is all-gathered per layer (or,
      without sharded parameters, torch.autocast's cached casts hold it through the step).
    - hf (Trainer with bf16=True: fp32 weights under torch.autocast): 4 master + 2 cached bf16 casts + 4 + 8.
    - fp8: the framework's bf16 layout, plus Transformer Engine's cached fp8 weight and transpose (2 B per matrix
      element; TE docs, performance_considerations; `fp8_weight_bytes` 1 on Blackwell, which needs no transpose)
      where fp8 is TE's (megatron, deepspeed, hf). torchao's float8
      (torchtitan, FSDP2, torchtune) casts per matmul and keeps no copy: float8 all-gather sends fp8 shards
      and the unsharded fp8 weight lives only while its block runs.
    """
    if precision == "fp32":
        return PrecisionLayout(working=4, master=0, grad=4, state=4)
    if precision == "bf16-pure":
        return PrecisionLayout(working=2, master=0, grad=2, state=2)
    fp16 = precision == "fp16"
    if te_fp8 is None:  # the framework's own fp8 (`TrainJob.fp8_kernels`)
        te_fp8 = fp8_kernels_of(framework) == "te"
    fp8 = fp8_weight_bytes if precision in QUANTIZED_PRECISIONS and te_fp8 else 0.0
    if framework == "megatron":
        # --fp8-param-gather: a block matrix is an fp8 weight and (Hopper) TE's cached fp8 transpose, in place of
        # the bf16 weight and TE's caches (`_model_states` sets their bytes); embeddings and norms stay bf16
        fp8_cache = 0.0 if fp8_param_gather else fp8
        return PrecisionLayout(working=2, master=4, grad=2 if fp16 or not grad_reduce_in_fp32 else 4, state=4,
                               grad_copy=4 if fp16 else 0, fp8_cache=fp8_cache)
    if framework == "deepspeed":
        return PrecisionLayout(working=2, master=4, grad=2, state=4, fp8_cache=fp8)
    if framework in PYTORCH_NATIVE:  # Transformer Engine's layers under FSDP (fp8_backend te) are called without
        # is_first_microbatch, so TE quantizes each weight in every forward and caches none across the step
        return PrecisionLayout(working=2, master=4, grad=4, state=4, persistent_working=False)
    if framework in HF_TRAINERS:
        return PrecisionLayout(working=2, master=4, grad=4, state=4, fp8_cache=fp8, persistent_working=False)
    raise InvalidArgument(f"unknown framework '{framework}'; valid: {', '.join(FRAMEWORKS)}")


def optimizer_state_bytes(optimizer: str, t: Tensor, numel: float, state: float,
                          state_sq: float | None = None) -> float:
    """Optimizer state bytes for `numel` elements of tensor `t` (a rank's share of it); `state_sq`: AdamW's second
    moment's bytes where they differ from the first's."""
    if optimizer == "adamw":
        return (state + (state if state_sq is None else state_sq)) * numel  # exp_avg and exp_avg_sq
    if optimizer == "sgd":
        return state * numel  # momentum buffer
    if optimizer == "adamw-8bit":
        if t.numel < BNB_MIN_8BIT_SIZE:
            return 8 * numel
        return numel * 2 * (1 + 4 / BNB_BLOCK)
    if optimizer == "adafactor":
        # Factored second moment, no first moment (torch.optim.Adafactor; transformers' Adafactor beta1=None):
        # a row and a column vector per matrix, a full vector for 1-D tensors.
        if len(t.shape) < 2:
            return state * numel
        rows, cols = t.shape[0], t.shape[-1]
        share = numel / t.numel
        return state * t.experts * (rows * share + cols)
    if optimizer == "muon":
        # one momentum buffer per 2-D hidden matrix; AdamW's two states for the embeddings, the output layer and
        # the vectors (estimate/muon.py)
        return state * numel if muon.updates(t) else 2 * state * numel
    if optimizer == "none":
        return 0.0
    raise InvalidArgument(f"unknown optimizer '{optimizer}'; valid: {', '.join(OPTIMIZERS)}")


@dataclass(frozen=True, slots=True)
class RankTensor:
    tensor: Tensor
    numel: float
    """Elements of the tensor on this rank (after TP / EP splits)."""
    expert: bool
    count: int = 1
    """Identical tensors (same role and shape, in different blocks of the stage) this entry stands for."""


@dataclass(frozen=True, slots=True)
class StageTensors:
    """The parameters a rank of one pipeline stage holds, grouped (see `rank_tensors`)."""

    groups: tuple[RankTensor, ...]
    params: float
    """Elements on the rank (after TP / EP splits, before ZeRO / FSDP sharding)."""
    largest_layer: float
    """Elements of the rank's largest block."""
    embedding: float
    """Token and position embedding elements on the rank (an FSDP unit of its own)."""
    head: float
    """LM head (and output projection) elements on the rank."""


_STAGE_CACHE: dict = {}
_BY_LAYER: dict = {}


def _inventory_by_layer(spec: ModelSpec) -> tuple[tuple[tuple[Tensor, bool], ...], tuple[tuple[Tensor, ...], ...]]:
    """The tensors outside the blocks, each with whether it sits on the head side (after the blocks), and the
    tensors of each block (cached per spec)."""
    hit = _BY_LAYER.get((id(spec),))
    if hit is not None:
        return hit[0]
    outside, by_layer = [], [[] for _ in range(spec.num_layers)]
    seen_blocks = False
    for t in tensor_inventory(spec):
        if t.layer is not None:
            seen_blocks = True
            by_layer[t.layer].append(t)
        else:
            outside.append((t, t.role in ("output", "proj_out") or seen_blocks))
    return remember(_BY_LAYER, (id(spec),), (tuple(outside), tuple(tuple(x) for x in by_layer)), spec)


def stage_tensors(spec: ModelSpec, layout: Layout, stage: int, bf16: frozenset[int] = frozenset()) -> StageTensors:
    """The parameters a rank of pipeline stage `stage` holds, with its share of each under TP and EP.

    Matrices split over TP (column/row parallel, vocabulary-parallel embeddings and LM head); norms and biases
    are counted whole. Routed experts split over EP and, like Megatron-Core's default expert tensor parallelism,
    over TP. The token embedding sits on the first stage, the final norm and LM head on the last; a tied
    embedding is held by both when pp > 1 (Megatron keeps a copy on the last stage).

    Tensors of the same role and shape in different blocks are one group with a count, so that the memory model
    costs the number of distinct tensors, not the number of layers (results are cached per stage); the blocks in
    `bf16` (kept in bf16 under a quantized recipe) are groups of their own, whose tensors' `layer` is one of them.
    """
    per_stage = stage_layers(layout, spec.num_layers)
    key = (id(spec), layout.tp, layout.ep, layout.expert_tp, per_stage, stage, bf16)
    hit = _STAGE_CACHE.get(key)
    if hit is not None:
        return hit[0]
    return remember(_STAGE_CACHE, key, _stage_tensors(spec, layout, stage, per_stage, bf16), spec)


def _stage_tensors(spec: ModelSpec, layout: Layout, stage: int, per_stage: tuple[int, ...],
                   bf16: frozenset[int] = frozenset()) -> StageTensors:
    outside, by_layer = _inventory_by_layer(spec)
    groups: dict[tuple, list] = {}
    largest = 0.0

    def add(t: Tensor, reps: int) -> float:
        expert = t.experts > 1 or t.role.endswith("_exps")
        tp = layout.expert_tp if expert else layout.tp
        share = 1.0 / tp if t.is_matrix and t.role not in ("pos_embd", "ffn_gate_inp") else 1.0
        if expert:
            share /= layout.ep
        n = t.numel * share
        groups.setdefault((t.role, t.shape, t.experts, t.layer is None, t.layer in bf16), [t, n, expert, 0])[3] += reps
        return n

    last = layout.pp - 1
    for t, head_side in outside:
        if stage == last if head_side else (stage == 0 or (t.role == "token_embd" and spec.tie_word_embeddings
                                                           and stage == last)):
            add(t, 1)
    for layer, reps in stage_blocks(spec, per_stage, stage, bf16):
        largest = max(largest, sum(add(t, reps) for t in by_layer[layer]))
    out = tuple(RankTensor(t, n, expert, count) for t, n, expert, count in groups.values())
    return StageTensors(
        groups=out, params=sum(rt.numel * rt.count for rt in out), largest_layer=largest,
        embedding=sum(rt.numel * rt.count for rt in out if rt.tensor.role in ("token_embd", "pos_embd")),
        head=sum(rt.numel * rt.count for rt in out if rt.tensor.role in ("output", "proj_out")))


def lora_targets(targets: str) -> frozenset[str]:
    """Tensor roles that LoRA adapts ('all-linear' = every attention and MLP matrix, as PEFT's option)."""
    names = list(LORA_TARGETS) if targets == "all-linear" else [x.strip() for x in targets.split(",") if x.strip()]
    unknown = [n for n in names if n not in LORA_TARGETS]
    if unknown or not names:
        raise InvalidArgument(f"unknown LoRA target '{','.join(unknown) or targets}'; valid: all-linear or a comma list "
                              f"of {', '.join(LORA_TARGETS)}")
    return frozenset(role for n in names for role in LORA_TARGETS[n])


_ROW_PARALLEL = ("attn_output", "ffn_down", "ffn_down_exps", "ffn_down_shexp")
"""Matrices whose input tensor parallelism splits (Megatron's row-parallel linears)."""


def adapter_input_bytes(job: TrainJob) -> float:
    """Bytes per input element that each LoRA adapter keeps of its own: PEFT runs `lora_A(dropout(x))` for every
    adapted matrix. With lora_dropout > 0 each call saves its dropped-out input and a 1-byte mask; under autocast
    (transformers with bf16/fp16 mixed precision, fp32 adapters: PEFT's default) each call casts its input to the
    adapter's dtype and autocast casts it back to 16 bits for the matmul, so lora_A keeps a 16-bit copy of its
    own. 0 when lora_A reads the very tensor the frozen matrix reads (dropout 0, adapters in the activation dtype:
    torchtune, PEFT without autocast) and for full fine-tuning."""
    if not job.frozen_base:
        return 0.0
    autocast = job.framework == "hf" and job.precision in ("bf16", "fp16")
    copy = job.element_bytes if (autocast or job.lora_dropout > 0) else 0.0
    return copy + (1.0 if job.lora_dropout > 0 else 0.0)


def adapter_inputs_per_token(spec: ModelSpec, layer: int, job: TrainJob, tp: int = 1) -> float:
    """Bytes per token that block `layer`'s LoRA adapters keep of their own (`adapter_input_bytes` per input
    element of every adapted matrix); a routed expert's adapter sees the top_k tokens routed to it."""
    per_element = adapter_input_bytes(job)
    if per_element == 0:
        return 0.0
    targets = lora_targets(job.lora_targets)
    moe = spec.moe
    total = 0.0
    fused_seen: set[tuple[str, int]] = set()
    for t in _inventory_by_layer(spec)[1][layer]:
        if t.role in targets and t.is_matrix:
            group = _MEGATRON_FUSED.get(t.role) if job.framework == "megatron" else None
            if group is not None:  # one adapter on the fused matrix: one copy of the input they all read
                if (group, t.experts) in fused_seen:
                    continue
                fused_seen.add((group, t.experts))
            width = t.shape[-1] / (tp if t.role in _ROW_PARALLEL else 1)
            total += width * (moe.top_k if t.experts > 1 and moe is not None else 1)
    return total * per_element


_MEGATRON_FUSED = {"attn_q": "linear_qkv", "attn_k": "linear_qkv", "attn_v": "linear_qkv",
                   "ffn_gate": "linear_fc1", "ffn_up": "linear_fc1", "ffn_gate_shexp": "shared_fc1",
                   "ffn_up_shexp": "shared_fc1"}
"""Megatron-Core fuses q, k, v into linear_qkv and gate, up into linear_fc1, and its LoRA (NeMo's
ParallelLinearAdapter, Megatron-Bridge's LoRA) wraps those modules: one adapter, one dropped-out input copy each."""


@dataclass(frozen=True, slots=True)
class ModelStates:
    """Bytes on one GPU (and in host memory, for offloaded states)."""

    params: float
    """Working parameters the matmuls read (16-bit, or fp32 under fp32; quantized base under QLoRA)."""
    master_weights: float
    grads: float
    optimizer: float
    cpu: float
    """Offloaded states in host memory."""
    trainable_params: float
    """Trainable parameters on this rank (before sharding)."""
    params_on_rank: float
    """Parameters held by this rank's stage and TP/EP shard (before ZeRO/FSDP sharding)."""
    layer_params: float
    """Parameters of this rank's largest block (before sharding): FSDP all-gathers one at a time."""
    working_bytes_per_param: float
    grad_bytes_per_param: float
    """Bytes of one (unsharded) gradient element of the trained weights."""
    transient_params: float
    """Part of `params` that lives only through forward and backward (autocast's cached casts, FSDP's
    unsharded copies kept between them): absent at the optimizer step."""
    block_casts: float = 0.0
    """Part of `transient_params`: autocast's 16-bit copies of the blocks' weights (fp32 parameters, unsharded).
    A matmul saves the copy it read for its backward, so a block keeps them only when it is not checkpointed."""
    head_params: float = 0.0
    """Trainable parameters of the output layer on this rank, before sharding (0 with tied embeddings, whose
    gradient is the embedding's): the first gradients a backward makes."""
    expert_trainable_params: float = 0.0
    """Part of `trainable_params` in routed experts: their gradients are reduced over the expert data-parallel
    group (tp x cp x dp / (ep x etp) ranks), not the dense one."""
    expert_params_on_rank: float = 0.0
    """Part of `params_on_rank` in routed experts."""
    cpu_grads: float = 0.0
    """Part of `cpu`: the gradients ZeRO-Offload reduces straight into host memory (DeepSpeed), which the CPU
    optimizer step reads once, where it reads and writes the other host states."""
    fp8_gathered_params: float = 0.0
    """Part of `params_on_rank` the data-parallel all-gathers move in fp8 (1 B) instead of the working dtype:
    torchao's float8 all-gather under FSDP2 (torchtitan's enable_fsdp_float8_all_gather, `--fp8-param-gather`) sends
    the Float8Linear block matrices so; embeddings, norms, the output layer and routed experts stay 16-bit."""

    @property
    def total(self) -> float:
        return self.params + self.master_weights + self.grads + self.optimizer


def model_states(spec: ModelSpec, layout: Layout, stage: int, job: TrainJob) -> ModelStates:
    """Model-state bytes on one rank of pipeline stage `stage` (cached: the planner asks for the same often)."""
    key = (id(spec), layout.tp, layout.ep, layout.expert_tp, stage_layers(layout, spec.num_layers), stage,
           layout.shard_size,
           layout.sharding, job.framework, job.precision, job.optimizer, job.finetune, job.lora_rank, job.lora_targets,
           job.offload, job.optimizer_in_backward, job.fp8_param_gather, job.grad_reduce_in_fp32, job.kbit_upcast,
           job.fp8_transpose_cache, job.exp_avg_dtype, job.exp_avg_sq_dtype, job.te_quantized,
           bf16_layers_key(layout, job))
    hit = _STATES_CACHE.get(key)
    if hit is not None:
        return hit[0]
    return remember(_STATES_CACHE, key, _model_states(spec, layout, stage, job), spec)


_STATES_CACHE: dict = {}


def _model_states(spec: ModelSpec, layout: Layout, stage: int, job: TrainJob) -> ModelStates:
    precision, optimizer, finetune, offload = job.precision, job.optimizer, job.finetune, job.offload
    lay = precision_layout(job.framework, precision, te_fp8=job.te_quantized, fp8_param_gather=job.fp8_param_gather,
                           grad_reduce_in_fp32=job.grad_reduce_in_fp32, fp8_weight_bytes=job.fp8_weight_bytes)
    if job.exp_avg_dtype is not None or job.exp_avg_sq_dtype is not None:  # Megatron's precision-aware optimizer
        lay = replace(lay, state=STATE_DTYPE_BYTES[job.exp_avg_dtype] if job.exp_avg_dtype else lay.state,
                      state_sq=STATE_DTYPE_BYTES[job.exp_avg_sq_dtype] if job.exp_avg_sq_dtype else lay.state)
    # Megatron's fp8 parameters (--fp8-param-gather; TE's fp8_model_init): every block matrix is an fp8 tensor
    # (and, on Hopper, its cached transpose), trained or frozen; embeddings, norms and the output layer stay 16-bit
    fp8_params = job.fp8_param_gather and precision == "fp8" and job.framework == "megatron"
    fp8_lay = replace(lay, working=job.fp8_weight_bytes) if fp8_params else lay
    # torchao's float8 all-gather (FSDP2): the sharded fp32 weights are cast and gathered in fp8, nothing kept
    float8_gather = job.fp8_param_gather and precision == "fp8" and job.framework in PYTORCH_NATIVE \
        and finetune == "full"
    torchao_nvfp4 = precision == "nvfp4" and job.framework == "torchtitan"  # routed experts stay bf16 there
    # no quantized copies of their weights (on the ranks that hold them)
    bf16_layers = job_bf16_layers(layout, spec.num_layers, job)
    adapter_lay = precision_layout("hf", "bf16" if precision != "fp32" else "fp32")  # PEFT: fp32 adapters
    sh = layout.sharding_spec
    dense_n = layout.shard_size
    expert_n = layout.expert_shard_size
    # PyTorch FSDP's parameter offload (FSDP2 CPUOffloadPolicy, FSDP1 CPUOffload; torchtitan, torchtune, plain FSDP,
    # transformers through accelerate) takes the sharded gradients along; ZeRO-Infinity's and Megatron's do not
    fsdp_offload = job.framework in ("fsdp", "torchtitan", "torchtune", "hf")
    held = stage_tensors(spec, layout, stage, bf16_layers)
    targets = lora_targets(job.lora_targets) if finetune != "full" else frozenset()
    frozen_bits = None
    if finetune == "qlora":
        from ..quant.formats import get_weight_format, tensor_bytes

        # keyed by value: the quantizer's inventory and the stage's need not be the same objects (caches expire)
        frozen_bits = {t: b * 8 / t.numel for t, b in tensor_bytes(get_weight_format("nf4-dq"), spec)}
    frozen_working = job.element_bytes

    acc = dict(params=0.0, master=0.0, grads=0.0, optimizer=0.0, cpu=0.0, transient=0.0, casts=0.0)
    block_casts = 0.0
    trainable = expert_trainable = expert_held = fp8_gathered = 0.0
    fused_seen: set[tuple[str, int]] = set()
    for rt in held.groups:
        t, n, count = rt.tensor, rt.numel, rt.count
        shard = expert_n if rt.expert else dense_n
        if rt.expert:
            expert_held += count * n
        elif float8_gather and _fp8_matrix(t):
            fp8_gathered += count * n
        if finetune != "full":
            # Frozen base: stored once in the compute dtype (NF4 + double-quantized scales under QLoRA).
            bits = frozen_bits[t] if frozen_bits is not None else frozen_working * 8
            if fp8_params and _fp8_matrix(t):
                bits = job.fp8_weight_bytes * 8
            if job.kbit_upcast and precision == "fp16" and bits >= 16:
                bits = 32  # prepare_model_for_kbit_training's fp32 casts stay (TRL recasts to 16-bit under bf16 only)
            base = count * n * bits / 8 / (shard if sh.params else 1)
            if "params" in offload and sh.params:
                acc["cpu"] += base
            else:
                acc["params"] += base
            if t.role not in targets:
                continue
            rows, cols = t.shape[0], t.shape[-1]
            group = _MEGATRON_FUSED.get(t.role) if job.framework == "megatron" else None
            if group is not None and (group, t.layer) in fused_seen:
                cols = 0  # one adapter on Megatron's fused matrix: one lora_A for the input q, k, v (gate, up) share
            elif group is not None:
                fused_seen.add((group, t.layer))
            n = job.lora_rank * (rows + cols) * t.experts / (layout.tp if t.is_matrix else 1)  # A (r x in) + B (out x r)
            parts = _tensor_states(adapter_lay, optimizer, t, n, shard, sh, offload, fsdp_offload)
        else:
            # (Megatron builds layers kept in bf16 outside fp8_model_init: bf16 weights under --fp8-param-gather)
            parts = _tensor_states(fp8_lay if _fp8_matrix(t) and t.layer not in bf16_layers else lay, optimizer, t, n,
                                   shard, sh, offload, fsdp_offload)
            quantized = t.layer not in bf16_layers  # (None: not a block's: embeddings, the output layer)
            if lay.fp8_cache and _fp8_matrix(t) and quantized:
                acc["params"] += count * lay.fp8_cache * n
                acc["transient"] += count * lay.fp8_cache * n
            if torchao_nvfp4 and _fp8_matrix(t) and not rt.expert and t.layer is not None and quantized:
                # torchao's NVFP4 linear saves the weight's transposed NVFP4 copy for its input gradient, a tensor of
                # its own that FSDP does not free: held from a block's forward to its backward unless checkpointed
                saved = count * NVFP4_WEIGHT_COPY_BYTES * n
                acc["params"] += saved
                acc["transient"] += saved
                block_casts += saved
        trainable += count * n
        if rt.expert:
            expert_trainable += count * n
        for k, v in parts.items():
            acc[k] += count * v
        if t.layer is not None:
            block_casts += count * parts["casts"]
    if job.optimizer_in_backward and held.params:
        # Each gradient is stepped and freed as soon as it is ready: about one block's gradients live at a time.
        acc["grads"] *= min(1.0, held.largest_layer / held.params)
    cpu_grads = 0.0
    if "optimizer" in offload and job.framework == "deepspeed":
        # ZeRO-Offload reduces each gradient bucket straight into host memory, where the optimizer runs.
        cpu_grads = acc["grads"]
        acc["cpu"] += acc["grads"]
        acc["grads"] = 0.0
    return ModelStates(params=acc["params"], master_weights=acc["master"], grads=acc["grads"], cpu_grads=cpu_grads,
                       optimizer=acc["optimizer"], cpu=acc["cpu"], trainable_params=trainable,
                       params_on_rank=held.params, layer_params=held.largest_layer,
                       # fp8 parameters travel in fp8 (--fp8-param-gather); the transpose is rebuilt locally
                       working_bytes_per_param=(1.0 if fp8_params else lay.working) if finetune == "full"
                       else frozen_working,
                       grad_bytes_per_param=lay.grad if finetune == "full" else adapter_lay.grad,
                       transient_params=acc["transient"], block_casts=block_casts,
                       head_params=held.head if finetune == "full" else 0.0,
                       expert_trainable_params=expert_trainable, expert_params_on_rank=expert_held,
                       fp8_gathered_params=fp8_gathered)


def _fp8_matrix(t: Tensor) -> bool:
    """A block matrix: what Transformer Engine's fp8 modules hold (not embeddings or the output layer)."""
    return t.is_matrix and t.role not in ("token_embd", "pos_embd", "output")


def _tensor_states(lay: PrecisionLayout, optimizer: str, t: Tensor, n: float, shard: int, sh,
                   offload: frozenset[str], grads_follow_params: bool = False) -> dict[str, float]:
    """Bytes of params, master, grads, optimizer, cpu, transient (part of params) and casts (autocast's cached
    16-bit copies, part of transient) for `n` trainable elements; `grads_follow_params`: a parameter offload also
    moves the sharded gradients (FSDP's, not ZeRO-Infinity's)."""
    opt_n = shard if sh.optimizer else 1
    grad_n = shard if sh.grads else 1
    states = (0.0 if optimizer == "none" else optimizer_state_bytes(optimizer, t, n, lay.state, lay.state_sq)
              + lay.grad_copy * n)
    # Where the fp32 weights are the model's own parameters (torch.autocast, FSDP2), they exist without an
    # optimizer and are sharded only with the parameters (ZeRO-1/2 there shard the optimizer states alone).
    own_weights = not lay.persistent_working
    master = lay.master * n if (optimizer != "none" or own_weights) else 0.0
    master_n = (shard if sh.params else 1) if own_weights else opt_n
    transient = 0.0
    if sh.params:
        # At rest the parameters are sharded (DeepSpeed / Megatron: the 16-bit copy; FSDP2: the fp32 one, counted
        # as master). Unsharded 16-bit copies exist only while a unit runs (buffers), or from forward to backward.
        at_rest = lay.working * n / shard if (lay.persistent_working or lay.master == 0) else 0.0
        transient = lay.working * n if sh.keep_unsharded else 0.0
    else:
        at_rest = 0.0 if own_weights else lay.working * n
        transient = lay.working * n if own_weights else 0.0  # autocast's cached casts
    casts = 0.0 if sh.params else transient
    out = dict(params=at_rest + transient, master=master / master_n, grads=lay.grad * n / grad_n,
               optimizer=states / opt_n, cpu=0.0, transient=transient, casts=casts)
    if "optimizer" in offload:
        out["cpu"] += out["optimizer"] + (out["master"] if not own_weights else 0.0)
        out["optimizer"] = 0.0
        if not own_weights:
            out["master"] = 0.0
    if "params" in offload and sh.params:
        # ZeRO-Infinity offload_param / FSDP2 CPUOffloadPolicy (FSDP1 CPUOffload(offload_params=True)): the shards
        # at rest; FSDP copies each sharded gradient to the host as its reduce-scatter produces it (FSDP2's
        # foreach_reduce: `.to(cpu)` when the parameter offloads), whatever the parameters' dtype.
        grads = grads_follow_params or own_weights
        out["cpu"] += at_rest + (out["master"] if own_weights else 0.0) + (out["grads"] if grads else 0.0)
        out["params"] -= at_rest
        if own_weights:
            out["master"] = 0.0
        if grads:
            out["grads"] = 0.0
    return out


def bytes_per_param(*, framework: str, precision: str, optimizer: str, layout: Layout) -> dict[str, float]:
    """Model-state bytes per parameter of a large dense matrix on one GPU (params, master, grads, optimizer).

    The ZeRO paper's arithmetic: deepspeed + bf16 + adamw gives 2 + 4 + 2 + 8 = 16 bytes with DDP and
    16 / N_d with ZeRO-3.
    """
    big = Tensor("ffn_up", 0, (1 << 16, 1 << 16))
    d = _tensor_states(precision_layout(framework, precision), optimizer, big, 1.0, layout.shard_size,
                       layout.sharding_spec, frozenset())
    return {"params": d["params"], "master_weights": d["master"], "grads": d["grads"], "optimizer": d["optimizer"]}
