"""`gpuwise bench comm`: collectives over message sizes, nccl-tests algbw/busbw, and a network profile from them.

Every torchrun rank runs `cli_main`; rank 0 reports. NCCL on CUDA GPUs, gloo on CPU (`--device cpu`).

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

Time per size: every rank times `iters` repetitions after `warmup` untimed ones (timing.time_op: CUDA events on
GPU, perf_counter on CPU; a barrier first), takes its median, and the slowest rank's median is reported (an
all-reduce MAX). nccl-tests by default averages each rank's mean time over the ranks (`-a 1`; `-a 3` takes the
max): the median is robust to a stray preemption, and the max is what the step waits for.

Network figures for the profile (what `estimate.comm.topology` reads from `--profile`):
- busbw: the largest all_reduce busbw among the three largest messages (busbw flattens out at large messages;
  taking the best of the last three keeps one noisy point from deciding it).
- latency: the smallest all_reduce's time divided by ceil(log2 n), the steps the model charges latency for
  (an upper bound: it includes that message's small bandwidth part).
- One node: both describe the intra-node level. Several nodes: the world all_reduce is the inter-node level and
  an all_reduce inside each node (new_subgroups of LOCAL_WORLD_SIZE ranks) the intra-node level.
"""

from __future__ import annotations

import datetime
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import GpuwiseError, InvalidArgument, require_positive_int, suggest
from ..estimate.comm import COLLECTIVES, bus_factor
from ..units import GB, GiB, KiB, MiB  # GB: nccl-tests' GB/s are 1e9 bytes per second (`*_busbw_gb_s`)

WHAT = "gpuwise bench comm"
DEFAULT_FILE = "gpuwise-network.json"
PROFILE_KIND = "gpuwise-network-profile"
DTYPE = "fp32"
ELT_BYTES = 4
"""fp32, nccl-tests' default type: busbw at large messages does not depend on the type (NCCL moves bytes)."""
FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
               "all_to_all": "(n-1)/n", "send_recv": "1"}
PEAK_OVER_LARGEST = 3
"""busbw for the profile: the best of this many largest messages."""
MEMORY_SHARE = 0.8
"""A size runs when its buffers fit in this share of the free memory (NCCL and the allocator need the rest)."""


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


# ---------------------------------------------------------------------------------------------------------------
# Pure bookkeeping (no torch): sizes, counts and bandwidths as nccl-tests defines them.

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


# ---------------------------------------------------------------------------------------------------------------
# The result.

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


# ---------------------------------------------------------------------------------------------------------------
# Running it (torch imported lazily, every rank runs the same collectives in the same order).

def run(plan: Plan) -> CommBenchResult | None:
    """Measure; the result on rank 0, None on the other ranks."""
    from . import dist as gdist

    env = gdist.torchrun_env(required=True, what=WHAT)
    if env.world_size < 2:
        raise InvalidArgument(f"{WHAT} needs at least 2 ranks (WORLD_SIZE={env.world_size}): "
                              "torchrun --nproc-per-node 2 (or more) -m gpuwise bench comm")
    if env.is_main and plan.save is not None:
        from .comm_report import check_save_target

        check_save_target(plan.save)
    torch, dev = gdist.init(env, plan.device, WHAT)  # cuda: each rank's LOCAL_RANK GPU; cuda:N refused
    import torch.distributed as dist

    backend = str(dist.get_backend())
    nnodes, homogeneous = _node_layout(torch, dist, dev, env)
    intra_group, intra_note = None, None
    if nnodes > 1:
        if not homogeneous:
            intra_note = "nodes run different numbers of ranks"
        elif env.local_world_size < 2:
            intra_note = "one rank per node"
        else:
            intra_group, _ = dist.new_subgroups(group_size=env.local_world_size)
    jobs = [(op, None, env.world_size) for op in plan.ops]
    if intra_group is not None:
        jobs.append(("all_reduce", intra_group, env.local_world_size))
    fits = _memory_agreement(torch, dist, dev, env, jobs, plan.sizes)
    gen = torch.Generator(device=dev)
    gen.manual_seed(20_000 + env.rank)
    say = _progress(env.is_main and plan.progress)
    results = []
    for op, group, n in jobs:
        results.append(_run_op(torch, dist, dev, gen, op, group, n, env, plan, fits, say))
    ops = tuple(r for r, (_, g, _n) in zip(results, jobs) if g is None)
    intra = next((r for r, (_, g, _n) in zip(results, jobs) if g is not None), None)
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    gdist.finish()
    if not env.is_main:
        return None
    return CommBenchResult(world_size=env.world_size, nnodes=nnodes, local_world_size=env.local_world_size,
                           backend=backend, device=device_name, dtype=DTYPE, iters=plan.iters, warmup=plan.warmup,
                           ops=ops, intra_node=intra, intra_node_note=intra_note,
                           fit=fit_network(ops, intra, nnodes=nnodes, intra_note=intra_note),
                           torch_version=torch.__version__,
                           date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def _node_layout(torch, dist, dev, env) -> tuple[int, bool]:
    """(nodes, whether every node runs LOCAL_WORLD_SIZE ranks): counted, not assumed from this rank's view."""
    t = torch.tensor([1 if env.local_rank == 0 else 0], dtype=torch.int64, device=dev)
    dist.all_reduce(t)
    m = torch.tensor([env.local_world_size, -env.local_world_size], dtype=torch.int64, device=dev)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    nodes, hi, lo = int(t.item()), int(m[0].item()), -int(m[1].item())
    return max(1, nodes), hi == lo and env.world_size % max(1, hi) == 0


def _free_bytes(torch, dev, local_ranks: int) -> int | None:
    """Free memory this rank may use: the GPU's free plus the allocator's cache, or host MemAvailable shared by the
    node's ranks; None when unknown (then nothing is skipped and an allocation error says so)."""
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return free + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 // max(1, local_ranks)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _memory_agreement(torch, dist, dev, env, jobs, sizes) -> dict:
    """{(job index, size): fits} agreed by all ranks (an all-reduce MIN): a size one rank skips, all skip,
    or the others would wait in the collective forever."""
    free = _free_bytes(torch, dev, env.local_world_size)
    keys, flags = [], []
    for j, (op, _g, n) in enumerate(jobs):
        for size in sizes:
            shape = message_shape(op, size, n)
            need = buffer_bytes(op, shape[1], n) if shape else 0
            keys.append((j, size))
            flags.append(1 if free is None or need <= MEMORY_SHARE * free else 0)
    t = torch.tensor(flags, dtype=torch.int32, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return dict(zip(keys, (bool(v) for v in t.tolist())))


def _progress(on: bool):
    def say(text: str) -> None:
        if on:
            sys.stderr.write(f"{WHAT}: {text}\n")
            sys.stderr.flush()
    return say


def _collective(torch, dist, dev, gen, op: str, count: int, n: int, group, rank: int):
    """fn(i) running one `op` of `count` (NCCL's count argument) fp32 elements over `group`, and its buffers."""
    def randn(k: int):
        # Random normal values, never zeros. all_reduce (SUM, in place) multiplies them by about n per call, so with
        # many ranks they reach inf after enough calls: harmless for timing (the same bytes move and GPUs add inf
        # as fast as finite numbers), and they never shrink into denormals, which could be slow.
        return torch.randn(k, generator=gen, device=dev, dtype=torch.float32)

    if op == "all_reduce":
        x = randn(count)
        return lambda i: dist.all_reduce(x, group=group)
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.11+
        src, out = randn(count), torch.empty(count * n, device=dev, dtype=torch.float32)
        return lambda i: gather(out, src, group=group)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        src, out = randn(count * n), torch.empty(count, device=dev, dtype=torch.float32)
        return lambda i: scatter(out, src, group=group)
    if op == "all_to_all":
        src, out = randn(count * n), torch.empty(count * n, device=dev, dtype=torch.float32)
        return lambda i: dist.all_to_all_single(out, src, group=group)
    if op == "send_recv":
        # nccl-tests' ring: send to rank + 1, receive from rank - 1, in one group call (world group only).
        src, out = randn(count), torch.empty(count, device=dev, dtype=torch.float32)
        to, frm = (rank + 1) % n, (rank - 1) % n

        def fn(i):
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, src, to), dist.P2POp(dist.irecv, out, frm)]):
                work.wait()
        return fn
    raise InvalidArgument(f"unknown collective {op!r}")


def _run_op(torch, dist, dev, gen, op, group, n, env, plan, fits, say) -> OpResult:
    """One collective over every size: a barrier, warm-up and timed repetitions, the slowest rank's figures."""
    from .timing import time_op

    rows, skipped = [], []
    unsupported: str | None = None
    where = "intra_node" if group is not None else "world"
    label = op if group is None else f"{op} inside each node"
    job_index = _job_index(op, group, plan)
    for size in plan.sizes:
        shape = message_shape(op, size, n)
        if shape is None:
            skipped.append((size, f"skipped: under one {DTYPE} element per rank ({n} ranks)"))
            continue
        count, size_b = shape
        if not fits[(job_index, size)]:
            skipped.append((size, f"skipped: {_human(buffer_bytes(op, size_b, n))} of buffers per rank exceed "
                                  f"{MEMORY_SHARE:.0%} of the free memory on at least one rank"))
            continue
        if unsupported:
            skipped.append((size, unsupported))
            continue
        try:
            fn = _collective(torch, dist, dev, gen, op, count, n, group, env.rank)
        except (torch.cuda.OutOfMemoryError, MemoryError):
            raise GpuwiseError(f"{WHAT}: out of memory allocating {_human(buffer_bytes(op, size_b, n))} for "
                               f"{op} at {_human(size_b)} on rank {env.rank}; lower --max-bytes") from None
        dist.barrier(group=group)
        try:
            st = time_op(torch, dev, fn, warmup=plan.warmup, reps=plan.iters)
        except (RuntimeError, NotImplementedError) as exc:
            # A backend without this collective (gloo in older torch) refuses it on every rank alike, before any
            # data moves: record why and go on. Anything else (a peer gone, NCCL errors) is not ours to hide.
            if rows or not _UNSUPPORTED.search(str(exc)):
                raise
            unsupported = f"skipped: {_backend_name(dist, group)} does not support {op} here ({_first_line(exc)})"
            skipped.append((size, unsupported))
            continue
        t = torch.tensor([st.median_s, st.p10_s, st.p90_s], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's figures
        med, p10, p90 = (float(v) for v in t.tolist())
        if not med > 0:  # below the timer's resolution: unknown, never an infinite bandwidth
            skipped.append((size, "skipped: time below the timer's resolution"))
            continue
        algbw, busbw = bandwidths(op, size_b, med, n)
        rows.append(Row(size_b, count, med, p10, p90, algbw, busbw))
        say(f"{label} {_human(size_b)}: {med * 1e6:.1f} us, busbw {busbw:.2f} GB/s")
        del fn
    return OpResult(op=op, group=where, group_size=n, busbw_factor=bus_factor(op, n), rows=tuple(rows),
                    skipped=tuple(skipped))


_UNSUPPORTED = re.compile(r"not support|not implemented|unsupported", re.IGNORECASE)


def _backend_name(dist, group) -> str:
    try:
        return str(dist.get_backend(group))
    except (RuntimeError, ValueError, AttributeError):
        return "this backend"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def _job_index(op: str, group, plan: Plan) -> int:
    """The job index `_memory_agreement` used: the ops in order, then the intra-node all_reduce last."""
    return len(plan.ops) if group is not None else plan.ops.index(op)


def _human(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"


def cli_main(args) -> str | None:
    """`gpuwise bench comm`: every rank calls this; rank 0 gets the text (or JSON), the others None."""
    from .comm_report import render, save, to_dict

    plan = make_plan(args)
    result = run(plan)
    if result is None:
        return None
    saved = save(result, plan.save) if plan.save is not None else None
    if plan.json:
        from ..schema import dumps

        return dumps(to_dict(result, saved))
    return render(result, saved)
