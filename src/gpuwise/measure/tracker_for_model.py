"""`Tracker.for_model`: a tracker whose FLOPs, tokens, MFU peak, memory prediction and NVML sampler come from
gpuwise's model and GPU catalogs and the current CUDA device.

tracker.py binds `for_model` below as the classmethod (it receives the class, so this module never imports
tracker.py). The device is read through `_deps.cuda_if_imported` (torch only when already imported). The
prediction for a `layout` is the planner's (plan/train.py).
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..catalog.gpus import GPU, get_gpu
from ..catalog.models import LoadedModel, load_model
from ..errors import InvalidArgument, UnknownGPUError, require_positive_int
from ..estimate.flops import gemm_dtype, job_flops
from ..estimate.job import TrainJob, job_default
from ..plan.train import TrainRequest, train
from . import _deps
from .rules import RuleContext

T = TypeVar("T")


def _resolve_gpu(gpu: Any) -> tuple[Any, int | None, str | None, str | None]:
    """(catalog GPU or None, index of the current CUDA device when torch sees one, why the peak is unknown, that
    device's name)."""
    cuda = _deps.cuda_if_imported()
    index = cuda.current_device() if cuda is not None else None
    name = cuda.get_device_name(index) if cuda is not None else None
    if isinstance(gpu, GPU):
        return gpu, index, None, name
    if gpu is not None:
        return get_gpu(gpu), index, None, name  # a name the user typed: unknown raises UnknownGPUError
    if cuda is None:
        return None, None, ("MFU unknown: no gpu= given and torch sees no CUDA device (or torch is not imported "
                            "yet); pass gpu=..."), None
    try:
        return get_gpu(name), index, None, name
    except UnknownGPUError:
        return None, index, f"MFU unknown: {name} is not in the catalog; pass gpu=... (see `gpuwise gpus`)", name


def _same_gpu(g: Any, device_name: str) -> bool:
    try:
        return get_gpu(device_name).id == g.id
    except UnknownGPUError:
        return False


def for_model(cls: type[T], model: Any, *, seq: int, batch: int, world_size: int = 1,
              precision: str = job_default("precision"), recompute: str = job_default("recompute"), gpu: Any = None,
              micro_batch: int | None = None, data_parallel: int | None = None, layout: dict | None = None,
              flops_convention: str = job_default("flops_convention"), nvml: bool | None = None, **kw: Any) -> T:
    """A tracker whose FLOPs, tokens, peak and label come from gpuwise's model and GPU catalogs.

    model: catalog name, Hugging Face id, config.json path, or a catalog.models.LoadedModel.
    seq: tokens per sequence; batch: sequences per optimizer step per data-parallel rank;
    micro_batch: sequences per forward/backward (None: batch, no gradient accumulation);
    data_parallel: ranks that see different data (None: world_size, or world_size / (tp x pp x cp) of `layout`).
    precision / recompute: as in `gpuwise train` (the peak is the dense peak of the GEMM dtype; recompute adds
        hardware FLOPs, HFU's numerator).
    gpu: catalog id or name, or a catalog GPU; None: the current CUDA device's name (when torch is imported and
        sees one) looked up in the catalog; not found: MFU unknown, with the reason in the summary.
    layout: options of `gpuwise train` (TrainRequest fields) for the job's parallel layout ({} for plain DDP, {"fsdp": "full"},
        {"tp": 8, "pp": 2}, ...): when given and the GPU is known, the predicted peak memory and step time
        (for the memory comparison and the communication rule). None: no prediction.
    nvml: sample the GPU with NVML in a background thread: None = when a CUDA device is visible and NVML
        works (else a note says why not), True = required, False = never.
    kw: the other Tracker options (clock, sync, sampler, history, ...).
    """
    require_positive_int("seq", seq, 1 << 24)
    require_positive_int("batch", batch, 1 << 24)
    require_positive_int("world_size", world_size, 1 << 24)
    opts = layout or {}
    # The job's FLOPs (MFU's numerator) as `gpuwise train` counts them: LoRA's frozen base included; the framework
    # does not change a FLOP count. TrainJob checks the vocabulary.
    job = TrainJob(framework=opts.get("framework") or "fsdp", precision=precision, seq=seq, recompute=recompute,
                   flops_convention=flops_convention, finetune=opts.get("finetune", job_default("finetune")))
    mb = batch if micro_batch is None else micro_batch
    require_positive_int("micro_batch", mb, batch)
    if batch % mb:
        raise InvalidArgument(f"micro_batch {mb} does not divide batch {batch}")
    if data_parallel is None:
        model_parallel = opts.get("tp", 1) * opts.get("pp", 1) * opts.get("cp", 1)
        if world_size % model_parallel:
            raise InvalidArgument(f"world_size {world_size} is not a multiple of tp x pp x cp = {model_parallel}")
        data_parallel = world_size // model_parallel
    require_positive_int("data_parallel", data_parallel, world_size)
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    global_batch = batch * data_parallel
    flops = job_flops(loaded.spec, job, global_batch=global_batch)

    g, cuda_index, reason, device_name = _resolve_gpu(gpu)
    peak = label = None
    if g is not None:
        dtype = gemm_dtype(g.peak_flops, precision)
        peak = g.peak(dtype)
        label = f"{g.name} ({g.id}) {dtype} dense"
        if peak is None:
            reason = f"MFU unknown: the catalog has no dense {dtype} peak for {g.name}"

    capacity = kw.pop("memory_capacity_bytes", None)
    if capacity is None and cuda_index is not None:  # the real device (MIG slices too)
        capacity = _deps.cuda_if_imported().get_device_properties(cuda_index).total_memory
    elif capacity is None and g is not None:
        capacity = g.memory_bytes
    predicted_mem = kw.pop("predicted_peak_memory_bytes", None)
    predicted_step = predicted_comm = None
    if layout is not None and g is not None:
        r = train(TrainRequest(model=loaded, gpu=g, num_gpus=world_size, seq=seq, global_batch=global_batch,
                               micro_batch=mb, precision=precision, recompute=recompute,
                               flops_convention=flops_convention, **layout))
        if predicted_mem is None:  # less the CUDA context, cuBLAS workspace and NCCL buffers torch does not see
            predicted_mem = int(r.memory.torch_reserved)
        predicted_step = r.perf.step.step_time_s
        predicted_comm = sum(v for k, v in r.perf.step.breakdown.items() if k.endswith("_comm"))

    context = kw.pop("context", None) or RuleContext(
        world_size=world_size, precision=precision, recompute=recompute,
        gpu_name=g.name if g is not None else None,
        memory_bandwidth_bytes_per_s=g.memory_bandwidth_bytes_per_s if g is not None else None,
        fp32_peak_flops_per_gpu=g.peak("fp32") if g is not None else None,
        bf16_peak_flops_per_gpu=g.peak("bf16") if g is not None else None,
        tokens_per_microbatch_per_gpu=seq * mb, predicted_step_time_s=predicted_step,
        predicted_comm_s=predicted_comm)

    notes = []
    if gpu is not None and device_name is not None and g is not None and not _same_gpu(g, device_name):
        notes.append(f"the MFU peak is for gpu={g.id}, but this process runs on {device_name}")
    sampler = kw.pop("sampler", None)
    optional = False
    if sampler is None and (nvml or (nvml is None and cuda_index is not None)):
        try:
            from .sampler import NvmlSampler

            sampler = NvmlSampler(cuda_index=cuda_index if cuda_index is not None else 0)
            optional = not nvml
        except Exception as e:  # noqa: BLE001 - any NVML failure; reported in the summary, not hidden
            if nvml:
                raise
            notes.append(f"NVML not sampled: {' '.join(str(e).split()) or type(e).__name__}")
    elif sampler is None and nvml is None:
        notes.append("NVML not sampled: no CUDA device visible to torch")
    t = cls(flops_per_step=flops.model, hardware_flops_per_step=flops.hardware, tokens_per_step=flops.tokens,
            peak_flops=peak, peak_label=label, unknown_peak_reason=reason, world_size=world_size,
            sampler=sampler, memory_capacity_bytes=capacity, predicted_peak_memory_bytes=predicted_mem,
            context=context, **kw)
    t._sampler_optional = optional  # an auto-created sampler that fails to start is a note, not an error
    t.notes.extend(notes)
    return t
