"""`gpuwise bench train`: real training steps of a model under a layout, next to gpuwise's prediction.

Run under torchrun (one process per GPU; `--device cpu` uses gloo on CPU). The model is the plain decoder of
torch_model.py built from the spec (optionally shrunk to `--layers`), the layout is applied with PyTorch's own
APIs: a (dp, tp) DeviceMesh, tensor parallelism (`parallelize_module`: column/row-wise linears, vocab-parallel
embedding, SequenceParallel norms with --sp), FSDP2 `fully_shard` per block and at the root with a bf16
`MixedPrecisionPolicy`, or DDP, and per-block activation checkpointing. Steps run on random tokens: warm-up steps,
then timed steps (each ended with a device sync: this is a benchmark), the slowest rank's time per step counts.

The prediction is `gpuwise train` for the same model (same layers), batch and layout on the catalog GPU the device
is, with framework `torchtitan` (FSDP2 + DTensor, what this runner does). When the model was shrunk, the full
model's prediction is shown too, and the measured step time is scaled by the predicted ratio full / shrunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..catalog.gpus import GPU, get_gpu
from ..catalog.models import LoadedModel, load_model
from ..errors import GpuwiseError, InvalidArgument, UnknownGPUError, require_positive_int
from ..jsonfile import read_json_object
from . import dist
from ._deps import set_tf32


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

    def train_options(self) -> dict:
        """The same job as `gpuwise train` options."""
        sh = {"none": {}, "ddp": {"zero": 0}, "fsdp-full": {"fsdp": "full"}, "fsdp-grad-op": {"fsdp": "grad-op"}}
        return dict(num_gpus=self.world_size, seq=self.seq, global_batch=self.global_batch,
                    micro_batch=self.micro_batch, tp=self.tp, sp=self.sp, recompute=self.recompute,
                    precision=self.precision, optimizer=self.optimizer, framework="torchtitan",
                    gpus_per_node=self.local_world_size, **sh[self.sharding])

    def describe(self) -> str:
        parts = [f"dp {self.dp}"] + ([f"tp {self.tp}" + (" + sp" if self.sp else "")] if self.tp > 1 else [])
        parts += [self.sharding, f"micro-batch {self.micro_batch} x {self.accumulation} accumulation",
                  f"global batch {self.global_batch} x {self.seq} tokens", f"recompute {self.recompute}",
                  self.precision, self.optimizer]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    step_times_s: tuple[float, ...]
    """Per timed step, the slowest rank's."""
    peak_allocated_bytes: float | None
    peak_reserved_bytes: float | None
    """Max over ranks of torch.cuda.max_memory_allocated / reserved (None on CPU)."""
    params_built: int

    @property
    def step_time_s(self) -> float:
        xs = sorted(self.step_times_s)
        return xs[len(xs) // 2]


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    config: BenchConfig
    device: str
    device_name: str
    gpu: GPU | None
    gpu_note: str
    backend: str
    measured: Measured
    prediction: object | None
    """plan.train.TrainResult for the model as built (None: no catalog GPU to predict for)."""
    prediction_full: object | None
    """The same for the full model, when it was shrunk."""
    model_flops_per_step: float
    hardware_flops_per_step: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def peak_flops_per_gpu(self) -> float | None:
        return self.prediction.perf.peak_flops_per_gpu if self.prediction is not None else None

    @property
    def mfu(self) -> float | None:
        peak = self.peak_flops_per_gpu
        if not peak or self.device.startswith("cpu"):
            return None
        return self.model_flops_per_step / (self.measured.step_time_s * peak * self.config.world_size)

    @property
    def comparable(self) -> bool:
        """Errors mean something only when the run was on the GPU the prediction is for."""
        return self.prediction is not None and not self.device.startswith("cpu")


# ----------------------------------------------------------------------------------------------------------------
# configuration


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


def _sharding(args, dp: int) -> str:
    if args.fsdp and args.zero == 0:
        raise InvalidArgument("--fsdp and --zero 0 conflict (FSDP shards, ZeRO-0 is plain DDP)")
    if args.fsdp or args.zero == 3:
        return "fsdp-" + (args.fsdp or "full")
    return "ddp" if dp > 1 else "none"


def configure(args, env: dist.DistEnv) -> BenchConfig:
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
    seq = (plan["seq"] if plan else None) or args.seq
    global_batch = (plan["global_batch"] if plan else None) or args.global_batch or dp * micro
    if global_batch % (dp * micro):
        raise InvalidArgument(f"global batch {global_batch} is not a multiple of dp {dp} x micro-batch {micro}")
    sharding = plan["sharding"] if plan else _sharding(args, dp)
    if env.world_size == 1 and sharding == "ddp":
        sharding = "none"  # one rank: nothing to replicate
    if env.world_size == 1 and sharding.startswith("fsdp"):
        raise InvalidArgument("FSDP shards over ranks: run under torchrun with 2 or more (e.g. torchrun "
                              "--nproc-per-node 2 -m gpuwise bench train ...), or drop --fsdp")
    recompute = plan["recompute"] if plan else args.recompute
    if recompute not in ("none", "full"):
        raise InvalidArgument(f"recompute '{recompute}': bench train runs none or full (per-block) checkpointing")
    sp = plan["sp"] if plan else args.sp
    if sp and tp == 1:
        raise InvalidArgument("--sp needs --tp 2 or more (sequence parallelism splits the TP group's work)")
    if tp > 1 and dp > 1 and not sharding.startswith("fsdp"):
        raise InvalidArgument("tensor parallelism with data parallelism runs FSDP2 on a 2-D mesh here: add --fsdp "
                              "full (or grad-op)")
    spec = full.spec
    from .torch_model import check_supported

    check_supported(spec)
    if tp > 1:
        if spec.num_heads % tp or spec.num_kv_heads % tp:
            raise InvalidArgument(f"--tp {tp} must divide the {spec.num_heads} attention heads and "
                                  f"{spec.num_kv_heads} KV heads")
        if spec.qk_norm == "full":
            raise InvalidArgument("tensor parallelism of full-width q/k norms (OLMo 2) is not supported")
        if sp and spec.learned_positions:
            raise InvalidArgument("--sp with a learned position table (GPT-2 style) is not supported; use --tp alone")
        if sp and seq % tp:
            raise InvalidArgument(f"--sp: the sequence ({seq}) must divide by --tp {tp}")
    layers = args.layers or spec.num_layers
    if layers > spec.num_layers:
        raise InvalidArgument(f"--layers {layers}: {full.id} has {spec.num_layers}")
    if spec.max_position_embeddings and spec.learned_positions and seq > spec.learned_positions:
        raise InvalidArgument(f"--seq {seq}: {full.id} has {spec.learned_positions} learned positions")
    model = full if layers == spec.num_layers else _shrunk(full, layers)
    return BenchConfig(model=model, full=full, layers=layers, seq=seq, micro_batch=micro, global_batch=global_batch,
                       tp=tp, sp=sp, sharding=sharding, recompute=recompute, precision=args.precision,
                       optimizer=args.optimizer, steps=args.steps, warmup_steps=args.warmup_steps,
                       world_size=env.world_size, local_world_size=env.local_world_size)


def _shrunk(m: LoadedModel, layers: int) -> LoadedModel:
    spec = m.spec
    small = replace(spec, num_layers=layers, layer_types=spec.layer_types[:layers] if spec.layer_types else ())
    return replace(m, id=f"{m.id} ({layers} of {spec.num_layers} layers)", spec=small)


# ----------------------------------------------------------------------------------------------------------------
# building and running


def _parallelize(torch, model, cfg: BenchConfig, dev, env: dist.DistEnv) -> None:
    from .torch_model import set_recompute

    mesh = None
    if cfg.tp > 1 or cfg.sharding.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(dev.type, (cfg.dp, cfg.tp), mesh_dim_names=("dp", "tp"))
    if cfg.tp > 1:
        _tensor_parallel(torch, model, mesh["tp"], cfg)
    set_recompute(model, cfg.recompute == "full")
    if cfg.sharding.startswith("fsdp"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if cfg.precision == "bf16" else MixedPrecisionPolicy())
        reshard = cfg.sharding == "fsdp-full"
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"], reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh["dp"], reshard_after_forward=reshard, mp_policy=mp)


def _tensor_parallel(torch, model, tp_mesh, cfg: BenchConfig) -> None:
    """torchtitan's Llama plan: q/k/v, gate/up column-wise, o/down row-wise, vocab-parallel embedding and head;
    with --sp the norms run on sequence shards and the linears' inputs are all-gathered along the sequence."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    spec = cfg.model.spec
    between = Shard(1) if cfg.sp else Replicate()
    top = {"embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
           "lm_head": ColwiseParallel(input_layouts=between, output_layouts=Replicate())}
    if cfg.sp:
        for name in ("norm", "embed_norm"):
            if hasattr(model, name):
                top[name] = SequenceParallel(use_local_output=True)
    parallelize_module(model, tp_mesh, top)
    if spec.tie_word_embeddings:  # both now Shard(0) over the vocabulary: tie the DTensors again
        model.lm_head.weight = model.embed.weight
    for block in model.blocks:
        plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
                "attn.o": RowwiseParallel(output_layouts=between), "mlp.up": ColwiseParallel(),
                "mlp.down": RowwiseParallel(output_layouts=between)}
        if spec.gated_mlp:
            plan["mlp.gate"] = ColwiseParallel()
        if cfg.sp:
            for name in ("attn_norm", "mlp_norm", "attn_post_norm", "mlp_post_norm"):
                if hasattr(block, name):
                    plan[name] = SequenceParallel(use_local_output=True)
            plan["attn"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
            plan["mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(block, tp_mesh, plan)


def _init_weights(torch, model) -> None:
    """Random weights (normal 0.02 for matrices and embeddings, ones for norms, zeros for biases), same seed on
    every rank as DTensor's random ops require."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                torch.nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)
            else:
                torch.nn.init.ones_(p)


def run(cfg: BenchConfig, env: dist.DistEnv, torch, dev) -> Measured:
    from .torch_model import build

    if cfg.precision == "fp32":
        set_tf32(torch, True)  # TF32 GEMMs, as gpuwise's fp32 prediction assumes
    with torch.device("meta"):
        model = build(cfg.model.spec)
    params_built = sum(p.numel() for p in model.parameters())
    _parallelize(torch, model, cfg, dev, env)
    model.to_empty(device=dev)
    if cfg.model.spec.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight
    _init_weights(torch, model)
    if cfg.precision == "bf16-pure":
        model.to(torch.bfloat16)
    if cfg.sharding == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = _optimizer(torch, model, cfg, dev)
    autocast = cfg.precision == "bf16" and not cfg.sharding.startswith("fsdp")
    vocab = cfg.model.spec.vocab_size
    gen = torch.Generator(device=dev).manual_seed(1234 + env.rank // cfg.tp)  # TP ranks see the same tokens
    batches = [torch.randint(0, vocab, (cfg.micro_batch, cfg.seq + 1), device=dev, generator=gen)
               for _ in range(min(cfg.accumulation, 4))]

    def step() -> None:
        for i in range(cfg.accumulation):
            last = i == cfg.accumulation - 1
            _gradient_sync(model, cfg, last)
            tokens = batches[i % len(batches)]
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            del logits  # as torchtitan does: only what the loss saved for backward stays
            (loss / cfg.accumulation).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(cfg.warmup_steps):
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for _ in range(cfg.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    alloc = reserved = None
    if dev.type == "cuda":
        alloc, reserved = float(torch.cuda.max_memory_allocated(dev)), float(torch.cuda.max_memory_reserved(dev))
    times_t = torch.tensor(times + [alloc or 0.0, reserved or 0.0], dtype=torch.float64, device=dev)
    if env.world_size > 1:
        import torch.distributed as tdist

        tdist.all_reduce(times_t, op=tdist.ReduceOp.MAX)  # the slowest rank sets the pace
    vals = times_t.tolist()
    return Measured(step_times_s=tuple(vals[:cfg.steps]), peak_allocated_bytes=vals[-2] if alloc is not None else None,
                    peak_reserved_bytes=vals[-1] if reserved is not None else None, params_built=params_built)


def _gradient_sync(model, cfg: BenchConfig, last: bool) -> None:
    """Gradient accumulation, as the prediction models it (estimate/step_time.py, train_memory.py):
    DDP reduces once per step, on the last micro-batch; FSDP full shard reduce-scatters every micro-batch (the
    gradients stay sharded, as torchtitan does); FSDP grad-op keeps parameters and gradients unsharded through the
    micro-batches and reduce-scatters and reshards after the last backward."""
    if cfg.sharding == "fsdp-grad-op":
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)
    elif cfg.sharding == "ddp":
        model.require_backward_grad_sync = last


def _optimizer(torch, model, cfg: BenchConfig, dev):
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    # fused AdamW on CUDA (one kernel per parameter group), foreach elsewhere.
    # foreach (torch's default on CUDA), never fused: the memory model charges foreach's temporary copy of the
    # parameters at the optimizer step. Tensor parallelism without FSDP leaves the norms as plain tensors beside
    # DTensor weights, which foreach cannot mix: a per-parameter loop there.
    mixed = cfg.tp > 1 and not cfg.sharding.startswith("fsdp")
    return torch.optim.AdamW(params, lr=1e-4, fused=False, foreach=not mixed)


# ----------------------------------------------------------------------------------------------------------------
# predicting and comparing


def _catalog_gpu(args, torch, dev) -> tuple[GPU | None, str]:
    if args.gpu:
        gpu = get_gpu(args.gpu)
        return gpu, f"catalog GPU {gpu.id} (--gpu)"
    if dev.type != "cuda":
        return None, "CPU run: no catalog GPU to predict for (pass --gpu to see a GPU's prediction anyway)"
    name = torch.cuda.get_device_name(dev)
    try:
        gpu = get_gpu(name)
    except UnknownGPUError:
        return None, f"'{name}' is not in the catalog: no prediction, MFU unknown (pass --gpu)"
    return gpu, f"catalog GPU {gpu.id}"


def predict(cfg: BenchConfig, gpu: GPU | None, profile: str | None):
    """(prediction for the model as built, prediction for the full model or None)."""
    if gpu is None:
        return None, None
    from ..api import train

    opts = cfg.train_options()
    pred = train(cfg.model, gpu=gpu, profile=profile, **opts)
    full = train(cfg.full, gpu=gpu, profile=profile, **opts) if cfg.model is not cfg.full else None
    return pred, full


def bench(args) -> BenchResult | None:
    env = dist.torchrun_env(required=False, what="gpuwise bench train")
    torch, dev = dist.init(env, args.device, "gpuwise bench train")
    try:
        cfg = configure(args, env)
        gpu, note = _catalog_gpu(args, torch, dev)
        pred, pred_full = predict(cfg, gpu, args.profile)
        measured = run(cfg, env, torch, dev)
    except BaseException:
        if env.world_size > 1:
            dist.finish(barrier=False)  # a failed rank must not wait in a barrier the others never reach
        raise
    if env.world_size > 1:
        dist.finish()
    if not env.is_main:
        return None
    from ..estimate.flops import step_flops

    flops = step_flops(cfg.model.spec, seq=cfg.seq, global_batch=cfg.global_batch, convention="causal",
                       recompute=cfg.recompute)
    notes = []
    if dev.type == "cpu" and gpu is not None:
        notes.append(f"measured on CPU, predicted for {gpu.id}: the two are not comparable, errors are not shown")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    return BenchResult(config=cfg, device=str(dev), device_name=name, gpu=gpu, gpu_note=note,
                       backend=("nccl" if dev.type == "cuda" else "gloo") if env.world_size > 1 else "none",
                       measured=measured, prediction=pred, prediction_full=pred_full, model_flops_per_step=flops.model,
                       hardware_flops_per_step=flops.hardware, notes=tuple(notes))


def cli_main(args) -> str | None:
    try:
        r = bench(args)
    except GpuwiseError:
        raise
    except RuntimeError as exc:  # CUDA out of memory, a collective failing: one line, not a traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GpuwiseError(f"bench train failed: {first[:300]}") from None
    if r is None:
        return None
    from .train_report import render, to_dict

    if args.json:
        from ..schema import dumps

        return dumps(to_dict(r))
    return render(r)
