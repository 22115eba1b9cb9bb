"""Reading the embedded TOML data files (stdlib tomllib; the tomli backport on Python 3.10).

Python's TOML parser is pure Python: the shipped catalogs (gpus.toml alone is ~110 KB) take ~100 ms to parse, a third
of a `gpuwise train` run. Each file's parse is therefore kept as JSON (C-parsed, ~1 ms) in the user's cache folder
($XDG_CACHE_HOME/gpuwise/catalog, ~/.cache by default), named by a hash of the TOML's bytes, so an edited or upgraded
file never reads a stale copy. The cache is an optimisation only: an unwritable folder, a missing or damaged entry,
or a value JSON cannot hold (a TOML date) means the TOML is parsed as before.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

try:  # hashlib's own import loads OpenSSL (~10 ms); its BLAKE2 lives in a small module of its own
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other Python builds
    from hashlib import blake2b

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DATA_DIR = Path(__file__).parent / "data"
CACHE_FORMAT = 1
"""Part of every cache entry's name: bump it when the cached form changes."""
MAX_CACHE_ENTRY_BYTES = 16 << 20
"""A cache entry larger than this is not read (the largest shipped TOML parses to ~150 KB of JSON)."""


def cache_dir() -> Path | None:
    """Where parsed data files are kept: $XDG_CACHE_HOME/gpuwise/catalog (~/.cache/gpuwise/catalog), or None when
    neither names an absolute folder."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative (which the XDG spec says to ignore)
        home = os.environ.get("HOME", "")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "gpuwise" / "catalog"


def load_toml(name: str) -> dict:
    """Parse `catalog/data/<name>` (from the JSON cache when it holds this very file's parse)."""
    raw = (DATA_DIR / name).read_bytes()
    folder = cache_dir()
    entry = None
    if folder is not None:
        digest = blake2b(raw, digest_size=12).hexdigest()
        entry = folder / f"{name.replace('/', '_')}.{digest}.v{CACHE_FORMAT}.json"
        cached = _read_entry(entry)
        if cached is not None:
            return cached
    data = tomllib.loads(raw.decode("utf-8"))
    if entry is not None:
        _write_entry(entry, data)
    return data


def _read_entry(entry: Path) -> dict | None:
    try:
        if entry.stat().st_size > MAX_CACHE_ENTRY_BYTES:
            return None
        data = json.loads(entry.read_bytes())
    except (OSError, ValueError):  # absent, unreadable or damaged: parse the TOML
        return None
    return data if isinstance(data, dict) else None


def _write_entry(entry: Path, data: dict) -> None:
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):  # a TOML date or time: not cached
        return
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, entry)  # atomic: a concurrent run reads the old entry or the new one, never half of one
    except OSError:  # a read-only or full disk: the cache is only an optimisation
        try:
            tmp.unlink()
        except OSError:
            pass
        return
    # the same data file's parses from other versions of it: "<name>.<digest>.v<format>.json"
    stem = entry.name.rsplit(".", 3)[0]
    for old in entry.parent.glob(f"{stem}.*.json"):
        if old.name != entry.name and old.name.rsplit(".", 3)[0] == stem:
            try:
                old.unlink()
            except OSError:
                pass
