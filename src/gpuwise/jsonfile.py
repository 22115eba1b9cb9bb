"""Reading a user's JSON file (a profile, a plan) with one clear line for each way it can be wrong."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InvalidArgument

MAX_BYTES = 16 << 20
"""Profiles and plans are KBs; a plan with every layout of a big search stays well under this."""


def read_json_object(path: str | Path, flag: str) -> dict:
    """The JSON object in `path`; InvalidArgument naming `flag` (e.g. '--profile') when it is missing, not a regular
    file (a device or a pipe is never read), too big, unreadable, not JSON, or not an object."""
    p = Path(path)
    if not p.exists():  # also a path with a NUL in it (pathlib answers False)
        raise InvalidArgument(f"{flag}: cannot read {path}: no such file")
    if not p.is_file():
        raise InvalidArgument(f"{flag}: {path} is not a regular file")
    if p.stat().st_size > MAX_BYTES:
        raise InvalidArgument(f"{flag}: {path} is over {MAX_BYTES >> 20} MiB: not a gpuwise JSON file")
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise InvalidArgument(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgument(f"{flag}: {path} is not a text file") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{flag}: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{flag}: {path} must hold a JSON object")
    return doc
