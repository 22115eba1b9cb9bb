"""GB200 and GB300 come as NVL72 racks: 72 GPUs share one NVLink domain unless --gpus-per-node says otherwise."""

from __future__ import annotations

from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.comm import topology


def test_gb200_defaults_to_one_nvlink_domain_of_72():
    t = topology(get_gpu("gb200"), num_gpus=144)
    assert t.gpus_per_node == 72 and t.level(64, 1) is t.intra and t.level(144, 1) is t.inter
    assert topology(get_gpu("gb200"), num_gpus=144, gpus_per_node=36).gpus_per_node == 36
    assert topology(get_gpu("b200"), num_gpus=144).gpus_per_node == 8


def test_gb300_is_an_nvl72_rack_with_an_800_gbps_nic_per_gpu():
    """NVIDIA's GB300 NVL72 reference architecture: 72 GPUs in one NVLink domain, one ConnectX-8 (800 Gb/s) per GPU
    (4 per compute tray of 4 GPUs); HGX B300 boards carry ConnectX-8 too, in 8-GPU servers."""
    gb300, b300, gb200 = (topology(get_gpu(g), num_gpus=288) for g in ("gb300", "b300", "gb200"))
    assert gb300.gpus_per_node == 72 and b300.gpus_per_node == 8
    assert gb300.inter.busbw_bytes_per_s == b300.inter.busbw_bytes_per_s == 2 * gb200.inter.busbw_bytes_per_s
    assert "800 Gb/s" in gb300.inter.name
