"""The glossary: `catalog/data/glossary.toml` read once, its term ids (`TERMS`), and the lookup of a name a user
types (an id or an alias, case, spaces, '-' and '_' ignored) to its term id (`resolve`)."""

from __future__ import annotations

import re
from functools import lru_cache

from ...catalog._toml import load_toml
from ...errors import GpuwiseError, suggest


def lookup_key(name: str) -> str:
    """Lookup key: case, spaces, '-' and '_' ignored ('ZeRO-3' = 'zero3', 'KV cache' = 'kv-cache')."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@lru_cache(maxsize=1)
def entries() -> dict[str, dict]:
    """Term id -> its glossary table (title, aliases, text, see_also, commands, sources)."""
    return dict(load_toml("glossary.toml")["term"])


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Lookup key -> term id, for ids and aliases (ids win over aliases)."""
    idx = {lookup_key(t): t for t in entries()}
    for term, row in entries().items():
        for alias in row.get("aliases", []):
            idx.setdefault(lookup_key(alias), term)
    return idx


TERMS: tuple[str, ...] = tuple(sorted(entries()))


def resolve(term: str) -> str:
    """The canonical id of a term or alias; GpuwiseError with close matches when unknown."""
    if not isinstance(term, str) or not lookup_key(term):
        raise GpuwiseError("no term given; `gpuwise explain --list` lists them")
    hit = _index().get(lookup_key(term))
    if hit is not None:
        return hit
    names = list(TERMS) + [a for row in entries().values() for a in row.get("aliases", [])]
    raise GpuwiseError(f"unknown term '{term}'.{suggest(term, names)} `gpuwise explain --list` lists the terms.")
