"""The CLI's commands as HTTP endpoints, generated from the CLI's own argparse options.

`GET /api/fit?model=llama-3.1-8b&gpu=rtx-4090&num_gpus=2` becomes the argv `fit llama-3.1-8b --gpu rtx-4090
--num-gpus 2 --json`, which `cli.run` answers exactly as `gpuwise` does: the response body is the CLI's stdout,
byte for byte, and an input error is a 400 whose `error` is the line the CLI prints after "gpuwise: error: ".
Parameter names are the options' names with underscores (dashes accepted too); flags take true/false. Options that
write files (`--plot`, `--emit`) or choose the output format (`--json`) are not offered. `POST` with a JSON body
`{"config": {...}}` runs the same command on a pasted config.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from ..errors import GpuwiseError, InvalidArgument
from ..units import KiB, MiB

COMMANDS = ("fit", "train", "infer", "plan", "pick", "doctor", "roofline", "models", "gpus", "explain")
"""The commands the API offers: the questions (not the measurement commands, which need the machine's GPUs)."""
HIDDEN = frozenset({"help", "json", "plot", "emit", "list", "version", "dataset_path"})
"""Not offered: output format and files written, and `--dataset-path` (a path on the server's disk)."""
MAX_BODY_BYTES = MiB
"""A config.json is a few KB; a MiB is generous."""
TRUE, FALSE = frozenset({"true", "1", "yes", "on"}), frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    """Query parameter name: the option's first flag with underscores (a positional's argparse dest)."""
    flag: str | None
    """'--num-gpus', or None for a positional argument."""
    is_switch: bool
    """store_true: present or not."""
    required: bool
    choices: tuple[str, ...] | None
    default: object
    kind: str
    """JSON-schema type: string, integer, number, boolean."""
    help: str


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from ..cli import parser

    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise RuntimeError("the CLI has no subcommands")  # pragma: no cover


def _kind(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "boolean"
    t = getattr(action.type, "__name__", "")
    if action.type is int or "int" in t:
        return "integer"
    if action.type is float or "float" in t:
        return "number"
    return "string"


def _usable_default(a: argparse.Action) -> object:
    """The option's default where a client could also send it (not None, and accepted by the option's type:
    `--reserve-gib` defaults to 0.0, which it refuses when given)."""
    if a.default in (None, argparse.SUPPRESS) or isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return None
    if a.type is not None:
        try:
            a.type(str(a.default))
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            return None
    return a.default


_OPTIONS: dict[str, tuple[Option, ...]] = {}


def options(command: str) -> tuple[Option, ...]:
    """The API parameters of a command, in the CLI's order."""
    hit = _OPTIONS.get(command)
    if hit is None:
        sub = _subparsers()[command]
        out = []
        for a in sub._actions:
            if a.dest in HIDDEN or a.help == argparse.SUPPRESS:
                continue
            positional = not a.option_strings
            # A parameter is named after the option's first flag (`--no-mig` -> no_mig), its argparse dest for a
            # positional: the names the API has always had, whatever the request field is called.
            out.append(Option(name=a.dest if positional else a.option_strings[0][2:].replace("-", "_"),
                              flag=None if positional else a.option_strings[0],
                              is_switch=isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)),
                              required=bool(a.required) if not positional else a.nargs not in ("?", "*"),
                              choices=tuple(a.choices) if a.choices else None,
                              default=None if positional else _usable_default(a),
                              kind=_kind(a), help=(a.help or "").replace("%%", "%")))
        hit = _OPTIONS[command] = tuple(out)
    return hit


def _params(query: str) -> dict[str, str]:
    raw = parse_qs(query, keep_blank_values=True)
    out = {}
    for key, values in raw.items():
        name = key.replace("-", "_")
        if name in out or len(values) > 1:
            raise InvalidArgument(f"parameter '{name}' given more than once")
        out[name] = values[0]
    return out


def argv_for(command: str, params: dict[str, str], *, model_path: str | None = None) -> list[str]:
    """The CLI argv (without --json) for `command` with these query parameters; InvalidArgument for an unknown
    parameter or a switch that is not true/false. `model_path` stands for the model (a pasted config)."""
    if command not in COMMANDS:
        raise InvalidArgument(f"unknown command '{command}' (the API has: {', '.join(COMMANDS)})")
    opts = {o.name: o for o in options(command)}
    unknown = sorted(set(params) - set(opts) - ({"model"} if model_path else set()))
    if unknown:
        raise InvalidArgument(f"{command}: unknown parameter{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(unknown)} (valid: {', '.join(opts)})")
    params = dict(params)
    if model_path is not None:
        if "model" not in opts:
            raise InvalidArgument(f"{command} takes no model, so no config can be posted")
        params["model"] = model_path
    positional, flags = [], []
    for name, opt in opts.items():
        if name not in params:
            continue
        value = params[name]
        if "\x00" in value:
            raise InvalidArgument(f"parameter '{name}' contains a NUL character")
        if opt.flag is None:
            positional.append(value)
        elif opt.is_switch:
            v = value.strip().lower()
            if v not in TRUE | FALSE:
                raise InvalidArgument(f"{name} is a switch: true or false, got '{value}'")
            if v in TRUE:
                flags.append(opt.flag)
        else:
            flags += [opt.flag, value]
    # Positional values after "--": a model named "-h" is a model name, not a request for help.
    return [command, *flags, *(["--", *positional] if positional else [])]


def cli_command(argv: list[str]) -> str:
    """The shell command a user would type for this view (positionals first, no "--" unless one needs it)."""
    if "--" in argv:
        i = argv.index("--")
        positional = argv[i + 1:]
        if not any(p.startswith("-") for p in positional):
            argv = [argv[0], *positional, *argv[1:i]]
    return shlex.join(["gpuwise", *argv])


PASTED = "./config.json"
"""How a pasted config is named in answers: what the CLI prints for `gpuwise fit ./config.json ...`."""


def _config_file(body: bytes, folder: str) -> str:
    """Write a posted {"config": {...}} to FOLDER/config.json and return its path (the model argument)."""
    if len(body) > MAX_BODY_BYTES:
        raise InvalidArgument(f"request body over {MAX_BODY_BYTES // KiB} KiB")
    try:
        text = (body or b"{}").decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument('the request body is not UTF-8 JSON: POST {"config": {...}}, the config.json object of '
                              "a model") from None
    from ..jsonfile import loads_bounded

    try:  # bad syntax, deep nesting, huge integers: one line each
        doc = loads_bounded(text, "the request body")
    except InvalidArgument as exc:
        raise InvalidArgument(f'{exc}: POST {{"config": {{...}}}}, the config.json object of a model') from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise InvalidArgument('POST a JSON body {"config": {...}}: the config.json object of a model')
    path = Path(folder) / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


DATA_DIR: str | None = None
"""The one directory whose files the API may read by path (`gpuwise serve --data-dir DIR`); None: none at all, so a
request can neither read this machine's files nor learn whether a path exists (issue 21)."""


def handle(method: str, command: str, query: str, body: bytes = b"") -> tuple[int, bytes]:
    """(HTTP status, JSON body) for /api/<command>. 200: the CLI's --json stdout; 400/404: {"error": message}."""
    from ..jsonfile import local_files

    with local_files((DATA_DIR,) if DATA_DIR else ()):
        return _handle(method, command, query, body)


def _handle(method: str, command: str, query: str, body: bytes) -> tuple[int, bytes]:
    from ..cli import run
    from ..jsonfile import local_files

    try:
        params = _params(query)
        if command == "cli":  # the equivalent command line of a view (the page shows it)
            target = params.pop("command", "")
            argv = argv_for(target, params, model_path=PASTED if method == "POST" else None)
            return 200, _json({"argv": argv, "command": cli_command(argv)})
        if command not in COMMANDS:
            return 404, _json({"error": f"no endpoint /api/{command} (the API has: {', '.join(COMMANDS)}, cli)"})
        if method == "POST":
            with tempfile.TemporaryDirectory(prefix="gpuwise-config-") as folder:
                path = _config_file(body, folder)
                try:
                    with local_files((folder, DATA_DIR) if DATA_DIR else (folder,)):
                        out = run(_with_json(argv_for(command, params, model_path=path)))
                except GpuwiseError as exc:
                    raise type(exc)(_as_pasted(str(exc), path)) from None
                # The answer names the model as the CLI would for ./config.json, not the temporary folder.
                out = _as_pasted(out or "", json.dumps(path)[1:-1])
        else:
            out = run(_with_json(argv_for(command, params)))
    except GpuwiseError as exc:
        return 400, _json({"error": str(exc)})
    except SystemExit:  # argparse's own exits (help, version): never a reason to drop the connection
        return 400, _json({"error": "the API does not print help: see /docs"})
    return 200, ((out or "") + "\n").encode()


def _with_json(argv: list[str]) -> list[str]:
    return [argv[0], "--json", *argv[1:]]  # before the "--" that ends the options


def _as_pasted(text: str, path: str) -> str:
    return text.replace(path, PASTED)


def _json(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def openapi() -> dict:
    """OpenAPI 3.1 description of the API, generated from the CLI's options (served at /openapi.json)."""
    from ..version import __version__

    paths = {}
    subs = _subparsers()
    for command in COMMANDS:
        params = []
        for o in options(command):
            schema: dict = {"type": o.kind}
            if o.choices:
                schema["enum"] = list(o.choices)
            if o.default is not None and o.default is not False:
                schema["default"] = o.default
            params.append({"name": o.name, "in": "query", "required": o.required,
                           "description": (o.help + (f" (CLI: {o.flag})" if o.flag else " (CLI: positional)")).strip(),
                           "schema": schema})
        responses = {"200": {"description": f"the JSON of `gpuwise {command} --json` (docs/json-schema.md)",
                             "content": {"application/json": {"schema": {"type": "object"}}}},
                     "400": {"description": "bad input: {\"error\": the CLI's one-line message}",
                             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}
        get = {"summary": subs[command].description or _help(command), "operationId": command,
               "parameters": params, "responses": responses}
        paths[f"/api/{command}"] = {"get": get}
        if any(o.name == "model" for o in options(command)):
            paths[f"/api/{command}"]["post"] = {
                "summary": f"{command} on a pasted config.json (the model parameter is not needed)",
                "operationId": f"{command}_config", "parameters": [p for p in params if p["name"] != "model"],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["config"],
                    "properties": {"config": {"type": "object", "description": "a Hugging Face config.json"}}}}}},
                "responses": responses}
    paths["/api/cli"] = {"get": {
        "summary": "the equivalent gpuwise command line for a command and its parameters", "operationId": "cli",
        "parameters": [{"name": "command", "in": "query", "required": True, "schema": {"type": "string",
                                                                                     "enum": list(COMMANDS)}}],
        "responses": {"200": {"description": "{argv, command}"}}}}
    return {"openapi": "3.1.0",
            "info": {"title": "gpuwise", "version": __version__,
                     "description": "The gpuwise CLI as an HTTP API: each endpoint returns the command's --json "
                                    "document, byte for byte."},
            "paths": paths,
            "components": {"schemas": {"Error": {"type": "object", "required": ["error"],
                                                 "properties": {"error": {"type": "string"}}}}}}


def _help(command: str) -> str:
    from ..cli import parser

    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == command:
                    return choice.help or command
    return command  # pragma: no cover
