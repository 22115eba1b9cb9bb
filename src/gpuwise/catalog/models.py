"""The model catalog and model resolution.

`data/models/index.toml` lists popular open models; each entry points at a verbatim copy of the
model's Hugging Face `config.json` (`data/models/<id>.json`), so catalog models go through exactly
the same parser as a user's file. `load_model(MODEL)` accepts, in this order:

1. a catalog id (`llama-3.1-8b`), its Hugging Face id (`meta-llama/Llama-3.1-8B`) or an alias;
2. a local `config.json` file, or a folder that holds one;
3. any other Hub id, fetched with `huggingface_hub` when it is installed and online. Offline (or
   without it) the error says how to pass a local config instead.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import ConfigError, UnknownModelError, suggest
from ..model import ModelSpec, spec_from_hf_config
from ._toml import DATA_DIR, load_toml

MODELS_DIR = DATA_DIR / "models"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    id: str
    hf_id: str
    config_file: str
    family: str
    aliases: tuple[str, ...] = ()
    params_published: float | None = None
    source: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A resolved model: its spec plus where it came from."""

    id: str
    """Catalog id, Hub id, or the path given."""
    hf_id: str | None
    spec: ModelSpec
    source: str
    """'catalog', 'file' or 'hub'."""
    config_path: str | None = None
    entry: CatalogEntry | None = None


def _key(name: str) -> str:
    return name.strip().lower()


@lru_cache(maxsize=1)
def catalog_entries() -> tuple[CatalogEntry, ...]:
    data = load_toml("models/index.toml")
    return tuple(
        CatalogEntry(
            id=m["id"], hf_id=m["hf_id"], config_file=m["config"], family=m.get("family", ""),
            aliases=tuple(m.get("aliases", []) or []), params_published=m.get("params_published"),
            source=m.get("source"), note=m.get("note") or None,
        )
        for m in data["model"]
    )


@lru_cache(maxsize=1)
def _index() -> dict[str, CatalogEntry]:
    idx: dict[str, CatalogEntry] = {}
    for e in catalog_entries():
        for k in (e.id, e.hf_id, *e.aliases):
            idx.setdefault(_key(k), e)
            # "Llama-3.1-8B" without the org also resolves.
            if "/" in k:
                idx.setdefault(_key(k.split("/", 1)[1]), e)
    return idx


def find_entry(name: str) -> CatalogEntry | None:
    return _index().get(_key(name))


@lru_cache(maxsize=256)
def entry_config(entry: CatalogEntry) -> dict:
    with open(MODELS_DIR / entry.config_file, encoding="utf-8") as fh:
        return json.load(fh)


@lru_cache(maxsize=256)
def entry_spec(entry: CatalogEntry) -> ModelSpec:
    """One spec object per catalog entry: the estimators' caches key on its identity."""
    return spec_from_hf_config(entry_config(entry))


MAX_CONFIG_BYTES = 4 << 20
"""A config.json is a few KB (the largest in the catalog is under 10 KB)."""


def read_config_file(path: str | os.PathLike) -> tuple[dict, str]:
    """Read a config.json (or a folder holding one); ConfigError on anything unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise ConfigError(f"folder '{path}' has no config.json")
    from ..jsonfile import loads_bounded, read_text_bounded

    # a device, a pipe, /dev/zero, /proc/kmsg: never read; nothing past MAX_CONFIG_BYTES
    text = read_text_bounded(p, MAX_CONFIG_BYTES, error=ConfigError)
    return loads_bounded(text, f"'{p}'", error=ConfigError), str(p)


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
"""A branch, tag or commit as the Hub names them (`main`, `v1.0`, `refs/pr/3`, a 40-hex commit)."""


def with_revision(name: str, revision: str) -> str:
    """MODEL with --revision as `org/name@revision` (a catalog name stands for its Hugging Face id)."""
    if not isinstance(revision, str) or not _REVISION.match(revision) or ".." in revision:
        raise UnknownModelError(f"--revision '{revision}' is not a branch, tag or commit name")
    entry = find_entry(name)
    repo = entry.hf_id if entry is not None and entry.hf_id else name
    if not _HUB_ID.match(repo or ""):
        raise UnknownModelError(f"--revision applies to a Hugging Face Hub id (org/name), not '{name}'")
    return f"{repo}@{revision}"


def _split_revision(name: str) -> tuple[str, str | None]:
    """'org/name@rev' -> ('org/name', 'rev'); anything else unchanged, without a revision."""
    repo, at, rev = name.partition("@")
    if at and _HUB_ID.match(repo) and _REVISION.match(rev) and ".." not in rev:
        return repo, rev
    return name, None


HUB_CONNECT_TIMEOUT_S = 1.5
"""How long to wait for the Hub's TCP handshake before calling it unreachable: a reply from huggingface.co takes
well under a second where there is a network, and without one the answer must come in under 2 s (issue 20), not
after huggingface_hub's five retries (~24 s)."""


def _hub_reachable(endpoint: str) -> str | None:
    """None when a TCP connection to the Hub's host opens within the timeout, else why not (one short phrase)."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"{host} unreachable: {exc.strerror or exc.__class__.__name__}"
    return None


HUB_ERRORS = {
    "GatedRepoError": "a gated repository: accept its license on huggingface.co and set HF_TOKEN",
    "RepositoryNotFoundError": "no such repository (or a private one: set HF_TOKEN)",
    "RevisionNotFoundError": "no such revision in the repository",
    "EntryNotFoundError": "the repository has no config.json",
    "LocalEntryNotFoundError": "not in the local Hub cache",
}
"""huggingface_hub's exceptions, said in words."""


def _from_hub(repo_id: str, revision: str | None = None) -> tuple[dict, str]:
    """A Hub model's config.json through huggingface_hub's cache (HF_HUB_OFFLINE, HF_TOKEN and HF_ENDPOINT as it reads
    them): from the cache when the Hub is offline or unreachable, else downloaded, without retries; `revision` a
    branch, tag or commit (default main)."""
    shown = f"{repo_id}@{revision}" if revision else repo_id
    advice = (f"download its config.json (https://huggingface.co/{repo_id}/blob/{revision or 'main'}/config.json) "
              "and pass the file or its folder instead")
    try:
        from huggingface_hub import constants, hf_hub_download  # optional: pip install gpuwise[hub]
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:
        raise UnknownModelError(
            f"'{shown}' is not in the catalog and huggingface_hub is not installed; {advice}"
        ) from None
    offline = bool(constants.HF_HUB_OFFLINE)
    reason = "HF_HUB_OFFLINE is set" if offline else _hub_reachable(constants.ENDPOINT)
    hub_logging.set_verbosity_error()  # its retry warnings would repeat what the one line says
    try:
        path = hf_hub_download(repo_id, "config.json", revision=revision, local_files_only=reason is not None)
    except Exception as exc:  # gated, missing, not cached: each named by its exception class
        name = exc.__class__.__name__
        why = reason + ", and it is not in the local Hub cache" if reason else HUB_ERRORS.get(name, name)
        raise UnknownModelError(
            f"'{shown}' is not in the catalog and its config.json could not be fetched from the Hub "
            f"({why}); {advice}"
        ) from None
    raw, _ = read_config_file(path)
    return raw, path


def load_model(name: str) -> LoadedModel:
    """Resolve MODEL (catalog name, HF id, local config.json or folder, or Hub id) to a `LoadedModel`."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownModelError("no model given; see `gpuwise models` for the catalog")
    entry = find_entry(name)
    if entry is not None:
        return LoadedModel(id=entry.id, hf_id=entry.hf_id, spec=entry_spec(entry), source="catalog", entry=entry)
    from ..jsonfile import NOT_READ, file_allowed

    allowed = file_allowed(name)
    if allowed and os.path.exists(name):
        raw, path = read_config_file(name)
        return LoadedModel(id=name, hf_id=None, spec=spec_from_hf_config(raw), source="file", config_path=path)
    repo, revision = _split_revision(name.strip())
    path_like = name.endswith(".json") or name.startswith(("/", ".", "~")) or (os.sep in name and not _HUB_ID.match(repo))
    if path_like:
        raise UnknownModelError(NOT_READ if not allowed else f"no such file: '{name}'")
    if _HUB_ID.match(repo):
        raw, path = _from_hub(repo, revision)
        return LoadedModel(id=name, hf_id=repo, spec=spec_from_hf_config(raw), source="hub", config_path=path)
    names = [e.id for e in catalog_entries()]
    raise UnknownModelError(
        f"unknown model '{name}'.{suggest(name, names)} Pass a catalog name (`gpuwise models`), a Hugging Face id, "
        "or a path to a config.json."
    )


def search_models(query: str | None = None) -> list[CatalogEntry]:
    entries = catalog_entries()
    if not query:
        return list(entries)
    q = query.lower()
    return [e for e in entries if q in e.id or q in e.hf_id.lower() or q in e.family or
            any(q in a.lower() for a in e.aliases)]
