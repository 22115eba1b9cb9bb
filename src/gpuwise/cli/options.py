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
user did not give, so that the request's own default applies; `gpuwise.fields.to_argv` is the inverse.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING
from typing import Any, Literal, get_args, get_origin

from ..errors import InvalidArgument
from ..fields import default_value, field_docs, flag, option_fields, strip_optional, type_hints
from .args import comma_list, finite_float, positive_int, rate

MODEL_HELP = "catalog name, Hugging Face id, or path to a config.json (or its folder)"
GPU_HELP = "GPU id or name, e.g. h100-sxm, rtx-4090, 'NVIDIA A100-SXM4-80GB'"
GPU_MEMORY_HELP = ("usable GPU memory, e.g. 24GiB: with --gpu, that GPU with this much free; alone, a GPU the catalog "
                   "lacks, of which only the memory is known (speed figures unknown)")
POWER_LIMIT_HELP = ("board power limit in watts the GPU runs under, as `nvidia-smi -pl W` sets it (e.g. 500): compute "
                    "slows with the SM clock, bandwidth stays (docs/performance.md); default its rated power")
FLAG_ALIASES = {"prices": ("--price",)}
INFINITE_OK = frozenset({"request_rate"})
"""Number options where inf means something (vLLM bench's --request-rate inf: every request at once)."""
"""The flag an option was first published under, where it differs from its field's name: listed first, so that it
stays the option's name in the HTTP API and its help; the field's own flag is accepted too."""


def _is_literal(tp: Any) -> bool:
    return get_origin(tp) is Literal


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", "")


def add_request_options(parser: argparse.ArgumentParser, cls: type, *, skip: frozenset[str] = frozenset(),
                        help_prefix: str = "") -> None:
    """Add one option per init field of dataclass `cls` to `parser` (fields named in `skip` left out)."""
    hints, docs = type_hints(cls), field_docs(cls)
    for f in option_fields(cls):
        if f.name in skip:
            continue
        tp = strip_optional(hints[f.name])
        default = default_value(f)
        doc = _help_text(docs.get(f.name, ""))
        if _type_name(tp) == "LoadedModel":
            parser.add_argument(f.name, help=MODEL_HELP)
            parser.add_argument("--revision", metavar="REV", help="with a Hugging Face id: the branch, tag or commit "
                                "whose config.json to read (default main; the same as MODEL@REV)")
            continue
        if _type_name(tp) == "GPU":
            parser.add_argument(flag(f.name), help=GPU_HELP + " (required unless --gpu-memory is given)")
            parser.add_argument("--gpu-memory", metavar="SIZE", help=GPU_MEMORY_HELP)
            parser.add_argument("--power-limit", metavar="W", help=POWER_LIMIT_HELP)
            continue
        kw: dict[str, Any] = {"dest": f.name}
        names = [*FLAG_ALIASES.get(f.name, ()), flag(f.name)]
        shown = default
        if tp is bool:
            if default is True:
                names = ["--no-" + f.name.replace("_", "-")]
                kw.update(action="store_false")
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
            kw.update(type=rate if f.name in INFINITE_OK else finite_float)
        if kw.get("type") is None:
            kw.pop("type", None)
        if "action" not in kw:
            # The request's default, read from it (collections as None: the request fills them in); a field
            # without one is a required option.
            kw["default"] = None if default is MISSING or isinstance(default, (tuple, dict)) else default
            kw["required"] = default is MISSING
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

    option = (*FLAG_ALIASES.get(name, ()), flag(name))[0]
    out = {}
    for item in comma_list(text):
        key, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise InvalidArgument(f"{option}: '{item}' is not ID=USD") from None
        if not 0 < number < 1e4:
            raise InvalidArgument(f"{option}: {number} USD per GPU-hour is not a price")
        base, _, profile = key.strip().partition(":")
        out[get_gpu(base).id + (":" + profile if profile else "")] = number
    return out


def request_options(args: argparse.Namespace, cls: type, *, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The keyword arguments of `cls` the user gave on the command line (model and GPU as the names typed)."""
    hints = type_hints(cls)
    out: dict[str, Any] = {}
    for f in option_fields(cls):
        if f.name in skip or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if value is None or (value == default_value(f) and isinstance(value, bool)):
            continue
        if value == () and default_value(f) is None:  # an empty list (`--gpus ""`): the request's default
            continue
        tp = strip_optional(hints[f.name])
        if get_origin(tp) is tuple and get_args(tp) and _type_name(get_args(tp)[0]) == "GPU":
            value = _gpus(value)
        elif get_origin(tp) is dict:
            value = _numbers_by_id(f.name, value)
        out[f.name] = value
    return out
