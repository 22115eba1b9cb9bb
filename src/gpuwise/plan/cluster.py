"""The hardware a request runs on: the device profile (measured or default) and the network topology.

One function for `gpuwise train` and the planner, so that a plan and the `train` run of its layout see the same
devices and links. The topology is cached (`doctor` asks once per remedy); the profile file is read on every call,
so that a long-running server sees a file that changed.
"""

from __future__ import annotations

from ..catalog.devices import DeviceProfile, device_profile, network_overrides
from ..catalog.gpus import GPU
from ..estimate.comm import Topology, topology
from ..memo import remember

_TOPOLOGIES: dict = {}


def cluster(gpu: GPU, *, num_gpus: int, gpus_per_node: int | None = None, inter_node_gbps: float | None = None,
            profile: str | None = None) -> tuple[DeviceProfile, Topology]:
    """(device profile, topology) of `num_gpus` x `gpu`: the profile file's measurements where `profile` names one
    (`--profile`), its `network` section over the topology's defaults."""
    dev = device_profile(gpu, profile)
    overrides = network_overrides(profile)
    key = (id(gpu), num_gpus, gpus_per_node, inter_node_gbps, repr(sorted(overrides.items())))
    hit = _TOPOLOGIES.get(key)
    if hit is not None:
        return dev, hit[0]
    topo = topology(gpu, num_gpus=num_gpus, gpus_per_node=gpus_per_node, inter_node_gbps=inter_node_gbps,
                    overrides=overrides)
    return dev, remember(_TOPOLOGIES, key, topo, gpu)
