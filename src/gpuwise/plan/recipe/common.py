"""What every recipe shares: the job a plan describes, the trainer versions followed, headers and notes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ...estimate.comm import topology
from ...estimate.layout import Layout
from ...units import GiB
from ...version import __version__
from ..planner import Plan, PlanRequest, PlanResult, describe

# The versions whose option names the files follow; where each name was checked is in docs/launch-recipes.md.
TORCHTITAN_VERSION = "torchtitan 0.2.2"
TORCHTITAN_SOURCE = ("torchtitan/config/job_config.py and torchtitan/distributed/pipeline_parallel.py of the "
                     "torchtitan 0.2.2 wheel (PyPI), the last release that reads TOML job files")
MEGATRON_VERSION = "Megatron-LM (megatron-core) 0.19.2"
MEGATRON_SOURCE = ("megatron/training/arguments.py and megatron/core/transformer/pipeline_parallel_layer_layout.py "
                   "of the megatron-core 0.19.2 wheel (PyPI); pretrain_gpt.py is in the Megatron-LM repository root")
DEEPSPEED_VERSION = "DeepSpeed 0.19.8"
DEEPSPEED_SOURCE = ("deepspeed/runtime/constants.py, runtime/zero/config.py, runtime/zero/offload_config.py, "
                    "runtime/precision_config.py and runtime/activation_checkpointing/config.py of deepspeed 0.19.8")
TORCHRUN_SOURCE = "torch.distributed.run (torchrun) of PyTorch 2.x"
RDZV_PORT = 29500
FP32_MOMENTS_NOTE = "AdamW's moments stay fp32: the plan's 16-bit moments are Megatron's precision-aware optimizer"
"""What the trainers other than Megatron say of a plan priced with --exp-avg-dtype / --exp-avg-sq-dtype."""

# torchtitan 0.2.2 model names and flavors (torchtitan/models/<name>/__init__.py) for catalog ids that match them.
TORCHTITAN_FLAVORS = {
    "llama-3-8b": ("llama3", "8B"), "llama-3.1-8b": ("llama3", "8B"),
    "llama-3-70b": ("llama3", "70B"), "llama-3.1-70b": ("llama3", "70B"), "llama-3.3-70b": ("llama3", "70B"),
    "llama-3.1-405b": ("llama3", "405B"),
    "qwen3-0.6b": ("qwen3", "0.6B"), "qwen3-1.7b": ("qwen3", "1.7B"), "qwen3-4b": ("qwen3", "4B"),
    "qwen3-8b": ("qwen3", "8B"), "qwen3-14b": ("qwen3", "14B"), "qwen3-32b": ("qwen3", "32B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"), "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "deepseek-v3": ("deepseek_v3", "671B"), "deepseek-r1": ("deepseek_v3", "671B"),
}


class Unsupported(Exception):
    """The trainer cannot run this layout at all; the message says why (it goes into `<trainer>.note.md`)."""


@dataclass(frozen=True)
class _Job:
    req: PlanRequest
    plan: Plan
    lay: Layout
    nodes: int
    gpus_per_node: int
    per_rank: int
    """Sequences per data-parallel rank per optimizer step."""
    microbatches: int
    """Micro-batches per data-parallel rank per step (pipeline micro-batches, or gradient-accumulation steps)."""
    offload: frozenset[str] = field(default_factory=frozenset)

    @property
    def spec(self):
        return self.req.model.spec


def _job(result: PlanResult, plan: Plan) -> _Job:
    req = result.request
    lay = plan.layout
    shard_group = getattr(plan, "shard_group", None)
    if shard_group is not None and lay.shard_group is None:
        lay = replace(lay, shard_group=shard_group)
    per_node = topology(req.gpu, num_gpus=req.num_gpus, gpus_per_node=req.gpus_per_node,
                        inter_node_gbps=req.inter_node_gbps).gpus_per_node
    per_rank = req.global_batch // lay.dp
    return _Job(req=req, plan=plan, lay=lay, nodes=math.ceil(req.num_gpus / per_node), gpus_per_node=per_node,
                per_rank=per_rank, microbatches=per_rank // plan.micro_batch,
                offload=frozenset(getattr(plan, "offload", ()) or ()))


def _header(job: _Job, follows: str, source: str) -> list[str]:
    req, p = job.req, job.plan
    mfu = "n/a" if p.mfu is None else f"{100 * p.mfu:.1f}%"
    return [
        f"gpuwise {__version__} launch recipe for {req.model.id}" + (f" ({req.model.hf_id})" if req.model.hf_id else "")
        + f" on {req.num_gpus} x {req.gpu.id} ({_nodes_text(job)})",
        f"job: seq {req.seq}, global batch {req.global_batch} sequences, framework {req.framework}, "
        f"precision {req.precision}, optimizer {req.optimizer}",
        f"plan: {describe(p)}" + (f", offload {'+'.join(sorted(job.offload))}"
                                  if job.offload and "offload" not in describe(p) else ""),
        f"predicted: step {p.step_time_s:.3f} s, MFU {mfu}, {p.memory_bytes / GiB:.1f} GiB per GPU",
        f"follows: {follows} ({source})",
    ]


def _nodes_text(job: _Job) -> str:
    return f"{job.nodes} node{'s' if job.nodes > 1 else ''} x {job.gpus_per_node} GPUs"


def _commented(lines: list[str], prefix: str = "# ") -> str:
    return "".join(f"{prefix}{line}".rstrip() + "\n" for line in lines)


def _differs_block(differs: list[str], prefix: str = "# ") -> str:
    if not differs:
        return _commented(["differs from the plan: nothing known"], prefix)
    return _commented(["differs from the plan:"] + [f"  - {d}" for d in differs], prefix)


def _note(job: _Job, trainer: str, why: str) -> str:
    follows = {"torchtitan": TORCHTITAN_VERSION, "megatron": MEGATRON_VERSION, "deepspeed": DEEPSPEED_VERSION}[trainer]
    head = _header(job, follows, "no file written")
    if job.req.framework == trainer:
        advice = (f"The plan came from `--framework {trainer}`, whose search does not know this constraint yet: "
                  "take the next plan in the list that this trainer can run.")
    else:
        advice = ("Run the plan with a trainer whose file was emitted (see README.md), or ask `gpuwise plan` for a "
                  f"plan under `--framework {trainer}`.")
    return (f"# {trainer}: not emitted for this plan\n\n" + "\n".join(f"- {h}" for h in head)
            + f"\n\n{trainer} cannot run this layout: {why}\n\n" + advice + "\n")
