"""`gpuwise train`: memory per GPU and FLOPs per step of a training or fine-tuning job, and whether it fits.

One request (model, GPU, layout, batch, precision, optimizer ...) gives one `TrainResult`: the per-GPU memory
breakdown on the most loaded rank, model and hardware FLOPs per step, the verdict, and the largest micro-batch
that fits. The performance model (step time, MFU) builds on the same request and result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from ..catalog.attention_kernels import flash_attn_triton_share, package_rate
from ..catalog.devices import DeviceProfile, host_op_time_ratio, network_defaults, rental_price
from ..catalog.gpus import GPU
from ..catalog.models import LoadedModel
from ..errors import MAX_TOKENS, InvalidArgument, require_positive_int, require_positive_number, require_train_tokens
from ..estimate.comm import Topology
from ..estimate.flops import StepFlops, gemm_dtype, job_flops, utilization
from ..estimate.job import (FSDP2_OFFLOAD_ALL, PYTORCH_NATIVE, AttnImplementation, Attention, CpCommType,
                            CudaGraphScope, Finetune, FlexBackend, Float8Recipe, FlopsConvention, Fp8Backend,
                            Framework, MoeDispatcher, NormType, attn_package_problem,
                            OffloadTarget, Optimizer, OptimizerImpl, Precision, QUANTIZED_PRECISIONS, Recompute,
                            SdpaBackend, StateDtype, TrainJob, NVFP4_ELEMENT_BYTES, NVFP4_WEIGHT_CACHE_BYTES,
                            fp8_transpose_cached, job_default, routed_experts_16bit)
from ..estimate.layout import PARAM_OFFLOAD_SHARDINGS, Layout, Schedule, divisors
from ..estimate.model_states import adapter_input_bytes, lora_targets
from ..estimate.parallel import sinks_cp_problem, validate_layout
from ..estimate.pipeline import stage_layers, torchtitan_default_ends
from ..estimate.recompute import framework_mode, recompute_plan
from ..estimate.layer_ops import MEGATRON_UNFUSED_PERMUTE_BYTES, PERMUTE_BYTES, UNFUSED_PERMUTE_BYTES
from ..estimate.step_time import (MOE_SYNC_GAP_S, NVFP4_QUANTIZE, StepTime, float8_tp_all_gathers, fp8_quantize_kind,
                                  moe_host_syncs, moe_sync_gap_s, step_time)
from ..estimate.train_memory import FRAGMENTATION_RISK, TrainMemory, layout_memory, required_bytes
from ..fields import field_default
from ..model.params import ParamCounts, param_counts
from .cluster import cluster
from .confidence import SpeedConfidence, speed_category, speed_confidence

FsdpMode = Literal["full", "grad-op", "no-reshard", "hybrid"]
ZeroStage = Literal[0, 1, 2, 3]
FSDP_MODES = dict(zip(get_args(FsdpMode), ("fsdp-full", "fsdp-grad-op", "fsdp-no-reshard", "hsdp")))
ZERO_STAGES = dict(zip(get_args(ZeroStage), ("ddp", "zero1", "zero2", "zero3")))
SHARDED_BY_DEFAULT = ("torchtitan", "torchtune")
"""Frameworks whose data-parallel ranks shard with FSDP2 unless told otherwise, so that neither --fsdp nor --zero
means full sharding: torchtitan's `parallelism.data_parallel_shard_degree` defaults to -1 (every data-parallel rank
not used by replication; torchtitan/config/job_config.py) and torchtune's distributed recipes always call
`training.shard_model` (fully_shard per layer). `--zero 0` asks either for plain replication. One data-parallel rank
(one GPU, or all GPUs in model parallelism) shards nothing: torchtitan applies FSDP only over more than one."""
# Upper bounds far beyond any real job, so that absurd input gets an error rather than a long search.
LIMITS = {"num_gpus": 1 << 20, "seq": MAX_TOKENS, "micro_batch": 1 << 24, "tp": 1 << 16, "pp": 1 << 16, "vpp": 1 << 10,
          "cp": 1 << 16, "ep": 1 << 16, "lora_rank": 1 << 16, "global_batch": MAX_TOKENS}
"""Checked in this order: the global batch's default needs the degrees before it."""


MEGATRON_OPTIONS = ("activation_func_fp8_input_store", "fp8_dot_product_attention",
                    "disable_parameter_transpose_cache", "no_fp8_weight_transpose_cache",
                    "moe_pad_expert_input_to_capacity", "moe_permute_fusion", "use_transformer_engine_op_fuser")
"""Megatron-LM options gpuwise models; each needs Megatron, and some its fp8 training (`megatron_option_problem`)."""


def fp8_backend_problem(backend: str | None, precision: str, framework: str) -> str | None:
    """Why --fp8-backend cannot apply to this job (None: it can)."""
    if backend is not None and precision != "fp8":
        return f"--fp8-backend {backend} applies to --precision fp8, not {precision}"
    if backend == "torchao" and framework == "megatron":
        return "--fp8-backend torchao: Megatron-Core's fp8 is Transformer Engine's (te)"
    if backend == "te" and framework == "torchtitan":
        return ("--fp8-backend te: torchtitan's fp8 is torchao's float8 (torchao); Transformer Engine under FSDP is "
                "--framework fsdp or hf")
    return None


NVFP4_FRAMEWORKS = {"megatron": "Transformer Engine's NVFP4BlockScaling recipe (--fp4-format e2m1)",
                    "torchtitan": "torchao's NVFP4 training (the nvfp4 quantization converter)"}
"""Who trains in NVFP4, and with what (`precision_problem`)."""


def precision_problem(precision: str, framework: str, gpu: GPU, finetune: str = "full") -> str | None:
    """Why this job cannot train at `precision` (None: it can). NVFP4 training runs Transformer Engine's recipe
    (Megatron-Core) or torchao's (torchtitan), on data-center Blackwell (SM 10.0 / 10.3: B200, GB200, B300, GB300;
    Transformer Engine's NVFP4 docs and torchtitan's nvfp4.md name no other), and trains whole models. FP8 needs
    fp8 tensor cores (`fp8_hardware_problem`)."""
    if precision == "fp8":
        return fp8_hardware_problem(gpu)
    if precision != "nvfp4":
        return None
    if framework not in NVFP4_FRAMEWORKS:
        return (f"--precision nvfp4 is Transformer Engine's recipe under --framework megatron or torchao's under "
                f"--framework torchtitan (got {framework})")
    if not (gpu.segment == "datacenter" and (gpu.architecture or "").startswith("Blackwell")
            and "fp4" in gpu.peak_flops):
        return (f"--precision nvfp4 trains on data-center Blackwell GPUs (B200, GB200, B300, GB300: SM 10.0 / 10.3, "
                f"what Transformer Engine and torchao support); {gpu.name} is not one")
    if finetune != "full":
        return f"--precision nvfp4 is modelled for full training, not --finetune {finetune}"
    return None


def fp8_hardware_problem(gpu: GPU) -> str | None:
    """Why fp8 training cannot run on `gpu` (None: it can, or its rates are unknown, as for a GPU given by memory
    only): Transformer Engine refuses fp8 below compute capability 8.9 ("Device compute capability 8.9 or higher
    required for FP8 execution", transformer_engine/pytorch/quantization.py `_compute_fp8_support` @d0067d0) and
    torchao's float8 wants SM 8.9 as well, so a GPU whose catalog entry has rates but no fp8 rate (Volta, Turing,
    Ampere, CDNA 2) is refused rather than priced in 16 bits."""
    if not gpu.peak_flops or "fp8" in gpu.peak_flops:
        return None
    return (f"--precision fp8 needs fp8 tensor cores (Transformer Engine and torchao's float8: compute capability "
            f"8.9+, i.e. Ada, Hopper, Blackwell; AMD CDNA 3 and later), and {gpu.name} has no fp8 rate in the catalog; "
            f"use --precision bf16")


def bf16_layers_problem(start: int, end: int, *, precision: str, framework: str, num_layers: int) -> str | None:
    """Why the first/last layers cannot stay in bf16 here (None: they can): Megatron-Core keeps them so under fp8 or
    NVFP4 (--first-last-layers-bf16), torchtitan's NVFP4 converter by the layers it is given (its bf16-tail
    configs); the counts are whole numbers and leave some layer quantized."""
    for name, value in (("--num-layers-at-start-in-bf16", start), ("--num-layers-at-end-in-bf16", end)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= num_layers:
            return f"{name} must be a whole number from 0 to the model's {num_layers} layers, got {value!r}"
    if not (start or end):
        return None
    if precision not in QUANTIZED_PRECISIONS:
        return f"layers kept in bf16 apply to --precision fp8 or nvfp4 (got {precision})"
    if framework != "megatron" and not (framework == "torchtitan" and precision == "nvfp4"):
        return ("layers kept in bf16 are Megatron-Core's --first-last-layers-bf16 (fp8, NVFP4) or torchtitan's NVFP4 "
                f"converter's layer list; not {framework} with {precision}")
    if start + end >= num_layers:
        return (f"--num-layers-at-start-in-bf16 + --num-layers-at-end-in-bf16 = {start + end} leaves no layer in "
                f"{precision}")
    return None


def nvfp4_shape_problem(spec, tp: int) -> str | None:
    """torchao's NVFP4 kernels take local GEMM dimensions divisible by 128 only (torchtitan's nvfp4.py refuses a
    Linear whose in or out features, after TP, are not): the first block linear that is not, or None."""
    dims = {"hidden size": spec.hidden_size}
    if spec.mla is None:  # (MLA's projections: their ranks are not checked)
        dims |= {"query width / TP": spec.num_heads * spec.head_dim / tp,
                 "key/value width / TP": spec.num_kv_heads * spec.head_dim / tp}
    if spec.moe is None or not all(spec.moe.moe_layers):
        dims["MLP width / TP"] = spec.intermediate_size / tp
    if spec.moe is not None and spec.moe.shared_intermediate_size:
        dims["shared-expert width / TP"] = spec.moe.shared_intermediate_size / tp
    for name, value in dims.items():
        if value % 128:
            return (f"--precision nvfp4 under torchtitan: torchao's NVFP4 kernels need every linear's local "
                    f"dimensions divisible by 128, and this model's {name} is {value:g}")
    return None


NVFP4_TP_OVERLAP = ("--tp-comm-overlap with --precision nvfp4: Transformer Engine's userbuffers overlap does not run "
                    "NVFP4 ('TP overlap not supported yet', MLPerf Training v5.1's NVFP4 configs; Megatron-Bridge's "
                    "performance scripts turn it off for nvfp4): drop it")


def sdpa_backend_problem(backend: str | None, gpu: GPU) -> str | None:
    """Why --sdpa-backend cannot apply on this GPU (None: it can): PyTorch's ROCm builds have no cuDNN backend."""
    if backend == "cudnn" and gpu.vendor == "amd":
        return (f"--sdpa-backend cudnn: PyTorch's ROCm builds have no cuDNN backend, so SDPA on {gpu.name} runs its "
                "flash backend (AOTriton): drop it or pass --sdpa-backend flash")
    return None


def megatron_option_problem(name: str, framework: str | None, precision: str, fp8_param_gather: bool,
                            vendor: str | None = None) -> str | None:
    """Why Megatron option `name` cannot apply to this job, or None. The SwiGLU's fp8 input store casts whatever
    the training precision; fp8 attention needs fp8 training; dropping the transpose cache is modelled for fp8
    parameters (without them Megatron's is_first_microbatch=None drops Transformer Engine's whole fp8 weight cache)."""
    flag = "--" + name.replace("_", "-")
    if framework != "megatron":
        return f"{flag} is a Megatron-LM option: it needs --framework megatron (got {framework})"
    if name in ("activation_func_fp8_input_store", "moe_pad_expert_input_to_capacity", "moe_permute_fusion",
                "use_transformer_engine_op_fuser"):
        return None
    if precision != "fp8":
        return f"{flag} needs --precision fp8 (got {precision})"
    if name == "disable_parameter_transpose_cache" and not fp8_param_gather:
        return f"{flag} is modelled with fp8 parameters: add --fp8-param-gather"
    if name == "no_fp8_weight_transpose_cache" and vendor not in (None, "amd"):
        return (f"{flag} is ROCm Megatron-LM's flag (AMD GPUs); upstream Megatron-LM drops the transposes with "
                "--fp8-param-gather --disable-parameter-transpose-cache")
    return None


def trainer_option_problem(framework: str, *, precision: str, compile: bool, tp_comm_overlap: bool,
                        fp8_param_gather: bool, grad_reduce_in_fp32: bool) -> str | None:
    """Why a trainer cannot run these options (train and plan alike, and so the plan's recipes), or None: TP overlap
    is Megatron's userbuffers or torchtitan's async TP (which torchtitan runs only compiled: 'Async TP requires
    torch.compile'); fp8 weight gathers need fp8 training; 16-bit gradient buffers are Megatron's
    --grad-reduce-in-bf16."""
    if tp_comm_overlap and framework not in ("megatron", "torchtitan"):
        return (f"--tp-comm-overlap is Megatron-LM's TP overlap or torchtitan's async TP; {framework} has "
                "neither")
    if tp_comm_overlap and framework == "torchtitan" and not compile:
        return "--tp-comm-overlap: torchtitan runs async TP only with torch.compile; add --compile"
    if fp8_param_gather and precision != "fp8":
        return f"--fp8-param-gather gathers fp8 weights: it needs --precision fp8 (got {precision})"
    if tp_comm_overlap and precision == "nvfp4" and framework == "megatron":
        return NVFP4_TP_OVERLAP
    if not grad_reduce_in_fp32 and framework != "megatron":
        return "--no-grad-reduce-in-fp32 is Megatron-LM's --grad-reduce-in-bf16: it needs --framework megatron"
    return None


def cuda_graph_scopes(text: str | None, *, framework: str | None, spec, padded: bool) -> frozenset[str]:
    """--cuda-graph-scope checked as Megatron-Core checks it (comma- or space-separated; full_iteration stands
    alone; the MoE scopes need an MoE model, and graphing whole MoE layers padded experts: TransformerConfig's
    'moe cuda graph is only supported with drop-padding MoE'; Megatron only)."""
    moe = spec.moe is not None
    all_moe = moe and all(spec.moe.moe_layers)
    if text is None:
        return frozenset()
    parts = [p.strip() for p in str(text).replace(" ", ",").split(",") if p.strip()]
    valid = get_args(CudaGraphScope)
    unknown = sorted(set(parts) - set(valid))
    if unknown or not parts:
        what = f"unknown scope '{unknown[0]}'" if unknown else "no scope given"
        raise InvalidArgument(f"--cuda-graph-scope: {what}; valid: {', '.join(valid)} (comma-separated, "
                              "Megatron-Core's names)")
    if framework != "megatron":
        raise InvalidArgument(f"--cuda-graph-scope is Megatron-Core's CUDA graph option: it needs --framework "
                              f"megatron (got {framework})")
    if "full_iteration" in parts and len(set(parts)) > 1:
        raise InvalidArgument("--cuda-graph-scope full_iteration captures the whole iteration: it cannot be "
                              "combined with other scopes")
    if {"moe", "moe_router", "moe_preprocess"} & set(parts) and not moe:
        raise InvalidArgument("--cuda-graph-scope: the moe, moe_router and moe_preprocess scopes graph MoE layers; "
                              "this model has none")
    if "moe" in parts and "moe_router" in parts:
        raise InvalidArgument("--cuda-graph-scope: moe already graphs the router; Megatron-Core refuses moe with "
                              "moe_router")
    if "moe_preprocess" in parts and "moe_router" not in parts:
        raise InvalidArgument("--cuda-graph-scope: moe_preprocess is graphed with moe_router (Megatron-Core): add "
                              "moe_router")
    if "mlp" in parts and all_moe:
        raise InvalidArgument("--cuda-graph-scope: mlp graphs dense MLP layers; every layer of this model is MoE")
    if "moe" in parts and not padded:
        raise InvalidArgument("--cuda-graph-scope moe graphs whole MoE layers, which Megatron-Core allows with padded "
                              "experts only: add --moe-pad-expert-input-to-capacity")
    return frozenset(parts)


DELAY_WGRAD_NEEDS_OVERLAP = ("--delay-wgrad-compute splits the weight gradients out for the EP overlap schedule: "
                             "Megatron-Core asserts --moe-a2a-overlap (--overlap-moe-expert-parallel-comm) with it")


def megatron_overlap_problem(job: TrainJob, layout: Layout) -> str | None:
    """Why Megatron-Core refuses this job's EP overlap or scoped CUDA graphs on this layout (TransformerConfig's
    checks): delayed weight gradients need EP overlap, which needs expert parallelism, the interleaved schedule when
    pipelining, and no full recompute;
    scoped CUDA graphs take no full recompute (only a whole-iteration graph does)."""
    full = recompute_plan(job.recompute).kind in ("full", "uniform", "block")
    if job.delay_wgrad_compute and not job.moe_a2a_overlap:
        return DELAY_WGRAD_NEEDS_OVERLAP
    if job.moe_a2a_overlap:
        if layout.ep <= 1:
            return "--moe-a2a-overlap (Megatron's --overlap-moe-expert-parallel-comm) needs expert parallelism: --ep > 1"
        if layout.pp > 1 and layout.vpp <= 1:
            return ("--moe-a2a-overlap with pipeline parallelism needs the interleaved schedule (--vpp > 1), as "
                    "Megatron-Core asserts")
        if full:
            return "--moe-a2a-overlap does not run with full recompute in Megatron-Core: use none or selective"
    if job.cuda_graph_scope and "full_iteration" not in job.cuda_graph_scope and full:
        return ("--cuda-graph-scope: full recompute runs only under a whole-iteration graph (full_iteration) in "
                "Megatron-Core")
    return None


def megatron_job_problem(framework: str | None, *, spec, optimizer: str, moe_a2a_overlap: bool,
                         moe_token_dispatcher: str, pad: bool, moment_dtypes: tuple,
                         permute_fusion: bool = False) -> str | None:
    """Why the Megatron-only options of a job cannot apply, the one home for `gpuwise train` and `gpuwise plan`:
    padded experts need routed experts (under the flex dispatcher only HybridEP pads; the recipe says so), EP overlap
    and the flex dispatcher are Megatron-Core's, and the AdamW moment dtypes are its precision-aware optimizer's."""
    if pad and spec.moe is None:
        return "--moe-pad-expert-input-to-capacity pads routed experts: this model has none"
    if permute_fusion and spec.moe is None:
        return "--moe-permute-fusion fuses the routed experts' permutation: this model has none"
    if (moe_a2a_overlap or moe_token_dispatcher == "flex") and framework != "megatron":
        return (f"--moe-a2a-overlap and --moe-token-dispatcher flex are Megatron-Core's: they need --framework megatron "
                f"(got {framework})")
    for name, value in zip(("exp_avg_dtype", "exp_avg_sq_dtype"), moment_dtypes):
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if value not in get_args(StateDtype):
            return f"{flag}: unknown dtype '{value}'; valid: {', '.join(get_args(StateDtype))}"
        if framework != "megatron":
            return f"{flag} is Megatron-LM's precision-aware optimizer option: it needs --framework megatron (got " \
                   f"{framework})"
        if optimizer != "adamw":
            return f"{flag} sets a moment of AdamW; the optimizer here is {optimizer}"
    return None


TORCHTITAN_MIXERS = ("gated_deltanet",)
"""Recurrent mixers torchtitan's model library builds: Gated DeltaNet (Qwen3-Next, Qwen3.5), beside attention and
MLA (pytorch/torchtitan torchtitan/models/common/attention/: attention, mla, gdn and kda, with their context-parallel
variants; no Mamba-2 layer). Kimi's KDA has no model in gpuwise's catalog."""


def model_problem(framework: str, spec) -> str | None:
    """Why the framework has no implementation of this model's layers, or None."""
    kind = recurrent_kind(spec)
    if framework == "torchtitan" and kind is not None and kind not in TORCHTITAN_MIXERS:
        return (f"torchtitan has no {spec.linear.name} layer (its models build attention, MLA and Gated DeltaNet); "
                "train this model with --framework megatron (Megatron-LM / Megatron-Bridge) or fsdp (its Hugging Face "
                "implementation under FSDP2)")
    return None


def optimizer_problem(framework: str, optimizer: str) -> str | None:
    """Why the framework cannot run this optimizer, or None."""
    if optimizer == "adamw-8bit" and framework == "megatron":
        return ("--optimizer adamw-8bit is bitsandbytes' optimizer, which Megatron-LM does not run; its "
                "precision-aware optimizer keeps AdamW's moments in bf16 or fp8 instead (--exp-avg-dtype, "
                "--exp-avg-sq-dtype)")
    return None


def recipe_problem(framework: str, *, spec, gpu: GPU, precision: str, finetune: str = "full", tp: int = 1,
                   fp8_backend: str | None, bf16_layers: tuple[int, int], sdpa_backend: str | None, optimizer: str,
                   compile: bool, tp_comm_overlap: bool, fp8_param_gather: bool, grad_reduce_in_fp32: bool,
                   moe_a2a_overlap: bool, moe_token_dispatcher: str, pad: bool, moment_dtypes: tuple,
                   permute_fusion: bool, attn_implementation: str | None = None) -> str | None:
    """The first reason, in one line, why `framework` cannot run this recipe, or None: the checks `gpuwise train`
    and `gpuwise plan` share (precision and its kernels, layers kept in bf16, the attention backend, trainer
    options, optimizer, model layers, Megatron-Core's MoE options), in that order."""
    checks = (
        lambda: fp8_backend_problem(fp8_backend, precision, framework),
        lambda: precision_problem(precision, framework, gpu, finetune),
        lambda: bf16_layers_problem(*bf16_layers, precision=precision, framework=framework,
                                    num_layers=spec.num_layers),
        lambda: nvfp4_shape_problem(spec, tp) if precision == "nvfp4" and framework == "torchtitan" else None,
        lambda: sdpa_backend_problem(sdpa_backend, gpu),
        lambda: attn_package_problem(attn_implementation, gpu),
        lambda: trainer_option_problem(framework, precision=precision, compile=compile,
                                       tp_comm_overlap=tp_comm_overlap, fp8_param_gather=fp8_param_gather,
                                       grad_reduce_in_fp32=grad_reduce_in_fp32),
        lambda: optimizer_problem(framework, optimizer),
        lambda: (f"--framework {framework}: {p}" if (p := model_problem(framework, spec)) else None),
        lambda: megatron_job_problem(framework, spec=spec, optimizer=optimizer, moe_a2a_overlap=moe_a2a_overlap,
                                     moe_token_dispatcher=moe_token_dispatcher, pad=pad,
                                     moment_dtypes=moment_dtypes, permute_fusion=permute_fusion),
    )
    return next((p for check in checks if (p := check()) is not None), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainRequest:
    """A training job on a cluster: the options of `gpuwise train`, one field each (the CLI is built from them: a
    field's docstring is its help, a Literal its choices, its default the option's default). The fields that are the
    job's or the layout's are documented there (`DOCS_FROM`)."""

    DOCS_FROM = (TrainJob, Layout)
    model: LoadedModel
    gpu: GPU
    num_gpus: int = 1
    """GPUs in the job."""
    seq: int = job_default("seq")
    global_batch: int | None = None
    """Sequences per optimizer step over all data-parallel ranks (default: one micro-batch per data-parallel
    rank, dp x micro-batch; filled in when the request is made, so `replace` keeps it)."""
    micro_batch: int = 1
    """Sequences per forward/backward on one rank."""
    tp: int = field_default(Layout, "tp")
    pp: int = field_default(Layout, "pp")
    vpp: int = field_default(Layout, "vpp")
    cp: int = field_default(Layout, "cp")
    ep: int = field_default(Layout, "ep")
    etp: int | None = None
    """Expert tensor parallelism of the routed experts: 1 or --tp (Megatron-Core --expert-tensor-parallel-size,
    torchtitan expert_tensor_parallel_degree; default --tp). --ep x --etp folds over tp x cp x dp."""
    sp: bool = field_default(Layout, "sp")
    """Sequence parallelism with TP (Megatron-LM's --sequence-parallel); always on under torchtitan's TP plan."""
    pp_first_layers: int | None = None
    pp_last_layers: int | None = None
    schedule: Schedule | None = None
    """Pipeline schedule (default 1f1b, interleaved with --vpp > 1)."""
    zero: ZeroStage | None = None
    """ZeRO stage (DeepSpeed; 3 = FSDP full shard)."""
    fsdp: FsdpMode | None = None
    """FSDP sharding mode (hybrid: HSDP, with --shard-group)."""
    shard_group: int | None = None
    recompute: Recompute | None = None
    """Activation checkpointing, gpuwise's spelling: none, selective, full, op, layer:N, block:K or uniform:K (see
    docs/training-memory.md; default full for hf LoRA/QLoRA, as PEFT's prepare_model_for_kbit_training and TRL's
    SFTConfig turn gradient checkpointing on, else none). selective under torchtitan is its per-op policy (op)."""
    ac: str | None = None
    """torchtitan's activation_checkpoint: none, op (mode selective, selective_ac_option op), layer:N (mode selective,
    selective_ac_option N) or full."""
    recompute_granularity: Literal["full", "selective"] | None = None
    """Megatron-LM --recompute-granularity."""
    recompute_method: Literal["uniform", "block"] | None = None
    """Megatron-LM --recompute-method (with --recompute-granularity full; default uniform)."""
    recompute_modules: str | None = None
    """Megatron-Core --recompute-modules (with --recompute-granularity selective), a comma list of core_attn, mlp,
    moe, shared_experts, mla_up_proj, moe_act, layernorm (default core_attn)."""
    recompute_num_layers: int | None = None
    """Megatron-LM --recompute-num-layers (default 1): blocks per checkpoint (uniform) or checkpointed blocks per
    pipeline stage and virtual stage (block)."""
    gradient_checkpointing: bool = False
    """transformers / PEFT / TRL gradient_checkpointing=True: every block checkpointed (full)."""
    compile: bool = job_default("compile")
    norm_type: NormType | None = None
    """torchtitan's model.norm_type: fused_rmsnorm (a Triton kernel, the llama configs' default from 2024-04-05 to
    2024-07-10) and compiled_rmsnorm (2024-07 to 2025-02) keep the norm's input and fp32 rstd; rmsnorm (default)
    runs eager and keeps the fp32 upcast and the normalized tensor (memory only; the step time is unchanged)."""
    compile_loss: bool = True
    """torchtitan with --compile: the loss is compiled too (compile.components default ["model", "loss"], since
    torchtitan 2025-04-02): no fp32 copy of the logits. --no-compile-loss: the loss runs eager (compile.components
    ["model"], or a torchtitan from 2024-12-18 to 2025-04-02)."""
    compile_components: str | None = None
    """torchtitan's compile.components, comma-separated: model (the blocks: as --compile) and loss (the
    cross-entropy: no fp32 copy of the logits); 'loss' alone compiles the loss with the blocks eager, as torchtitan's
    DeepSeek-V3 configs do. Given, it decides both (--compile and --no-compile-loss must agree with it)."""
    loss_chunks: int | None = None
    """Cross-entropy over this many sequence chunks, upcast to fp32 one at a time (default 8 for torchtune, whose
    recipes use CEWithChunkedOutputLoss, else 1: the whole logits at once)."""
    fused_loss: bool = job_default("fused_loss")
    fp8_param_gather: bool = job_default("fp8_param_gather")
    activation_func_fp8_input_store: bool = job_default("activation_func_fp8_input_store")
    fp8_dot_product_attention: bool = job_default("fp8_dot_product_attention")
    disable_parameter_transpose_cache: bool = False
    """Megatron's --disable-parameter-transpose-cache (TransformerConfig disable_parameter_transpose_cache): fp8
    weights keep no cached transpose; it is built in each backward (Blackwell needs none either way)."""
    no_fp8_weight_transpose_cache: bool = False
    """ROCm Megatron-LM and Primus's --no-fp8-weight-transpose-cache (Transformer Engine for ROCm's
    keep_fp8_weight_transpose_cache=False; ROCm/Megatron-LM examples/llama/train_llama3.sh sets it with
    FP8_WEIGHT_TRANSPOSE_CACHE=0 under FSDP): the fp8 weight stays cached across micro-batches, its transpose is
    built in each backward instead of kept."""
    grad_reduce_in_fp32: bool = job_default("grad_reduce_in_fp32")
    optimizer_in_backward: bool = job_default("optimizer_in_backward")
    exp_avg_dtype: StateDtype | None = None
    exp_avg_sq_dtype: StateDtype | None = None
    optimizer_impl: OptimizerImpl | None = None
    offload: tuple[OffloadTarget, ...] = ()
    """States kept in host memory: a comma list of optimizer, params, activations."""
    optimizer: Optimizer = job_default("optimizer")
    precision: Precision = job_default("precision")
    framework: Framework | None = None
    """Implementation profile (default: from the other options; see docs/training-memory.md)."""
    finetune: Finetune = job_default("finetune")
    lora_rank: int = job_default("lora_rank")
    lora_targets: str = job_default("lora_targets")
    kbit_upcast: bool = True
    """hf QLoRA: PEFT's prepare_model_for_kbit_training runs (TRL's SFTTrainer calls it), leaving the unquantized
    weights in fp32 and the residual stream in fp32; --no-kbit-upcast for trainers that skip it (LLaMA-Factory,
    a custom loop calling get_peft_model only). Ignored elsewhere."""
    lora_dropout: float = job_default("lora_dropout")
    """Dropout on the LoRA adapters' input (PEFT's lora_dropout; default 0.0, PEFT's): above 0 each adapted
    matrix keeps a dropped-out copy of its input and a mask."""
    flops_convention: FlopsConvention = job_default("flops_convention")
    attention: Attention = job_default("attention")
    tp_comm_overlap: bool = job_default("tp_comm_overlap")
    overlap_p2p_communication: bool = job_default("overlap_p2p_communication")
    moe_token_dispatcher: MoeDispatcher = job_default("moe_token_dispatcher")
    moe_flex_dispatcher_backend: FlexBackend | None = None
    """Megatron-Core --moe-flex-dispatcher-backend under --moe-token-dispatcher flex: deepep (DeepEP's normal
    kernels; Megatron-Core's default) or hybridep (DeepEP's HybridEP); across nodes each is priced at its own
    measured rate (data/devices.toml [network.ep_dispatch])."""
    moe_a2a_overlap: bool = job_default("moe_a2a_overlap")
    delay_wgrad_compute: bool = job_default("delay_wgrad_compute")
    moe_pad_expert_input_to_capacity: bool = job_default("moe_pad_expert_input_to_capacity")
    moe_permute_fusion: bool = job_default("moe_permute_fusion")
    use_transformer_engine_op_fuser: bool = job_default("use_transformer_engine_op_fuser")
    num_layers_at_start_in_bf16: int = job_default("num_layers_at_start_in_bf16")
    num_layers_at_end_in_bf16: int = job_default("num_layers_at_end_in_bf16")
    cuda_graph_scope: str | None = None
    """Megatron-Core --cuda-graph-scope (now --cuda-graph-modules), comma-separated: full_iteration (--cuda-graph-impl
    full_iteration: the whole forward-backward replayed as one graph, dropless MoE without host syncs) or Transformer
    Engine scoped graphs of attn, mlp, moe, moe_router, moe_preprocess (--cuda-graph-impl transformer_engine).
    Default: none (eager)."""
    cp_comm_type: CpCommType | None = None
    """Context-parallel K/V exchange (Megatron-Core --cp-comm-type): p2p ring, allgather or a2a (Ulysses); default
    p2p for Megatron, allgather for PyTorch's context_parallel (torchtitan)."""
    attn_implementation: AttnImplementation | None = None
    """A PyTorch trainer's attention library, as transformers' attn_implementation names it: sdpa (PyTorch's
    scaled_dot_product_attention) or flash_attention_2 (the flash-attn package; Axolotl's flash_attention: true).
    The same kernels on NVIDIA GPUs; on ROCm the package is Composable Kernel's build and SDPA's flash backend
    AOTriton. flash_attention_3 (FlashAttention-3, Hopper) and flash_attention_4 (FlashAttention-4, data-center
    Blackwell): priced as shares of cuDNN's attention rate (catalog attention_kernels.toml [package.*]). triton: the
    package's Triton kernels of 2022 (llm-foundry's attn_impl triton, its default through v0.6), slower than
    FlashAttention-2. Default sdpa."""
    sdpa_backend: SdpaBackend | None = None
    """PyTorch SDPA's backend (torch.nn.attention.SDPBackend) for PyTorch trainers: flash (FlashAttention-2 kernels)
    or cudnn (cuDNN fused attention); default cudnn for torchtitan (which asks for it first: on Blackwell since
    May 2025, on every GPU since October 2025), flash for the others. Megatron runs Transformer Engine's attention
    instead."""
    fp8_backend: Fp8Backend | None = None
    """Whose fp8 training (with --precision fp8): te (Transformer Engine: Megatron-Core, DeepSpeed, Accelerate's
    default fp8_backend, Composer/llm-foundry's amp_fp8) or torchao (torchao's float8: torchtitan, FSDP2, torchtune,
    Accelerate's fp8_backend ao); default the framework's own: te for megatron, deepspeed and hf, torchao for
    torchtitan, fsdp and torchtune. torchao's casts cost far more without --compile (docs/performance.md)."""
    float8_recipe: Float8Recipe | None = None
    """torchao's float8 recipe under --precision fp8: tensorwise (one scale per tensor; torchao's default, and
    torchtitan's until 2026-04-27: its TP then all-gathers fp8, and only it all-gathers fp8 weights under FSDP), rowwise
    (torchtitan's default and only float8 recipe since, beside rowwise_with_gw_hp): 16-bit TP collectives. Default:
    rowwise under torchtitan, tensorwise under fsdp and torchtune. Its GEMMs and casts are priced as tensorwise's."""
    gpus_per_node: int | None = None
    """GPUs per node (default 8, or the job's GPU count when smaller)."""
    inter_node_gbps: float | None = None
    """Per-GPU NIC line rate across nodes in Gb/s (default: 400 Hopper/Blackwell, 200 Ampere)."""
    profile: str | None = None
    """Measured device profile (JSON, from `gpuwise calibrate`) overriding the defaults."""
    train_tokens: float | None = None
    """Token budget of the whole run (its time, GPU-hours, cost and energy)."""
    usd_per_gpu_hour: float | None = None
    """Price per GPU-hour (default: the catalog's on-demand rental price, unknown if it has none)."""
    _job: TrainJob = field(init=False, repr=False, compare=False)
    _framework_reason: str = field(init=False, repr=False, compare=False)
    _sharded_by_default: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        for name, maximum in LIMITS.items():
            if name == "global_batch" and self.global_batch is None:  # one micro-batch per data-parallel rank
                mp = self.tp * self.pp * self.cp
                dp = self.num_gpus // mp if self.num_gpus % mp == 0 else 1
                object.__setattr__(self, "global_batch", dp * self.micro_batch)
            require_positive_int("--" + name.replace("_", "-"), getattr(self, name), maximum)
        if self.gpus_per_node is not None:
            require_positive_int("--gpus-per-node", self.gpus_per_node, 1 << 10)
        for name, value, hi in (("--inter-node-gbps", self.inter_node_gbps, 1e5),
                                ("--usd-per-gpu-hour", self.usd_per_gpu_hour, 1e4)):
            if value is not None:
                require_positive_number(name, value, hi)
        if self.train_tokens is not None:
            require_train_tokens(self.train_tokens)
        if self.schedule is not None and self.schedule not in get_args(Schedule):
            raise InvalidArgument(f"--schedule: unknown value '{self.schedule}'; valid: {', '.join(get_args(Schedule))}")
        if self.zero is not None and self.fsdp is not None:
            raise InvalidArgument("--zero and --fsdp both set: choose one sharding (--zero 3 is FSDP full shard)")
        if self.zero is not None and self.zero not in ZERO_STAGES:
            raise InvalidArgument(f"--zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.fsdp is not None and self.fsdp not in FSDP_MODES:
            raise InvalidArgument(f"--fsdp: unknown mode '{self.fsdp}'; valid: {', '.join(FSDP_MODES)}")
        framework, why = choose_framework(self)
        data_parallel = self.num_gpus // (self.tp * self.pp)  # dp x cp: the ranks FSDP2 shards over
        object.__setattr__(self, "_sharded_by_default", self.fsdp is None and self.zero is None
                           and framework in SHARDED_BY_DEFAULT and data_parallel > 1)
        if self.norm_type is not None and framework != "torchtitan":
            raise InvalidArgument(f"--norm-type is torchtitan's model.norm_type; the framework here is {framework}")
        if not self.compile_loss and framework != "torchtitan":
            raise InvalidArgument(f"--no-compile-loss is torchtitan's compile.components without 'loss'; the framework "
                                  f"here is {framework}")
        loss_compiled = self.compile and self.compile_loss and framework == "torchtitan"
        if self.compile_components is not None:
            loss_compiled = self._resolve_compile_components(framework)
        if framework == "torchtitan" and self.pp > 1:
            self._torchtitan_pipeline_defaults()
        # FSDP2's CPUOffloadPolicy (asked for, or the framework's own full shard): the step runs on the host too.
        # torchtune's fsdp_cpu_offload is the same policy; it also offloads the optimizer alone (CPUOffloadOptimizer),
        # which the other FSDP2 frameworks refuse below.
        fsdp_sharded = self.fsdp is not None or self._sharded_by_default
        fsdp2 = fsdp_sharded and framework in FSDP2_OFFLOAD_ALL
        policy = fsdp_sharded and (fsdp2 or framework == "torchtune")
        if policy and "params" in self.offload and "optimizer" not in self.offload:
            object.__setattr__(self, "offload", (*self.offload, "optimizer"))
        recompute = resolve_recompute(self, framework)
        chunks = self.loss_chunks if self.loss_chunks is not None else (8 if framework == "torchtune" else 1)
        # A framework's own spelling becomes --recompute (so that `replace(req, recompute=...)` is one request); a
        # mode left to the framework's default stays None, and is chosen again for the framework of a `replace`.
        natives = self.ac is not None or self.gradient_checkpointing or self.recompute_granularity is not None \
            or self.recompute_method is not None or self.recompute_num_layers is not None \
            or self.recompute_modules is not None
        for name, value in (("recompute", recompute if natives else self.recompute), ("ac", None),
                            ("recompute_granularity", None), ("recompute_method", None),
                            ("recompute_num_layers", None), ("recompute_modules", None),
                            ("gradient_checkpointing", False)):
            object.__setattr__(self, name, value)
        job = TrainJob(framework=framework, precision=self.precision, optimizer=self.optimizer, seq=self.seq,
                       recompute=recompute, finetune=self.finetune, lora_rank=self.lora_rank,
                       lora_targets=self.lora_targets, lora_dropout=self.lora_dropout,
                       kbit_upcast=self.kbit_upcast and framework == "hf" and self.finetune == "qlora",
                       offload=frozenset(self.offload), attention=self.attention,
                       tp_comm_overlap=self.tp_comm_overlap, moe_token_dispatcher=self.moe_token_dispatcher,
                       moe_flex_dispatcher_backend=self.moe_flex_dispatcher_backend,
                       overlap_p2p_communication=self.overlap_p2p_communication,
                       moe_a2a_overlap=self.moe_a2a_overlap, delay_wgrad_compute=self.delay_wgrad_compute,
                       cp_comm_type=self.cp_comm_type,
                       cuda_graph_scope=cuda_graph_scopes(self.cuda_graph_scope, framework=framework,
                                                          spec=self.model.spec,
                                                          padded=self.moe_pad_expert_input_to_capacity),
                       moe_pad_expert_input_to_capacity=self.moe_pad_expert_input_to_capacity,
                       moe_permute_fusion=self.moe_permute_fusion,
                       use_transformer_engine_op_fuser=self.use_transformer_engine_op_fuser,
                       num_layers_at_start_in_bf16=self.num_layers_at_start_in_bf16,
                       num_layers_at_end_in_bf16=self.num_layers_at_end_in_bf16,
                       sdpa_backend=self.sdpa_backend, attn_implementation=self.attn_implementation,
                       fp8_backend=self.fp8_backend, float8_recipe=self.float8_recipe,
                       flops_convention=self.flops_convention,
                       compile=self.compile, loss_chunks=chunks, fused_loss=self.fused_loss,
                       compile_loss=loss_compiled,
                       norm_type=self.norm_type or "rmsnorm",
                       fp8_param_gather=self.fp8_param_gather, grad_reduce_in_fp32=self.grad_reduce_in_fp32,
                       optimizer_in_backward=self.optimizer_in_backward, optimizer_impl=self.optimizer_impl,
                       exp_avg_dtype=self.exp_avg_dtype, exp_avg_sq_dtype=self.exp_avg_sq_dtype,
                       activation_func_fp8_input_store=self.activation_func_fp8_input_store,
                       fp8_dot_product_attention=self.fp8_dot_product_attention,
                       fp8_transpose_cache=fp8_transpose_cached(self.gpu.architecture,
                                                                disabled=self.disable_parameter_transpose_cache
                                                                or self.no_fp8_weight_transpose_cache))
        for name in MEGATRON_OPTIONS:
            problem = megatron_option_problem(name, framework, self.precision, self.fp8_param_gather,
                                              self.gpu.vendor)
            if getattr(self, name) and problem:
                raise InvalidArgument(problem)
        if (self.use_transformer_engine_op_fuser and self.model.spec.is_moe
                and (self.etp if self.etp is not None else self.tp) > 1):
            raise InvalidArgument("--use-transformer-engine-op-fuser: Megatron-Core's fused grouped MLP runs without "
                                  "expert tensor parallelism (its _is_fused_impl_supported): add --etp 1 or drop it")
        if (problem := recipe_problem(
                framework, spec=self.model.spec, gpu=self.gpu, precision=self.precision, finetune=self.finetune,
                tp=self.tp, fp8_backend=self.fp8_backend,
                bf16_layers=(self.num_layers_at_start_in_bf16, self.num_layers_at_end_in_bf16),
                sdpa_backend=self.sdpa_backend, optimizer=self.optimizer, compile=self.compile,
                tp_comm_overlap=self.tp_comm_overlap, fp8_param_gather=self.fp8_param_gather,
                grad_reduce_in_fp32=self.grad_reduce_in_fp32, moe_a2a_overlap=self.moe_a2a_overlap,
                moe_token_dispatcher=self.moe_token_dispatcher, pad=self.moe_pad_expert_input_to_capacity,
                moment_dtypes=(self.exp_avg_dtype, self.exp_avg_sq_dtype),
                permute_fusion=self.moe_permute_fusion, attn_implementation=self.attn_implementation)) is not None:
            raise InvalidArgument(problem)
        if (self.exp_avg_dtype or self.exp_avg_sq_dtype) and self.sharding == "ddp":
            # Megatron's OptimizerConfig asserts the distributed optimizer
            raise InvalidArgument("--exp-avg-dtype / --exp-avg-sq-dtype: Megatron's precision-aware optimizer runs on "
                                  "its distributed optimizer: add --zero 1")
        if fsdp2 and "optimizer" in self.offload and "params" not in self.offload:
            raise InvalidArgument("FSDP2 offloads parameters, gradients and optimizer states together "
                                  "(CPUOffloadPolicy): use --offload params,optimizer (or --framework deepspeed)")
        if "params" in self.offload and self.sharding not in PARAM_OFFLOAD_SHARDINGS:
            raise InvalidArgument("--offload params needs sharded parameters (--zero 3 or --fsdp full/hybrid)")
        if self.optimizer_in_backward and self.num_microbatches_per_step > 1:
            raise InvalidArgument("--optimizer-in-backward steps every micro-batch: it needs one micro-batch per step "
                                  "(global batch = data-parallel ranks x micro-batch), as torchtune requires")
        if self.finetune == "qlora" and self.precision in ("fp32", "fp8"):
            raise InvalidArgument(f"--finetune qlora computes in bf16/fp16 over an NF4 base; --precision "
                                  f"{self.precision} does not apply")
        if self.finetune != "full":
            lora_targets(self.lora_targets)
        spec = self.model.spec
        if self.cp_comm_type == "a2a" and self.cp > 1 and spec.num_heads % (self.cp * self.tp):
            raise InvalidArgument(f"--cp-comm-type a2a splits attention heads over cp x tp = {self.cp * self.tp}: the "
                                  f"model's {spec.num_heads} heads do not divide by it (use p2p or allgather)")
        if (why_cp := sinks_cp_problem(spec, job.framework, self.cp, self.cp_comm_type)) is not None:
            raise InvalidArgument(why_cp)
        if spec.position == "learned" and spec.learned_positions and self.seq > spec.max_position_embeddings:
            raise InvalidArgument(f"--seq {self.seq} is longer than the model's {spec.max_position_embeddings} "
                                  f"learned positions")
        object.__setattr__(self, "_job", job)
        object.__setattr__(self, "_framework_reason", why)

    def _resolve_compile_components(self, framework: str) -> bool:
        """--compile-components sets --compile (model) and whether the loss is compiled; returns the latter."""
        parts = [p.strip() for p in str(self.compile_components).split(",") if p.strip()]
        unknown = sorted(set(parts) - {"model", "loss"})
        if unknown:
            raise InvalidArgument(f"--compile-components: unknown component '{unknown[0]}'; valid: model, loss "
                                  "(comma-separated, as torchtitan's compile.components)")
        if framework != "torchtitan":
            raise InvalidArgument(f"--compile-components is torchtitan's compile.components; the framework here is "
                                  f"{framework} (use --compile)")
        model, loss = "model" in parts, "loss" in parts
        if self.compile and not model:
            raise InvalidArgument("--compile compiles the model, and --compile-components leaves it out: "
                                  "give one of them")
        if not self.compile_loss and loss:
            raise InvalidArgument("--no-compile-loss leaves the loss out, and --compile-components has it: "
                                  "give one of them")
        object.__setattr__(self, "compile", model)
        object.__setattr__(self, "compile_loss", loss)
        return loss

    def _torchtitan_pipeline_defaults(self) -> None:
        """What torchtitan does with pipeline options left unset: two stages per rank for a multi-stage schedule
        (Interleaved1F1B: `stages_per_rank = 1 if is_single_stage_schedule else 2`), and its generated split where
        the layers do not divide over the stages (`estimate.pipeline.torchtitan_default_ends`)."""
        if self.schedule == "interleaved" and self.vpp == 1:
            object.__setattr__(self, "vpp", 2)
        if self.pp_first_layers is None and self.pp_last_layers is None:
            split = torchtitan_default_ends(self.model.spec.num_layers, self.pp, self.vpp)
            if split is not None:
                object.__setattr__(self, "pp_first_layers", split[0])
                object.__setattr__(self, "pp_last_layers", split[1])

    @property
    def job(self) -> TrainJob:
        """The training job every estimator is given (framework resolved by `choose_framework`)."""
        return self._job

    @property
    def framework_reason(self) -> str:
        return self._framework_reason

    @property
    def num_microbatches_per_step(self) -> int:
        """Micro-batches each data-parallel rank runs per optimizer step."""
        mp = self.tp * self.pp * self.cp
        dp = max(1, self.num_gpus // mp)
        return max(1, self.global_batch // (dp * self.micro_batch))

    @property
    def sharding(self) -> str:
        if self.fsdp is not None:
            return FSDP_MODES[self.fsdp]
        if self._sharded_by_default:
            return FSDP_MODES["full"]
        return ZERO_STAGES[self.zero or 0]

    def layout(self) -> Layout:
        schedule = self.schedule or ("interleaved" if self.vpp > 1 else "1f1b")
        # torchtitan's TP plan always splits the norms along the sequence (SequenceParallel in
        # torchtitan/models/llama3/infra/parallelize.py, apply_tp); Megatron-LM needs --sequence-parallel.
        sp = self.sp or (self.tp > 1 and self._job.framework == "torchtitan")
        return Layout(num_gpus=self.num_gpus, tp=self.tp, pp=self.pp, vpp=self.vpp, cp=self.cp, ep=self.ep,
                      etp=self.etp, sp=sp, sharding=self.sharding, shard_group=self.shard_group, schedule=schedule,
                      pp_first_layers=self.pp_first_layers, pp_last_layers=self.pp_last_layers)


def resolve_recompute(req: TrainRequest, framework: str) -> str:
    """gpuwise's recompute mode from whichever spelling the request uses (one at most): --recompute, torchtitan's
    --ac, Megatron's --recompute-granularity/-method/-num-layers, transformers' --gradient-checkpointing; else the
    framework's default."""
    megatron = (req.recompute_granularity, req.recompute_method, req.recompute_num_layers, req.recompute_modules)
    given = [name for name, on in (("--recompute", req.recompute is not None), ("--ac", req.ac is not None),
                                   ("--recompute-granularity/-method/-num-layers", any(x is not None for x in megatron)),
                                   ("--gradient-checkpointing", req.gradient_checkpointing)) if on]
    if len(given) > 1:
        raise InvalidArgument(f"{given[0]} and {given[1]} both set: give activation checkpointing once")
    if req.ac is not None:
        mode = {"selective": "op"}.get(req.ac, req.ac)
        if mode not in ("none", "op", "full") and not mode.startswith("layer:"):
            raise InvalidArgument(f"--ac: unknown mode '{req.ac}'; valid: none, op, layer:N, full")
        recompute_plan(mode)
        return "full" if mode == "layer:1" else mode
    if any(x is not None for x in megatron):
        granularity, method, count, modules = megatron
        if granularity is None:
            raise InvalidArgument("--recompute-method/--recompute-num-layers/--recompute-modules need "
                                  "--recompute-granularity")
        if granularity == "selective":
            if method is not None or count is not None:
                raise InvalidArgument("--recompute-method and --recompute-num-layers apply to --recompute-granularity "
                                      "full only")
            if modules is None:
                return "selective"
            mode = "selective:" + "+".join(sorted({m.strip() for m in modules.split(",") if m.strip()}))
            return "selective" if recompute_plan(mode).kind == "selective" else mode
        if modules is not None:
            raise InvalidArgument("--recompute-modules applies to --recompute-granularity selective only")
        count = 1 if count is None else count
        require_positive_int("--recompute-num-layers", count, 1 << 16)
        if method == "block":
            return f"block:{count * req.vpp}"
        return "full" if count == 1 else f"uniform:{count}"
    if req.gradient_checkpointing:
        return "full"
    if req.recompute is None:
        return "full" if framework in ("hf", "unsloth") and req.finetune != "full" else "none"
    recompute_plan(req.recompute)
    return framework_mode(req.recompute, framework)


def choose_framework(req: TrainRequest) -> tuple[str, str]:
    """The implementation profile, and why (when --framework is not given)."""
    if req.framework is not None:
        return req.framework, "as requested"
    if req.finetune != "full":
        return "hf", "LoRA/QLoRA fine-tuning is usually transformers + PEFT"
    if req.precision == "nvfp4":  # the two trainers that run it (NVFP4_FRAMEWORKS)
        if req.fsdp is not None:
            return "torchtitan", "NVFP4 under FSDP2: torchtitan with torchao's NVFP4 converter"
        return "megatron", "NVFP4: Megatron-Core with Transformer Engine's NVFP4BlockScaling recipe"
    if req.fsdp is not None:
        return "fsdp", "--fsdp given: PyTorch FSDP2"
    if req.zero is not None:
        return "deepspeed", "--zero given: DeepSpeed ZeRO"
    if max(req.tp, req.pp, req.cp, req.ep) > 1:
        why = ("an optimizer Megatron-LM does not run" if optimizer_problem("megatron", req.optimizer) is not None
               else "torchao's float8" if req.fp8_backend == "torchao" else None)
        if why is None:
            return "megatron", "model parallelism given: Megatron-LM"
        if (problem := model_problem("torchtitan", req.model.spec)) is not None:
            raise InvalidArgument(f"model parallelism with {why} would be torchtitan, but {problem}")
        return "torchtitan", f"model parallelism given, with {why}: torchtitan"
    return "fsdp", "default: PyTorch-native training (FSDP2 / DDP) with flash attention"


@dataclass(slots=True, kw_only=True)  # not frozen: built per configuration (cheaper)
class TrainPerf:
    """Predicted speed, cost and energy of the job (the performance model on top of the memory model)."""

    step: StepTime
    profile: DeviceProfile
    topology: Topology
    peak_dtype: str
    peak_flops_per_gpu: float | None
    """The MFU/HFU denominator: dense peak of the GEMM dtype on one GPU (None: unknown)."""
    mfu: float | None
    hfu: float | None
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    train_tokens: float | None
    train_time_s: float | None
    gpu_hours: float | None
    usd_per_gpu_hour: float | None
    usd_source: str
    cost_usd: float | None
    energy_kwh: float | None
    """At its board power (TDP, or --power-limit) for every GPU over the run: an upper-bound estimate (GPUs rarely sit at TDP)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainResult:
    request: TrainRequest
    framework: str
    framework_reason: str
    layout: Layout
    params: ParamCounts
    memory: TrainMemory
    flops: StepFlops
    num_microbatches: int
    """Micro-batches per rank per step (gradient accumulation x pipeline)."""
    max_micro_batch: int | None
    """Largest micro-batch dividing the per-rank batch that fits; None if even 1 does not."""
    perf: TrainPerf
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return self.memory.required <= self.request.gpu.memory_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.request.gpu.memory_bytes - self.memory.total

    @property
    def tight(self) -> bool:
        """Fits, but within the fragmentation GMLake measured on average (FRAGMENTATION_RISK)."""
        return self.fits and self.memory.total * (1 + FRAGMENTATION_RISK) > self.request.gpu.memory_bytes


def train(req: TrainRequest) -> TrainResult:
    spec = req.model.spec
    job = req.job
    layout = req.layout()
    validate_layout(layout, spec, seq=req.seq, global_batch=req.global_batch, micro_batch=req.micro_batch)
    if (problem := megatron_overlap_problem(job, layout)) is not None:
        raise InvalidArgument(problem)
    per_rank = req.global_batch // layout.dp
    mem_model = layout_memory(spec, layout, job)
    memory = mem_model.at(req.micro_batch, per_rank // req.micro_batch)
    best = None
    # Memory grows with the micro-batch: scan the divisors upward until one does not fit.
    for b in divisors(per_rank):
        if required_bytes(*mem_model.peak(b, per_rank // b)) > req.gpu.memory_bytes:
            break
        best = b
    flops = job_flops(spec, job, global_batch=req.global_batch, pp=layout.pp)
    perf = _perf(req, layout, memory, flops)
    return TrainResult(request=req, framework=job.framework, framework_reason=req.framework_reason, layout=layout,
                       params=param_counts(spec), memory=memory, flops=flops,
                       num_microbatches=per_rank // req.micro_batch, max_micro_batch=best, perf=perf,
                       assumptions=_assumptions(req, job.framework, layout, memory))


def _perf(req: TrainRequest, layout: Layout, memory: TrainMemory, flops: StepFlops) -> TrainPerf:
    profile, topo = cluster(req.gpu, num_gpus=req.num_gpus, gpus_per_node=req.gpus_per_node,
                            inter_node_gbps=req.inter_node_gbps, profile=req.profile)
    per_rank = req.global_batch // layout.dp
    step = step_time(req.model.spec, layout, req.job, profile=profile, topo=topo, micro_batch=req.micro_batch,
                     num_microbatches=per_rank // req.micro_batch, states=memory.states)
    t = step.step_time_s
    dtype = gemm_dtype(req.gpu.peak_flops, req.precision)
    peak = req.gpu.peak_flops.get(dtype)
    n = req.num_gpus
    tokens_per_s = flops.tokens / t
    price, price_source = (req.usd_per_gpu_hour, "as given") if req.usd_per_gpu_hour else rental_price(req.gpu)
    run_s = req.train_tokens / tokens_per_s if req.train_tokens else None
    gpu_hours = run_s * n / 3600 if run_s is not None else None
    cost = gpu_hours * price if (gpu_hours is not None and price is not None) else None
    energy = gpu_hours * req.gpu.power_w / 1000 if (gpu_hours is not None and req.gpu.power_w) else None
    return TrainPerf(step=step, profile=profile, topology=topo, peak_dtype=dtype, peak_flops_per_gpu=peak,
                     mfu=utilization(flops.model, t, n, peak), hfu=utilization(flops.hardware, t, n, peak),
                     tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / n,
                     train_tokens=req.train_tokens, train_time_s=run_s, gpu_hours=gpu_hours, usd_per_gpu_hour=price,
                     usd_source=price_source, cost_usd=cost, energy_kwh=energy)


def fp8_family(req: TrainRequest) -> str | None:
    """The fp8 quantization kernel family the request is priced with (`step_time.fp8_quantize_kind`), or None
    where no GEMM runs in fp8 (another precision, or a GPU without fp8 tensor cores: `flops.gemm_dtype`)."""
    if req.precision != "fp8" or "fp8" not in req.gpu.peak_flops:
        return None
    return fp8_quantize_kind(req.job.fp8_kernels, req.compile)


def recurrent_kind(spec) -> str | None:
    """The kind of a hybrid model's recurrent layers (what speed confidence checks coverage of); None without any."""
    return spec.linear.kind if spec.linear is not None and spec.num_linear_layers else None


def train_confidence(r: TrainResult) -> SpeedConfidence:
    """The error band of this configuration's category on held-out published runs, and what lies outside them."""
    req, layout = r.request, r.layout
    gpu, spec = req.gpu, req.model.spec
    category = speed_category(moe=spec.moe is not None, cp=layout.cp, seq=req.seq, vendor=gpu.vendor,
                              architecture=gpu.architecture or "", precision=req.precision,
                              framework=req.job.framework, tp=layout.tp, pp=layout.pp)
    return speed_confidence(category=category, gpu=gpu.id, precision=req.precision, framework=req.job.framework,
                            degrees={"tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep},
                            num_gpus=req.num_gpus, seq=req.seq, finetune=req.finetune, power_limit_w=gpu.power_limit_w,
                            optimizer=req.optimizer,
                            fp8_kernels=fp8_family(req), mixer=recurrent_kind(spec),
                            eager_moe_host=eager_moe_host(req), attention_share=r.flops.forward.attention_share)


def eager_moe_host(req: TrainRequest) -> str | None:
    """The host CPU (`GPU.host_cpu`, x86 when unset) of a Megatron-Core MoE run without CUDA graph scopes, whose
    kernel launches gpuwise does not price; None for anything else."""
    if req.model.spec.moe is None or req.job.framework != "megatron" or req.job.cuda_graph_scope:
        return None
    return req.gpu.host_cpu or "x86"


def _nvfp4_bytes(kind: str) -> float:
    """Bytes moved per element quantizing an activation or gradient to both NVFP4 copies (`NVFP4_QUANTIZE`)."""
    q = NVFP4_QUANTIZE[kind]
    return q.cast + q.transpose


def _assumptions(req: TrainRequest, framework: str, layout: Layout, mem: TrainMemory) -> tuple[str, ...]:
    out = [f"framework profile '{framework}'; peak at the {mem.moment.replace('-', ' ')} on pipeline stage "
           f"{mem.stage} of {layout.pp} (rank 0 of that stage's data-parallel group; all its ranks are alike)"]
    if mem.moment != "backward" or mem.grads > 0 or mem.states.grads == 0:
        grads = "gradients counted in full (as from the second micro-batch of accumulation on)"
    else:
        grads = ("no gradients yet at the start of the backward (one micro-batch per step, and zero_grad("
                 "set_to_none=True) freed the last step's); they are counted at the optimizer step")
    if layout.tp > 1 and float8_tp_all_gathers(req.job, gemm_dtype(req.gpu.peak_flops, req.precision)):
        out.append("torchtitan's TP under torchao's tensorwise float8: the all-gathers move fp8 activations and "
                   "gradients, the reduce-scatters 16-bit ones (torchao's float8 tensor-parallel styles; "
                   "--float8-recipe rowwise keeps every TP collective 16-bit)")
    if req._sharded_by_default and layout.dp * layout.cp > 1:
        out.append(f"{framework} shards with FSDP2 over the data-parallel ranks unless told otherwise (full shard); "
                   "--zero 0 for plain replication, --fsdp for another mode")
    if req.attention == "flash":
        out.append(f"activations with flash attention (no materialized scores); {grads}")
    else:
        out.append("unfused attention: the softmax output (and dropout mask and output) of every head is saved, "
                   f"a x s^2 per sequence; {grads}")
    if framework == "hf" and req.finetune == "full" and req.precision in ("bf16", "fp16", "fp8"):
        out.append("mixed precision as torch.autocast: fp32 weights (master) plus cached 16-bit casts (params)")
    fp8_params = req.fp8_param_gather and req.precision == "fp8" and framework == "megatron"
    if req.finetune != "full":
        base = ("NF4 with double quantization" if req.finetune == "qlora" else
                ("fp8 (Megatron's fp8 parameters)" if fp8_params else "the compute dtype"))
        out.append(f"LoRA rank {req.lora_rank} on {req.lora_targets}, adapters in fp32 (PEFT's default), "
                   f"frozen base in {base}"
                   f"; lora_dropout {req.lora_dropout:g}: frozen matrices keep no inputs, "
                   + ("each adapter keeps its own copy of its input" if adapter_input_bytes(req.job) > 0
                      else "the adapters share their matrices' inputs"))
        if req.job.kbit_upcast:
            out.append("PEFT's prepare_model_for_kbit_training (TRL calls it): fp32 norms turn the residual stream "
                       "and the MLP to fp32 (--no-kbit-upcast for trainers that skip it)")
    if req.job.recompute == "selective" and framework != "megatron" and req.attention == "flash":
        out.append("selective recompute = the attention core only (Megatron's); with flash attention it saves almost "
                   "nothing (torchtitan's per-op policy is --ac op)")
    if req.attention == "flash" and framework != "megatron":
        if req.job.flash_attn_triton:
            fwd, bwd = (flash_attn_triton_share(backward=b) for b in (False, True))
            out.append(f"attention: the flash-attn package's Triton kernels of 2022 (--attn-implementation triton, "
                       f"llm-foundry's attn_impl triton), at {fwd:.2f}x the package's FlashAttention-2 rate forward "
                       f"and {bwd:.2f}x backward: a proxy from the FlashAttention-2 paper's A100 comparisons (no "
                       "measurement of this kernel is published), held on every GPU")
        elif req.job.attn_package is not None:
            (fwd, curve), (bwd, _) = (package_rate(req.job.attn_package, backward=b) for b in (False, True))
            name = "FlashAttention-" + req.job.attn_package[-1]
            out.append(f"attention: {name} (--attn-implementation {req.job.attn_package}), at {fwd:.2f}x the rate of "
                       f"cuDNN's fused attention on {req.gpu.name} forward and {bwd:.2f}x backward at 16k tokens and "
                       f"head dim 128, along the {curve} family's sequence curve (catalog/data/attention_kernels.toml "
                       "[package.*] gives each share's source)")
        elif req.gpu.vendor == "amd":
            out.append("attention on ROCm: the flash-attn package's Composable Kernel build, at its measured rate"
                       if req.job.flash_attn_package else
                       "attention on ROCm: PyTorch's SDPA runs AOTriton's kernels (no cuDNN backend there; Composable "
                       "Kernel with TORCH_ROCM_FA_PREFER_CK=1), its backward at AOTriton's own tuning measurements, "
                       "its forward at the flash-attn CK build's rate (optimistic: one published AOTriton forward, "
                       "PyTorch 2.10 on an MI300X, runs ~0.9x that at 8k tokens and ~0.75x at 2k); "
                       "--attn-implementation flash_attention_2 for the flash-attn package")
        elif req.job.flash_attn_package:
            out.append("attention: the flash-attn package's FlashAttention-2 kernels (--attn-implementation "
                       "flash_attention_2)")
        else:
            flash = req.job.sdpa_flash_on(req.gpu)
            if req.sdpa_backend is not None or flash:
                why = ""
            elif framework == "torchtitan":
                why = " (torchtitan asks for it first)"
            else:
                why = (f" (PyTorch 2.11 and later try it first on {req.gpu.name}; --sdpa-backend flash for an older "
                       "PyTorch's default)")
            out.append("attention: PyTorch SDPA's " + ("FlashAttention-2 kernels (its flash backend)" if flash
                       else "cuDNN backend" + why) + "; --sdpa-backend flash|cudnn to choose")
    if req.job.te_fp8 and framework in PYTORCH_NATIVE:
        out.append("Transformer Engine fp8 under FSDP: called without is_first_microbatch, it quantizes each weight "
                   "in every forward and keeps no fp8 copy; linear inputs saved in fp8")
    elif req.job.te_fp8:
        out.append("Transformer Engine fp8 weights: " + ("the fp8 weight and its transpose (Hopper's fp8 GEMMs take "
                   "K-major operands only), 2 B per block-matrix element" if req.job.fp8_transpose_cache else
                   "the fp8 weight alone (Blackwell, or no transpose cache), 1 B per block-matrix element"))
    if req.precision == "fp8" and req.model.spec.is_moe and routed_experts_16bit(framework, True):
        out.append("fp8: routed experts in bf16 (torchtitan's float8 and MXFP8 converters swap Linear modules only; its "
                   "grouped experts' own converter, Float8GroupedExpertsConverter, is opt-in and not modelled)")
    if req.precision == "nvfp4":
        te = req.job.fp8_kernels == "te"
        experts = "" if te or not req.model.spec.is_moe else (
            "; routed experts in bf16 (torchtitan's converter swaps nn.Linear only, not its grouped experts)")
        out.append("NVFP4: " + NVFP4_FRAMEWORKS[framework] + "; every block linear's three GEMMs (forward, input and "
                   "weight gradients) in NVFP4" + experts + ", attention, the LM head and embeddings in bf16"
                   + (", the router too" if te else "") + "; each activation "
                   "and gradient quantized to rowwise and columnwise (Hadamard-transformed) copies at "
                   + (f"{_nvfp4_bytes('te'):.2f} B per element (Transformer Engine, measured on a B300); weights "
                      f"quantized once per step and cached, both copies, {NVFP4_WEIGHT_CACHE_BYTES:.2f} B per "
                      "block-matrix element" if te else
                      f"{_nvfp4_bytes('compiled'):.1f} B per element (torchao's Triton kernels, measured on a GB200); "
                      "weights re-quantized in every pass")
                   + f"; linear inputs saved as NVFP4 ({NVFP4_ELEMENT_BYTES:.2f} B per element)"
                   + ("" if req.num_layers_at_start_in_bf16 or req.num_layers_at_end_in_bf16 else
                      "; every layer in NVFP4 (--num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 for "
                      "recipes that keep the first or last layers in bf16)"))
    if req.job.quantized_gemms and (req.num_layers_at_start_in_bf16 or req.num_layers_at_end_in_bf16):
        out.append(f"the first {req.num_layers_at_start_in_bf16} and last {req.num_layers_at_end_in_bf16} layers "
                   f"in bf16 (GEMMs, saved inputs, no quantized weight copies), the others in {req.precision}; MFU "
                   f"still divides by the {req.precision} peak")
    if fp8_family(req) in ("compiled", "eager"):  # torchao's float8
        out.append("torchao float8: " + ("compiled casts, an amax pass then the cast, with separate transposed copies"
                   if req.compile else "without --compile every cast is six eager kernels and every transposed fp8 "
                   "copy a strided byte copy: an fp8 linear layer ran 0.56-0.76x as fast as in bf16 on an H200 "
                   "(1.45-1.52x compiled); torchtitan and torchao ask for --compile"))
    if "activation" in req.job.fp8_saved:
        out.append("--activation-func-fp8-input-store: the SwiGLU keeps its input in fp8")
    if "attention" in req.job.fp8_saved:
        out.append("--fp8-dot-product-attention: q, k, v and the output saved in fp8; attention time is still the "
                   "16-bit kernel's (no fp8 attention curve in the catalog)")
    if req.model.spec.moe is not None:
        if not req.job.moe_permute_fused:
            how = (f"PyTorch's index_select, probability weighting and atomic scatter_add_, about "
                   f"{MEGATRON_UNFUSED_PERMUTE_BYTES / PERMUTE_BYTES:.1f}x the bytes' time (measured on an H200); "
                   "--moe-permute-fusion for Transformer Engine's fused kernels" if framework == "megatron" else
                   f"PyTorch's gather and atomic index_add_, about {UNFUSED_PERMUTE_BYTES / PERMUTE_BYTES:.1f}x the "
                   "bytes' time (measured on an H200)")
        elif req.moe_token_dispatcher == "flex":
            how = ("fused: HybridEP's dispatch kernels, or Transformer Engine's after DeepEP's (the flex dispatcher; "
                   "the recipe sets --moe-permute-fusion)")
        else:
            how = "Transformer Engine's fused kernels (--moe-permute-fusion)"
        out.append("MoE permute and unpermute: " + how)
        if (backend := req.job.flex_backend) is not None and layout.ep > 1:
            table = network_defaults()["ep_dispatch"][backend]
            rates = ", ".join(f"{v:g} GB/s over {n} nodes" for n, v in table["logical_gb_s"].items())
            out.append(f"MoE dispatch and combine across nodes: {backend}'s kernels at their measured rate per GPU "
                       f"({rates}, with a {table['nic_gbps']} Gb/s NIC per GPU, counting a token's copy for its own "
                       "node too; scaled to this network's NIC); inside one NVLink domain NCCL's all-to-all")
        moe = req.model.spec.moe
        if framework == "megatron" and (moe.expert_bias or moe.clamped_glu):
            extras = " and ".join(x for x, on in (("output bias", moe.expert_bias),
                                                 ("clamped activation", moe.clamped_glu)) if on)
            out.append(f"MoE experts' {extras}: " + ("inside Transformer Engine's fused grouped-MLP ops "
                       "(--use-transformer-engine-op-fuser)" if req.use_transformer_engine_op_fuser else
                       "PyTorch ops of their own in Megatron-Core's TEGroupedMLP (a loop over the local experts), "
                       "their bytes measured on an H200; "
                       "--use-transformer-engine-op-fuser fuses them"))
    if (gap := moe_sync_gap_s(req.model.spec, req.job, req.gpu)) > 0:
        fwd, act = moe_host_syncs(req.model.spec, req.job)
        tokens = not req.job.moe_pad_expert_input_to_capacity
        many = fwd + act > 1
        pad = "" if not tokens or req.moe_token_dispatcher == "flex" else (
            "; --moe-pad-expert-input-to-capacity the token counts' one" if many else
            " or --moe-pad-expert-input-to-capacity")
        host = (f"; {MOE_SYNC_GAP_S * 1e3:.2f} ms measured on an x86 host, x{host_op_time_ratio(req.gpu):g} for "
                "Grace's time per host operation" if req.gpu.host_cpu == "grace" else "")
        why = " and ".join(w for w, on in (("for its routed token counts", tokens),
                                           ("for its GLU offset (torch.tensor(linear_offset, device=...) in "
                                            "weighted_bias_quick_geglu_impl; --use-transformer-engine-op-fuser "
                                            "avoids it)", fwd - tokens > 0)) if on)
        times = f"{fwd} x " if fwd > 1 else ""
        again = f", {act} x more in each recompute of moe_act" if act else ""
        out.append(f"eager Megatron-Core MoE: each MoE layer's forward waits {times}{gap * 1e3:.2f} ms on the host "
                   f"{why}{again} (host_sync{host}); --moe-a2a-overlap or --cuda-graph-scope full_iteration"
                   + (f" remove the waits{pad}" if many else f"{pad} remove the wait"))
    if framework == "torchtitan" and layout.pp > 1:
        per = stage_layers(layout, req.model.spec.num_layers)
        out.append(f"torchtitan pipeline: {layout.pp} ranks x {layout.vpp} stage(s) each, layers per rank "
                   f"{', '.join(map(str, per))}" + ("; FSDP2 keeps each stage unsharded through the micro-batches "
                   "(reshard_after_forward=False under pipelining) and reduce-scatters once per step"
                   if layout.sharding_spec.params else ""))
    if req.compile:
        out.append("torch.compile: the blocks keep matmul and attention tensors; pointwise ops are recomputed"
                   + ("; the loss is compiled too: 16-bit logits and gradient, no fp32 copy (torchtitan's "
                      "compile.components; --no-compile-loss if it is not)" if req.job.compile_loss else ""))
    elif req.job.compile_loss:
        out.append("torch.compile on the loss only (compile.components ['loss']): 16-bit logits and gradient, no "
                   "fp32 copy; the blocks run eager")
    if req.job.loss_chunks > 1:
        out.append(f"cross-entropy over {req.job.loss_chunks} chunks: one chunk's fp32 temporaries at a time")
    if layout.sp and layout.tp == 1:
        out.append("--sp without tensor parallelism has no effect")
    max_pos = req.model.spec.max_position_embeddings
    if max_pos is not None and req.seq > max_pos:
        out.append(f"--seq {req.seq:,} is beyond the model's maximum context ({max_pos:,}, max_position_embeddings): "
                   "training there extends the context (RoPE scaling in the config); the cost is priced as asked")
    peaks = req.gpu.peak_flops
    if req.precision in ("bf16", "bf16-pure") and "bf16" not in peaks:
        out.append(f"{req.gpu.name} has no bf16 tensor cores: bf16 runs emulated (slow); fp16 is the usual choice")
    if req.precision == "fp8" and "fp8" not in peaks:
        out.append(f"{req.gpu.name} has no fp8 tensor cores")
    out.append("runtime = CUDA context 0.5 GiB + cuBLAS workspace + NCCL buffers; allocator allowance 5% "
               "(Megatron-LM's estimate)")
    return tuple(out)
