"""How nccl-tests counts a collective: message sizes, element counts, buffers, algbw and busbw (no torch).

Definitions: NVIDIA/nccl-tests doc/PERFORMANCE.md and src/*.cu, the same as the communication model uses
(`estimate.comm.bus_factor`):

    op              size S (bytes, the "size" column)           count (the NCCL count argument)   busbw / algbw
    all_reduce      the buffer                                  S / elt                           2 (n-1) / n
    all_gather      the gathered buffer, count x n x elt        elements each rank sends          (n-1) / n
    reduce_scatter  the buffer before scattering, count x n x elt  elements each rank receives    (n-1) / n
    all_to_all      what one rank sends in all, count x n x elt elements sent to each peer        (n-1) / n
    send_recv       the buffer each rank sends                  S / elt                           1

algbw = S / t. A requested size whose element count does not split into n equal parts is rounded down to one
that does, as nccl-tests does (so for n = 3 the rows say 8184 B, not 8192). send_recv is nccl-tests' ring: each
rank sends to rank + 1 and receives from rank - 1 at once (one batch_isend_irecv, NCCL's group call); for two
ranks both directions of the one link carry S at the same time.
"""

from __future__ import annotations

import math

from ..errors import InvalidArgument
from ..estimate.comm import COLLECTIVES, bus_factor
from ..units import GB, GiB, KiB, MiB  # GB: nccl-tests' GB/s are 1e9 bytes per second (`*_busbw_gb_s`)

DTYPE = "fp32"
ELT_BYTES = 4
"""fp32, nccl-tests' default type: busbw at large messages does not depend on the type (NCCL moves bytes)."""
FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
               "all_to_all": "(n-1)/n", "send_recv": "1"}


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """min, 2 min, 4 min ... up to max (nccl-tests -b MIN -e MAX -f 2)."""
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def message_shape(op: str, size_bytes: int, n: int, elt_bytes: int = ELT_BYTES) -> tuple[int, int] | None:
    """(count, size_bytes) for a requested size, as nccl-tests' GetCollByteCount rounds it; None if under one
    element per rank. count is what the NCCL call takes: per rank for all_gather / reduce_scatter, per peer for
    all_to_all; size_bytes is the full message (S in algbw = S / t)."""
    elements = size_bytes // elt_bytes
    if op in ("all_reduce", "send_recv"):
        return (elements, elements * elt_bytes) if elements >= 1 else None
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        per_rank = elements // n
        return (per_rank, per_rank * n * elt_bytes) if per_rank >= 1 else None
    raise InvalidArgument(f"unknown collective {op!r}; one of {', '.join(COLLECTIVES)}")


def buffer_bytes(op: str, size_bytes: int, n: int) -> int:
    """Bytes of input plus output buffers one rank holds for a message of `size_bytes` (S)."""
    if op == "all_reduce":
        return size_bytes  # in place
    if op in ("all_gather", "reduce_scatter"):
        return size_bytes + size_bytes // n
    return 2 * size_bytes  # all_to_all, send_recv: a send and a receive buffer of S each


def bandwidths(op: str, size_bytes: int, time_s: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 B/s): algbw = S / t, busbw = algbw x nccl-tests' factor for n ranks."""
    algbw = size_bytes / time_s / GB
    return algbw, algbw * bus_factor(op, n)


def latency_steps(n: int) -> int:
    """Steps the communication model charges latency for in a collective over n ranks: ceil(log2 n)."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1


def human_bytes(n: int) -> str:
    """A message or buffer size in the largest binary unit it reaches, whole numbers without decimals."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"

