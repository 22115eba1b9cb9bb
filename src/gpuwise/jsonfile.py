"""Reading a user's JSON file (a profile, a plan) with one clear line for each way it can be wrong."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InvalidArgument


def read_json_object(path: str | Path, flag: str) -> dict:
    """The JSON object in `path`; InvalidArgument naming `flag` (e.g. '--profile') when it is missing, unreadable,
    not JSON, or not an object."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InvalidArgument(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgument(f"{flag}: {path} is not a text file") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{flag}: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{flag}: {path} must hold a JSON object")
    return doc
