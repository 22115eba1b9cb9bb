"""The HTTP server of `gpuwise serve`: stdlib `http.server` with a thread per request, no framework.

Routes: `/` and `/static/<file>` (the page), `/api/<command>` (api.py), `/openapi.json`, `/docs`. It binds to
loopback by default: the API reads config files by path (`model=/path/config.json`), like the CLI, so exposing it
to a network would expose those reads too (`gpuwise serve --host 0.0.0.0` says so).
"""

from __future__ import annotations

import json
import sys
from http import HTTPStatus
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
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    f = resources.files("gpuwise.serve").joinpath("static", name)
    return f.read_bytes() if f.is_file() else None


class Handler(BaseHTTPRequestHandler):
    server_version = "gpuwise"
    quiet = False

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=300" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path
        if path.startswith("/api/"):
            body = b""
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                if length > api.MAX_BODY_BYTES:
                    return self._send(413, b'{"error": "request body too large"}\n', "application/json")
                body = self.rfile.read(length)
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

    def do_HEAD(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if not self.quiet:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")


class QuietHandler(Handler):
    quiet = True


def make_server(host: str = "127.0.0.1", port: int = 8000, quiet: bool = False) -> ThreadingHTTPServer:
    """The server, bound and ready (`serve_forever()` runs it); port 0 picks a free port."""
    try:
        server = ThreadingHTTPServer((host, port), QuietHandler if quiet else Handler)
    except OSError as exc:
        raise GpuwiseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    return server


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def cli_main(args) -> None:
    server = make_server(args.host, args.port, quiet=args.quiet)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    sys.stderr.write(f"gpuwise serve: http://{shown}:{port}/  (API: /api/fit?model=...&gpu=...; reference: /docs)"
                     "; Ctrl-C stops\n")
    if args.host not in LOOPBACK:
        sys.stderr.write(f"gpuwise serve: warning: listening on {args.host}, not loopback: anyone who can reach it "
                         "can run queries and make it read config files by path on this machine\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
