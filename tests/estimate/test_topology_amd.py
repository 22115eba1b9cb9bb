"""AMD Instinct nodes as their sources describe them: MI300X and MI325X share the same seven Infinity Fabric links
(7 x 64 GB/s each way: ml-engineering network/README.md), and their clusters give each GPU a 400 Gb/s NIC (Azure
ND MI300X v5: 8 x 400 Gb/s NDR)."""

from __future__ import annotations

import pytest

from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.comm import topology


@pytest.mark.parametrize("gpu", ["mi300x", "mi325x"])
def test_cdna3_nodes_talk_over_infinity_fabric_not_pcie(gpu):
    t = topology(get_gpu(gpu), num_gpus=16)
    assert "Infinity Fabric" in t.intra.name
    assert get_gpu(gpu).interconnect_bytes_per_s == pytest.approx(7 * 2 * 64e9)


@pytest.mark.parametrize("gpu", ["mi300x", "mi325x", "mi355x"])
def test_amd_instinct_nodes_get_a_400_gbps_nic_per_gpu(gpu):
    amd = topology(get_gpu(gpu), num_gpus=16)
    h100 = topology(get_gpu("h100-sxm"), num_gpus=16)
    assert amd.inter.busbw_bytes_per_s == h100.inter.busbw_bytes_per_s
    assert "400 Gb/s" in amd.inter.name
