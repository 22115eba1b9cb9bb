"""The parsed-TOML cache (catalog/_toml.py): the same data as parsing, never a stale or damaged copy, and no error when
the cache folder cannot be written."""

from __future__ import annotations

import os

import pytest

from gpuwise.catalog import _toml
from gpuwise.catalog._toml import load_toml, tomllib

SHIPPED = ["gpus.toml", "devices.toml", "engine_perf.toml", "attention_kernels.toml", "glossary.toml",
           "rental.toml", "speed_validation.toml", "models/index.toml"]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "gpuwise" / "catalog"


def _parsed(name: str) -> dict:
    return tomllib.loads((_toml.DATA_DIR / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", SHIPPED)
def test_a_cached_file_reads_back_exactly_as_parsed(cache, name):
    first, second = load_toml(name), load_toml(name)
    assert first == second == _parsed(name)
    assert len(list(cache.glob("*.json"))) == 1


def test_a_damaged_entry_is_parsed_again_and_replaced(cache):
    load_toml("rental.toml")
    (entry,) = cache.glob("rental.toml.*.json")
    entry.write_text('{"half": ')
    assert load_toml("rental.toml") == _parsed("rental.toml")
    assert load_toml("rental.toml") == _parsed("rental.toml")


def test_an_edited_file_is_never_read_from_its_old_entry(cache, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.toml").write_text("a = 1\n")
    monkeypatch.setattr(_toml, "DATA_DIR", data)
    assert load_toml("x.toml") == {"a": 1}
    (data / "x.toml").write_text("a = 2\n")
    assert load_toml("x.toml") == {"a": 2}
    assert len(list(cache.glob("x.toml.*.json"))) == 1  # the old version's entry is pruned


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
