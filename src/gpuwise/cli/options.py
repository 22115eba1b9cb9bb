"""A command's options, built from its request dataclass: declared once, so the CLI, the Python API and the HTTP API
(generated from these options, serve/api.py) cannot disagree.

Each init field of the request becomes an option: `--num-gpus` for `num_gpus`; its docstring is the help (module
constants in braces filled in, `gpuwise.fields`), a `Literal` type gives the choices, the default is the option's
default and is shown in the help. Field types decide the rest:

- `LoadedModel` -> the positional MODEL; `GPU` -> the required `--gpu`; a tuple of GPUs -> a comma list of names
  (a MIG slice as GPU:PROFILE);
- `bool` -> a switch (`--sp`), or `--no-<name>` where the default is True;
- `int` -> a whole number >= 1; `float` -> a finite number (the request checks its range);
- a tuple -> a comma list; `dict[str, float]` -> ID=NUMBER,ID=NUMBER.

`request_options` turns the parsed namespace back into the request's keyword arguments, leaving out options the
user did not give, so that the request's own default applies. `to_argv` is the inverse: the flags that give a
request these values (the `gpuwise train` command a plan prints).
"""

from __future__ import annotations

import argparse
import shlex
import types
from dataclasses import MISSING, Field, fields
from functools import lru_cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from ..errors import InvalidArgument
from ..fields import field_docs
from .args import comma_list, finite_float, positive_int

MODEL_HELP = "catalog name, Hugging Face id, or path to a config.json (or its folder)"
GPU_HELP = "GPU id or name, e.g. h100-sxm, rtx-4090, 'NVIDIA A100-SXM4-80GB'"
FLAG_ALIASES = {"prices": ("--price",)}
"""Other spellings an option keeps accepting (the flag it was first published under)."""


def _strip_optional(tp: Any) -> Any:
    """X for `X | None`; the type itself otherwise."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _is_literal(tp: Any) -> bool:
    return get_origin(tp) is Literal


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", "")


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def option_fields(cls: type) -> tuple[Field, ...]:
    """The fields of `cls` that are options (init fields)."""
    return tuple(f for f in fields(cls) if f.init)


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_request_options(parser: argparse.ArgumentParser, cls: type, *, skip: frozenset[str] = frozenset(),
                        help_prefix: str = "") -> None:
    """Add one option per init field of dataclass `cls` to `parser` (fields named in `skip` left out)."""
    hints, docs = _hints(cls), field_docs(cls)
    for f in option_fields(cls):
        if f.name in skip:
            continue
        tp = _strip_optional(hints[f.name])
        default = _default(f)
        doc = _help_text(docs.get(f.name, ""))
        if _type_name(tp) == "LoadedModel":
            parser.add_argument(f.name, help=MODEL_HELP)
            continue
        if _type_name(tp) == "GPU":
            parser.add_argument(flag(f.name), required=True, help=GPU_HELP)
            continue
        kw: dict[str, Any] = {}
        names = [flag(f.name), *FLAG_ALIASES.get(f.name, ())]
        shown = default
        if tp is bool:
            if default is True:
                names = ["--no-" + f.name.replace("_", "-")]
                kw.update(action="store_false", dest=f.name)
            else:
                kw.update(action="store_true")
            shown = None
        elif _is_literal(tp):
            choices = get_args(tp)
            kw.update(choices=choices, type=type(choices[0]) if not isinstance(choices[0], str) else None)
        elif get_origin(tp) is tuple:
            element = get_args(tp)[0]
            kw.update(type=comma_list, metavar="A,B,...")
            if _is_literal(element):
                doc += f" ({', '.join(map(str, get_args(element)))})" if "," not in doc else ""
            shown = ",".join(map(str, default)) if isinstance(default, tuple) and default else None
        elif get_origin(tp) is dict:
            kw.update(type=str, metavar="ID=VALUE,...")
            shown = None
        elif tp is int:
            kw.update(type=positive_int)
        elif tp is float:
            kw.update(type=finite_float)
        if kw.get("type") is None:
            kw.pop("type", None)
        if "action" not in kw:
            # The request's default, read from it (collections as None: the request fills them in).
            kw["default"] = None if default is MISSING or isinstance(default, (tuple, dict)) else default
        if shown not in (None, MISSING, "", ()) and "default" not in doc:
            doc = f"{doc} (default {shown})" if doc else f"default {shown}"
        parser.add_argument(*names, help=(help_prefix + doc).replace("%", "%%"), **kw)


def _help_text(doc: str) -> str:
    """A field docstring as help: no final period, a lower-case first word unless it is a name (GPUs, LoRA, TP)."""
    doc = doc.rstrip(".")
    first = doc.split(" ", 1)[0]
    if first[1:] == first[1:].lower():
        doc = doc[:1].lower() + doc[1:]
    return doc


def _gpus(names: tuple[str, ...]) -> tuple:
    from ..catalog.mig import resolve_gpu

    return tuple(resolve_gpu(n) for n in names)


def _numbers_by_id(name: str, text: str) -> dict[str, float]:
    """'ID=X,ID=X' -> {catalog id: X}: prices in USD per GPU-hour (a MIG slice as GPU:PROFILE)."""
    from ..catalog.gpus import get_gpu

    out = {}
    for item in comma_list(text):
        key, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise InvalidArgument(f"{flag(name)}: '{item}' is not ID=USD") from None
        if not 0 < number < 1e4:
            raise InvalidArgument(f"{flag(name)}: {number} USD per GPU-hour is not a price")
        base, _, profile = key.strip().partition(":")
        out[get_gpu(base).id + (":" + profile if profile else "")] = number
    return out


def request_options(args: argparse.Namespace, cls: type, *, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The keyword arguments of `cls` the user gave on the command line (model and GPU as the names typed)."""
    hints = _hints(cls)
    out: dict[str, Any] = {}
    for f in option_fields(cls):
        if f.name in skip or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if value is None or (value == _default(f) and isinstance(value, bool)):
            continue
        tp = _strip_optional(hints[f.name])
        if get_origin(tp) is tuple and get_args(tp) and _type_name(get_args(tp)[0]) == "GPU":
            value = _gpus(value)
        elif get_origin(tp) is dict:
            value = _numbers_by_id(f.name, value)
        out[f.name] = value
    return out


def to_argv(cls: type, values: dict[str, Any], *, keep: tuple[str, ...] = ()) -> list[str]:
    """The command-line flags that give a `cls` request these field values (positional model and GPU excluded;
    values equal to the field's default left out, but for the fields named in `keep`)."""
    by_name = {f.name: f for f in option_fields(cls)}
    hints = _hints(cls)
    out: list[str] = []
    for name, value in values.items():
        f = by_name[name]
        if value is None or (value == _default(f) and name not in keep):
            continue
        tp = _strip_optional(hints[name])
        if tp is bool:
            out.append(flag(name) if value else "--no-" + name.replace("_", "-"))
        elif get_origin(tp) is tuple:
            out += [flag(name), ",".join(map(str, value))]
        else:
            out += [flag(name), str(value)]
    return out


def command_line(command: str, model: str, gpu: str, argv: list[str]) -> str:
    """The shell command (quoted) for `gpuwise COMMAND MODEL --gpu GPU ARGV`."""
    return shlex.join(["gpuwise", command, model, "--gpu", gpu, *argv])
