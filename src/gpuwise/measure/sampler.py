"""A background NVML sampler of one GPU for the training tracker: utilization, power, energy, clocks, memory.

The readings come from nvml.py's queries (None where NVML cannot say); this module adds the thread, the bounded
buffer with absolute positions (`mark` / `summary(since)`), and the window aggregates (energy from the counter, or
the power integral when the GPU has no counter).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ._deps import MeasureUnavailable
from .nvml import _memory, _query, _visible_handles, load_nvml


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the sampled GPU (fields as in GpuSnapshot); None where NVML could not say."""

    t_s: float
    utilization_gpu_pct: int | None
    power_w: float | None
    sm_clock_mhz: int | None
    temperature_c: int | None
    memory_used_bytes: int | None
    energy_j: float | None


@dataclass(frozen=True, slots=True)
class SamplerSummary:
    """A window of samples. Every metric is None when no sample in the window had it."""

    samples: int
    duration_s: float | None
    """From the window's first sample to its last (0 with one sample, None with none)."""
    mean_utilization_gpu_pct: float | None
    mean_power_w: float | None
    max_power_w: float | None
    energy_j: float | None
    """Over duration_s: the driver's energy counter difference where the GPU has one (Volta and newer), else the
    trapezoid integral of power over time; None with fewer than two samples."""
    max_temperature_c: int | None
    mean_sm_clock_mhz: float | None
    max_memory_used_bytes: int | None
    energy_source: str | None = None
    """'counter', 'power integral' or None: the evidence behind energy_j."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


_MEANS = ("utilization_gpu_pct", "power_w", "sm_clock_mhz")
_MAXES = ("power_w", "temperature_c", "memory_used_bytes")


class _Window:
    """The summary math over consecutive samples, fed one at a time (so the whole run needs no stored samples)."""

    def __init__(self) -> None:
        self.n = 0
        self.first: Sample | None = None
        self.last: Sample | None = None
        self.sums = dict.fromkeys(_MEANS, 0.0)
        self.counts = dict.fromkeys(_MEANS, 0)
        self.maxes: dict[str, Any] = dict.fromkeys(_MAXES)
        self.integral_j = 0.0
        self.intervals = 0  # power intervals integrated
        self.powered: Sample | None = None  # the last sample that had a power reading

    def add(self, s: Sample) -> None:
        if self.first is None:
            self.first = s
        self.last, self.n = s, self.n + 1
        for k in _MEANS:
            if (v := getattr(s, k)) is not None:
                self.sums[k] += v
                self.counts[k] += 1
        for k in _MAXES:
            if (v := getattr(s, k)) is not None and (self.maxes[k] is None or v > self.maxes[k]):
                self.maxes[k] = v
        if s.power_w is not None:
            if self.powered is not None:  # trapezoid; missing readings in between are bridged by a straight line
                self.integral_j += (self.powered.power_w + s.power_w) / 2 * (s.t_s - self.powered.t_s)
                self.intervals += 1
            self.powered = s

    def summary(self) -> SamplerSummary:
        def mean(k: str) -> float | None:
            return self.sums[k] / self.counts[k] if self.counts[k] else None

        energy, source = None, None
        if self.n >= 2:
            a, b = self.first.energy_j, self.last.energy_j
            if a is not None and b is not None and b >= a:  # b < a: the counter restarted (driver reloaded)
                energy, source = b - a, "counter"
            elif self.intervals:
                energy, source = self.integral_j, "power integral"
        return SamplerSummary(
            samples=self.n, duration_s=None if self.n == 0 else self.last.t_s - self.first.t_s,
            mean_utilization_gpu_pct=mean("utilization_gpu_pct"), mean_power_w=mean("power_w"),
            max_power_w=self.maxes["power_w"], energy_j=energy, max_temperature_c=self.maxes["temperature_c"],
            mean_sm_clock_mhz=mean("sm_clock_mhz"), max_memory_used_bytes=self.maxes["memory_used_bytes"],
            energy_source=source)


class NvmlSampler:
    """Samples one GPU every `interval_s` in a daemon thread, for the training tracker.

        with NvmlSampler(cuda_index=0) as sampler:
            start = sampler.mark()
            ...  # a training step
            step = sampler.summary(since=start)   # and sampler.summary() for the whole run

    `cuda_index` is the GPU as CUDA numbers it under CUDA_VISIBLE_DEVICES. Construction raises
    MeasureUnavailable (one line) without NVML or that GPU; after that nothing raises: a failed reading is
    recorded as None and the training goes on. The last `max_samples` samples are kept (1 h at 0.1 s); a window
    that began before them covers only those, and its `samples` and `duration_s` say so. The whole run
    (`since` None or 0) is aggregated as it goes and is always complete.
    """

    def __init__(self, cuda_index: int = 0, interval_s: float = 0.1, *, nvml: Any = None,
                 env: Mapping[str, str] = os.environ, clock: Callable[[], float] = time.monotonic,
                 max_samples: int = 36_000) -> None:
        self._nvml = load_nvml(nvml)
        visible = _visible_handles(self._nvml, env)
        if not 0 <= cuda_index < len(visible) or visible[cuda_index][2] is None:
            raise MeasureUnavailable(f"NVML sampler: no usable GPU cuda:{cuda_index} ({len(visible)} visible, "
                                     f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        self.cuda_index, self.index, self._handle = visible[cuda_index]
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._buffer: deque[tuple[int, Sample]] = deque(maxlen=max_samples)
        self._count = 0  # samples taken so far: positions are absolute, so eviction never shifts a mark
        self._total = _Window()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> Sample:
        nv, h = self._nvml, self._handle
        t_s = self._clock()  # next to the energy counter, whose differences are paired with these times
        energy_j = _query(nv, nv.nvmlDeviceGetTotalEnergyConsumption, h, scale=1e-3)
        util = _query(nv, nv.nvmlDeviceGetUtilizationRates, h)
        mem = _memory(nv, h)
        return Sample(t_s=t_s, utilization_gpu_pct=None if util is None else util.gpu,
                      power_w=_query(nv, nv.nvmlDeviceGetPowerUsage, h, scale=1e-3),
                      sm_clock_mhz=_query(nv, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                      temperature_c=_query(nv, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                      memory_used_bytes=None if mem is None else mem.used, energy_j=energy_j)

    def sample(self) -> Sample:
        """Take one sample now (the thread calls this; tests may too). Never raises."""
        try:
            s = self._read()
        except Exception:  # whatever NVML does mid-run, the training process must go on
            s = Sample(self._clock(), None, None, None, None, None, None)
        with self._lock:
            self._buffer.append((self._count, s))
            self._count += 1
            self._total.add(s)
        return s

    def mark(self) -> int:
        """An opaque position in the sample stream: summary(since=mark) covers the samples taken after it."""
        with self._lock:
            return self._count

    def summary(self, since: int | None = None) -> SamplerSummary:
        """The samples from position `since` on (a mark()), or the whole run when None."""
        window = _Window()
        with self._lock:
            if not since:
                return self._total.summary()
            recent = []
            for pos, s in reversed(self._buffer):  # from the newest: O(window), not O(buffer)
                if pos < since:
                    break
                recent.append(s)
        for s in reversed(recent):
            window.add(s)
        return window.summary()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def start(self) -> NvmlSampler:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpuwise-nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 10 * self.interval_s))
            self._thread = None

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
