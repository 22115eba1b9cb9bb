"""`gpuwise watch`'s view of one refresh: the per-GPU text table and the JSON document, over nvml.snapshot.

Unknown values print as "n/a" and are null in JSON, never 0. The view repeats that GPU-Util is not MFU, because
a busy-looking GPU is the most common way to miss a slow training run. The refresh loop is commands.watch.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from ..schema import SCHEMA_VERSION
from ..units import GiB
from .nvml import GpuSnapshot

NOTE = ("GPU-Util is the share of time at least one kernel was running, not how busy the SMs are: "
        "100% can still be a few % of peak FLOP/s (MFU). See `gpuwise explain mfu`.")

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def _na(value: Any, fmt: str = "{}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _pair(a: Any, b: Any, fmt: str, unit: str) -> str:
    """'a / b unit', with n/a for an unknown side; 'n/a' alone when both are unknown."""
    if a is None and b is None:
        return "n/a"
    return f"{_na(a, fmt)} / {_na(b, fmt)} {unit}"


def _gpu_label(s: GpuSnapshot) -> str:
    return f"{_na(s.cuda_index)}/{s.index}"


def _memory(s: GpuSnapshot) -> str:
    text = _pair(None if s.memory_used_bytes is None else s.memory_used_bytes / GiB,
                 None if s.memory_total_bytes is None else s.memory_total_bytes / GiB, "{:.1f}", "GiB")
    if s.memory_used_bytes is not None and s.memory_total_bytes:
        text += f" ({100 * s.memory_used_bytes / s.memory_total_bytes:.0f}%)"
    return text


def _table(header: Sequence[str], rows: list[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def render(snapshots: Sequence[GpuSnapshot], *, now: datetime | None = None) -> str:
    """The GPU table, the processes with their GPU memory, and the note that GPU-Util is not MFU."""
    now = now or datetime.now()
    rows = [[_gpu_label(s), _na(s.name)[:28], _na(s.utilization_gpu_pct, "{}%"), _memory(s),
             _pair(s.power_w, s.power_limit_w, "{:.0f}", "W"), _na(s.temperature_c, "{} °C"),
             _pair(s.sm_clock_mhz, s.sm_clock_max_mhz, "{}", "MHz"), _na(s.memory_clock_mhz, "{} MHz")]
            for s in snapshots]
    lines = [f"gpuwise watch  {now:%Y-%m-%d %H:%M:%S}  (NVML; GPU = cuda index/NVML index)", ""]
    lines += _table(["GPU", "Name", "Util", "Memory used / total", "Power / limit", "Temp", "SM clock / max",
                     "Mem clock"], rows)
    procs = [[_gpu_label(s), str(p.pid), _na(p.name),
              _na(None if p.used_memory_bytes is None else p.used_memory_bytes / GiB, "{:.2f} GiB")]
             for s in snapshots for p in s.processes]
    lines.append("")
    lines += _table(["GPU", "PID", "Process", "GPU memory"], procs) if procs else ["Processes: none reported"]
    return "\n".join([*lines, "", NOTE])


def to_dict(snapshots: Sequence[GpuSnapshot], *, now: datetime | None = None) -> dict[str, Any]:
    """One refresh as a JSON document: nvml.GpuSnapshot's fields (units in the keys), null when unknown."""
    gpus = []
    for s in snapshots:
        d = {k: getattr(s, k) for k in s.__dataclass_fields__ if k != "processes"}
        d["processes"] = [{"pid": p.pid, "name": p.name, "used_memory_bytes": p.used_memory_bytes}
                          for p in s.processes]
        gpus.append(d)
    return {"schema_version": SCHEMA_VERSION, "command": "watch",
            "time": (now or datetime.now()).isoformat(timespec="seconds"), "gpus": gpus}

