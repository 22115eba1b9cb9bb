"""The real server on an ephemeral loopback port, shared by the API and page tests."""

from __future__ import annotations

import threading

import pytest

from gpuwise.serve.server import make_server


@pytest.fixture(scope="session")
def base_url():
    server = make_server("127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
