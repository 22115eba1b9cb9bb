"""The network profile file `gpuwise bench comm --save` writes: its document, and merging into an existing profile.

`catalog.devices.network_overrides` reads the `network` keys; a device profile written by `gpuwise calibrate`
(calibrate_profile.py) keeps everything else when the network figures are merged into it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..jsonfile import check_save_target as _check_save_target, existing_json_object, write_atomic
from ..version import __version__
from .comm_result import CommBenchResult

PROFILE_KIND = "gpuwise-network-profile"


def network_profile(result: CommBenchResult) -> dict:
    """The file `--save` writes: provenance, and the `network` keys `catalog.devices.network_overrides` reads."""
    r = result
    largest = max((row.size_bytes for o in r.ops if o.op == "all_reduce" for row in o.rows), default=None)
    return {"kind": PROFILE_KIND,
            "measured": {"by": "gpuwise bench comm", "date": r.date, "world_size": r.world_size, "nnodes": r.nnodes,
                         "local_world_size": r.local_world_size, "backend": r.backend, "device": r.device,
                         "dtype": r.dtype, "largest_all_reduce_bytes": largest, "torch_version": r.torch_version,
                         "gpuwise_version": __version__, "how": list(r.fit.how)},
            "network": r.fit.network()}


def _existing_profile(p: Path) -> dict | None:
    """The JSON object already at `p` (None when there is no file); anything else is an error, never overwritten."""
    return existing_json_object(p)


def check_save_target(path: str | os.PathLike) -> None:
    """Before measuring: the file `save` will write can be written (a mistake found after the run wastes it)."""
    _check_save_target(path)


def save(result: CommBenchResult, path: str | os.PathLike) -> str:
    """Write the network profile; into an existing profile JSON object (say `gpuwise calibrate`'s) merge it: the
    measured `network` keys replace those keys, everything else stays, and the provenance goes to
    `network_measured` (the file's own `measured` belongs to whoever wrote it). Returns the path written."""
    p = Path(path)
    prof = network_profile(result)
    doc = prof
    old = _existing_profile(p)
    if old is not None:
        if old.get("kind") != PROFILE_KIND:
            net = old.get("network") if isinstance(old.get("network"), dict) else {}
            doc = {**old, "network": {**net, **prof["network"]}, "network_measured": prof["measured"]}
        else:
            net = old.get("network") if isinstance(old.get("network"), dict) else {}
            doc = {**old, **prof, "network": {**net, **prof["network"]}}
    write_atomic(p, json.dumps(doc, indent=2) + "\n")
    return str(p)

