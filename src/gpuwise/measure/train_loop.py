"""`gpuwise bench train`'s timed loop: the model built and laid out, random weights and tokens, warm-up steps, then
timed steps (each ended with a device sync: this is a benchmark); the slowest rank's time per step counts.

Gradient accumulation and the optimizer run as the prediction models them (see `_gradient_sync`, `_optimizer`).
torch imported lazily.
"""

from __future__ import annotations

import time

from ._deps import set_tf32
from .dist import DistEnv
from .torch_model import build
from .train_config import BenchConfig
from .train_parallel import parallelize
from .train_result import Measured


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


def run(cfg: BenchConfig, env: DistEnv, torch, dev) -> Measured:
    """Build, lay out and time the model on this rank; every rank returns the slowest rank's figures."""
    if cfg.precision == "fp32":
        set_tf32(torch, True)  # TF32 GEMMs, as gpuwise's fp32 prediction assumes
    with torch.device("meta"):
        model = build(cfg.model.spec)
    params_built = sum(p.numel() for p in model.parameters())
    parallelize(torch, model, cfg, dev)
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
    # --optimizer-impl: fused (torchtitan's default: one kernel per parameter group) or foreach (a kernel per
    # operation, torch's default when neither is asked for); the prediction models the one asked for. Tensor
    # parallelism without FSDP leaves the norms as plain tensors beside DTensor weights, which neither can mix: a
    # per-parameter loop there (`mixed_tensor_optimizer`; the report notes it).
    mixed = mixed_tensor_optimizer(cfg)
    fused = cfg.optimizer_impl == "fused" and not mixed
    kw = dict(fused=fused, foreach=not mixed and not fused)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, **kw)
    return torch.optim.AdamW(params, lr=1e-4, **kw)


def mixed_tensor_optimizer(cfg: BenchConfig) -> bool:
    """Tensor parallelism without FSDP: DTensor weights beside plain-tensor norms, stepped parameter by parameter."""
    return cfg.tp > 1 and not cfg.sharding.startswith("fsdp")
