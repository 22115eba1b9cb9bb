"""Reading the embedded TOML data files (stdlib tomllib; the tomli backport on Python 3.10).

Python's TOML parser is pure Python: the shipped catalogs (gpus.toml alone is ~110 KB) take ~100 ms to parse, a third
of a `gpuwise train` run. Each file's parse is therefore kept as JSON (C-parsed, ~1 ms) in the user's cache folder
($XDG_CACHE_HOME/gpuwise/catalog, ~/.cache by default), named by a hash of the TOML's bytes, so an edited or upgraded
file never reads a stale copy. The cache is an optimisation only: an unwritable folder, a missing or damaged entry,
or a value JSON cannot hold (a TOML date) means the TOML is parsed as before. An entry is read only as a bounded
regular file (never a FIFO or device) from a folder of the current user's that others cannot write to, written
through a fresh exclusive temporary file and an atomic rename, and at most `MAX_ENTRIES_PER_FILE` versions of each
data file are kept.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

from ..jsonfile import loads_bounded, read_regular_text

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
        cached = _read_entry(entry) if _own_folder(folder) else None
        if cached is not None:
            return cached
    data = tomllib.loads(raw.decode("utf-8"))
    if entry is not None:
        _write_entry(entry, data)
    return data


def _read_entry(entry: Path) -> dict | None:
    """The cached parse, or None: absent, not a regular file (a FIFO or a device is never opened for a blocking
    read), over the size bound, damaged, nested past the parser's depth, or not a table."""
    try:
        data = loads_bounded(read_regular_text(entry, MAX_CACHE_ENTRY_BYTES, error=ValueError), "", error=ValueError)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _own_folder(folder: Path) -> bool:
    """Whether `folder` is a directory of the current user that others cannot write to (POSIX; elsewhere any
    directory): entries in a shared or foreign folder could be someone else's, so they are neither read nor written."""
    try:
        info = os.stat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return False
    getuid = getattr(os, "getuid", None)
    return getuid is None or (info.st_uid == getuid() and not info.st_mode & stat.S_IWOTH)


def _write_entry(entry: Path, data: dict) -> None:
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):  # a TOML date or time: not cached
        return
    import tempfile

    folder = entry.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:  # a read-only disk, a file where the folder should be: the cache is only an optimisation
        return
    if not _own_folder(folder):
        return
    try:  # a fresh, exclusive temporary file (no symlink followed), then an atomic rename over the entry
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=entry.name + ".", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, entry)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return
    _prune(folder, entry)


MAX_ENTRIES_PER_FILE = 4
"""Parses of one data file kept at once (several installed versions of gpuwise may share the cache); older ones and
temporary files left over an hour by a killed run are removed."""


def _prune(folder: Path, entry: Path) -> None:
    stem = entry.name.rsplit(".", 3)[0]  # "<name>.<digest>.v<format>.json"
    try:
        now = time.time()
        same = []
        for old in folder.glob(f"{stem}.*"):
            if old.name.endswith(".json") and old.name.rsplit(".", 3)[0] == stem:
                same.append((old.stat().st_mtime, old))
            elif old.name.endswith(".tmp") and now - old.stat().st_mtime > 3600:  # left by a killed run
                old.unlink()
        same.sort(reverse=True)
        for _, old in same[MAX_ENTRIES_PER_FILE:]:
            if old != entry:
                old.unlink()
    except OSError:
        pass
