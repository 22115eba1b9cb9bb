"""`gpuwise explain TERM`: what a concept means, its numbers on a GPU (and a model), and the command that shows it.

The words live in `catalog/data/glossary.toml` (title, aliases, text, see_also, command templates, sources). Every
number is computed, from the catalogs and the same estimator functions the other commands use, never typed:
`explain roofline` prints the ridge point `gpuwise roofline` uses, `explain kv-cache` the KV bytes `gpuwise fit`
counts. Without a GPU the numbers are for `DEFAULT_GPU`, and the output says so; model numbers need a model.

The package:

- `glossary.py`: reads the glossary; `TERMS`, `resolve` (an id or alias -> the term id).
- `examples.py`: the example settings behind the numbers (8 data-parallel GPUs, `gpuwise train`'s --seq, ...).
- `facts.py`: what the number providers share (the `Fact` they return, formatting, parameters and weight bytes).
- `numbers_hardware.py`, `numbers_training.py`, `numbers_parallelism.py`, `numbers_inference.py`: one provider
  per term, by topic; each module's `NUMBERS` maps its term ids to its providers.
- `render.py`: the plain text (`render`, `list_terms`) and the `--json` document (`to_dict`).
- here: `Explanation` and `explain`, which puts the glossary row and the numbers together.

Kept light on purpose: the glossary and GPU catalog are small TOML files, the estimators are imported only when
a term needs them, and nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...catalog.gpus import get_gpu
from ...catalog.models import load_model
from . import numbers_hardware, numbers_inference, numbers_parallelism, numbers_training
from .examples import DEFAULT_GPU
from .facts import Provider
from .glossary import TERMS, entries, resolve
from .render import WIDTH, list_terms, render, to_dict

__all__ = ["DEFAULT_GPU", "MODEL_PLACEHOLDER", "NUMBERS", "TERMS", "WIDTH", "Explanation", "explain", "list_terms",
           "render", "resolve", "to_dict"]

MODEL_PLACEHOLDER = "MODEL"
"""What `{model}` becomes in the command templates when no model is given."""

NUMBERS: dict[str, Provider] = {**numbers_hardware.NUMBERS, **numbers_training.NUMBERS,
                                **numbers_parallelism.NUMBERS, **numbers_inference.NUMBERS}
"""Term id -> the provider of its computed numbers."""


@dataclass(frozen=True, slots=True)
class Explanation:
    term: str
    """Canonical term id (one of TERMS)."""
    title: str
    text: str
    """The glossary's explanation, whitespace collapsed to single spaces."""
    see_also: tuple[str, ...]
    commands: tuple[str, ...]
    """Command templates filled with the model (or MODEL) and the GPU id."""
    numbers: dict[str, float | str]
    """Computed values, keys naming their units (`_bytes`, `_s`, `_flop_per_byte`); 'gpu' / 'model' say for what."""
    facts: tuple[str, ...] = ()
    """The numbers in words, one line each (what `render` prints)."""
    sources: tuple[str, ...] = ()
    """Where the facts in `text` come from."""
    aliases: tuple[str, ...] = ()
    gpu_is_default: bool = False
    """True when the GPU numbers are for DEFAULT_GPU because none was given."""


def explain(term: str, *, model: str | None = None, gpu: str | None = None) -> Explanation:
    """Explain TERM (an id or alias); numbers for `gpu` (default DEFAULT_GPU) and, when given, `model`."""
    tid = resolve(term)
    row = entries()[tid]
    g = get_gpu(gpu if gpu is not None else DEFAULT_GPU)
    m = load_model(model) if model is not None else None
    facts = NUMBERS[tid](g, m) if tid in NUMBERS else []
    numbers: dict[str, float | str] = {}
    lines: list[str] = []
    for key, value, line in facts:
        if key is not None and value is not None:
            numbers[key] = value
        if line is not None:
            lines.append(line)
    commands = tuple(c.format(model=m.id if m is not None else MODEL_PLACEHOLDER, gpu=g.id)
                     for c in row.get("commands", []))
    return Explanation(term=tid, title=row["title"], text=" ".join(row["text"].split()),
                       see_also=tuple(row.get("see_also", [])), commands=commands, numbers=numbers,
                       facts=tuple(lines), sources=tuple(row.get("sources", [])),
                       aliases=tuple(row.get("aliases", [])), gpu_is_default=gpu is None and "gpu" in numbers)
