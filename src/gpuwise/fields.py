"""Dataclass fields as the one place an option is declared: its default and its docstring.

A request's field carries the option's type (a `Literal` gives the choices), its default and, in the docstring
written under it, its help. `field_default` lets one request take another's default instead of restating it
(`gpuwise pick`'s --prompt-tokens is `gpuwise infer`'s); `field_docs` reads the docstrings (Python keeps none of
them at run time, so they are read from the source, once per class), for the CLI's help and the HTTP API's
OpenAPI description. A docstring may name a constant of its module in braces, e.g. "(default {DEFAULT_CONTEXT})":
the help shows its value, so a default stated in words is still written once.

A field `num_gpus` is the command-line option `--num-gpus` (`flag`); `to_argv` writes the flags that give a request
given values (the `gpuwise train` command a plan prints; the CLI reads them back, cli/options.py).
"""

from __future__ import annotations

import re
import shlex
import sys
import types
from dataclasses import MISSING, Field, fields
from functools import lru_cache
from typing import Any, Union, get_args, get_origin, get_type_hints


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
    `cls` that have one; a field without one takes the docstring of the same field in the classes `cls` names in a
    `DOCS_FROM` class attribute (a request field that is a job's or a layout's is documented there, once)."""
    out = _own_docs(cls)
    for other in getattr(cls, "DOCS_FROM", ()):
        for name, doc in field_docs(other).items():
            out.setdefault(name, doc)
    return out


def _own_docs(cls: type) -> dict[str, str]:
    module = sys.modules[cls.__module__]
    try:  # the file itself: `inspect` costs ~10 ms to import, on every CLI run
        with open(module.__file__, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
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


def strip_optional(tp: Any) -> Any:
    """X for `X | None`; the type itself otherwise."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


@lru_cache(maxsize=None)
def type_hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def option_fields(cls: type) -> tuple[Field, ...]:
    """The fields of `cls` that are options (init fields)."""
    return tuple(f for f in fields(cls) if f.init)


def default_value(f: Field) -> Any:
    """A field's default (its factory's value), or MISSING."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def to_argv(cls: type, values: dict[str, Any], *, keep: tuple[str, ...] = ()) -> list[str]:
    """The command-line flags that give a `cls` request these field values (positional model and GPU excluded;
    values equal to the field's default left out, but for the fields named in `keep`). Scalars, switches and tuples
    of scalars only (what a `TrainRequest` holds): GPUs and price tables have no flags written for them here."""
    by_name = {f.name: f for f in option_fields(cls)}
    hints = type_hints(cls)
    out: list[str] = []
    for name, value in values.items():
        f = by_name[name]
        if value is None or (value == default_value(f) and name not in keep):
            continue
        tp = strip_optional(hints[name])
        if tp is bool:
            out.append(flag(name) if value else "--no-" + name.replace("_", "-"))
        elif get_origin(tp) is tuple:
            out += [flag(name), ",".join(map(str, value))]
        elif isinstance(value, float):
            out += [flag(name), f"{value:g}"]
        else:
            out += [flag(name), str(value)]
    return out


def command_line(command: str, model: str, gpu: str, argv: list[str]) -> str:
    """The shell command (quoted) for `gpuwise COMMAND MODEL --gpu GPU ARGV`."""
    return shlex.join(["gpuwise", command, model, "--gpu", gpu, *argv])
