"""A training job: what every training estimator needs besides the model, the layout and the batch.

`TrainJob` is a frozen value: the memory model (`train_memory`, `layout_memory`, `model_states`, activations), the
step-time model (`step_time`) and the FLOP count (`job_flops`) all take `(spec, layout, job, ...)`, and use it as
(part of) their cache key. `gpuwise train`, the planner, `doctor`, `pick` and the tracker each build one from their
request and pass it down, so that a plan and the `train` run of the same layout evaluate the same job.

The vocabularies are `Literal` types: argparse's choices, the request checks and the docs read the same tuples
(`FRAMEWORKS`, `PRECISIONS`, ...). A field's default here is the default of the matching option of `gpuwise train`
(plan/train.py reads it with `job_default`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..catalog.attention_kernels import package_architectures
from ..errors import InvalidArgument
from ..fields import field_default
from ..quant.formats import MICROSCALING, MICROSCALING_SCALE_BITS
from .recompute import op_policy_keeps_matmuls

Framework = Literal["megatron", "torchtitan", "fsdp", "torchtune", "hf", "unsloth", "deepspeed"]
"""Implementation profiles: Megatron-LM / Megatron-Core, torchtitan, PyTorch FSDP2 or DDP, torchtune, transformers
(+ PEFT / TRL), Unsloth (transformers + PEFT with its own kernels), DeepSpeed ZeRO (docs/training-memory.md)."""
HF_TRAINERS: tuple[str, ...] = ("hf", "unsloth")
"""Frameworks training a transformers model with PEFT under the HF Trainer (fp32 adapters, torch optimizers)."""
Precision = Literal["fp32", "bf16", "fp16", "bf16-pure", "fp8", "nvfp4"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "adafactor", "muon", "none"]
OptimizerImpl = Literal["fused", "foreach"]
Recompute = str
"""none | selective | full | op | layer:N | block:K | uniform:K (estimate/recompute.py; each framework's own
spellings resolve to these in plan/train.py)."""
Finetune = Literal["full", "lora", "qlora"]
Attention = Literal["flash", "unfused"]
MoeDispatcher = Literal["alltoall", "flex"]
FlexBackend = Literal["deepep", "hybridep"]
"""Megatron-Core --moe-flex-dispatcher-backend values gpuwise prices (ncclep is not modelled)."""
Float8Recipe = Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"]
"""torchao's float8 recipes (torchao.float8 Float8LinearRecipeName; torchtitan's float8 converter `recipe_name`:
--float8.recipe_name in its 2025 releases, --quantize.linear.float8.recipe_name until its configs became Python
dataclasses in 2026-02, rowwise only since 2026-04-27)."""
CpCommType = Literal["p2p", "allgather", "a2a"]
CudaGraphScope = Literal["full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess"]
"""Megatron-Core's --cuda-graph-scope values gpuwise reads (megatron/core/transformer/enums.py CudaGraphScope; mamba
is not modelled)."""
SdpaBackend = Literal["flash", "cudnn"]
AttnImplementation = Literal["sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4", "triton"]
FlopsConvention = Literal["causal", "full"]
NormType = Literal["rmsnorm", "fused_rmsnorm", "compiled_rmsnorm"]
OffloadTarget = Literal["optimizer", "params", "activations"]
StateDtype = Literal["fp32", "bf16", "fp16", "fp8"]
QUANTIZED_PRECISIONS = ("fp8", "nvfp4")
"""Training precisions whose block GEMMs run in a narrow format from 16-bit operands quantized on the fly."""
STATE_DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
NVFP4_ELEMENT_BYTES = (MICROSCALING["nvfp4"][0] + MICROSCALING_SCALE_BITS["nvfp4"] / MICROSCALING["nvfp4"][1]) / 8
"""An NVFP4 tensor in 1 x 16 blocks: 4-bit E2M1 values and one E4M3 scale byte per 16 (Transformer Engine's
NVFP4BlockScaling and torchao's NVFP4 training keep activations and gradients so; the fp32 per-tensor scale is
negligible): what each saved linear input costs."""
NVFP4_WEIGHT_COPY_BYTES = 0.5 + 1 / 256
"""One NVFP4 copy of a weight, per element: 4-bit values and one E4M3 scale per 16 x 16 block (the recipes' 2D
weight scaling)."""
NVFP4_WEIGHT_CACHE_BYTES = 2 * NVFP4_WEIGHT_COPY_BYTES
"""Transformer Engine's cached NVFP4 weight, per element: a rowwise copy for the forward GEMM and a columnwise
(transposed) one for the input gradient, NVFP4 GEMMs being TN-only."""

FRAMEWORKS: tuple[str, ...] = get_args(Framework)
PRECISIONS: tuple[str, ...] = get_args(Precision)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
OFFLOADABLE_OPTIMIZERS: tuple[str, ...] = tuple(o for o in OPTIMIZERS if o not in ("none", "muon"))
"""Optimizers whose states CPU offload can move (ZeRO-Offload's, FSDP's CPUOffloadPolicy's): not Muon, whose
Newton-Schulz iterations are GPU matmuls that no framework runs on the host, and not `none`."""
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)
OWN_FUSED_OPTIMIZERS: tuple[str, ...] = ("megatron", "deepspeed")
"""Frameworks that step with their own fused, in-place optimizers (Apex / Transformer Engine FusedAdam, DeepSpeed's
FusedAdam), not torch.optim."""
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
"""The modes the planner and doctor try, cheapest in time first: recomputation only adds work (the planner's pruning
relies on the order). Where the framework has per-op selective checkpointing (torchtitan), "selective" is it."""
PYTORCH_NATIVE: tuple[str, ...] = ("torchtitan", "fsdp", "torchtune")
"""Frameworks built on FSDP2 / DDP and eager PyTorch modules: fp32 sharded masters, torchao float8."""


def pipeline_keeps_unsharded(framework: str, pp: int, sharded_params: bool) -> bool:
    """FSDP2 under torch.distributed.pipelining (the PyTorch-native frameworks with --pp > 1) keeps each stage's
    parameters unsharded through the step's micro-batches and syncs gradients once: torchtitan applies
    fully_shard(reshard_after_forward=False) when pipelining ("to avoid per-microbatch all-gathers, which can be
    expensive and non-overlapped", torchtitan/parallelisms/parallelize_llama.py apply_fsdp @9dec370), and the
    schedule calls set_requires_gradient_sync only on the last backward. One gather and one reduce-scatter per step;
    the memory model holds the unsharded stage and its accumulated gradients."""
    return sharded_params and pp > 1 and framework in PYTORCH_NATIVE


FSDP2_OFFLOAD_ALL: tuple[str, ...] = ("torchtitan", "fsdp")
"""Frameworks whose only offload is FSDP2's CPUOffloadPolicy: parameters, their gradients and the optimizer step on
the host together, no optimizer-only variant (torch.distributed.fsdp.CPUOffloadPolicy)."""
TE_FP8: tuple[str, ...] = ("megatron", "deepspeed", "hf")
"""Frameworks whose fp8 training is Transformer Engine's (fp8 weight caches, fp8 saved linear inputs)."""
Fp8Backend = Literal["te", "torchao"]
FP8_BACKENDS: tuple[str, ...] = get_args(Fp8Backend)


def routed_experts_16bit(framework: str, quantized: bool) -> bool:
    """Whether an MoE's routed experts keep 16-bit GEMMs, inputs and weights under a quantized recipe (`quantized`:
    fp8 or NVFP4 GEMMs elsewhere): torchtitan's float8, MXFP8 and NVFP4 converters swap its Linear modules only
    (torchtitan components/quantization/float8.py Float8LinearConverter.convert traverses Linear.Config), and its
    grouped experts are quantized only by a converter of their own (Float8GroupedExpertsConverter, opt-in), which
    gpuwise does not model. Transformer Engine under Megatron-Core quantizes the experts' GEMMs too."""
    return framework == "torchtitan" and quantized


def sdpa_prefers_cudnn(gpu) -> bool:
    """Whether PyTorch's SDPA (2.11 and later, whose wheels bundle cuDNN past the 9.15 guard) tries cuDNN attention
    first on `gpu` by default: the data-center Hopper and Blackwell parts, compute capability 9.x and 10.x (sm90,
    sm100, sm103: H100, H200, H20, B200, GB200, B300, GB300; 2.10-2.12 checked minor 0 or 3, 2.13 only the major), not
    the sm12x GeForce, workstation and GB10 Blackwell chips. The catalog has no compute capability: the
    architecture and the data-center segment stand for it."""
    arch = gpu.architecture_family
    return gpu.vendor == "nvidia" and (arch == "Hopper" or (arch in ("Blackwell", "Blackwell Ultra")
                                                            and gpu.segment == "datacenter"))


def _package_runs_on(package: str, gpu) -> bool:
    arch = gpu.architecture_family
    return (gpu.vendor == "nvidia" and arch in package_architectures(package)
            and (arch == "Hopper" or gpu.segment == "datacenter"))


def attn_package_problem(attn_implementation: str | None, gpu) -> str | None:
    """Why `attn_implementation` cannot run on `gpu` (a catalog GPU), or None: FlashAttention-3 runs on Hopper,
    FlashAttention-4 is priced on data-center Blackwell (its paper's B200) (attention_kernels.toml [package.*])."""
    if attn_implementation not in ATTN_PACKAGES or _package_runs_on(attn_implementation, gpu):
        return None
    archs = package_architectures(attn_implementation)
    where = ("Hopper GPUs (sm90: H100, H200, H800, H20)" if archs == ("Hopper",)
             else "data-center Blackwell GPUs (sm100/sm103: B200, GB200, B300, GB300)")
    sibling = next((p for p in ATTN_PACKAGES if p != attn_implementation and _package_runs_on(p, gpu)), None)
    instead = f"use {sibling} there" if sibling else "use flash_attention_2 or sdpa there"
    return (f"--attn-implementation {attn_implementation}: gpuwise prices it on {where} only, and {gpu.name} is "
            f"{gpu.architecture or 'another architecture'}; {instead}")


def fp8_kernels_of(framework: str, backend: str | None = None) -> str:
    """Whose kernels run a job's fp8: `backend` when given, else the framework's own (Transformer Engine for
    `TE_FP8`, torchao's float8 for the PyTorch-native trainers)."""
    return backend or ("te" if framework in TE_FP8 else "torchao")
FINETUNE: tuple[str, ...] = get_args(Finetune)
ATTENTION: tuple[str, ...] = get_args(Attention)
CONVENTIONS: tuple[str, ...] = get_args(FlopsConvention)
DISPATCHERS: tuple[str, ...] = get_args(MoeDispatcher)
FLEX_BACKENDS: tuple[str, ...] = get_args(FlexBackend)
FLOAT8_RECIPES: tuple[str, ...] = get_args(Float8Recipe)
CP_COMM_TYPES: tuple[str, ...] = get_args(CpCommType)
SDPA_BACKENDS: tuple[str, ...] = get_args(SdpaBackend)
ATTN_IMPLEMENTATIONS: tuple[str, ...] = get_args(AttnImplementation)
ATTN_PACKAGES: tuple[str, ...] = ("flash_attention_3", "flash_attention_4")
"""attn_implementation values priced as a share of the device's best kernel (attention_kernels.toml [package.*])."""
OFFLOAD_TARGETS: tuple[str, ...] = get_args(OffloadTarget)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainJob:
    """What is trained and how, independent of the parallel layout and the batch."""

    framework: Framework
    """Implementation profile whose memory layout and kernels are modelled (resolved: never None here)."""
    precision: Precision = "bf16"
    """bf16/fp16: mixed precision with fp32 master weights; bf16-pure: bf16 weights and optimizer states;
    fp8: the framework's bf16 layout with fp8 GEMMs (Transformer Engine); nvfp4: the same with NVFP4 GEMMs
    (Transformer Engine's NVFP4BlockScaling recipe, torchao's NVFP4 training on Blackwell)."""
    optimizer: Optimizer = "adamw"
    """AdamW, 8-bit AdamW (bitsandbytes), SGD with momentum, Adafactor, or none (no optimizer states)."""
    seq: int = 4096
    """Tokens per sequence."""
    recompute: Recompute = "none"
    """Activation checkpointing: none; selective (Megatron: the attention core; torchtitan: per-op, as op); full
    (every block: its input kept, its forward run again); op (torchtitan's per-op policy: block input, every other
    matmul output and the attention output kept); layer:N (every N-th block full, torchtitan's
    selective_ac_option=N); block:K (the first K blocks of each stage full, Megatron --recompute-method block);
    uniform:K (groups of K blocks, Megatron --recompute-method uniform)."""
    finetune: Finetune = "full"
    """full: every weight trained; lora/qlora: adapters on a frozen base (qlora: an NF4 base)."""
    lora_rank: int = 16
    """LoRA rank."""
    lora_targets: str = "all-linear"
    """all-linear (PEFT's option) or a comma list of q,k,v,o,gate,up,down."""
    kbit_upcast: bool = False
    """QLoRA through PEFT's prepare_model_for_kbit_training (TRL's SFTTrainer and the PEFT/QLoRA recipes call it):
    every weight left unquantized is cast to fp32 (TRL and qlora.py cast the embeddings and LM head back under
    bf16; norms stay fp32), so the fp32 norm weights promote the residual stream and the 4-bit matmuls' outputs
    (bitsandbytes returns its input's dtype) to fp32."""
    lora_dropout: float = 0.0
    """Dropout on each adapter's input (PEFT LoraConfig lora_dropout, default 0.0: an nn.Identity, nothing kept);
    above 0 every adapted matrix keeps its own dropped-out copy of its input and a 1-byte mask."""
    offload: frozenset[OffloadTarget] = frozenset()
    """States kept in host memory: optimizer (ZeRO-Offload), params (ZeRO-Infinity / FSDP2 CPUOffloadPolicy),
    activations."""
    attention: Attention = "flash"
    """flash (fused kernel, no score matrix: FlashAttention / cuDNN / SDPA) or unfused (scores, softmax and dropout
    in memory: Megatron-LM before --use-flash-attn, eager attention)."""
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives overlapped with the split GEMMs (Megatron-LM --tp-comm-overlap)."""
    overlap_p2p_communication: bool = False
    """Pipeline sends and receives of each model chunk run beside the next chunk's compute, as Megatron's
    interleaved schedule does with overlap_p2p_comm (Megatron-LM's default since 2023-10): only what exceeds that
    chunk's forward or backward is charged. Off by default: hiding every send made the calibration part's
    published Megatron runs too fast (docs/performance.md, "Overlapped pipeline sends"), so gpuwise waits for each
    send/recv unless asked; other schedules and frameworks always wait."""
    moe_token_dispatcher: MoeDispatcher = "alltoall"
    """Megatron-Core --moe-token-dispatcher-type: alltoall (NCCL all-to-all: every routed copy of a token crosses
    the network on its own) or flex (DeepEP / HybridEP: a token crosses to each destination node once and is
    forwarded to that node's experts over NVLink)."""
    moe_flex_dispatcher_backend: FlexBackend | None = None
    """Megatron-Core --moe-flex-dispatcher-backend, the flex dispatcher's kernels: deepep (DeepEP's normal kernels,
    Megatron-Core's default) or hybridep (DeepEP's HybridEP). Across nodes each is priced at its own measured rate
    (data/devices.toml [network.ep_dispatch]). None: deepep under the flex dispatcher."""
    cp_comm_type: CpCommType | None = None
    """How context-parallel ranks exchange keys and values (Megatron-Core --cp-comm-type): p2p (a ring, each step's
    chunk sent while the previous one is attended to), allgather (the whole context's K/V gathered before attention
    and their gradients reduce-scattered after it: PyTorch's context_parallel default rotate method, which
    torchtitan uses) or a2a (DeepSpeed-Ulysses: all-to-alls switch q, k, v and the output between sequence and head
    sharding). None: the framework's default (p2p for Megatron, allgather otherwise)."""
    sdpa_backend: SdpaBackend | None = None
    """The backend PyTorch's scaled_dot_product_attention runs (torch.nn.attention.SDPBackend): flash (the
    FlashAttention-2 kernels) or cudnn (cuDNN fused attention, the device's best kernel on Hopper and Blackwell).
    None: the framework's own choice (`sdpa_runs_flash`). Megatron runs Transformer Engine's attention instead."""
    attn_implementation: AttnImplementation | None = None
    """Which library a PyTorch trainer's attention calls, in transformers' own words (config attn_implementation):
    sdpa (PyTorch's scaled_dot_product_attention) or flash_attention_2 (the flash-attn package: Axolotl's
    `flash_attention: true`, llm-foundry's attn_impl flash). The same FlashAttention-2 kernels on NVIDIA GPUs; on ROCm
    the package is Composable Kernel's build and SDPA's flash backend AOTriton, at different rates (devices.toml).
    triton: the package's Triton kernels of 2022 (flash_attn_triton.py), which llm-foundry ran as attn_impl triton (its
    default through v0.6), at a share of FlashAttention-2's rate (attention_kernels.toml: a proxy, as no measurement of
    that kernel is published). flash_attention_3 (FlashAttention-3, Hopper) and flash_attention_4 (FlashAttention-4,
    data-center Blackwell): the newer packages' kernels, at shares of cuDNN's rate (attention_kernels.toml [package.*]:
    FA3's from its paper, FA4's forward from its paper's claim, its backward fitted to a published kernel benchmark).
    None: sdpa."""
    moe_a2a_overlap: bool = False
    """Expert-parallel dispatch and combine hidden behind another micro-batch's compute (Megatron-Core
    --overlap-moe-expert-parallel-comm, DeepSeek-V3's dual micro-batch overlap): each all-to-all hides behind the part
    of the other micro-batch's layer that Megatron-Core's combined 1F1B schedule runs beside it."""
    delay_wgrad_compute: bool = False
    """Megatron-Core --delay-wgrad-compute (with --moe-a2a-overlap): the experts' weight gradients run after their
    dispatch backward is issued, so that all-to-all waits only for their input gradients."""
    num_layers_at_start_in_bf16: int = 0
    """Under fp8 or NVFP4, the first N transformer layers keep their GEMMs in bf16 (Megatron-Core
    --first-last-layers-bf16 --num-layers-at-start-in-bf16 N; NVIDIA's NVFP4 paper keeps the first two)."""
    num_layers_at_end_in_bf16: int = 0
    """Under fp8 or NVFP4, the last N transformer layers keep their GEMMs in bf16 (Megatron-Core
    --num-layers-at-end-in-bf16 N; torchtitan's bf16-tail NVFP4 configs: the last ceil(0.15 L) layers)."""
    moe_permute_fusion: bool = False
    """Megatron-Core --moe-permute-fusion (TransformerConfig moe_permute_fusion; default False): Transformer Engine's
    fused permute and unpermute kernels move each routed copy once each way; without them the copies are gathered and
    summed back with PyTorch's index ops (`layer_ops.UNFUSED_PERMUTE_BYTES`), as in the PyTorch-native trainers."""
    use_transformer_engine_op_fuser: bool = False
    """Megatron-Core --use-transformer-engine-op-fuser (TransformerConfig use_transformer_engine_op_fuser, on main after
    core_v0.17.0, e.g. 2a75ac1; default False; not with expert tensor parallelism): the routed experts run as
    Transformer Engine's fused grouped-MLP ops, their biases and clamped gated activation inside the fused kernels;
    without it an expert bias and a clamped activation are PyTorch ops of their own
    (`layer_ops.MEGATRON_EXPERT_BIAS_BYTES`, `MEGATRON_GLU_CLAMP_BYTES`; gpt-oss)."""
    moe_pad_expert_input_to_capacity: bool = False
    """Megatron-Core --moe-pad-expert-input-to-capacity (with --moe-expert-capacity-factor): each expert's input is
    dropped or padded to its capacity, so the dispatch has static shapes and no host wait for the token counts. gpuwise
    routes evenly, so at capacity factor 1 the experts' work is unchanged."""
    cuda_graph_scope: frozenset[CudaGraphScope] = frozenset()
    """What Megatron-Core replays as CUDA graphs (--cuda-graph-scope: full_iteration, or Transformer Engine scoped
    graphs; `CudaGraphScope`); empty: every kernel launched eagerly. What removes the MoE layers' host wait is
    `step_time.moe_host_syncs`'s to say."""
    flops_convention: FlopsConvention = "causal"
    """Attention FLOPs: causal (half the score matrix) or full (what FlopCounterMode counts)."""
    compile: bool = False
    """torch.compile on the blocks (torchtitan training.compile, torchtune compile): the partitioner recomputes
    pointwise ops in the backward instead of saving their outputs."""
    norm_type: NormType = "rmsnorm"
    """torchtitan's model.norm_type: rmsnorm (eager: the fp32 upcast and the normalized tensor kept), fused_rmsnorm
    (its Triton kernel) or compiled_rmsnorm (torch.compile on the norm alone), which keep the input and the fp32
    rstd."""
    compile_loss: bool = False
    """torchtitan: the cross-entropy is compiled too (compile.components includes "loss"): it keeps the 16-bit
    logits and writes their 16-bit gradient in one fused kernel, no fp32 copy (torchtune's compile is modelled by
    `compile` alone)."""
    loss_chunks: int = 1
    """Cross-entropy over this many chunks of the sequence, each upcast to fp32 in turn (torchtune's
    CEWithChunkedOutputLoss uses 8); 1: the whole fp32 logits at once."""
    fused_loss: bool = False
    """The LM head and the loss run chunk by chunk, each chunk's backward right after it (torchtitan's
    ChunkedLossWrapper, Liger's and Cut Cross-Entropy's fused linear cross-entropy): no logits are kept, one chunk's
    are alive at a time (loss_chunks chunks, 8 when not given)."""
    fp8_param_gather: bool = False
    """Megatron --fp8-param-gather (Megatron-Bridge fp8_param_gather): the 16-bit working weights are replaced by fp8
    ones (1 B) all-gathered in fp8; Transformer Engine caches only their transpose (1 B) beside them."""
    grad_reduce_in_fp32: bool = True
    """Megatron's gradient buffer in fp32 (Megatron-LM forces accumulate_allreduce_grads_in_fp32 for bf16); False:
    bf16 gradient buffers (MCore DDP grad_reduce_in_fp32=False, as Megatron-Bridge's performance recipes set)."""
    optimizer_impl: OptimizerImpl | None = None
    """How torch.optim's AdamW / SGD step (torchtitan's optimizer.implementation; the HF Trainer's --optim
    adamw_torch_fused or adamw_torch): fused (one kernel reads and writes each state once, in place) or foreach (a
    kernel per operation over the parameter list: AdamW makes 20 element reads and writes per parameter instead of 7,
    and holds a temporary the size of one state). None: the framework's default, fused for torchtitan, torchtune
    (its recipes set fused: True) and the HF Trainer (adamw_torch_fused, transformers with torch 2.8+), foreach for
    plain PyTorch (fsdp: torch.optim's default). Megatron and DeepSpeed run their own fused optimizers."""
    optimizer_in_backward: bool = False
    """Each parameter's optimizer step runs as soon as its gradient is ready, which is then freed (torchtune
    optimizer_in_bwd): no step-wide gradients."""
    exp_avg_dtype: StateDtype | None = None
    """Megatron --exp-avg-dtype (with --use-precision-aware-optimizer; Megatron-Bridge's exp_avg_dtype): the dtype of
    AdamW's first moment; None: the framework's (fp32 under mixed precision)."""
    exp_avg_sq_dtype: StateDtype | None = None
    """Megatron --exp-avg-sq-dtype: the dtype of AdamW's second moment; None: the framework's."""
    activation_func_fp8_input_store: bool = False
    """Megatron --activation-func-fp8-input-store: the MLP activation function (SwiGLU) keeps its input in fp8 for
    the backward (1 B instead of 2; Megatron's fused bias-SwiGLU casts it whatever the training precision)."""
    fp8_dot_product_attention: bool = False
    """Megatron --fp8-dot-product-attention (Transformer Engine's fp8 fused attention, NVTE_FP8_DPA): under fp8
    attention reads and writes fp8 q, k, v and output, which it saves (1 B each). Time stays at the 16-bit
    attention rate: no fp8 attention kernel curve is in the catalog yet."""
    fp8_backend: Fp8Backend | None = None
    """Whose fp8 training this is (`fp8_kernels`): Transformer Engine's ("te") or torchao's float8 ("torchao");
    None: the framework's own."""
    float8_recipe: Float8Recipe | None = None
    """torchao's float8 recipe (`Float8Recipe`): tensorwise (one scale per tensor), rowwise or rowwise_with_gw_hp
    (per-row scales). What gpuwise prices differently: under tensorwise torchtitan's TP all-gathers move fp8
    (torchao's float8 tensor-parallel styles, which torchtitan applied until 2026-04-27), and only tensorwise can
    all-gather fp8 weights under FSDP (--fp8-param-gather); the rowwise GEMMs and casts are priced as tensorwise's.
    None: the framework's default (`torchao_float8_recipe`)."""
    fp8_transpose_cache: bool = True
    """Transformer Engine keeps a transposed fp8 copy beside each fp8 weight: Hopper's fp8 tensor cores take only
    K-major (TN) operands. False on Blackwell, whose fp8 GEMMs take either layout (TE's non_tn_fp8_gemm_supported):
    the fp8 weight alone. Set from the GPU, not an option."""

    def __post_init__(self) -> None:
        for name, value, valid in (("--framework", self.framework, FRAMEWORKS), ("--precision", self.precision, PRECISIONS),
                                   ("--optimizer", self.optimizer, OPTIMIZERS),
                                   ("--finetune", self.finetune, FINETUNE), ("--attention", self.attention, ATTENTION),
                                   ("--flops-convention", self.flops_convention, CONVENTIONS),
                                   ("--moe-token-dispatcher", self.moe_token_dispatcher, DISPATCHERS),
                                   ("--moe-flex-dispatcher-backend", self.moe_flex_dispatcher_backend or "deepep",
                                    FLEX_BACKENDS),
                                   ("--cp-comm-type", self.cp_comm_type or "p2p", CP_COMM_TYPES),
                                   ("--sdpa-backend", self.sdpa_backend or "flash", SDPA_BACKENDS),
                                   ("--fp8-backend", self.fp8_backend or "te", FP8_BACKENDS),
                                   ("--exp-avg-dtype", self.exp_avg_dtype or "fp32", STATE_DTYPE_BYTES),
                                   ("--exp-avg-sq-dtype", self.exp_avg_sq_dtype or "fp32", STATE_DTYPE_BYTES)):
            if value not in valid:
                raise InvalidArgument(f"{name}: unknown value '{value}'; valid: {', '.join(valid)}")
        if self.float8_recipe is not None:
            if self.float8_recipe not in FLOAT8_RECIPES:
                raise InvalidArgument(f"--float8-recipe: unknown value '{self.float8_recipe}'; valid: "
                                      f"{', '.join(FLOAT8_RECIPES)}")
            if self.precision != "fp8" or self.fp8_kernels != "torchao":
                raise InvalidArgument(f"--float8-recipe {self.float8_recipe} is torchao's float8 recipe: it needs "
                                      "--precision fp8 with torchao's float8 (torchtitan, fsdp, torchtune, or "
                                      "--fp8-backend torchao)")
        if self.fp8_param_gather and self.torchao_float8_recipe not in (None, "tensorwise"):
            raise InvalidArgument(f"--fp8-param-gather: torchao all-gathers fp8 weights under the tensorwise recipe "
                                  f"only, and this job's is {self.torchao_float8_recipe} (torchtitan's default and "
                                  "only float8 recipe since 2026-04-27 is rowwise): add --float8-recipe tensorwise for "
                                  "an older torchtitan, torchao or torchtune")
        if self.moe_flex_dispatcher_backend is not None and self.moe_token_dispatcher != "flex":
            raise InvalidArgument(f"--moe-flex-dispatcher-backend {self.moe_flex_dispatcher_backend} chooses the flex "
                                  "dispatcher's kernels: add --moe-token-dispatcher flex")
        if self.optimizer_impl is not None:
            if self.optimizer_impl not in OPTIMIZER_IMPLS:
                raise InvalidArgument(f"--optimizer-impl: unknown value '{self.optimizer_impl}'; valid: "
                                      f"{', '.join(OPTIMIZER_IMPLS)}")
            if self.optimizer not in ("adamw", "sgd"):
                raise InvalidArgument(f"--optimizer-impl chooses torch.optim's AdamW or SGD implementation (fused or "
                                      f"foreach); {self.optimizer} has one: drop it")
            if self.framework in OWN_FUSED_OPTIMIZERS:
                raise InvalidArgument(f"--optimizer-impl chooses torch.optim's implementation, and {self.framework} "
                                      "steps with its own fused optimizer: drop it, or pass --framework torchtitan, "
                                      "fsdp, torchtune or hf")
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise InvalidArgument(f"--attn-implementation: unknown value '{self.attn_implementation}'; valid: "
                                  f"{', '.join(ATTN_IMPLEMENTATIONS)}")
        if self.attn_implementation is not None and self.framework == "megatron":
            raise InvalidArgument("--attn-implementation chooses a PyTorch trainer's attention library, and the "
                                  "framework is megatron, which runs Transformer Engine's attention: pass --framework "
                                  "fsdp, hf, deepspeed or unsloth with it")
        if (self.flash_attn_package or self.attn_package) and self.framework in ("torchtitan", "torchtune"):
            closest = ("--sdpa-backend cudnn chooses cuDNN's attention, the closest to it" if self.attn_package
                       else "--sdpa-backend flash chooses SDPA's FlashAttention-2 kernels")
            raise InvalidArgument(f"--attn-implementation {self.attn_implementation}: {self.framework} calls PyTorch's "
                                  f"SDPA, not the flash-attn package ({closest})")
        if (self.flash_attn_package or self.attn_package) and self.sdpa_backend is not None:
            raise InvalidArgument(f"--sdpa-backend chooses PyTorch SDPA's backend, and --attn-implementation "
                                  f"{self.attn_implementation} calls the flash-attn package instead of SDPA: give one "
                                  "of them")
        if self.sdpa_backend is not None and self.framework == "megatron":
            raise InvalidArgument("--sdpa-backend is PyTorch's SDPA backend, and the framework is megatron, which "
                                  "runs Transformer Engine's attention: pass --framework torchtitan, fsdp, torchtune "
                                  "or hf with it")
        from .recompute import recompute_plan

        if "moe_act" in recompute_plan(self.recompute).modules and self.framework != "megatron":  # raises if unknown
            raise InvalidArgument("--recompute-modules moe_act is Megatron-Core's (its TEGroupedMLP): it needs "
                                  f"--framework megatron (got {self.framework})")
        if not isinstance(self.lora_dropout, (int, float)) or not 0.0 <= self.lora_dropout < 1.0:
            raise InvalidArgument(f"--lora-dropout must be a probability from 0 up to (not including) 1, "
                                  f"got {self.lora_dropout!r}")
        if not isinstance(self.loss_chunks, int) or not 1 <= self.loss_chunks <= 1 << 16:
            raise InvalidArgument(f"--loss-chunks must be a whole number from 1 to 65536, got {self.loss_chunks!r}")
        if self.optimizer == "muon" and "optimizer" in self.offload:  # see OFFLOADABLE_OPTIMIZERS
            raise InvalidArgument("--optimizer muon orthogonalizes its updates with GPU matmuls and no framework runs "
                                  "its step on the CPU: drop the optimizer offload (FSDP2's parameter offload, "
                                  "CPUOffloadPolicy, moves the step to the host too) or use adamw")
        bad = sorted(o for o in self.offload if o not in OFFLOAD_TARGETS)
        if bad:
            raise InvalidArgument(f"--offload: unknown target '{bad[0]}'; valid: {', '.join(OFFLOAD_TARGETS)}")

    @property
    def torchao_float8_recipe(self) -> str | None:
        """torchao's float8 recipe this fp8 job runs, None where the fp8 is not torchao's. Unless told, the
        framework's default: rowwise for torchtitan (its float8 converter's default `recipe_name` and only recipe
        since 2026-04-27, torchtitan #3127; tensorwise before), tensorwise elsewhere (torchao's
        Float8LinearConfig())."""
        if self.precision != "fp8" or self.fp8_kernels != "torchao":
            return None
        return self.float8_recipe or ("rowwise" if self.framework == "torchtitan" else "tensorwise")

    @property
    def flex_backend(self) -> str | None:
        """The flex dispatcher's kernels (Megatron-Core's default deepep unless told), None under alltoall."""
        if self.moe_token_dispatcher != "flex":
            return None
        return self.moe_flex_dispatcher_backend or "deepep"

    @property
    def element_bytes(self) -> float:
        """Bytes of one activation (and 16-bit working) element: 4 under fp32, else 2 (fp8 training keeps its
        activations and working weights in bf16; only the GEMM inputs are cast to fp8)."""
        return 4.0 if self.precision == "fp32" else 2.0

    @property
    def stream_bytes(self) -> float:
        """Bytes of one residual-stream / MLP activation element: 4 under fp32 or a kbit-upcast QLoRA, else the
        activation element size."""
        return 4.0 if self.kbit_upcast else self.element_bytes

    @property
    def torch_optimizer_impl(self) -> OptimizerImpl | None:
        """`optimizer_impl` resolved to the framework's default: fused or foreach where torch.optim's AdamW or SGD
        steps, None where there is no such choice (other optimizers; Megatron's and DeepSpeed's own)."""
        if self.optimizer not in ("adamw", "sgd") or self.framework in OWN_FUSED_OPTIMIZERS:
            return None
        if self.optimizer_impl is not None:
            return self.optimizer_impl
        return "foreach" if self.framework == "fsdp" else "fused"

    @property
    def optimizer_foreach(self) -> bool:
        """Whether the optimizer steps with torch.optim's foreach kernels (`torch_optimizer_impl`)."""
        return self.torch_optimizer_impl == "foreach"

    @property
    def frozen_base(self) -> bool:
        """LoRA / QLoRA: the base weights get no gradients (no weight-gradient GEMMs, no optimizer states)."""
        return self.finetune != "full"

    @property
    def fp8_weight_cache(self) -> bool:
        """fp8 weights (and their transposes) are made once per optimizer step and reused by every micro-batch:
        Megatron-Core passes is_first_microbatch to Transformer Engine's layers, which quantize each weight on the
        first micro-batch and cache it, and fp8 parameters (--fp8-param-gather) are quantized once, at the optimizer
        step (--disable-parameter-transpose-cache, which gpuwise takes with fp8 parameters only, rebuilds the
        transposes in each backward: `fp8_transpose_cache`). torchao's float8 (torchtitan) quantizes them in every
        forward and backward."""
        return self.framework == "megatron"

    @property
    def te_fp8(self) -> bool:
        """fp8 training as Transformer Engine does it (cached fp8 weights, fp8 saved linear inputs); torchao's float8
        (torchtitan, FSDP2, torchtune) keeps bf16 weights and saves bf16 inputs."""
        return self.precision == "fp8" and self.fp8_kernels == "te"

    @property
    def op_keeps_matmuls(self) -> bool:
        """torchtitan's per-op checkpointing keeps matmul outputs (not NVFP4's opaque linears:
        `recompute.op_policy_keeps_matmuls`)."""
        return op_policy_keeps_matmuls(self.framework, self.precision)

    def bf16_layers(self, num_layers: int) -> frozenset[int]:
        """The transformer layers whose GEMMs stay in bf16 under fp8 or NVFP4 (empty otherwise)."""
        if not self.quantized_gemms:
            return frozenset()
        end = max(0, num_layers - self.num_layers_at_end_in_bf16)
        return frozenset(range(min(self.num_layers_at_start_in_bf16, num_layers))) | frozenset(range(end, num_layers))

    @property
    def quantized_gemms(self) -> bool:
        """Block GEMMs run in a narrow format from 16-bit operands quantized on the fly: fp8 or NVFP4."""
        return self.precision in QUANTIZED_PRECISIONS

    @property
    def te_quantized(self) -> bool:
        """Transformer Engine's low-precision training (fp8 or NVFP4): quantized weights cached per step
        (`fp8_weight_bytes` each), quantized linear inputs saved for the backward."""
        return self.quantized_gemms and self.fp8_kernels == "te"

    @property
    def saved_input_bytes(self) -> float:
        """Bytes per element of a linear layer's saved input where it is kept quantized, 0 where it stays 16-bit:
        Transformer Engine's fp8 keeps the fp8 copy (1 B); NVFP4 keeps the columnwise FP4 copy its weight-gradient
        GEMM reads, under Transformer Engine and torchao alike (`NVFP4_ELEMENT_BYTES`); torchao's float8 keeps the
        bf16 input."""
        if self.precision == "nvfp4":
            return NVFP4_ELEMENT_BYTES
        return 1.0 if self.te_fp8 else 0.0

    @property
    def moe_permute_fused(self) -> bool:
        """An MoE layer's permute and unpermute run as fused kernels: Megatron-Core with --moe-permute-fusion, or
        with the flex dispatcher (HybridEP permutes inside its dispatch kernels whatever the flag; DeepEP's permute
        follows the flag, which gpuwise does not tell apart)."""
        return self.framework == "megatron" and (self.moe_permute_fusion or self.moe_token_dispatcher == "flex")

    @property
    def fp8_kernels(self) -> str:
        """"te" or "torchao": `fp8_backend`, else the framework's (Transformer Engine for megatron, deepspeed and hf;
        torchao's float8 for torchtitan, fsdp and torchtune)."""
        return fp8_kernels_of(self.framework, self.fp8_backend)

    @property
    def sdpa_runs_flash(self) -> bool:
        """Whether attention runs PyTorch SDPA's FlashAttention-2 kernels rather than the device's best kernel, on a
        GPU where SDPA's own default order puts flash first (`sdpa_flash_on` for a given GPU). Megatron: never
        (Transformer Engine's attention). torchtitan asks SDPA for cuDNN first (its ScaledDotProductAttention: on
        Blackwell since torchtitan #1196, 2025-05-14, on every GPU since #1776, 2025-10-09); other PyTorch trainers
        leave SDPA's default order (transformers, torchtune; flash-attn 2 in llm-foundry)."""
        if self.framework == "megatron" or self.attn_package:
            return False
        if self.flash_attn_package:  # the package's FlashAttention-2 kernels
            return True
        if self.sdpa_backend is not None:
            return self.sdpa_backend == "flash"
        return self.framework != "torchtitan"

    def sdpa_flash_on(self, gpu) -> bool:
        """`sdpa_runs_flash` on `gpu` (a catalog GPU). ROCm builds of PyTorch have no cuDNN backend, so a PyTorch
        trainer's SDPA runs its flash backend (AOTriton) on AMD GPUs whatever it asks for first. Left to SDPA's
        default order, today's PyTorch (2.11 and later, whose bundled cuDNN is past 9.15) puts cuDNN first on the
        data-center Hopper and Blackwell GPUs (`sdpa_prefers_cudnn`; `sdp_utils.cpp` check_prefer_cudnn_attention,
        unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set) and flash first elsewhere (A100, Ada, the sm12x Blackwell
        cards); `--sdpa-backend flash` prices an older PyTorch's default."""
        if self.framework != "megatron" and gpu.vendor == "amd":
            return True
        if (self.framework in ("megatron", "torchtitan") or self.sdpa_backend is not None or self.flash_attn_package
                or self.attn_package):
            return self.sdpa_runs_flash  # the framework's or the user's own choice
        return not sdpa_prefers_cudnn(gpu)  # SDPA's default order

    @property
    def expert_extras_unfused(self) -> str | None:
        """The routing probabilities' dtype where an MoE layer's expert bias and clamped activation run as PyTorch ops
        of their own (Megatron-Core's TEGroupedMLP without the op fuser): fp32 under the flex dispatcher (HybridEP and
        DeepEP take fp32 probabilities), else bf16; None where they run fused (other frameworks: not modelled)."""
        if self.framework != "megatron" or self.use_transformer_engine_op_fuser:
            return None
        return "fp32" if self.moe_token_dispatcher == "flex" else "bf16"

    @property
    def flash_attn_package(self) -> bool:
        """Whether attention calls the flash-attn package (`attn_implementation` flash_attention_2, or triton: its
        Triton kernels) rather than PyTorch's SDPA."""
        return self.attn_implementation in ("flash_attention_2", "triton")

    @property
    def attn_package(self) -> str | None:
        """The newer flash-attn package kernels attention calls instead of SDPA (`attn_implementation`
        flash_attention_3 or flash_attention_4, attention_kernels.toml [package.*]); None for anything else."""
        return self.attn_implementation if self.attn_implementation in ATTN_PACKAGES else None

    def attention_kernel(self, gpu) -> str:
        """The attention kernel a step prices on `gpu` (a catalog GPU), by name: transformer_engine (Megatron: cuDNN
        fused attention on Hopper and Blackwell), flash_attn_3, flash_attn_4, flash_attn_triton, flash_attn (the
        package; Composable Kernel's build on ROCm), sdpa_aotriton (PyTorch's SDPA on ROCm), sdpa_flash or
        sdpa_cudnn; unfused when the score matrix is in memory."""
        if self.attention != "flash":
            return "unfused"
        if self.framework == "megatron":
            return "transformer_engine"
        if self.attn_package is not None:
            return "flash_attn_" + self.attn_package[-1]
        if self.flash_attn_triton:
            return "flash_attn_triton"
        if self.flash_attn_package:
            return "flash_attn"
        if gpu.vendor == "amd":
            return "sdpa_aotriton"
        return "sdpa_flash" if self.sdpa_flash_on(gpu) else "sdpa_cudnn"

    @property
    def flash_attn_triton(self) -> bool:
        """Whether attention runs the flash-attn package's Triton kernels (`attn_implementation` triton)."""
        return self.attn_implementation == "triton"

    @property
    def fp8_saved(self) -> frozenset[str]:
        """Saved activations Megatron keeps in fp8 beyond the linear inputs: "activation" (the SwiGLU's input, cast
        to fp8 for storage whatever the training precision), "attention" (fp8 attention, under fp8 training)."""
        if self.framework != "megatron":
            return frozenset()
        return frozenset(n for n, on in (("activation", self.activation_func_fp8_input_store),
                                         ("attention", self.fp8_dot_product_attention and self.te_fp8)) if on)

    @property
    def fp8_weight_bytes(self) -> float:
        """Bytes per element of a Transformer Engine quantized weight copy: the fp8 weight, and its transpose on
        Hopper; NVFP4's rowwise and columnwise copies (`NVFP4_WEIGHT_CACHE_BYTES`)."""
        if self.precision == "nvfp4":
            return NVFP4_WEIGHT_CACHE_BYTES
        return 2.0 if self.fp8_transpose_cache else 1.0

    @property
    def flash(self) -> bool:
        return self.attention == "flash"


def fp8_transpose_cached(architecture: str | None, *, disabled: bool = False) -> bool:
    """Whether Transformer Engine keeps a transposed fp8 copy of each fp8 weight on this GPU (`TrainJob.
    fp8_transpose_cache`): not on Blackwell (fp8 GEMMs in either layout), nor where Megatron's
    --disable-parameter-transpose-cache or ROCm Megatron-LM's --no-fp8-weight-transpose-cache (`disabled`) builds
    it in the backward instead."""
    return not disabled and fp8_gemm_needs_transpose(architecture)


def fp8_gemm_needs_transpose(architecture: str | None) -> bool:
    """Hopper's fp8 tensor cores take only K-major (TN) operands, so the backward needs each weight transposed
    (Transformer Engine for ROCm caches the transpose on CDNA likewise, keep_fp8_weight_transpose_cache=True by
    default); Blackwell's fp8 GEMMs take either layout (Transformer Engine's non_tn_fp8_gemm_supported)."""
    return not (architecture or "").startswith("Blackwell")


def job_default(name: str) -> object:
    """The default of `TrainJob.<name>`: the one place a training option's default is written."""
    return field_default(TrainJob, name)
