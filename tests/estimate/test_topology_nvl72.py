"""GB200 comes as an NVL72 rack: 72 GPUs share one NVLink domain unless --gpus-per-node says otherwise."""

from __future__ import annotations

from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.comm import topology


def test_gb200_defaults_to_one_nvlink_domain_of_72():
    t = topology(get_gpu("gb200"), num_gpus=144)
    assert t.gpus_per_node == 72 and t.level(64, 1) is t.intra and t.level(144, 1) is t.inter
    assert topology(get_gpu("gb200"), num_gpus=144, gpus_per_node=36).gpus_per_node == 36
    assert topology(get_gpu("b200"), num_gpus=144).gpus_per_node == 8
