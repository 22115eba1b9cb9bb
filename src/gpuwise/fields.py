"""Dataclass fields as the one place an option is declared: its default and its docstring.

A request's field carries the option's type (a `Literal` gives the choices), its default and, in the docstring
written under it, its help. `field_default` lets one request take another's default instead of restating it
(`gpuwise pick`'s --prompt-tokens is `gpuwise infer`'s); `field_docs` reads the docstrings (Python keeps none of
them at run time, so they are read from the source, once per class), for the CLI's help and the HTTP API's
OpenAPI description. A docstring may name a constant of its module in braces, e.g. "(default {DEFAULT_CONTEXT})":
the help shows its value, so a default stated in words is still written once.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import MISSING, fields
from functools import lru_cache


def field_default(cls: type, name: str) -> object:
    """The default of field `name` of dataclass `cls` (KeyError when it has none)."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name}")


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring (whitespace collapsed; module constants in braces filled in), for the fields of
    `cls` that have one."""
    module = sys.modules[cls.__module__]
    try:
        lines = inspect.getsource(module).split("\n")
    except (OSError, TypeError):  # no source (a frozen build): no help, still a working CLI
        return {}
    head = f"class {cls.__name__}"
    start = next((i for i, line in enumerate(lines) if line.startswith((head + ":", head + "("))), None)
    if start is None:
        return {}
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in ("", " ", "#")), len(lines))
    names = vars(module)
    return {name: _fill(" ".join(doc.split()), names)
            for name, doc in _FIELD_DOC.findall("\n".join(lines[start:end]))}


_FIELD_DOC = re.compile(r'^    (\w+): [^\n]*\n    """(.*?)"""', re.M | re.S)
"""A field line of the class body (`    name: type = default`) and the docstring on the lines right under it. A regular
expression, not `ast`: parsing the class costs ~2 ms on every CLI run, this ~0.1 ms."""


def _fill(doc: str, names: dict) -> str:
    """`doc` with {NAME} (or {NAME:,}) replaced by the module constant NAME; left as written when none matches."""
    if "{" not in doc:
        return doc
    try:
        return doc.format_map(names)
    except (KeyError, ValueError, IndexError, AttributeError):
        return doc
