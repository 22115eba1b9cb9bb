"""The HTTP server of `gpuwise serve`: stdlib `http.server` with a thread per request, no framework.

Routes: `/` and `/static/<file>` (the page), `/api/<command>` (api.py), `/openapi.json`, `/docs`. It binds to
loopback by default: the API reads config files by path (`model=/path/config.json`), like the CLI, so exposing it
to a network would expose those reads too (`gpuwise serve --host 0.0.0.0` says so).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import urlsplit

from ..errors import GpuwiseError
from . import api

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png", ".json": "application/json",
         ".ico": "image/x-icon"}


def _static(name: str) -> bytes | None:
    """A file of the page (None: no such file). Only plain names inside static/: no path traversal."""
    if not name or len(name) > 100 or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        return None  # the page's files have short plain names; 256+ characters made the OS raise (issue 21)
    try:
        f = resources.files("gpuwise.serve").joinpath("static", name)
        return f.read_bytes() if f.is_file() else None
    except (OSError, ValueError):
        return None


def _error(message: str) -> bytes:
    return (json.dumps({"error": message}) + "\n").encode()


class Handler(BaseHTTPRequestHandler):
    server_version = "gpuwise"
    quiet = False
    timeout = 30  # seconds a client may take to send its request: a stalled body never holds a thread for good

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "max-age=300" if cache else "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client left: nothing to answer
            self.close_connection = True

    def _foreign(self) -> str | None:
        """Why an /api/ request must be refused (None: it may run). The API reads files by path as the CLI does,
        so only this machine's pages may call it: a web page elsewhere (cross-site requests, DNS rebinding to a
        loopback server) must not."""
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]").lower()
        bound = str(self.server.server_address[0]).lower()
        if bound in LOOPBACK_ADDRESSES and host not in ("localhost", "127.0.0.1", "::1"):
            return f"Host '{host}' is not this machine (the server listens on loopback only)"
        if self.headers.get("Sec-Fetch-Site") == "cross-site":
            return "cross-site requests are refused"
        origin = self.headers.get("Origin")
        if origin and not self._own_origin(origin, host):
            return f"requests from {origin} are refused (only this server's own page may call the API)"
        return None

    def _own_origin(self, origin: str, host: str) -> bool:
        """Whether `origin` is this server's own: http, a loopback name (or the Host it was reached at) and its port.
        Another local port is another program's page (issue 21: Origin http://localhost:1 got through)."""
        try:
            url = urlsplit(origin)
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            return False
        names = ("localhost", "127.0.0.1", "::1", host)
        return url.scheme == "http" and url.hostname in names and port == self.server.server_address[1]

    def _body(self) -> bytes | tuple[int, str]:
        if self.headers.get("Transfer-Encoding"):
            return 411, "send the body with a Content-Length (no chunked encoding)"
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return 411, "a POST needs a Content-Length"
        if length < 0:
            return 400, "negative Content-Length"
        if length > api.MAX_BODY_BYTES:
            return 413, f"request body over {api.MAX_BODY_BYTES >> 10} KiB"
        return self.rfile.read(length)

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path
        if path.startswith("/api/"):
            why = self._foreign()
            if why:
                return self._send(403, _error(why), "application/json")
            body = b""
            if method == "POST":
                got = self._body()
                if isinstance(got, tuple):
                    self.close_connection = True  # the unread body must not be taken for the next request
                    return self._send(got[0], _error(got[1]), "application/json")
                body = got
            status, out = api.handle(method, path[len("/api/"):], url.query, body)
            return self._send(status, out, "application/json")
        if method == "POST":
            return self._send(405, b'{"error": "POST goes to /api/<command>"}\n', "application/json")
        if path in ("/", "/index.html"):
            return self._file("index.html")
        if path.startswith("/static/"):
            return self._file(path[len("/static/"):])
        if path == "/openapi.json":
            return self._send(200, (json.dumps(api.openapi(), indent=2) + "\n").encode(), "application/json")
        if path in ("/docs", "/docs/"):
            from .docs import docs_html

            return self._send(200, docs_html().encode(), TYPES[".html"])
        if path == "/favicon.ico":
            return self._send(204, b"", "image/x-icon")
        self._send(404, f"no page at {path}: see / or /docs\n".encode(), "text/plain; charset=utf-8")

    def _file(self, name: str) -> None:
        data = _static(name)
        if data is None:
            return self._send(404, f"no file {name}\n".encode(), "text/plain; charset=utf-8")
        ext = name[name.rfind("."):] if "." in name else ""
        self._send(200, data, TYPES.get(ext, "application/octet-stream"))

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._route("GET")
        _bound_memory()

    def do_HEAD(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")
        _bound_memory()

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if not self.quiet:  # control characters escaped, as http.server does: a request line cannot drive the terminal
            sys.stderr.write(f"{self.address_string()} {(format % args).translate(self._control_char_table)}\n")


MEMORY_BUDGET_BYTES = 768 * 2**20
"""Resident memory past which the server empties the models' caches after a request: every distinct posted config
adds its own cached terms (40 large ones once held 1.8 GB), so the caches are bounded by bytes, not entries. The
catalog's answers rebuild theirs in milliseconds."""
_CLEAR_LOCK = threading.Lock()


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None  # not Linux: the entry bounds (memo.MAX_ENTRIES, lru sizes) still hold


def _bound_memory(budget: int | None = None) -> bool:
    """Empty the caches when resident memory passes the budget; whether it did."""
    used = _resident_bytes()
    if used is None or used <= (budget or MEMORY_BUDGET_BYTES):
        return False
    from .. import memo

    with _CLEAR_LOCK:
        memo.clear_all()
    return True


class QuietHandler(Handler):
    quiet = True


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def make_server(host: str = "127.0.0.1", port: int = 8000, quiet: bool = False) -> ThreadingHTTPServer:
    """The server, bound and ready (`serve_forever()` runs it); port 0 picks a free port."""
    cls = _Server6 if ":" in host else ThreadingHTTPServer
    try:
        server = cls((host, port), QuietHandler if quiet else Handler)
    except OSError as exc:
        raise GpuwiseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    return server


LOOPBACK = ("127.0.0.1", "localhost", "::1")
LOOPBACK_ADDRESSES = ("127.0.0.1", "::1")


def cli_main(args) -> None:
    if getattr(args, "data_dir", None):
        if not os.path.isdir(args.data_dir):
            raise GpuwiseError(f"--data-dir: {args.data_dir} is not a directory")
        api.DATA_DIR = os.path.realpath(args.data_dir)
    server = make_server(args.host, args.port, quiet=args.quiet)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    sys.stderr.write(f"gpuwise serve: http://{shown}:{port}/  (API: /api/fit?model=...&gpu=...; reference: /docs)"
                     "; Ctrl-C stops\n")
    if args.host not in LOOPBACK and not str(args.host).startswith("127."):
        sys.stderr.write(f"gpuwise serve: warning: listening on {args.host}, not loopback: anyone who can reach it "
                         "can run queries" + (f" and make it read the files under {api.DATA_DIR}" if api.DATA_DIR
                                              else "") + "\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
