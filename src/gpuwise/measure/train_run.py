"""`gpuwise bench train` end to end: real training steps of a model under a layout, next to gpuwise's prediction.

Run under torchrun (one process per GPU; `--device cpu` uses gloo on CPU). The configuration is train_config.py,
the layout train_parallel.py, the timed steps train_loop.py. The prediction is `gpuwise train` (plan/train.py) for
the same model (same layers), batch and layout on the catalog GPU the device is, with framework `torchtitan`
(FSDP2 + DTensor, what this runner does). When the model was shrunk, the full model's prediction is shown too, and
the measured step time is scaled by the predicted ratio full / shrunk.
"""

from __future__ import annotations

from ..catalog.gpus import GPU, get_gpu
from ..errors import UnknownGPUError
from ..estimate.flops import step_flops
from ..plan.train import TrainRequest, train
from . import dist
from .train_config import BenchConfig, configure
from .train_loop import mixed_tensor_optimizer, run
from .train_result import BenchResult


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
    opts = cfg.train_options(gpu)
    pred = train(TrainRequest(model=cfg.model, gpu=gpu, profile=profile, **opts))
    full = train(TrainRequest(model=cfg.full, gpu=gpu, profile=profile, **opts)) if cfg.model is not cfg.full else None
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
    flops = step_flops(cfg.model.spec, seq=cfg.seq, global_batch=cfg.global_batch, convention="causal",
                       recompute=cfg.recompute)
    notes = []
    if mixed_tensor_optimizer(cfg):
        notes.append("tensor parallelism without FSDP: the optimizer steps parameter by parameter (neither fused nor "
                     f"foreach mixes DTensor and plain tensors); the prediction is for --optimizer-impl "
                     f"{cfg.optimizer_impl}")
    if dev.type == "cpu" and gpu is not None:
        notes.append(f"measured on CPU, predicted for {gpu.id}: the two are not comparable, errors are not shown")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    return BenchResult(config=cfg, device=str(dev), device_name=name, gpu=gpu, gpu_note=note,
                       backend=("nccl" if dev.type == "cuda" else "gloo") if env.world_size > 1 else "none",
                       measured=measured, prediction=pred, prediction_full=pred_full, model_flops_per_step=flops.model,
                       hardware_flops_per_step=flops.hardware, notes=tuple(notes))
