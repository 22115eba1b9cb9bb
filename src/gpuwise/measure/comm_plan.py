"""What `gpuwise bench comm` runs: the collectives, message sizes and repetitions from the command's options.

Validated before any process group exists, so every rank refuses a bad option alike (no torch here).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument, require_positive_int, suggest
from ..estimate.comm import COLLECTIVES
from ..units import GiB, KiB, MiB
from .comm_sizes import message_sizes

DEFAULT_FILE = "gpuwise-network.json"


@dataclass(frozen=True, slots=True)
class Defaults:
    min_bytes: int
    max_bytes: int
    iters: int
    warmup: int


GPU_DEFAULTS = Defaults(8 * KiB, 1 * GiB, 20, 5)
CPU_DEFAULTS = Defaults(8 * KiB, 64 * MiB, 20, 5)
"""gloo over loopback moves ~1 GB/s: 64 MiB keeps a default CPU run near half a minute."""
QUICK_DEFAULTS = Defaults(8 * KiB, 4 * MiB, 5, 2)


def parse_ops(text: str | None) -> tuple[str, ...]:
    """'all_reduce,all-gather' -> ('all_reduce', 'all_gather'); None -> all five."""
    if text is None:
        return COLLECTIVES
    out: list[str] = []
    for raw in text.split(","):
        name = raw.strip().lower().replace("-", "_")
        if not name:
            continue
        if name not in COLLECTIVES:
            raise InvalidArgument(f"--ops: unknown collective '{raw.strip()}'.{suggest(name, list(COLLECTIVES))} "
                                  f"Choose from {', '.join(COLLECTIVES)}")
        if name not in out:
            out.append(name)
    if not out:
        raise InvalidArgument(f"--ops: no collective named; choose from {', '.join(COLLECTIVES)}")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run, validated before any process group exists (every rank validates alike)."""

    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    iters: int
    warmup: int
    device: str | None
    save: str | None
    json: bool
    progress: bool


def make_plan(args) -> Plan:
    ops = parse_ops(getattr(args, "ops", None))
    device = getattr(args, "device", None)
    quick = bool(getattr(args, "quick", False))
    cpu = device is not None and device.strip().lower().startswith("cpu")
    d = QUICK_DEFAULTS if quick else (CPU_DEFAULTS if cpu else GPU_DEFAULTS)
    lo = d.min_bytes if getattr(args, "min_bytes", None) is None else args.min_bytes
    hi = d.max_bytes if getattr(args, "max_bytes", None) is None else args.max_bytes
    iters = d.iters if getattr(args, "iters", None) is None else args.iters
    warmup = d.warmup if getattr(args, "warmup", None) is None else args.warmup
    require_positive_int("--min-bytes", lo, 1 << 40)
    require_positive_int("--max-bytes", hi, 1 << 40)
    require_positive_int("--iters", iters, 100_000)
    require_positive_int("--warmup", warmup, 10_000)
    if lo > hi:
        raise InvalidArgument(f"--min-bytes {lo:,} is larger than --max-bytes {hi:,}")
    save = getattr(args, "save", None)
    if save is not None and "all_reduce" not in ops:
        raise InvalidArgument("--save: the network profile is fitted from all_reduce; add it to --ops")
    return Plan(ops=ops, sizes=tuple(message_sizes(lo, hi)), iters=iters, warmup=warmup, device=device,
                save=(save or DEFAULT_FILE) if save is not None else None, json=bool(getattr(args, "json", False)),
                progress=not quick)

