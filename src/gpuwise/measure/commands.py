"""The measurement commands as the CLI runs them: `calibrate`, `bench comm`, `bench train` and `watch`.

Each takes the argparse Namespace and returns the text to print (or None when it printed itself, or on the
torchrun ranks other than 0). This is the top of measure/: it wires a measurement to its report, and nothing
in measure/ imports it (cli/measure.py does). A command's modules are imported
inside its function, so that each command loads only what it runs (the CLI's start-up time).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Mapping, TextIO

from ..errors import GpuwiseError
from ..schema import dumps
from ._deps import MeasureUnavailable


def calibrate(args) -> str:
    """`gpuwise calibrate`: measure this device, optionally save the profile, report it."""
    from .calibrate_gemm import parse_dtypes
    from .calibrate_profile import check_writable, default_path, save_profile
    from .calibrate_report import render, to_dict
    from .calibrate_run import calibrate as measure

    dtypes = parse_dtypes(args.dtypes)
    if args.save:
        check_writable(args.save)
    c = measure(device=args.device, quick=args.quick, dtypes=dtypes, progress=sys.stderr)
    saved = save_profile(c, args.save or default_path(c)) if args.save is not None else None
    if args.json:
        doc = to_dict(c)
        doc["saved"] = str(saved) if saved else None
        return dumps(doc)
    return render(c, saved)


def bench_comm(args) -> str | None:
    """`gpuwise bench comm`: every rank calls this; rank 0 gets the text (or JSON), the others None."""
    from .comm_plan import make_plan
    from .comm_profile import save
    from .comm_report import render, to_dict
    from .comm_run import run

    plan = make_plan(args)
    result = run(plan)
    if result is None:
        return None
    saved = save(result, plan.save) if plan.save is not None else None
    if plan.json:
        return dumps(to_dict(result, saved))
    return render(result, saved)


def bench_train(args) -> str | None:
    """`gpuwise bench train`: every rank calls this; rank 0 gets the text (or JSON), the others None."""
    from .train_report import render, to_dict
    from .train_run import bench

    try:
        r = bench(args)
    except GpuwiseError:
        raise
    except RuntimeError as exc:  # CUDA out of memory, a collective failing: one line, not a traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GpuwiseError(f"bench train failed: {first[:300]}") from None
    if r is None:
        return None
    if args.json:
        return dumps(to_dict(r))
    return render(r)


def watch(args: Any, *, nvml: Any = None, out: TextIO | None = None, sleep: Callable[[float], None] = time.sleep,
          env: Mapping[str, str] = os.environ) -> None:
    """`gpuwise watch`: args.interval (s), args.count (None: until Ctrl-C), args.once, args.json.

    Writes its own output and returns None; MeasureUnavailable (no NVML, no GPU visible) becomes one line on
    stderr and exit status 2 in the CLI. nvml, out, sleep and env replace the real ones in tests."""
    from .nvml import load_nvml, snapshot
    from .watch_view import CLEAR, render, to_dict

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


def _nothing_visible(nvml: Any, env: Mapping[str, str]) -> MeasureUnavailable:
    """The MeasureUnavailable for a snapshot with no GPU: none on the machine, or all hidden by CUDA_VISIBLE_DEVICES."""
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
