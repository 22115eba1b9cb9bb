"""A fake pynvml: only the functions, constants and exceptions gpuwise calls, over configurable GPUs.

Values are in NVML's own units (mW, mJ, bytes, MHz) so the tests check gpuwise's conversions. `advance(dt_s)`
moves the fake clock and runs each GPU's energy counter at its current power.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

GIB = 2**30


class NVMLError(Exception):
    def __init__(self, text: str = "Unknown Error") -> None:
        super().__init__(text)


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__("Not Supported")


class NVMLError_NoPermission(NVMLError):
    def __init__(self) -> None:
        super().__init__("Insufficient Permissions")


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__("NVML Shared Library Not Found")


class NVMLLibraryMismatchError(Exception):
    """pynvml raises this (not an NVMLError) when an unversioned call's _v3 function is missing."""


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-aaaa-bbbb-cccc-000000000000"
    util_gpu: int = 97
    util_memory: int = 41
    used_v2_bytes: int = 70 * GIB
    reserved_bytes: int = GIB // 2  # counted as used by the v1 memory query only
    total_bytes: int = 80 * GIB
    power_mw: int = 650_000
    power_limit_mw: int = 700_000
    temperature_c: int = 67
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    mem_clock_mhz: int = 2619
    energy_mj: int = 123_456_789
    compute: list = field(default_factory=list)  # SimpleNamespace(pid=..., usedGpuMemory=...)
    graphics: list = field(default_factory=list)
    unsupported: set = field(default_factory=set)  # names of nvml functions that raise NVMLError_NotSupported
    raises: dict = field(default_factory=dict)  # name -> exception instance to raise
    no_handle: bool = False  # nvmlDeviceGetHandleByIndex raises NoPermission


def proc(pid: int, used_bytes: int | None) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=used_bytes)


class FakeNvml:
    """Stands in for the pynvml module (pass it as `nvml=`, or put it in sys.modules['pynvml'])."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    nvmlMemory_v2 = 0x02000028

    def __init__(self, gpus: list[FakeGpu] | None = None, init_error: Exception | None = None) -> None:
        self.gpus = [FakeGpu()] if gpus is None else gpus
        self.init_error = init_error
        self.init_calls = 0
        self.t_s = 0.0

    # the fake's own controls
    def clock(self) -> float:
        return self.t_s

    def advance(self, dt_s: float) -> None:
        self.t_s += dt_s
        for g in self.gpus:
            g.energy_mj += round(g.power_mw * dt_s)  # mW x s = mJ

    def _check(self, gpu: FakeGpu, name: str) -> FakeGpu:
        if name in gpu.unsupported:
            raise NVMLError_NotSupported()
        if name in gpu.raises:
            raise gpu.raises[name]
        return gpu

    # pynvml's API
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument")
        if self.gpus[index].no_handle:
            raise NVMLError_NoPermission()
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._check(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._check(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        g = self._check(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: int | None = None) -> SimpleNamespace:
        g = self._check(h, "nvmlDeviceGetMemoryInfo")
        if version is not None:
            self._check(h, "nvmlDeviceGetMemoryInfo_v2")
            return SimpleNamespace(total=g.total_bytes, reserved=g.reserved_bytes, used=g.used_v2_bytes,
                                   free=g.total_bytes - g.reserved_bytes - g.used_v2_bytes)
        used = g.used_v2_bytes + g.reserved_bytes
        return SimpleNamespace(total=g.total_bytes, used=used, free=g.total_bytes - used)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._check(h, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:
        g = self._check(h, "nvmlDeviceGetClockInfo")
        return {self.NVML_CLOCK_SM: g.sm_clock_mhz, self.NVML_CLOCK_MEM: g.mem_clock_mhz}[kind]

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return self._check(h, "nvmlDeviceGetMaxClockInfo").sm_clock_max_mhz

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list:
        return list(self._check(h, "nvmlDeviceGetComputeRunningProcesses").compute)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeGpu) -> list:
        return list(self._check(h, "nvmlDeviceGetComputeRunningProcesses_v2").compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list:
        return list(self._check(h, "nvmlDeviceGetGraphicsRunningProcesses").graphics)
