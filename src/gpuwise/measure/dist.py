"""The torchrun environment of `gpuwise bench comm` and `gpuwise bench train`.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every process; across
nodes its usual rendezvous (`--nnodes 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT`) sets the same. The process
group uses NCCL when the ranks drive CUDA GPUs and gloo on CPU (the tests' path).
"""

from __future__ import annotations

import gc
import os
import sys
from dataclasses import dataclass

from ._deps import MeasureUnavailable, require_torch, resolve_device


@dataclass(frozen=True, slots=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def torchrun_env(required: bool, what: str) -> DistEnv:
    """The ranks torchrun describes; a single process (rank 0 of 1) when not under torchrun and not `required`."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        if required:
            raise MeasureUnavailable(f"{what} runs under torchrun, e.g. `torchrun --nproc-per-node 2 -m gpuwise "
                                     f"{what.removeprefix('gpuwise ')}` (RANK/WORLD_SIZE are not set)")
        return DistEnv(0, 1, 0, 1)
    try:
        world = int(os.environ["WORLD_SIZE"])
        return DistEnv(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")),
                       int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    except ValueError:
        raise MeasureUnavailable(f"{what}: malformed torchrun environment (RANK={os.environ.get('RANK')!r}, "
                                 f"WORLD_SIZE={os.environ.get('WORLD_SIZE')!r})") from None


def init(env: DistEnv, device: str | None, what: str):
    """(torch, device) with the default process group up when world_size > 1 (NCCL on CUDA, gloo on CPU).

    `device` None: this rank's CUDA GPU (LOCAL_RANK) when CUDA is visible, else an error asking for --device cpu."""
    torch = require_torch(what)
    name = (device or "").strip().lower()
    if env.world_size > 1 and name.startswith("cuda:"):
        raise MeasureUnavailable(f"{what}: --device {device} would put every rank on one GPU: leave --device out or "
                                 "pass --device cuda (each rank takes the GPU of its LOCAL_RANK)")
    if name in ("", "cuda") and torch.cuda.is_available():  # plain "cuda": this rank's GPU, not GPU 0 for all
        device = f"cuda:{env.local_rank % torch.cuda.device_count()}"
    dev = resolve_device(torch, device, what)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if env.world_size > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            backend = "nccl" if dev.type == "cuda" else "gloo"
            kwargs = {"device_id": dev} if dev.type == "cuda" else {}
            dist.init_process_group(backend=backend, **kwargs)
            _GROUP_STARTED[0] = True
    return torch, dev


_GROUP_STARTED = [False]
"""Whether this process started a process group (it runs as one rank under torchrun)."""


def leave_after_group(code: int) -> int:
    """Exit a torchrun rank at once, past the interpreter's teardown, once its output is written; return `code`
    unchanged in a process that started no process group.

    Gloo's worker threads can still hold work objects when the interpreter finalizes, and their destruction then
    aborts the rank now and then ("terminate called without an active exception", SIGABRT: the failure
    pytorch/pytorch#179291 describes). The group has been torn down by `finish` before this; nothing is left to
    clean up but the interpreter itself."""
    if _GROUP_STARTED[0]:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def finish(barrier: bool = True) -> None:
    """Tear the process group down (after a barrier, unless this rank failed: the others may never reach it)."""
    torch = require_torch("gpuwise bench")
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()  # the model's reference cycles (FSDP2 hooks, DTensors) die while the group can still serve them
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
    del torch
