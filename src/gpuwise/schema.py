"""The JSON contract's shared pieces: the schema version every `--json` document carries, its envelope, and how
numbers are written into it (unknown stays null, never 0).

A leaf module (it imports nothing of gpuwise's), so that every presenter and the measurement side write the same
envelope without loading the estimators or the planners. The documents themselves are described in
docs/json-schema.md; bump SCHEMA_VERSION on any incompatible change.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_VERSION = "1"


def envelope(command: str, **fields: Any) -> dict[str, Any]:
    """The start of every document: {"schema_version", "command", ...fields}."""
    return {"schema_version": SCHEMA_VERSION, "command": command, **fields}


def num(x: float | None) -> int | None:
    """A byte count or other whole quantity: rounded to an integer; None (unknown) stays None."""
    return None if x is None else int(round(x))


def rounded(x: float | None, digits: int = 6) -> float | None:
    """A measured or predicted quantity to `digits` significant digits; None stays None."""
    return None if x is None else float(f"{x:.{digits}g}")


def dumps(doc: Any) -> str:
    """The document as the CLI prints it (indented, keys in the order built). JSON has no NaN or Infinity: a
    non-finite number is unknown, null (never a token other programs cannot parse)."""
    try:
        return json.dumps(doc, indent=2, sort_keys=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(doc), indent=2, sort_keys=False, allow_nan=False)


def _finite(x: Any) -> Any:
    import math

    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x
