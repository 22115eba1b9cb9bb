"""Parsing and dispatch: which subcommand runs, with what options, and how errors and output reach the terminal.

The parser of a run holds the options of its own subcommand only: a question command's options are built from its
request dataclass (its module imported for that), so `gpuwise fit` never imports the planner. `parser()` with no
command builds every subcommand's options (the HTTP API and its OpenAPI page read them all).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..errors import GpuwiseError
from .args import Parser, UsageError
from .command import Command
from .measure import MEASURE
from .questions import QUESTIONS
from .tools import TOOLS

EXIT_USAGE = 2
ORDER = ("fit", "train", "doctor", "infer", "plan", "pick", "explain", "roofline", "calibrate", "bench", "watch",
         "serve", "models", "gpus")
"""The subcommands in the order `gpuwise --help` lists them."""
COMMANDS: dict[str, Command] = {name: {**QUESTIONS, **MEASURE, **TOOLS}[name] for name in ORDER}

_PARSERS: dict[str | None, argparse.ArgumentParser] = {}


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser with the options of `command` (None: of every command), built once per process."""
    hit = _PARSERS.get(command)
    if hit is None:
        p = Parser(prog="gpuwise", description="Will it fit, how fast, on what: GPU answers for LLM work.")
        p.add_argument("--version", action="store_true", help="print the version and exit")
        sub = p.add_subparsers(dest="command", parser_class=Parser)
        for name, cmd in COMMANDS.items():
            sp = sub.add_parser(name, help=cmd.help)
            if command is None or command == name:
                cmd.add_options(sp)
        hit = _PARSERS[command] = p
    return hit


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv (the first word that is not an option), when it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    command = _command_of(argv)
    args = parser(command if command is not None else "").parse_args(list(argv))
    if hasattr(args, "gpu_memory") and hasattr(args, "gpu"):  # a command with one GPU: --gpu, --gpu-memory or both
        if args.gpu_memory is not None:
            from ..catalog.gpus import with_memory
            from ..catalog.mig import resolve_gpu

            args.gpu = with_memory(resolve_gpu(args.gpu) if args.gpu else None, args.gpu_memory)
        elif args.gpu is None:
            raise UsageError("--gpu is required (or --gpu-memory SIZE for a GPU the catalog lacks)")
        if getattr(args, "power_limit", None) is not None:
            from ..catalog.mig import resolve_gpu
            from ..catalog.power import with_power_limit

            args.gpu = with_power_limit(resolve_gpu(args.gpu) if isinstance(args.gpu, str) else args.gpu,
                                        args.power_limit)
    return args


def run(argv: Sequence[str]) -> str | None:
    """What `gpuwise ARGV` prints on stdout (without the final newline), or GpuwiseError with the one-line message
    it prints on stderr. The web API calls this, so its JSON is the CLI's, byte for byte."""
    args = _parse(argv)
    if args.command is None:
        raise UsageError("no command given (see gpuwise --help)")
    return COMMANDS[args.command].run(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parse(argv)
        if args.version:
            from ..version import __version__

            print(__version__)
            return 0
        if args.command is None:
            parser("").print_help()
            return EXIT_USAGE
        if getattr(args, "revision", None) is not None:
            from ..catalog.models import with_revision

            args.model = with_revision(args.model, args.revision)
        out = COMMANDS[args.command].run(args)
    except GpuwiseError as exc:
        _say(f"gpuwise: error: {exc}")
        return _leave(EXIT_USAGE)
    if out is None:  # wrote its own output (a live view), or a torchrun rank other than 0
        return _leave(0)
    return _leave(_write(out))


def _write(out: str) -> int:
    """Print the answer; a closed or full stdout is one line on stderr and exit status 1, never a traceback."""
    if sys.stdout is None:  # started with stdout closed (`gpuwise fit ... >&-`)
        _say("gpuwise: error: standard output is closed: nothing to print the answer to")
        return 1
    try:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `gpuwise models | head`: the reader has what it wanted
        _quiet_stdout()
    except OSError as exc:  # /dev/full, a full disk, a closed descriptor
        _quiet_stdout()
        _say(f"gpuwise: error: cannot write the answer to standard output ({exc.strerror or exc})")
        return 1
    return 0


def _say(line: str) -> None:
    try:
        if sys.stderr is not None:
            sys.stderr.write(line + "\n")
    except OSError:
        pass


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's flush at exit cannot fail a second time."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _leave(code: int) -> int:
    """`code`; a torchrun rank of `gpuwise bench` exits here, its output written (see measure.dist)."""
    dist = sys.modules.get("gpuwise.measure.dist")  # loaded only by the measuring commands
    return dist.leave_after_group(code) if dist is not None else code
