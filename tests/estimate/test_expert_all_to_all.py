"""The MoE dispatch/combine model (issue 18): NVLink inside a node, each rank's NIC across nodes, the flex
dispatcher's one crossing per destination node, and the overlap that hides it behind another micro-batch."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate.comm import topology
from gpuwise.estimate.model_states import model_states

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


def _reductions(monkeypatch, model, **kw):
    """The gradient reduce-scatters a Megatron ZeRO-1 step issues: (message bytes, ranks, stride)."""
    from gpuwise.estimate.comm import Topology

    seen, original = [], Topology.collective_s

    def spy(self, op, message, group, inner=1):
        if op == "reduce_scatter":
            seen.append((message, group, inner))
        return original(self, op, message, group, inner)

    monkeypatch.setattr(Topology, "collective_s", spy)
    r = gpuwise.train(model, gpu="h100-sxm", framework="megatron", zero=1, seq=4096, micro_batch=1, **kw)
    return r, seen


def test_expert_gradients_are_reduced_over_the_expert_data_parallel_ranks(monkeypatch):
    """Parallel folding: with EP 8 over 64 data-parallel ranks each expert lives on 64 / 8 = 8 ranks, one per EP
    group (stride 8, one per node), and only those reduce its gradient; the dense weights reduce over all 64."""
    r, seen = _reductions(monkeypatch, "mixtral-8x7b", num_gpus=64, ep=8, global_batch=64)
    states = model_states(r.request.model.spec, r.layout, 0, r.request.job)
    grad = states.grad_bytes_per_param
    assert sorted((g, s) for _, g, s in seen) == [(8, 8), (64, 1)]
    by_group = {g: msg for msg, g, _ in seen}
    assert by_group[8] == pytest.approx(states.expert_trainable_params * grad)
    assert by_group[64] == pytest.approx((states.trainable_params - states.expert_trainable_params) * grad)
    assert states.expert_trainable_params > 0.7 * states.trainable_params  # one whole expert per layer


def test_experts_spread_over_every_data_parallel_rank_need_no_gradient_reduction(monkeypatch):
    """EP 16 on 16 data-parallel ranks: every expert lives on one rank (expert data parallelism 1)."""
    _, seen = _reductions(monkeypatch, "qwen3-30b-a3b", num_gpus=16, ep=16, global_batch=16)
    assert [g for _, g, _ in seen] == [16, 1]
