"""What `gpuwise bench train` measured, next to the prediction: the result types (no torch).

MFU goes through `estimate.flops.utilization`, the one formula every MFU in gpuwise uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog.gpus import GPU
from ..estimate.flops import utilization
from .train_config import BenchConfig


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
        if self.device.startswith("cpu"):
            return None
        return utilization(self.model_flops_per_step, self.measured.step_time_s, self.config.world_size,
                           self.peak_flops_per_gpu)

    @property
    def comparable(self) -> bool:
        """Errors mean something only when the run was on the GPU the prediction is for."""
        return self.prediction is not None and not self.device.startswith("cpu")
