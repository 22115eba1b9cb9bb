"""`gpuwise bench comm`'s measuring: every torchrun rank runs the same collectives in the same order; rank 0 gets the
result. NCCL on CUDA GPUs, gloo on CPU (`--device cpu`); torch imported lazily.

Time per size: every rank times `iters` repetitions after `warmup` untimed ones (timing.time_op: CUDA events on
GPU, perf_counter on CPU; a barrier first), takes its median, and the slowest rank's median is reported (an
all-reduce MAX). nccl-tests by default averages each rank's mean time over the ranks (`-a 1`; `-a 3` takes the
max): the median is robust to a stray preemption, and the max is what the step waits for.
"""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

from ..errors import GpuwiseError, InvalidArgument
from ..estimate.comm import bus_factor
from .comm_plan import Plan
from .comm_profile import check_save_target
from .comm_result import CommBenchResult, OpResult, Row, fit_network
from .comm_sizes import DTYPE, bandwidths, buffer_bytes, human_bytes, message_shape

WHAT = "gpuwise bench comm"
MEMORY_SHARE = 0.8
"""A size runs when its buffers fit in this share of the free memory (NCCL and the allocator need the rest)."""


def run(plan: Plan) -> CommBenchResult | None:
    """Measure; the result on rank 0, None on the other ranks."""
    from . import dist as gdist

    env = gdist.torchrun_env(required=True, what=WHAT)
    if env.world_size < 2:
        raise InvalidArgument(f"{WHAT} needs at least 2 ranks (WORLD_SIZE={env.world_size}): "
                              "torchrun --nproc-per-node 2 (or more) -m gpuwise bench comm")
    if env.is_main and plan.save is not None:
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
            skipped.append((size, f"skipped: {human_bytes(buffer_bytes(op, size_b, n))} of buffers per rank exceed "
                                  f"{MEMORY_SHARE:.0%} of the free memory on at least one rank"))
            continue
        if unsupported:
            skipped.append((size, unsupported))
            continue
        try:
            fn = _collective(torch, dist, dev, gen, op, count, n, group, env.rank)
        except (torch.cuda.OutOfMemoryError, MemoryError):
            raise GpuwiseError(f"{WHAT}: out of memory allocating {human_bytes(buffer_bytes(op, size_b, n))} for "
                               f"{op} at {human_bytes(size_b)} on rank {env.rank}; lower --max-bytes") from None
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
        say(f"{label} {human_bytes(size_b)}: {med * 1e6:.1f} us, busbw {busbw:.2f} GB/s")
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

