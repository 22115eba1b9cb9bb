"""The planner against the layouts published runs used (issue 18): `python -m validation.layouts`.

For every scored 2023-2026 speed row that trains the whole model with a framework the planner searches, gpuwise plans
the same model, GPUs, sequence, global batch, framework and precision, and compares its best plan with the published
layout, both predicted by the same step-time model: the same layout, a tie (within 3%), the planner's choice with
the predicted gain and the parts of the step where it comes from, or, where the published layout is predicted more
than 3% faster than anything the planner found, a miss (the search did not reach it). A published layout the
planner cannot evaluate (its model or options refused) is listed with why.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from gpuwise.plan.planner import COMPILING_FRAMEWORKS
from validation.speed import LEGACY, _model, load

PLANNED = ("megatron", "torchtitan", "fsdp", "deepspeed")
TIE = 0.03


@dataclass(frozen=True, slots=True)
class Compared:
    name: str
    published: str
    best: str
    published_s: float
    best_s: float
    why: str

    @property
    def gain(self) -> float:
        """Predicted step-time saving of the planner's best over the published layout (0: same or worse)."""
        return max(0.0, 1 - self.best_s / self.published_s)


def _layout(lay, micro_batch: int) -> str:
    parts = [f"TP {lay.tp}", f"PP {lay.pp}" + (f"x{lay.vpp}" if lay.vpp > 1 else ""), f"CP {lay.cp}"]
    if lay.ep > 1:
        parts.append(f"EP {lay.ep}" + (f" (ETP {lay.expert_tp})" if lay.expert_tp != lay.tp else ""))
    return ", ".join(parts) + f", DP {lay.dp}, mb {micro_batch}"


def _why(pub_breakdown: dict, best_breakdown: dict) -> str:
    diffs = sorted(((pub_breakdown.get(k, 0.0) - best_breakdown.get(k, 0.0), k)
                    for k in set(pub_breakdown) | set(best_breakdown)), reverse=True)
    top = [f"{k.replace('_', ' ')} {d:+.3g} s" for d, k in diffs[:2] if d > 0]
    return "published layout spends more on " + ", ".join(top) if top else "no single part dominates"


def compare(row: dict) -> Compared | None:
    import gpuwise

    opts = row["options"]
    r = gpuwise.train(_model(row["model"]), gpu=row["gpu"], **opts)
    if r.framework not in PLANNED or r.request.finetune != "full":
        return None
    plan_opts = dict(num_gpus=opts["num_gpus"], seq=opts["seq"], global_batch=r.request.global_batch,
                     framework=r.framework, precision=r.request.precision)
    for key in ("gpus_per_node", "inter_node_gbps", "sdpa_backend", "attn_implementation"):
        if key in opts:
            plan_opts[key] = opts[key]
    # the job's own choices the planner can price: torch.compile, Megatron's AdamW moment dtypes ...
    if r.request.compile and r.framework in COMPILING_FRAMEWORKS:
        plan_opts["compile"] = True
    if r.framework == "megatron" and r.request.optimizer == "adamw":
        for key in ("exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(r.request, key) is not None:
                plan_opts[key] = getattr(r.request, key)
    # how it dispatches experts and what it replays as CUDA graphs (Megatron), and how it overlaps TP collectives,
    # gathers fp8 weights and reduces gradients
    for key in ("moe_token_dispatcher", "moe_flex_dispatcher_backend", "moe_a2a_overlap", "delay_wgrad_compute",
                "moe_pad_expert_input_to_capacity",
                "moe_permute_fusion", "use_transformer_engine_op_fuser", "cuda_graph_scope", "tp_comm_overlap",
                "fp8_param_gather", "grad_reduce_in_fp32",
                "fp8_backend", "float8_recipe", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
        if key in opts:
            plan_opts[key] = opts[key]
    p = gpuwise.plan(_model(row["model"]), gpu=row["gpu"], **plan_opts)
    published = _layout(r.layout, r.request.micro_batch)
    pub_s = r.perf.step.step_time_s
    if not p.plans:  # the published layout ran and the planner found nothing: a miss
        return Compared(row["name"], published, "none fits", pub_s, float("inf"), p.why)
    best = p.plans[0]
    best_name = _layout(best.layout, best.micro_batch)
    why = "" if best_name == published else _why(r.perf.step.breakdown, best.step.breakdown)
    return Compared(row["name"], published, best_name, pub_s, best.step_time_s, why)


def main() -> int:
    from gpuwise.errors import GpuwiseError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out, skipped = [], []
    for row in load():
        if row["category"] == LEGACY or row["model"].startswith("custom:") or row["gpu"].startswith("custom:"):
            continue
        try:
            c = compare(row)
        except GpuwiseError as exc:
            skipped.append((row["name"], str(exc).split(";")[0]))
            continue
        if c is not None:
            out.append(c)
    same = [c for c in out if c.best == c.published]
    # the published layout predicted faster than the planner's best: a layout the search did not reach (a degree,
    # split or option outside its space), shown rather than counted as a tie
    missed = [c for c in out if c not in same and c.best_s > c.published_s * (1 + TIE)]
    tie = [c for c in out if c not in same and c not in missed and c.gain <= TIE]
    better = [c for c in out if c not in same and c.gain > TIE]
    for c in sorted(missed, key=lambda c: c.published_s / c.best_s):
        best = "nothing fits" if c.best_s == float("inf") else \
            f"{c.best}: {c.best_s:.3g} s ({100 * (c.best_s / c.published_s - 1):.0f}% longer)"
        print(f"{c.name[:90]}\n    MISSED: published {c.published}: {c.published_s:.3g} s predicted; planner's best "
              f"{best}")
    for c in sorted(better, key=lambda c: -c.gain):
        print(f"{c.name[:90]}\n    published {c.published}: {c.published_s:.3g} s predicted; planner {c.best}: "
              f"{c.best_s:.3g} s ({100 * c.gain:.0f}% shorter); {c.why}")
    gains = statistics.median([c.gain for c in better] or [0])
    print(f"\n{len(out)} published layouts: {len(same)} are the planner's best, {len(tie)} within {100 * TIE:.0f}% of "
          f"it, {len(missed)} predicted faster than the planner's best (outside its search), {len(better)} predicted "
          f"slower than the planner's best (median {100 * gains:.0f}% "
          f"shorter steps; every gain inherits the step-time model's error, docs/performance.md)")
    for name, why in skipped:
        print(f"  not compared: {name[:90]}: {why}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
