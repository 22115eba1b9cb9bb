"""`gpuwise bench comm`'s report: nccl-tests style tables and the JSON document.

Reads the result types (comm_result.py); nothing measuring imports this module. The profile file is comm_profile.py.
"""

from __future__ import annotations

from ..schema import SCHEMA_VERSION
from ..units import MiB
from .comm_result import PEAK_OVER_LARGEST, CommBenchResult, OpResult, Row
from .comm_sizes import ELT_BYTES, FACTOR_TEXT, human_bytes


def _time_us(t_s: float) -> str:
    us = t_s * 1e6
    return f"{us:.0f}" if us >= 10_000 else (f"{us:.1f}" if us >= 100 else f"{us:.2f}")


def _render_op(o: OpResult) -> list[str]:
    where = "all ranks" if o.group == "world" else "inside each node"
    out = [f"{o.op}  ({where}, n = {o.group_size}; busbw = algbw x {FACTOR_TEXT[o.op]} = x {o.busbw_factor:.4g})",
           f"{'size':>12}  {'count':>12}  {'time':>9}  {'p10-p90':>17}  {'algbw':>8}  {'busbw':>8}",
           f"{'(B)':>12}  {'(elements)':>12}  {'(us)':>9}  {'(us)':>17}  {'(GB/s)':>8}  {'(GB/s)':>8}"]
    for r in o.rows:
        spread = f"{_time_us(r.time_p10_s)}-{_time_us(r.time_p90_s)}"
        out.append(f"{r.size_bytes:>12}  {r.count:>12}  {_time_us(r.time_s):>9}  {spread:>17}  "
                   f"{r.algbw_gb_s:>8.2f}  {r.busbw_gb_s:>8.2f}")
    for size, why in o.skipped:
        out.append(f"{size:>12}  {'-':>12}  {why}")
    if not o.rows:
        out.append("  (no size measured)")
    return out


def render(result: CommBenchResult, saved: str | None = None) -> str:
    r = result
    head = (f"gpuwise bench comm: {r.world_size} ranks on {r.nnodes} node(s) ({r.local_world_size} per node), "
            f"{r.backend} on {r.device}, {r.dtype}; {r.iters} timed after {r.warmup} warm-up per size")
    lines = [head, "time = the slowest rank's median; algbw = size / time; busbw = algbw x the op's factor "
                   "(nccl-tests doc/PERFORMANCE.md); GB = 1e9 bytes", ""]
    for o in r.ops + ((r.intra_node,) if r.intra_node else ()):
        lines += _render_op(o) + [""]
    if r.intra_node_note:
        lines.append(f"intra-node all_reduce not run: {r.intra_node_note}")
    lines.append("network profile:")
    f = r.fit
    for key, unit in (("intra_node_busbw_gb_s", "GB/s"), ("inter_node_busbw_gb_s", "GB/s"),
                      ("intra_node_latency_us", "us"), ("inter_node_latency_us", "us")):
        v = getattr(f, key)
        lines.append(f"  {key:<24} {'not measured' if v is None else f'{v:.4g} {unit}'}")
    lines += [f"  ({h})" for h in f.how]
    world = next((o for o in r.ops if o.op == "all_reduce"), None)
    if world and world.rows and r.device != "cpu" and world.rows[-1].size_bytes < 256 * MiB:
        lines.append(f"  note: largest message {human_bytes(world.rows[-1].size_bytes)}; NCCL busbw keeps rising up to "
                     "hundreds of MiB, so these figures understate the plateau (use --max-bytes 1073741824)")
    if r.device == "cpu":
        lines.append("  note: measured with gloo on CPU, not a GPU interconnect; fine for testing the pipeline")
    if saved:
        lines.append(f"saved: {saved} (use: gpuwise train MODEL --gpu GPU --profile {saved}); the model reads the "
                     "busbw keys, the latency keys are recorded for reference")
    return "\n".join(lines)


def _row_dict(row: Row) -> dict:
    return {"size_bytes": row.size_bytes, "count": row.count, "time_s": row.time_s, "time_p10_s": row.time_p10_s,
            "time_p90_s": row.time_p90_s, "algbw_gb_s": row.algbw_gb_s, "busbw_gb_s": row.busbw_gb_s}


def _op_dict(o: OpResult) -> dict:
    return {"op": o.op, "group": o.group, "group_size": o.group_size, "busbw_factor": o.busbw_factor,
            "busbw_factor_formula": FACTOR_TEXT[o.op], "peak_busbw_gb_s": o.peak_busbw_gb_s,
            "latency_us": o.latency_us if o.op == "all_reduce" else None,
            "rows": [_row_dict(x) for x in o.rows],
            "skipped": [{"size_bytes": s, "reason": why} for s, why in o.skipped]}


def to_dict(result: CommBenchResult, saved: str | None = None) -> dict:
    r = result
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "bench comm",
        "world_size": r.world_size, "nnodes": r.nnodes, "local_world_size": r.local_world_size,
        "backend": r.backend, "device": r.device, "dtype": r.dtype, "element_bytes": ELT_BYTES,
        "iters": r.iters, "warmup": r.warmup, "torch_version": r.torch_version, "date": r.date,
        "definitions": {"time_s": "max over ranks of each rank's median", "algbw_gb_s": "size_bytes / time_s / 1e9",
                        "busbw_gb_s": "algbw_gb_s x busbw_factor (nccl-tests doc/PERFORMANCE.md)",
                        "peak_busbw_gb_s": f"max busbw over the {PEAK_OVER_LARGEST} largest messages",
                        "latency_us": "smallest all_reduce time / ceil(log2 group_size)"},
        "ops": {o.op: _op_dict(o) for o in r.ops},
        "intra_node_all_reduce": _op_dict(r.intra_node) if r.intra_node else None,
        "intra_node_note": r.intra_node_note,
        "network": {k: getattr(r.fit, k) for k in ("intra_node_busbw_gb_s", "inter_node_busbw_gb_s",
                                                    "intra_node_latency_us", "inter_node_latency_us")},
        "network_how": list(r.fit.how),
        "profile_path": saved,
    }
