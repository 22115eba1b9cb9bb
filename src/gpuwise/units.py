"""Units: byte and FLOP multiples, and how numbers are shown.

Everything inside gpuwise is in base units (bytes, FLOP, seconds, bytes/s). Conversions happen only
when a presenter formats a number, and the unit always goes with it: memory is shown in GiB (2**30
bytes, what nvidia-smi's MiB and torch.cuda report), datasheet capacities and bandwidths keep their
decimal GB (1e9 bytes). The two are never mixed silently: every formatted string names its unit.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

TFLOP = 10**12

_SIZE_UNITS = {"b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB, "kb": KB, "mb": MB, "gb": GB, "tb": TB}


def parse_size(text: str) -> float | None:
    """'24GiB', '24 GiB', '23.5gb', '24000 MiB' -> bytes (GiB and GB as written: binary and decimal); None when it is
    not a positive finite number with one of the units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]+)\s*", text or "")
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        return None
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    return value if value > 0 else None


def gib(n_bytes: float) -> float:
    """Bytes -> GiB (2**30)."""
    return n_bytes / GiB


def gb(n_bytes: float) -> float:
    """Bytes -> GB (1e9)."""
    return n_bytes / GB


def fmt_gib(n_bytes: float | None, digits: int = 2) -> str:
    """Bytes as GiB with the unit; None (unknown) as 'unknown', never as 0."""
    if n_bytes is None:
        return "unknown"
    return f"{n_bytes / GiB:.{digits}f} GiB"


def fmt_bytes(n_bytes: float | None) -> str:
    """Bytes with a binary unit chosen by size (B, KiB, MiB, GiB, TiB)."""
    if n_bytes is None:
        return "unknown"
    value = float(n_bytes)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{int(value)} B"


def fmt_count(n: float | None) -> str:
    """A parameter or token count with an SI suffix: 8.03B, 125.1M, 4.1K."""
    if n is None:
        return "unknown"
    value = float(n)
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f}{suffix}"
    return f"{int(value)}"
