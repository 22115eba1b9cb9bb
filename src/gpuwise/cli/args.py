"""argparse as gpuwise uses it: errors as one line (raised, not printed), and the value types of its options."""

from __future__ import annotations

import argparse
from typing import NoReturn

from ..errors import GpuwiseError


class UsageError(GpuwiseError):
    """Options argparse rejects (unknown flag, missing value, bad number): the same one line as any input error."""


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump): raised, so that `main` prints them and exits 2, and the
    web API (serve/) answers them with a 400 carrying the same message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None


def positive_float(text: str) -> float:
    value = _number(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def finite_float(text: str) -> float:
    """Any finite number; the request checks its range (a share may be 0, a reserve 0 GiB)."""
    value = _number(text)
    if not abs(value) < float("inf"):  # also NaN
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def rate(text: str) -> float:
    """A positive number or 'inf' (vLLM bench's request rate: inf sends every request at once)."""
    value = _number(text)
    if not value > 0:  # also NaN
        raise argparse.ArgumentTypeError(f"must be a positive number or inf, got {text}")
    return value


def comma_list(text: str) -> tuple[str, ...]:
    """'a, b,c' -> ('a', 'b', 'c'); '' -> ()."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value
