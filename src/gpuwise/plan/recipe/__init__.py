"""Launch recipes for a chosen `gpuwise plan`: the torchrun line and the parallelism settings of real trainers.

`recipes(result, plan)` returns file name -> text; `write_recipes` writes them into a folder (`gpuwise plan --emit
DIR`). Always emitted: `launch.sh` (torchrun for the plan's framework), `torchtitan.toml`, `megatron.args`,
`ds_config.json` and `README.md`. Each names the plan it encodes (`describe()`), the predicted step time and MFU, and
the trainer version whose option names it follows; those names were checked against that version's source (see
docs/launch-recipes.md). Where a trainer runs the layout but not every detail of the plan (ZeRO-1 in torchtitan,
selective recompute in DeepSpeed ...) the file lists what differs; where it cannot run the layout at all (TP, PP or
CP under plain DeepSpeed ZeRO), `<trainer>.note.md` takes the file's place and says why.

Pure text generation: no torch, no trainer imported.

One module per trainer: torchtitan.py, megatron.py, deepspeed.py; launch.py writes launch.sh and the README;
common.py holds the job and what they share.
"""

from __future__ import annotations

from pathlib import Path

from ...estimate.pipeline import virtual_stage_layers
from ..planner import Plan, PlanResult
from .common import DEEPSPEED_VERSION, MEGATRON_VERSION, TORCHTITAN_VERSION, Unsupported, _job, _note
from .deepspeed import _deepspeed_config
from .launch import _launch_sh, _readme
from .megatron import _megatron_args, megatron_layout
from .torchtitan import _torchtitan_toml, torchtitan_split

__all__ = ["DEEPSPEED_VERSION", "MEGATRON_VERSION", "TORCHTITAN_VERSION", "megatron_layout", "recipes",
           "torchtitan_split", "virtual_stage_layers", "write_recipes"]


def recipes(result: PlanResult, plan: Plan) -> dict[str, str]:
    """File name -> file text for the plan (a Plan from result.plans; result.request is the PlanRequest)."""
    job = _job(result, plan)
    files: dict[str, str] = {}
    caveats: dict[str, list[str]] = {}
    for trainer, build in (("torchtitan", _torchtitan_toml), ("megatron", _megatron_args),
                           ("deepspeed", _deepspeed_config)):
        try:
            name, text, differs = build(job)
        except Unsupported as e:
            name, text, differs = f"{trainer}.note.md", _note(job, trainer, str(e)), [f"not expressible: {e}"]
        files[name] = text
        caveats[name] = differs
    files["launch.sh"] = _launch_sh(job, files)
    files["README.md"] = _readme(job, files, caveats)
    return dict(sorted(files.items()))


def write_recipes(result: PlanResult, plan: Plan, directory: str | Path) -> list[Path]:
    """Create the directory if needed, write the files, return their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in recipes(result, plan).items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        if name.endswith(".sh"):
            path.chmod(0o755)
        paths.append(path)
    return paths
