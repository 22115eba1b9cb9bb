"""Communication: cluster topology as two levels, collective times, and where each parallel dimension lands.

A collective over n ranks moving a message of S bytes takes `latency x ceil(log2 n) + S x factor / busbw`,
where `factor` is the nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md in NVIDIA/nccl-tests): the bytes
each rank must send per byte of the message with a ring algorithm.

    all-reduce      2 (n-1) / n      (reduce-scatter then all-gather)
    all-gather      (n-1) / n        S = the gathered (full) size
    reduce-scatter  (n-1) / n        S = the full size before scattering
    all-to-all      (n-1) / n        S = what one rank sends in total
    send/recv       1

`busbw` is the bus bandwidth NCCL reaches on the slowest level the group spans: NVLink/NVSwitch (or PCIe)
inside a node, the NIC bandwidth per GPU across nodes (rail-optimized clusters give every GPU its own NIC), times
the group's members per node for ring collectives (`Topology.busbw`).
Parallel dimensions are placed innermost first, TP, then CP, EP, PP and DP (Megatron-LM's and torchtitan's
meshes put TP on the fastest links): a dimension's group stays inside a node when the product of its degree and
the degrees placed inside it is at most the GPUs per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog.attention_kernels import interp_log2
from ..catalog.devices import ASSUMED_PCIE_GEN, network_defaults, pcie_x16_bytes_per_s
from ..catalog.gpus import GPU
from ..errors import InvalidArgument, require_positive_number
from ..units import GB

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def bus_factor(op: str, n: int) -> float:
    """Bytes each rank sends per byte of the message (nccl-tests' busbw / algbw)."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; one of {COLLECTIVES}")


@dataclass(frozen=True, slots=True)
class Level:
    name: str
    """e.g. 'NVLink 4 (NVSwitch)', 'PCIe 4.0 x16', '400 Gb/s per GPU'."""
    busbw_bytes_per_s: float
    """Bus bandwidth NCCL reaches for large messages."""
    latency_s: float
    """Per algorithm step (ceil(log2 n) steps per collective)."""
    source: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    gpus_per_node: int
    intra: Level
    inter: Level

    def level(self, group: int, inner: int) -> Level:
        """The slowest level a group of `group` ranks spans, when `inner` ranks sit inside each of its steps."""
        return self.intra if group * inner <= self.gpus_per_node else self.inter

    def members_per_node(self, group: int, inner: int) -> int:
        """Ranks of one group on each node it spans (`inner` ranks apart)."""
        return max(1, min(group, self.gpus_per_node // max(1, inner)))

    def busbw(self, op: str, group: int, inner: int) -> float:
        """Bus bandwidth of `op` over a group of `group` ranks, `inner` apart.

        Across nodes a ring collective (all-reduce, all-gather, reduce-scatter) runs one ring per NCCL channel and
        spreads the channels' cross-node hops over the NICs of the group's members on each node: k members per node
        reach k NICs' worth, up to the NVLink ring inside the node (DGX-1's 4 NICs give 48 GB/s of 4 x 12,
        nccl-tests#29; 8 x 400 Gb/s NDR nodes reach ~370 GB/s). All-to-all and send/recv leave each rank through its
        own NIC."""
        lv = self.level(group, inner)
        if lv is self.inter and op in ("all_reduce", "all_gather", "reduce_scatter"):
            k = self.members_per_node(group, inner)
            return min(self.intra.busbw_bytes_per_s, k * lv.busbw_bytes_per_s) if k > 1 else lv.busbw_bytes_per_s
        return lv.busbw_bytes_per_s

    def expert_all_to_all_s(self, token_bytes: float, top_k: int, group: int, inner: int = 1, *,
                            per_node: bool = False, backend: str | None = None) -> float:
        """One MoE dispatch (or combine) over an expert-parallel group: `token_bytes` of tokens on each rank, each
        sent to `top_k` experts spread evenly over the group's ranks.

        Inside one node it is NCCL's all-to-all. Across nodes the copies bound for other nodes leave through the
        rank's own NIC while those for its node's ranks go over NVLink, at the same time. `per_node` (DeepEP,
        HybridEP: Megatron-Core's flex dispatcher) sends a token to each destination node once, where NVLink
        forwards it to that node's experts: with n nodes and top-k experts drawn evenly it crosses to
        (n - 1)(1 - (1 - 1/n)^k) other nodes instead of k (n - 1) / n times. With a `backend` whose kernels were
        measured across nodes (deepep, hybridep: data/devices.toml [network.ep_dispatch]) the time is the kernels'
        own: the logical bytes they count (every node a token reaches, its own included) at their measured rate for
        that many nodes (`ep_dispatch_bytes_per_s`), NVLink's share alongside; DeepEP's kernels see NVLink nodes of 8
        even inside an NVL72 rack (`kernel_nvl_peers`), so a wider group there crosses between groups of 8 over RDMA."""
        if group <= 1 or token_bytes <= 0:
            return 0.0
        steps = math.ceil(math.log2(group))
        backend = backend if per_node else None
        peers = self.kernel_nvl_peers(backend) if backend else None
        if self.level(group, inner) is self.intra:
            if peers is None or group * inner <= peers:
                return self.collective_s("all_to_all", token_bytes * top_k, group, inner)
            # kernels that see NVLink nodes of `peers` ranks inside a wider NVLink domain (DeepEP on NVL72): RDMA
            # between those groups, through the GPUs' NICs
            members = max(1, min(group, peers // max(1, inner)))
        else:
            members = self.members_per_node(group, inner)
        nodes = max(2, math.ceil(group / members))
        remote = (nodes - 1) / nodes
        if per_node:
            reached = 1 - (1 - 1 / nodes) ** top_k  # the chance a token has an expert on a given node
            nvlink = token_bytes * top_k  # every copy is delivered (or forwarded) inside a node once
            if backend is not None and (rate := self.ep_dispatch_bytes_per_s(backend, nodes)) is not None:
                # the kernels' own measured rate for the logical bytes they count (its own node included)
                return self.inter.latency_s * steps + max(token_bytes * nodes * reached / rate,
                                                          nvlink / self.intra.busbw_bytes_per_s)
            cross = token_bytes * (nodes - 1) * reached
        else:
            cross = token_bytes * top_k * remote
            nvlink = token_bytes * top_k * (members - 1) / group
        return self.inter.latency_s * steps + max(cross / self.inter.busbw_bytes_per_s,
                                                  nvlink / self.intra.busbw_bytes_per_s)

    def kernel_nvl_peers(self, backend: str) -> int | None:
        """The NVLink node size flex-dispatcher kernels `backend` assume whatever the NVLink domain (DeepEP's 8), or
        None where they follow the domain (HybridEP's multi-node NVLink support)."""
        table = network_defaults().get("ep_dispatch", {}).get(backend) or {}
        return int(table["nvl_peers"]) if "nvl_peers" in table else None

    def ep_dispatch_bytes_per_s(self, backend: str, nodes: int) -> float | None:
        """The measured logical rate per GPU of flex-dispatcher kernels `backend` across `nodes` nodes
        (data/devices.toml [network.ep_dispatch]: interpolated in log2 of the node count, the nearest measured count
        outside them), scaled from the measuring NIC to this topology's cross-node bus bandwidth; None for a backend
        never measured across nodes."""
        table = network_defaults().get("ep_dispatch", {}).get(backend)
        if table is None:
            return None
        points = sorted((int(n), float(v)) for n, v in table["logical_gb_s"].items())
        gb_s = interp_log2([n for n, _ in points], [v for _, v in points], nodes)
        measured_nic = float(table["nic_gbps"]) / 8 * GB * float(network_defaults()["nic_busbw_efficiency"])
        return gb_s * GB * self.inter.busbw_bytes_per_s / measured_nic

    def collective_s(self, op: str, message_bytes: float, group: int, inner: int = 1) -> float:
        if group <= 1 or message_bytes <= 0:
            return 0.0
        lv = self.level(group, inner)
        steps = 1 if op == "send_recv" else math.ceil(math.log2(group))
        return lv.latency_s * steps + message_bytes * bus_factor(op, group) / self.busbw(op, group, inner)


def default_gpus_per_node(gpu: GPU) -> int:
    """GPUs in one NVLink domain (server or rack) of this kind when the job does not say (data/devices.toml [network]
    gpus_per_node, by GPU id or segment, else the default: an HGX/DGX server's 8; GB200: its NVL72 rack)."""
    table = network_defaults()["gpus_per_node"]
    return int(table.get(gpu.id, table.get(gpu.segment, table["default"])))


def topology(gpu: GPU, *, num_gpus: int, gpus_per_node: int | None = None, inter_node_gbps: float | None = None,
             overrides: dict | None = None) -> Topology:
    """The default two-level network for `num_gpus` GPUs of this kind (see data/devices.toml [network])."""
    net = network_defaults()
    over = overrides or {}
    if gpus_per_node is not None and gpus_per_node < 1:
        raise InvalidArgument(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    if inter_node_gbps is not None:
        require_positive_number("--inter-node-gbps", inter_node_gbps, 1e5)
    per_node = gpus_per_node or min(num_gpus, default_gpus_per_node(gpu))
    intra = _intra_level(gpu, per_node, net)
    intra = _measured(intra, over, "intra_node")
    by_arch = net["inter_node_gbps"]
    gbps = inter_node_gbps or float(by_arch.get(gpu.architecture_family, by_arch["default"]))
    eff = float(net["nic_busbw_efficiency"])
    inter = Level(f"{gbps:g} Gb/s per GPU", gbps / 8 * GB * eff, float(net["inter_node_latency_us"]) * 1e-6,
                  net["nic_source"])
    inter = _measured(inter, over, "inter_node")
    return Topology(per_node, intra, inter)


def _measured(level: Level, over: dict, prefix: str) -> Level:
    """A level with the bus bandwidth and latency a profile measured (`gpuwise bench comm`), where it has them."""
    bw, lat = over.get(f"{prefix}_busbw_gb_s"), over.get(f"{prefix}_latency_us")
    if bw is None and lat is None:
        return level
    return Level(level.name + " (profile)", float(bw) * GB if bw is not None else level.busbw_bytes_per_s,
                 float(lat) * 1e-6 if lat is not None else level.latency_s, "profile")


def _intra_level(gpu: GPU, per_node: int, net: dict) -> Level:
    latency = float(net["intra_node_latency_us"]) * 1e-6
    link = gpu.interconnect or "PCIe"
    bridge_only = "bridge" in link.lower()
    if gpu.interconnect_bytes_per_s and "nvlink" in link.lower() and not (bridge_only and per_node > 2):
        one_way = gpu.interconnect_bytes_per_s / 2
        return Level(link, one_way * float(net["nvlink_busbw_efficiency"]), latency, net["nvlink_source"])
    if gpu.interconnect_bytes_per_s and "nvlink" not in link.lower() and "pcie" not in link.lower():
        # Infinity Fabric / Gaudi RoCE / TPU ICI: scale-up links other than NVLink, same treatment.
        return Level(link, gpu.interconnect_bytes_per_s / 2 * float(net["nvlink_busbw_efficiency"]), latency,
                     net["nvlink_source"])
    x16 = pcie_x16_bytes_per_s(gpu, assume=True)
    eff = float(net["pcie_busbw_efficiency"])
    name = f"PCIe {gpu.pcie_gen}.0 x16" if pcie_x16_bytes_per_s(gpu) else f"PCIe {ASSUMED_PCIE_GEN}.0 x16, generation assumed"
    return Level(name, x16 * eff, latency * 2, net["pcie_source"])


# Placement order, innermost first (the and Megatron/torchtitan's convention).
ORDER = ("tp", "cp", "ep", "pp", "dp")


def inner_sizes(degrees: dict[str, int]) -> dict[str, int]:
    """For each dimension, the product of the degrees placed inside it (its ranks' stride)."""
    out, inner = {}, 1
    for dim in ORDER:
        out[dim] = inner
        inner *= degrees.get(dim, 1)
    return out
