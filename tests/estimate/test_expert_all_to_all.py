"""The MoE dispatch/combine model (issue 18): NVLink inside a node, each rank's NIC across nodes, the flex
dispatcher's one crossing per destination node, and the overlap that hides it behind another micro-batch."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.comm import topology

MB = 1 << 20


def _topo(n=64):
    return topology(get_gpu("h100-sxm"), num_gpus=n)


def test_inside_a_node_it_is_ncclss_all_to_all():
    t = _topo()
    assert t.expert_all_to_all_s(64 * MB, 8, 8) == t.collective_s("all_to_all", 8 * 64 * MB, 8)


def test_across_nodes_the_nic_carries_the_remote_copies():
    t = _topo()
    remote = 8 * 64 * MB * 3 / 4  # EP 32 over 4 nodes: 3/4 of the copies leave the node
    assert t.expert_all_to_all_s(64 * MB, 8, 32) == pytest.approx(remote / t.inter.busbw_bytes_per_s, rel=0.01)


@pytest.mark.parametrize("ep", [16, 32, 64])
def test_sending_once_per_node_never_costs_more_and_saves_most_at_high_top_k(ep):
    t = _topo()
    plain = t.expert_all_to_all_s(64 * MB, 8, ep)
    flex = t.expert_all_to_all_s(64 * MB, 8, ep, per_node=True)
    assert flex < plain
    assert t.expert_all_to_all_s(64 * MB, 1, ep, per_node=True) == pytest.approx(
        t.expert_all_to_all_s(64 * MB, 1, ep), rel=1e-6)  # top-1: nothing to deduplicate


def test_overlap_hides_the_dispatch_behind_compute_and_never_adds_time():
    kw = dict(gpu="h100-sxm", num_gpus=64, ep=32, seq=4096, global_batch=256, framework="megatron")
    plain = gpuwise.train("qwen3-30b-a3b", **kw).perf.step.breakdown["ep_comm"]
    flex = gpuwise.train("qwen3-30b-a3b", moe_token_dispatcher="flex", **kw).perf.step.breakdown["ep_comm"]
    both = gpuwise.train("qwen3-30b-a3b", moe_token_dispatcher="flex", moe_a2a_overlap=True,
                         **kw).perf.step.breakdown["ep_comm"]
    assert plain > flex >= both >= 0.0


def test_an_unknown_dispatcher_is_refused():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="--moe-token-dispatcher"):
        gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, ep=8, moe_token_dispatcher="nccl")
