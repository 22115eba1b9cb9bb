"""How an explanation is shown: plain text wrapped to WIDTH columns (`render`), the term list (`list_terms`) and
the `--json` document (`to_dict`)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from ...schema import envelope
from .glossary import TERMS, entries

if TYPE_CHECKING:
    from . import Explanation

WIDTH = 100
"""Columns of the plain-text output."""


def _wrap(text: str, indent: str = "", subsequent: str | None = None) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent=indent,
                         subsequent_indent=indent if subsequent is None else subsequent,
                         break_long_words=False, break_on_hyphens=False)


def _command_lines(cmd: str) -> list[str]:
    """A command on one line, or broken with shell continuations (still pastes) when wider than WIDTH."""
    if len(cmd) + 2 <= WIDTH:
        return ["  " + cmd]
    parts = textwrap.wrap(cmd, width=WIDTH - 8, break_long_words=False, break_on_hyphens=False)
    return ["  " + parts[0] + " \\"] + ["      " + p + " \\" for p in parts[1:-1]] + ["      " + parts[-1]]


def render(e: Explanation) -> str:
    """Plain text: title, explanation, computed numbers, commands, see also, sources; wrapped to WIDTH columns."""
    out = [e.title, "=" * min(len(e.title), WIDTH), *_wrap(e.text)]
    if e.facts:
        where = []
        if "gpu" in e.numbers:
            where.append(str(e.numbers["gpu"]) + (" (default GPU; pass --gpu for another)" if e.gpu_is_default else ""))
        if "model" in e.numbers:
            where.append(str(e.numbers["model"]))
        head = "Numbers, computed from the catalog" + (f" for {' and '.join(where)}" if where else "") + ":"
        out += ["", *_wrap(head)]
        for line in e.facts:
            out += _wrap(line, "  - ", "    ")
    if e.commands:
        out += ["", "See it for your model:"]
        for c in e.commands:
            out += _command_lines(c)
    if e.see_also:
        out += ["", *_wrap("See also: " + ", ".join(e.see_also), "", "  ")]
    if e.sources:
        out += ["", "Sources:"]
        for s in e.sources:
            out += _wrap(s, "  - ", "    ")
    return "\n".join(out)


def to_dict(e: Explanation) -> dict:
    """The `--json` document, in the envelope every gpuwise document has (gpuwise.schema)."""
    return envelope("explain", term=e.term, title=e.title, text=e.text, aliases=list(e.aliases),
                    numbers=dict(e.numbers), facts=list(e.facts), gpu_is_default=e.gpu_is_default,
                    commands=list(e.commands), see_also=list(e.see_also), sources=list(e.sources))


def list_terms() -> str:
    """`gpuwise explain` with no term: every term, its title and the other names it answers to."""
    width = max(len(t) for t in TERMS) + 2
    out = ["Terms (gpuwise explain TERM; other accepted names in brackets):"]
    for t in TERMS:
        row = entries()[t]
        aliases = row.get("aliases", [])
        line = f"  {t.ljust(width)}{row['title']}" + (f" [{', '.join(aliases)}]" if aliases else "")
        out += _wrap(line, "", " " * (width + 2))
    return "\n".join(out)
