"""Suite-wide settings: nothing a test runs writes outside its temporary folders."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_cache_home(tmp_path_factory):
    """The parsed-catalog cache (catalog/_toml.py) goes to a session folder, not the user's ~/.cache; subprocesses
    (the CLI tests) inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield
