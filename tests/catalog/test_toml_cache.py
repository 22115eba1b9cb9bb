"""The parsed-TOML cache (catalog/_toml.py): the same data as parsing, never a stale or damaged copy, and no error when
the cache folder cannot be written."""

from __future__ import annotations

import json
import os

import pytest

from gpuwise.catalog import _toml
from gpuwise.catalog._toml import load_toml, tomllib

SHIPPED = ["gpus.toml", "devices.toml", "engine_perf.toml", "attention_kernels.toml", "glossary.toml",
           "rental.toml", "speed_validation.toml", "memory_validation.toml", "models/index.toml"]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "gpuwise" / "catalog"


def _parsed(name: str) -> dict:
    return tomllib.loads((_toml.DATA_DIR / name).read_text(encoding="utf-8"))


def _no_parsing(monkeypatch):
    """From here on the TOML parser fails: what `load_toml` returns can only come from the cache."""
    def boom(*a, **k):
        raise AssertionError("parsed the TOML instead of reading the cache")

    monkeypatch.setattr(_toml.tomllib, "loads", boom)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_cached_file_reads_back_exactly_as_parsed(cache, name, monkeypatch):
    assert load_toml(name) == _parsed(name)
    assert len(list(cache.glob("*.json"))) == 1
    want = _parsed(name)
    _no_parsing(monkeypatch)
    assert load_toml(name) == want


def test_a_damaged_entry_is_parsed_again_and_replaced(cache, monkeypatch):
    load_toml("rental.toml")
    (entry,) = cache.glob("rental.toml.*.json")
    entry.write_text('{"half": ')
    want = _parsed("rental.toml")
    assert load_toml("rental.toml") == want
    assert json.loads(entry.read_text()) == want  # rewritten whole
    _no_parsing(monkeypatch)
    assert load_toml("rental.toml") == want


def test_an_edited_file_is_never_read_from_its_old_entry(cache, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.toml").write_text("a = 1\n")
    monkeypatch.setattr(_toml, "DATA_DIR", data)
    assert load_toml("x.toml") == {"a": 1}
    (entry,) = cache.glob("x.toml.*.json")
    assert json.loads(entry.read_text()) == {"a": 1}
    (data / "x.toml").write_text("a = 2\n")
    assert load_toml("x.toml") == {"a": 2}
    (new,) = set(cache.glob("x.toml.*.json")) - {entry}
    assert json.loads(new.read_text()) == {"a": 2}
    _no_parsing(monkeypatch)
    assert load_toml("x.toml") == {"a": 2}


def test_at_most_a_few_versions_of_a_file_are_kept(cache, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(_toml, "DATA_DIR", data)
    for i in range(_toml.MAX_ENTRIES_PER_FILE + 3):
        (data / "x.toml").write_text(f"a = {i}\n")
        assert load_toml("x.toml") == {"a": i}
    assert len(list(cache.glob("x.toml.*.json"))) == _toml.MAX_ENTRIES_PER_FILE
    assert not list(cache.glob("*.tmp"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_or_a_deeply_nested_entry_falls_back_to_parsing(cache):
    load_toml("rental.toml")
    (entry,) = cache.glob("rental.toml.*.json")
    entry.write_text("[" * 200_000)  # past the JSON parser's recursion depth
    assert load_toml("rental.toml") == _parsed("rental.toml")
    entry.unlink()
    os.mkfifo(entry)  # a blocking read would hang: it is never opened for one
    assert load_toml("rental.toml") == _parsed("rental.toml")


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_a_folder_others_can_write_is_neither_read_nor_written(cache, monkeypatch):
    cache.mkdir(parents=True)
    load_toml("rental.toml")
    (entry,) = cache.glob("rental.toml.*.json")
    entry.write_text(json.dumps({"planted": True}))
    os.chmod(cache, 0o777)
    assert load_toml("rental.toml") == _parsed("rental.toml")
    assert json.loads(entry.read_text()) == {"planted": True}  # not rewritten either


def test_a_date_is_not_cached_but_still_read(cache, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.toml").write_text("when = 2026-11-28\n")
    monkeypatch.setattr(_toml, "DATA_DIR", data)
    assert str(load_toml("d.toml")["when"]) == "2026-11-28"
    assert not list(cache.glob("d.toml.*"))


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert load_toml("rental.toml") == _parsed("rental.toml")


def test_a_relative_cache_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", "")
    assert _toml.cache_dir() is None
    assert load_toml("rental.toml") == _parsed("rental.toml")
    assert os.listdir(tmp_path) == []
