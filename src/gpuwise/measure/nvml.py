"""NVML, the library behind nvidia-smi: per-GPU snapshots and a background sampler for the training tracker.

Every metric is a value or None: None means NVML could not say (not supported on this GPU, no permission, GPU
lost), never 0. Each field's docstring names the `nvidia-smi --query-gpu` field it matches. pynvml (the
`nvidia-ml-py` package) is imported inside `load_nvml`, and any module with the same functions can be passed in
its place (tests use a fake). No torch here: `gpuwise watch` must work in a bare monitoring environment.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ._deps import EXTRA_HINT, MeasureUnavailable

_INIT_LOCK = threading.Lock()
_INITIALIZED: dict[int, Any] = {}  # id(module) -> module on which nvmlInit succeeded (NVML is never shut down)


def load_nvml(module: Any = None) -> Any:
    """The pynvml module (or `module`, e.g. a fake), with nvmlInit called once per process.

    MeasureUnavailable, in one line, when the bindings are not installed or NVML cannot start (no NVIDIA
    driver, libnvidia-ml.so not found, driver not loaded)."""
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError:
            raise MeasureUnavailable(f"the NVML bindings (nvidia-ml-py) are not installed: {EXTRA_HINT}") from None
        except Exception as exc:  # a broken install
            raise MeasureUnavailable(f"the NVML bindings fail to import here ({exc.__class__.__name__})") from None
    with _INIT_LOCK:
        if id(module) not in _INITIALIZED:
            try:
                module.nvmlInit()
            except module.NVMLError as exc:  # LibraryNotFound, DriverNotLoaded, NoPermission, ...
                raise MeasureUnavailable(f"no NVIDIA driver / NVML on this machine (NVML: {exc})") from None
            _INITIALIZED[id(module)] = module
    return module


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process with a context on the GPU (nvidia-smi's process list)."""

    pid: int
    """`pid`. In a container with its own PID namespace NVML reports host PIDs, so `name` may be None."""
    name: str | None
    """`process_name` (the short name from /proc/<pid>/comm or psutil); None when it cannot be read."""
    used_memory_bytes: int | None
    """`used_memory`; None when NVML does not report it (Windows WDDM, some MIG setups)."""


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One GPU at one moment. None means not available, never 0."""

    index: int
    """`index`: NVML's index (PCI bus order), what nvidia-smi prints."""
    cuda_index: int | None
    """The index CUDA and PyTorch give it under CUDA_VISIBLE_DEVICES (`cuda:N`); None when hidden."""
    name: str | None
    """`name`."""
    uuid: str | None
    """`uuid` (GPU-...)."""
    utilization_gpu_pct: int | None
    """`utilization.gpu`: % of the last sample period (1/6 s to 1 s) in which a kernel ran. Not SM busy, not MFU."""
    utilization_memory_pct: int | None
    """`utilization.memory`: % of the sample period in which device memory was read or written."""
    memory_used_bytes: int | None
    """`memory.used` (nvmlMemory_v2 where the driver has it: reserved memory not counted as used)."""
    memory_total_bytes: int | None
    """`memory.total`."""
    power_w: float | None
    """`power.draw`: board power; averaged over 1 s on Ampere (except A100) and newer, instantaneous before."""
    power_limit_w: float | None
    """`enforced.power.limit`."""
    temperature_c: int | None
    """`temperature.gpu`."""
    sm_clock_mhz: int | None
    """`clocks.sm`."""
    sm_clock_max_mhz: int | None
    """`clocks.max.sm`."""
    memory_clock_mhz: int | None
    """`clocks.mem`."""
    energy_j: float | None
    """`total_energy_consumption` (Volta and newer): energy since the driver was loaded (NVML counts mJ)."""
    processes: tuple[GpuProcess, ...] = ()
    """`nvidia-smi --query-compute-apps` and the graphics processes, one entry per pid."""


def _query(nvml: Any, fn: Callable, *args: Any, scale: float | None = None) -> Any:
    """fn(*args) (times `scale`), or None when NVML raises: NotSupported, NoPermission, GpuIsLost all mean
    'not available', which is None and never 0."""
    try:
        value = fn(*args)
    except nvml.NVMLError:
        return None
    if isinstance(value, bytes):  # old pynvml versions return bytes for names and UUIDs
        value = value.decode(errors="replace")
    return value if scale is None or value is None else value * scale


def visible_indices(count: int, env: Mapping[str, str] = os.environ,
                    uuids: Sequence[str | None] | None = None) -> list[int]:
    """The NVML indices CUDA can see, in CUDA's order: position i in the list is `cuda:i`.

    CUDA_VISIBLE_DEVICES is parsed as CUDA does (and as PyTorch's `_parse_visible_devices` mirrors it): unset,
    all GPUs; empty, none; a comma list of integer indices (leading digits count, as strtoul reads them) or,
    when the first entry starts with `GPU-`, of UUIDs or unique UUID prefixes (`uuids`: NVML's UUID per index,
    needed only for that form). The first entry that matches nothing (out of range, negative, ambiguous, not
    the list's form) ends the list; a repeated GPU hides them all.

    MIG-... entries are not resolved (a MIG instance is not a whole GPU): such a list shows no GPU.
    Integer entries are taken as NVML indices, which follow the PCI bus order: that is CUDA's order only under
    CUDA_DEVICE_ORDER=PCI_BUS_ID. CUDA's default (FASTEST_FIRST) can order mixed GPUs differently; PyTorch
    makes the same assumption when it counts devices through NVML."""
    var = env.get("CUDA_VISIBLE_DEVICES")
    if var is None:
        return list(range(count))
    entries = [e.strip() for e in var.split(",")]
    by_uuid = entries[0].startswith("GPU-")
    found: list[int] = []
    for entry in entries:
        if by_uuid:
            matches = [i for i, u in enumerate(uuids or ()) if u and entry.startswith("GPU-") and u.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        else:
            digits = re.match(r"\+?\d+", entry)
            index = int(digits.group()) if digits and int(digits.group()) < count else None
        if index is None:
            break
        if index in found:
            return []
        found.append(index)
    return found


def _visible_handles(nvml: Any, env: Mapping[str, str]) -> list[tuple[int, int, Any]]:
    """(cuda_index, nvml_index, handle or None) for each visible GPU."""
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        raise MeasureUnavailable(f"NVML could not count the GPUs ({exc})") from None
    handles = [_query(nvml, nvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]
    uuids = None
    if env.get("CUDA_VISIBLE_DEVICES", "").strip().startswith("GPU-"):
        uuids = [None if h is None else _query(nvml, nvml.nvmlDeviceGetUUID, h) for h in handles]
    return [(c, i, handles[i]) for c, i in enumerate(visible_indices(count, env, uuids))]


def _process_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or None
    except OSError:
        pass
    try:
        import psutil  # optional: other operating systems

        return psutil.Process(pid).name()
    except Exception:  # not installed, gone, not ours: the name is unknown, not an error
        return None


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute then graphics processes, one per pid. The unversioned calls are NVML's _v3 functions, which
    drivers before R510 lack: there pynvml raises NVMLLibraryMismatchError and the _v2 call answers."""
    errors = (nvml.NVMLError, getattr(nvml, "NVMLLibraryMismatchError", nvml.NVMLError))
    found: dict[int, GpuProcess] = {}
    for kind in ("Compute", "Graphics"):
        infos: list = []
        for suffix in ("", "_v2"):
            fn = getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses{suffix}", None)
            if fn is None:
                continue
            try:
                infos = fn(handle)
                break
            except errors:
                continue
        for p in infos:
            if p.pid not in found:
                found[p.pid] = GpuProcess(p.pid, _process_name(p.pid), getattr(p, "usedGpuMemory", None))
    return tuple(found.values())


def _memory(nvml: Any, handle: Any) -> Any:
    """nvmlMemory_v2 (reserved memory apart, as recent nvidia-smi reports) where the driver has it, else v1."""
    if hasattr(nvml, "nvmlMemory_v2"):
        info = _query(nvml, nvml.nvmlDeviceGetMemoryInfo, handle, nvml.nvmlMemory_v2)
        if info is not None:
            return info
    return _query(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)


def _snapshot_one(nvml: Any, cuda_index: int, index: int, h: Any) -> GpuSnapshot:
    if h is None:  # no handle (no permission, GPU lost): the GPU is there, nothing about it is known
        return GpuSnapshot(index, cuda_index, *([None] * 13))
    util = _query(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
    mem = _memory(nvml, h)
    q = nvml.nvmlDeviceGetClockInfo, nvml.nvmlDeviceGetMaxClockInfo
    return GpuSnapshot(
        index=index, cuda_index=cuda_index,
        name=_query(nvml, nvml.nvmlDeviceGetName, h), uuid=_query(nvml, nvml.nvmlDeviceGetUUID, h),
        utilization_gpu_pct=None if util is None else util.gpu,
        utilization_memory_pct=None if util is None else util.memory,
        memory_used_bytes=None if mem is None else mem.used, memory_total_bytes=None if mem is None else mem.total,
        power_w=_query(nvml, nvml.nvmlDeviceGetPowerUsage, h, scale=1e-3),
        power_limit_w=_query(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, h, scale=1e-3),
        temperature_c=_query(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
        sm_clock_mhz=_query(nvml, q[0], h, nvml.NVML_CLOCK_SM),
        sm_clock_max_mhz=_query(nvml, q[1], h, nvml.NVML_CLOCK_SM),
        memory_clock_mhz=_query(nvml, q[0], h, nvml.NVML_CLOCK_MEM),
        energy_j=_query(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, h, scale=1e-3),
        processes=_processes(nvml, h),
    )


def snapshot(nvml: Any = None, env: Mapping[str, str] = os.environ) -> list[GpuSnapshot]:
    """One GpuSnapshot per GPU visible under CUDA_VISIBLE_DEVICES, in CUDA's order (empty when none is)."""
    nvml = load_nvml(nvml)
    return [_snapshot_one(nvml, c, i, h) for c, i, h in _visible_handles(nvml, env)]
