"""Reading a user's JSON file (a profile, a plan) with one clear line for each way it can be wrong."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InvalidArgument

MAX_BYTES = 16 << 20
"""Profiles and plans are KBs; a plan with every layout of a big search stays well under this."""


_ALLOWED_ROOTS: "ContextVar[tuple[str, ...] | None]"
try:
    from contextvars import ContextVar

    _ALLOWED_ROOTS = ContextVar("gpuwise_allowed_roots", default=None)
except ImportError:  # pragma: no cover
    raise

NOT_READ = ("local files are not read through the web API (start `gpuwise serve --data-dir DIR` to let it read the "
            "files under DIR, or paste the config)")
"""What the API says of any path outside the directories it may read, whether or not the path exists."""


class local_files:  # noqa: N801 (used as a context manager, like contextlib's)
    """Within it, files are read only under `roots` (the web API: its --data-dir and a pasted config's folder);
    None: every file, as the CLI reads them."""

    def __init__(self, roots: tuple[str, ...] | None) -> None:
        import os

        self.roots = None if roots is None else tuple(os.path.realpath(r) for r in roots)

    def __enter__(self):
        self.token = _ALLOWED_ROOTS.set(self.roots)
        return self

    def __exit__(self, *exc) -> None:
        _ALLOWED_ROOTS.reset(self.token)


def file_allowed(path: str | Path) -> bool:
    """Whether `path` may be read here (always in the CLI; under the allowed roots in the web API)."""
    import os

    roots = _ALLOWED_ROOTS.get()
    if roots is None:
        return True
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


PSEUDO_FILESYSTEMS = ("/proc/", "/sys/", "/dev/")
"""Kernel interfaces that look like regular files but can block forever (/proc/kmsg) or never end: never read."""


def _real_file_path(path: str | Path, error, unusable: str, pseudo: str) -> str:
    """`path` with its links resolved; `error(unusable)` when it cannot be, `error(pseudo)` under /proc, /sys, /dev."""
    import os

    try:
        resolved = os.path.realpath(path)
    except (OSError, ValueError):
        raise error(unusable) from None
    if (resolved + "/").startswith(PSEUDO_FILESYSTEMS):
        raise error(pseudo)
    return resolved


def read_text_bounded(path: str | Path, limit: int, *, error=InvalidArgument, what: str = "") -> str:
    """The UTF-8 text of the regular file `path`, at most `limit` bytes: a directory, device, FIFO or socket, a file
    under /proc, /sys or /dev, one over the limit (by its size or by what a read returns), or undecodable bytes give
    `error` with one line. The file is opened non-blocking, so a FIFO swapped in after the check does not hang."""
    if not file_allowed(path):  # the same words whether or not it exists: the API reveals nothing of other paths
        raise error(f"{what}{NOT_READ}")
    return read_regular_text(path, limit, error=error, what=what)


def read_regular_text(path: str | Path, limit: int, *, error=InvalidArgument, what: str = "") -> str:
    """`read_text_bounded` without the web API's allowed folders: for files gpuwise itself names (the operator's GPU
    catalog, its parsed-data cache), not ones a request names."""
    import os
    import stat

    label = f"{what}'{path}'" if what else f"'{path}'"
    resolved = _real_file_path(path, error, f"{label}: not a readable path",
                               f"{label} is a kernel interface, not a file to read")
    try:
        fd = os.open(resolved, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise error(f"{label}: no such file") from None
    except (OSError, ValueError) as exc:
        raise error(f"{label}: cannot read it ({getattr(exc, 'strerror', None) or exc.__class__.__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{label} is not a regular file")
        if info.st_size > limit:
            raise error(f"{label} is {info.st_size:,} bytes: over the {limit:,} a file of this kind can be")
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise error(f"{label} is over the {limit:,} bytes a file of this kind can be")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{label} is not UTF-8 text") from None


def loads_bounded(text: str | bytes, label: str, *, error=InvalidArgument):
    """json.loads with its three crashes turned into one line each: bad syntax, nesting deep enough to exhaust the
    recursion limit, and integers longer than Python converts (4,300 digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{label} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise error(f"{label} is nested too deeply to be a config or profile") from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(f"{label} holds a number too long to read ({str(exc).split(':')[0]})") from None


def read_json_object(path: str | Path, flag: str) -> dict:
    """The JSON object in `path`; InvalidArgument naming `flag` (e.g. '--profile') when it is missing, not a regular
    file (a device, a pipe or a kernel interface is never read), too big, unreadable, not JSON, or not an object."""
    text = read_text_bounded(path, MAX_BYTES, what=f"{flag}: ")
    doc = loads_bounded(text, f"{flag}: {path}")
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{flag}: {path} must hold a JSON object")
    return doc


def existing_json_object(path: str | Path, flag: str = "--save", *, error=None) -> dict | None:
    """What a file `flag` is about to write already holds: None when nothing is there; the JSON object when a regular
    file holds one; else `error` with one line (a directory, device, FIFO or kernel interface is never read nor
    replaced, a file that is not a JSON object is never overwritten)."""
    import os

    from .errors import GpuwiseError

    error = error or GpuwiseError
    if not os.path.lexists(path):
        return None
    text = read_text_bounded(path, MAX_BYTES, error=error, what=f"{flag}: ")
    doc = loads_bounded(text, f"{flag}: {path}", error=error)
    if not isinstance(doc, dict):
        raise error(f"{flag}: {path} exists and does not hold a JSON object; choose another file")
    return doc


def check_save_target(path: str | Path, flag: str = "--save", *, error=None) -> dict | None:
    """Before minutes of measuring, everything that would make the write fail afterwards: the path names no directory,
    device, FIFO or kernel interface, an existing file is a JSON object (merged into, not overwritten), and its folder
    exists and is writable. Returns the existing object (None when there is no file)."""
    import os

    from .errors import GpuwiseError

    error = error or GpuwiseError
    resolved = _real_file_path(path, error, f"{flag}: '{path}' is not a usable path",
                               f"{flag}: '{path}' is a kernel interface or device, not a file to write")
    if os.path.isdir(resolved):
        raise error(f"{flag}: '{path}' is a folder; name a file in it")
    old = existing_json_object(path, flag, error=error)
    folder = os.path.dirname(resolved) or "."
    if not os.path.isdir(folder):
        raise error(f"{flag}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise error(f"{flag}: folder {folder} is not writable")
    return old


def write_atomic(path: str | Path, text: str, flag: str = "--save", *, error=None) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader never sees half a file,
    and a failed write (disk full) leaves the old file as it was."""
    import os
    import tempfile

    from .errors import GpuwiseError

    error = error or GpuwiseError
    folder = os.path.dirname(os.path.realpath(path)) or "."
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise error(f"{flag}: cannot write {path}: {exc.strerror or exc.__class__.__name__}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
