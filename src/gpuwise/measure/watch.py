"""`gpuwise watch`: the live per-GPU view (the text table, the JSON lines, the refresh loop) over nvml.snapshot.

Unknown values print as "n/a" and are null in JSON, never 0. The view repeats that GPU-Util is not MFU, because
a busy-looking GPU is the most common way to miss a slow training run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence, TextIO

from ..units import GiB
from ._deps import MeasureUnavailable
from .nvml import GpuSnapshot, load_nvml, snapshot

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
    from ..schema import SCHEMA_VERSION

    gpus = []
    for s in snapshots:
        d = {k: getattr(s, k) for k in s.__dataclass_fields__ if k != "processes"}
        d["processes"] = [{"pid": p.pid, "name": p.name, "used_memory_bytes": p.used_memory_bytes}
                          for p in s.processes]
        gpus.append(d)
    return {"schema_version": SCHEMA_VERSION, "command": "watch",
            "time": (now or datetime.now()).isoformat(timespec="seconds"), "gpus": gpus}


def _nothing_visible(nvml: Any, env: Mapping[str, str]) -> MeasureUnavailable:
    var = env.get("CUDA_VISIBLE_DEVICES") or ""
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError:
        count = None
    if not count:
        return MeasureUnavailable("watch: NVML sees no NVIDIA GPU on this machine")
    hint = " (MIG instances are not resolved: unset it to watch the whole GPUs)" if var.startswith("MIG-") else ""
    return MeasureUnavailable(f"watch: NVML sees {count} GPU(s) but CUDA_VISIBLE_DEVICES='{var}' hides all of "
                              f"them{hint}")


def cli_main(args: Any, *, nvml: Any = None, out: TextIO | None = None, sleep: Callable[[float], None] = time.sleep,
             env: Mapping[str, str] = os.environ) -> None:
    """`gpuwise watch`: args.interval (s), args.count (None: until Ctrl-C), args.once, args.json.

    Writes its own output and returns None; MeasureUnavailable (no NVML, no GPU visible) becomes one line on
    stderr and exit status 2 in the CLI."""
    out = out or sys.stdout
    try:
        nvml = load_nvml(nvml)
    except MeasureUnavailable as exc:
        raise MeasureUnavailable(f"watch: {exc}") from None
    count = 1 if args.once else args.count
    redraw = not args.json and count != 1 and out.isatty()
    frame = 0
    try:
        while True:
            snaps = snapshot(nvml, env)
            if not snaps:
                raise _nothing_visible(nvml, env)
            if args.json:
                out.write(json.dumps(to_dict(snaps), separators=(",", ":")) + "\n")
            else:
                out.write((CLEAR if redraw else "\n" if frame else "") + render(snaps) + "\n")
            out.flush()
            frame += 1
            if count is not None and frame >= count:
                return None
            sleep(args.interval)
    except (KeyboardInterrupt, BrokenPipeError):  # Ctrl-C is how a live view ends; `| head` closes the pipe
        return None
