"""The device profile `gpuwise calibrate` writes for `--profile`: its JSON document, its default name, the file.

The document is what `catalog.devices.load_profile` reads; an existing file's `network` section (written by
`gpuwise bench comm`, comm_profile.py) is kept when calibrate rewrites it.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog.devices import PROFILE_KIND, PROFILE_MAX_US
from ..jsonfile import check_save_target, write_atomic
from ..units import GB
from ..version import __version__
from .calibrate_result import Calibration


def profile_doc(c: Calibration) -> dict:
    """The device profile `load_profile` reads (catalog/devices.py), with what was measured and how."""
    doc: dict = {"kind": PROFILE_KIND, "gpu": c.gpu.id if c.gpu else None, "device_name": c.device_name}
    eff = {d.dtype: d.fitted_efficiency for d in c.dtypes if d.fitted_efficiency is not None}
    if eff:
        doc["matmul_efficiency"] = eff
    absolute = {d.dtype: round(d.best.tflops, 4) for d in c.dtypes if d.fitted_efficiency is None}
    if absolute:  # no datasheet peak to divide by: absolute figures (load_profile divides by the --gpu's peak)
        doc["matmul_tflops"] = absolute
    copy = c.transfer("copy")
    datasheet = c.gpu.memory_bandwidth_bytes_per_s / GB if c.gpu and c.gpu.memory_bandwidth_bytes_per_s else None
    # A copy can beat the datasheet a little (rounded figures, boost clocks): the model's fraction stays <= 1.
    doc["memory_bandwidth_gb_s"] = round(min(copy.gb_s, datasheet) if datasheet else copy.gb_s, 3)
    doc["kernel_overhead_us"] = round(c.kernel_overhead_us, 3)
    line = c.gemm_line
    notes = list(c.notes)
    if line is not None and not 0 <= round(line.intercept_s * 1e6, 3) < PROFILE_MAX_US:  # as written
        # a noisy sweep (a busy host) can fit a negative or huge intercept: the profile keeps the kernel overhead
        notes.append(f"the one-row GEMM line's fixed time, {line.intercept_s * 1e6:.1f} us, is outside [0, "
                     f"{PROFILE_MAX_US:g}) us: not written (memory-bound GEMMs keep the kernel overhead)")
    elif line is not None:  # a memory-bound GEMM's line: its fixed time and its streaming rate
        doc["gemm_overhead_us"] = round(line.intercept_s * 1e6, 3)
        gb_s = line.bytes_per_s / GB
        doc["gemm_bandwidth_gb_s"] = round(min(gb_s, datasheet) if datasheet else gb_s, 3)
    h2d = c.transfer("h2d_pinned")
    if h2d is not None:
        doc["host_to_device_gb_s"] = round(h2d.gb_s, 3)
    doc["measured"] = {
        "by": f"gpuwise {__version__} calibrate{' --quick' if c.quick else ''}", "at": c.measured_at,
        "device": c.device, "environment": c.environment, "state_before": c.state_before,
        "state_after": c.state_after, "duration_s": round(c.duration_s, 2),
        "best_tflops": {d.dtype: round(d.best.tflops, 4) for d in c.dtypes},
        "fit_median_error": {d.dtype: d.fit_median_error for d in c.dtypes},
        "transfers_gb_s": {t.kind: round(t.gb_s, 3) for t in c.transfers},
        "one_row_gemms": None if line is None else {"dtype": line.dtype, "points": [
            {"bytes": b, "s": t} for b, t in line.points]},
        "skipped": c.skipped, "notes": notes,
    }
    return doc


def default_path(c: Calibration) -> str:
    slug = c.gpu.id if c.gpu else "".join(ch if ch.isalnum() else "-" for ch in c.device_name.lower()).strip("-")
    return f"gpuwise-profile-{slug or 'device'}.json"


def save_profile(c: Calibration, path: str) -> Path:
    """Write the profile atomically; an existing profile's `network` section (from `bench comm`) is kept."""
    p = Path(path)
    doc = profile_doc(c)
    old = check_save_target(p)
    if old is not None and isinstance(old.get("network"), dict):
        doc["network"] = old["network"]
    write_atomic(p, json.dumps(doc, indent=2) + "\n")
    return p


def check_writable(path: str) -> None:
    """Before minutes of measuring: the file --save will write can be written (jsonfile.check_save_target)."""
    check_save_target(path)
