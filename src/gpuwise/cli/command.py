"""A subcommand: its help line, how it adds its options to its parser, and what it runs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Command:
    help: str
    add_options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], "str | None"]
    """The text to print on stdout (without the final newline), or None when the command wrote its own output."""
