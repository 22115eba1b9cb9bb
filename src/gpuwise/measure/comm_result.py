"""What `gpuwise bench comm` measured (rows per message size, per collective) and the network figures fitted from it.

Network figures for the profile (what `estimate.comm.topology` reads from `--profile`):
- busbw: the largest all_reduce busbw among the three largest messages (busbw flattens out at large messages;
  taking the best of the last three keeps one noisy point from deciding it).
- latency: the smallest all_reduce's time divided by ceil(log2 n), the steps the model charges latency for
  (an upper bound: it includes that message's small bandwidth part).
- One node: both describe the intra-node level. Several nodes: the world all_reduce is the inter-node level and
  an all_reduce inside each node (new_subgroups of LOCAL_WORLD_SIZE ranks) the intra-node level.
"""

from __future__ import annotations

from dataclasses import dataclass

from .comm_sizes import latency_steps

PEAK_OVER_LARGEST = 3
"""busbw for the profile: the best of this many largest messages."""


@dataclass(frozen=True, slots=True)
class Row:
    size_bytes: int
    """S as nccl-tests counts it (see message_shape)."""
    count: int
    """Elements in the NCCL call's count argument."""
    time_s: float
    """Slowest rank's median seconds per operation."""
    time_p10_s: float
    time_p90_s: float
    """Slowest rank's 10th / 90th percentile."""
    algbw_gb_s: float
    busbw_gb_s: float


@dataclass(frozen=True, slots=True)
class OpResult:
    op: str
    group: str
    """'world' or 'intra_node' (an all_reduce inside each node, on a multi-node run)."""
    group_size: int
    busbw_factor: float
    rows: tuple[Row, ...]
    skipped: tuple[tuple[int, str], ...] = ()
    """(requested size_bytes, why) for sizes not measured."""

    @property
    def peak_busbw_gb_s(self) -> float | None:
        """The best busbw among the PEAK_OVER_LARGEST largest messages; None when nothing was measured."""
        tail = sorted(self.rows, key=lambda r: r.size_bytes)[-PEAK_OVER_LARGEST:]
        return max(r.busbw_gb_s for r in tail) if tail else None

    @property
    def latency_us(self) -> float | None:
        """Smallest message's time / ceil(log2 n) (the model's latency per step); None when nothing measured."""
        if not self.rows:
            return None
        small = min(self.rows, key=lambda r: r.size_bytes)
        return small.time_s * 1e6 / latency_steps(self.group_size)


@dataclass(frozen=True, slots=True)
class NetworkFit:
    """The figures the profile's `network` section gets (None: not measured by this run), and how."""

    intra_node_busbw_gb_s: float | None
    inter_node_busbw_gb_s: float | None
    intra_node_latency_us: float | None
    inter_node_latency_us: float | None
    how: tuple[str, ...]

    def network(self) -> dict:
        keys = ("intra_node_busbw_gb_s", "inter_node_busbw_gb_s", "intra_node_latency_us", "inter_node_latency_us")
        return {k: _sig(getattr(self, k)) for k in keys if getattr(self, k) is not None}


@dataclass(frozen=True, slots=True)
class CommBenchResult:
    world_size: int
    nnodes: int
    local_world_size: int
    backend: str
    device: str
    """torch.cuda.get_device_name, or 'cpu'."""
    dtype: str
    iters: int
    warmup: int
    ops: tuple[OpResult, ...]
    intra_node: OpResult | None
    """The per-node all_reduce of a multi-node run (None on one node, or when a node has one rank)."""
    intra_node_note: str | None
    fit: NetworkFit
    torch_version: str
    date: str
    """UTC, ISO 8601."""


def fit_network(ops: tuple[OpResult, ...], intra: OpResult | None, *, nnodes: int,
                intra_note: str | None = None) -> NetworkFit:
    """Which level each all_reduce describes (module docstring)."""
    world = next((o for o in ops if o.op == "all_reduce" and o.group == "world"), None)
    how: list[str] = []
    rule = f"busbw: best of the {PEAK_OVER_LARGEST} largest messages; latency: smallest message / ceil(log2 n)"
    if world is None or not world.rows:
        return NetworkFit(None, None, None, None, ("all_reduce not measured: no network figures",))
    if nnodes <= 1:
        how.append(f"one node: intra-node level from the all_reduce over {world.group_size} ranks ({rule})")
        how.append("inter-node level not measured (one node)")
        return NetworkFit(world.peak_busbw_gb_s, None, world.latency_us, None, tuple(how))
    how.append(f"{nnodes} nodes: inter-node level from the all_reduce over all {world.group_size} ranks ({rule})")
    if intra is not None and intra.rows:
        how.append(f"intra-node level from an all_reduce inside each node ({intra.group_size} ranks)")
        return NetworkFit(intra.peak_busbw_gb_s, world.peak_busbw_gb_s, intra.latency_us, world.latency_us,
                          tuple(how))
    how.append(f"intra-node level not measured ({intra_note or 'no per-node all_reduce'})")
    return NetworkFit(None, world.peak_busbw_gb_s, None, world.latency_us, tuple(how))


def _sig(x: float) -> float:
    return float(f"{x:.6g}")

