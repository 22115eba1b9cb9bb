"""`gpuwise bench train`'s configuration: the model, batch and layout from the command's options or a plan file,
checked before any GPU work (every rank checks alike).

The model is the plain decoder of torch_model.py built from the spec, optionally shrunk to `--layers`; the layout
is data parallelism (DDP or FSDP2), tensor parallelism (+ sequence parallelism) and per-block checkpointing
(none, full, op, layer:N). A `gpuwise plan --json` file gives its first plan's layout; what bench train cannot run (PP, CP, EP, offload) is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..catalog.models import LoadedModel, load_model
from ..errors import InvalidArgument, require_positive_int
from ..estimate.job import sdpa_prefers_cudnn
from ..estimate.parallel import sp_splits, tp_conflict
from ..estimate.recompute import framework_mode, recompute_plan
from ..jsonfile import read_json_object
from .dist import DistEnv
from .torch_model import RECOMPUTE_MODES, check_supported


def plain_sdpa_backend(gpu=None) -> str:
    """The kernel a plain `F.scaled_dot_product_attention` call (the bench model's) runs first here: on a CUDA device,
    cuDNN where PyTorch's own order puts it first (2.10 and later with a runtime cuDNN past 9.15, compute capability 9.x
    or 10.x, TORCH_CUDNN_SDPA_DEPRIORITIZED unset: sdp_utils.cpp check_prefer_cudnn_attention), else flash; without
    one (re-predicting a saved run on a CPU), what today's PyTorch does on catalog GPU `gpu`
    (`estimate.job.sdpa_prefers_cudnn`), flash when no GPU is given."""
    try:
        import torch

        if torch.cuda.is_available() and not torch.version.hip:
            major, _ = torch.cuda.get_device_capability()
            cudnn = torch.backends.cudnn.version() or 0
            release = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
            off = os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "") not in ("", "0")
            return "cudnn" if release >= (2, 10) and major in (9, 10) and cudnn > 91500 and not off else "flash"
    except ImportError:
        pass
    return "cudnn" if gpu is not None and sdpa_prefers_cudnn(gpu) else "flash"


DEFAULT_SEQ = 2048
"""bench train's sequence when none is given, capped at the model's own maximum (GPT-2 has 1,024 positions)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    model: LoadedModel
    """The model as built (shrunk when `layers` < the full model's)."""
    full: LoadedModel
    layers: int
    seq: int
    micro_batch: int
    global_batch: int
    tp: int
    sp: bool
    sharding: str
    """none (one data-parallel rank), ddp, fsdp-full or fsdp-grad-op."""
    recompute: str
    precision: str
    optimizer: str
    optimizer_impl: str
    """fused or foreach (torch.optim's implementations)."""
    steps: int
    warmup_steps: int
    world_size: int
    local_world_size: int

    @property
    def dp(self) -> int:
        return self.world_size // self.tp

    @property
    def accumulation(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq

    def train_options(self, gpu=None) -> dict:
        """The same job as `gpuwise train` options (`gpu`: the catalog GPU it runs on, for SDPA's kernel when this
        machine has no CUDA device: `plain_sdpa_backend`)."""
        sh = {"none": {}, "ddp": {"zero": 0}, "fsdp-full": {"fsdp": "full"}, "fsdp-grad-op": {"fsdp": "grad-op"}}
        return dict(num_gpus=self.world_size, seq=self.seq, global_batch=self.global_batch,
                    micro_batch=self.micro_batch, tp=self.tp, sp=self.sp, recompute=self.recompute,
                    precision=self.precision, optimizer=self.optimizer, optimizer_impl=self.optimizer_impl,
                    framework="torchtitan",
                    # the benchmark's own model calls plain F.scaled_dot_product_attention: SDPA's own order
                    sdpa_backend=plain_sdpa_backend(gpu), gpus_per_node=self.local_world_size, **sh[self.sharding])

    def describe(self) -> str:
        parts = [f"dp {self.dp}"] + ([f"tp {self.tp}" + (" + sp" if self.sp else "")] if self.tp > 1 else [])
        parts += [self.sharding, f"micro-batch {self.micro_batch} x {self.accumulation} accumulation",
                  f"global batch {self.global_batch} x {self.seq} tokens", f"recompute {self.recompute}",
                  self.precision, f"{self.optimizer} ({self.optimizer_impl})"]
        return ", ".join(parts)


def _from_plan(path: str) -> dict:
    doc = read_json_object(path, "--plan")
    plans = doc.get("plans")
    if not plans:
        raise InvalidArgument(f"--plan: {path} holds no plans (write one with `gpuwise plan ... --json`)")
    p = plans[0] if isinstance(plans, list) else None
    if not isinstance(p, dict):
        raise InvalidArgument(f"--plan: {path} is not a `gpuwise plan --json` document (plans[0] is not an object)")
    for key in ("tp", "pp", "cp", "ep", "micro_batch"):
        require_positive_int(f"--plan: plans[0].{key}", p.get(key, 1), 1 << 20)
    for key in ("seq", "global_batch", "num_gpus"):
        if doc.get(key) is not None:
            require_positive_int(f"--plan: {key}", doc[key], 1 << 30)
    for key in ("pp", "cp", "ep"):
        if (p.get(key) or 1) > 1:
            raise InvalidArgument(f"--plan: the plan uses {key.upper()} {p[key]}; bench train runs data, FSDP and "
                                  "tensor(+sequence) parallelism only (use the plan's --emit recipes with a trainer)")
    sharding = {"ddp": "ddp", "fsdp-full": "fsdp-full", "zero3": "fsdp-full", "fsdp-grad-op": "fsdp-grad-op",
                "zero2": "fsdp-grad-op"}.get(p.get("sharding"))
    if sharding is None:
        raise InvalidArgument(f"--plan: sharding '{p.get('sharding')}' has no FSDP2/DDP equivalent in bench train")
    if p.get("offload"):
        raise InvalidArgument("--plan: CPU offload is not run by bench train")
    return dict(model_id=doc.get("model", {}).get("id"), num_gpus=doc.get("num_gpus"), seq=doc.get("seq"),
                global_batch=doc.get("global_batch"), tp=p.get("tp", 1), sp=bool(p.get("sp")), sharding=sharding,
                micro_batch=p.get("micro_batch", 1), recompute=p.get("recompute", "none"))


def _recompute(mode: str) -> str:
    """The checkpointing mode, in gpuwise's spelling of torchtitan's (torchtitan's `selective` is its per-op policy)."""
    mode = framework_mode(mode, "torchtitan")
    if recompute_plan(mode).kind not in ("none", "full", "op", "layer"):
        raise InvalidArgument(f"recompute '{mode}': bench train runs {RECOMPUTE_MODES} (torchtitan's modes)")
    return mode


def _sharding(args, dp: int) -> str:
    if args.fsdp and args.zero == 0:
        raise InvalidArgument("--fsdp and --zero 0 conflict (FSDP shards, ZeRO-0 is plain DDP)")
    if args.fsdp or args.zero == 3:
        return "fsdp-" + (args.fsdp or "full")
    return "ddp" if dp > 1 else "none"


def configure(args, env: DistEnv) -> BenchConfig:
    """The benchmark's configuration from the CLI options (or a plan file), checked before any GPU work."""
    full = load_model(args.model)
    plan = _from_plan(args.plan) if args.plan else None
    if plan and plan["num_gpus"] not in (None, env.world_size):
        raise InvalidArgument(f"--plan: the plan is for {plan['num_gpus']} GPUs, torchrun started {env.world_size}")
    if plan and plan["model_id"] not in (None, full.id):
        raise InvalidArgument(f"--plan: the plan is for {plan['model_id']}, not {full.id}")
    tp = plan["tp"] if plan else args.tp
    if env.world_size % tp:
        raise InvalidArgument(f"--tp {tp} does not divide the {env.world_size} ranks torchrun started")
    dp = env.world_size // tp
    micro = plan["micro_batch"] if plan else args.micro_batch
    seq = (plan["seq"] if plan else None) or args.seq or min(
        DEFAULT_SEQ, full.spec.learned_positions or full.spec.max_position_embeddings or DEFAULT_SEQ)
    global_batch = (plan["global_batch"] if plan else None) or args.global_batch or dp * micro
    if global_batch % (dp * micro):
        raise InvalidArgument(f"global batch {global_batch} is not a multiple of dp {dp} x micro-batch {micro}")
    sharding = plan["sharding"] if plan else _sharding(args, dp)
    if env.world_size == 1 and sharding == "ddp":
        sharding = "none"  # one rank: nothing to replicate
    if env.world_size == 1 and sharding.startswith("fsdp"):
        raise InvalidArgument("FSDP shards over ranks: run under torchrun with 2 or more (e.g. torchrun "
                              "--nproc-per-node 2 -m gpuwise bench train ...), or drop --fsdp")
    recompute = _recompute(plan["recompute"] if plan else args.recompute)
    sp = plan["sp"] if plan else args.sp
    if sp and tp == 1:
        raise InvalidArgument("--sp needs --tp 2 or more (sequence parallelism splits the TP group's work)")
    if tp > 1 and dp > 1 and not sharding.startswith("fsdp"):
        raise InvalidArgument("tensor parallelism with data parallelism runs FSDP2 on a 2-D mesh here: add --fsdp "
                              "full (or grad-op)")
    spec = full.spec
    check_supported(spec)
    if tp > 1:
        conflict = tp_conflict(spec, tp)  # the rule `gpuwise train` and the planner apply
        if conflict is not None:
            raise InvalidArgument(f"--tp {tp} does not divide {conflict[0]} ({conflict[1]})")
        if spec.qk_norm == "full":
            raise InvalidArgument("tensor parallelism of full-width q/k norms (OLMo 2) is not supported")
        if sp and spec.learned_positions:
            raise InvalidArgument("--sp with a learned position table (GPT-2 style) is not supported; use --tp alone")
        if sp and not sp_splits(seq, 1, tp):  # the rule `gpuwise train` applies
            raise InvalidArgument(f"--sp: the sequence ({seq}) must divide by --tp {tp}")
    layers = args.layers or spec.num_layers
    if layers > spec.num_layers:
        raise InvalidArgument(f"--layers {layers}: {full.id} has {spec.num_layers}")
    if spec.max_position_embeddings and spec.learned_positions and seq > spec.learned_positions:
        raise InvalidArgument(f"--seq {seq}: {full.id} has {spec.learned_positions} learned positions")
    model = full if layers == spec.num_layers else _shrunk(full, layers)
    return BenchConfig(model=model, full=full, layers=layers, seq=seq, micro_batch=micro, global_batch=global_batch,
                       tp=tp, sp=sp, sharding=sharding, recompute=recompute, precision=args.precision,
                       optimizer=args.optimizer, optimizer_impl=getattr(args, "optimizer_impl", "fused"),
                       steps=args.steps, warmup_steps=args.warmup_steps,
                       world_size=env.world_size, local_world_size=env.local_world_size)


def _shrunk(m: LoadedModel, layers: int) -> LoadedModel:
    spec = m.spec
    small = replace(spec, num_layers=layers, layer_types=spec.layer_types[:layers] if spec.layer_types else ())
    return replace(m, id=f"{m.id} ({layers} of {spec.num_layers} layers)", spec=small)

