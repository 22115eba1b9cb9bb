"""The models' hot-path caches: values stored under keys that hold `id()`s of the objects they depend on.

Model specs, device profiles and GPUs are big frozen dataclasses whose hash walks every field; keying by `id` is
what makes a lookup cheap. A cache site reads `hit = store.get(key)` and, on a miss only, computes the value and
calls `remember`, which stores the keyed objects beside it so that their ids stay unique while the entry lives.
(A helper taking a builder callable would cost a closure per lookup, which the planner's inner loop feels.)
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


MAX_ENTRIES = 100_000
"""Per store. A long-running process (`gpuwise serve`) meets ever new specs and profiles: past this many entries a
store starts over (each entry holds its own objects, so dropping them all is safe; the planner's biggest
search fills a few thousand)."""


_STORES: dict[int, dict] = {}


def remember(store: dict, key: tuple, value: T, *keep: object) -> T:
    """Store `value` under `key` with the objects whose ids the key holds; return it."""
    if len(store) >= MAX_ENTRIES:
        store.clear()
    elif not store:
        _STORES[id(store)] = store
    store[key] = (value, keep)
    return value


def clear_all() -> None:
    """Empty every cache of the models: these stores and every functools.lru_cache of gpuwise's modules. A long-running
    server calls it when its memory passes its budget (serve/server.py), which bounds the caches by bytes whatever
    the number of distinct models posted to it."""
    import functools
    import sys

    for store in _STORES.values():
        store.clear()
    for name, module in list(sys.modules.items()):
        if not (name == "gpuwise" or name.startswith("gpuwise.")) or module is None:
            continue
        for obj in list(vars(module).values()):
            members = vars(obj).values() if isinstance(obj, type) and obj.__module__ == name else ()
            for fn in (obj, *members):
                if isinstance(fn, functools._lru_cache_wrapper):
                    fn.cache_clear()
