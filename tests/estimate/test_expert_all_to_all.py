"""The MoE dispatch/combine model (issue 18): NVLink inside a node, each rank's NIC across nodes, the flex
dispatcher's one crossing per destination node, and the overlap that hides it behind another micro-batch."""

from __future__ import annotations

import math

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


def _published_rate(backend: str, nodes: int) -> float:
    """The measured logical GB/s the catalog ships for `backend` across `nodes` nodes (400 Gb/s NICs)."""
    from gpuwise.catalog.devices import network_defaults

    return float(network_defaults()["ep_dispatch"][backend]["logical_gb_s"][str(nodes)])


@pytest.mark.parametrize("backend, quoted", [("hybridep", {2: (57.74, 56.96), 4: (46.54, 50.68), 8: (41.46, 47.68)}),
                                             ("deepep", {2: (43.0, 43.0), 4: (57.0, 57.0), 8: (50.0, 50.0)})])
def test_the_shipped_dispatch_rates_are_the_published_kernel_measurements(backend, quoted):
    """DeepEP's hybrid-ep README (H100, 8 SMs, Torch API, BF16 dispatch and combine) and its legacy V1 table (H800,
    BF16 combine): the catalog carries their mean, not a fitted number."""
    for nodes, (dispatch, combine) in quoted.items():
        assert _published_rate(backend, nodes) == pytest.approx((dispatch + combine) / 2, abs=0.01)


@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
@pytest.mark.parametrize("ep, nodes", [(16, 2), (32, 4), (64, 8)])
def test_a_measured_backend_moves_the_logical_bytes_at_its_measured_rate(backend, ep, nodes):
    """The kernels' benchmarks count a token once per node it reaches, its own node included: the time is those
    bytes over the measured rate on a network of the measuring NIC (400 Gb/s per GPU)."""
    from gpuwise.units import GB

    t = _topo(ep)
    logical = 64 * MB * nodes * (1 - (1 - 1 / nodes) ** 8)
    expected = logical / (_published_rate(backend, nodes) * GB)
    got = t.expert_all_to_all_s(64 * MB, 8, ep, per_node=True, backend=backend)
    assert got == pytest.approx(expected + t.inter.latency_s * math.ceil(math.log2(ep)), rel=1e-9)


def test_two_nodes_move_the_remote_bytes_slower_than_ncclss_nic_rate():
    """At two nodes half of the logical bytes stay home, yet they pass the kernel's RDMA stage: both backends move
    the bytes that really leave the node below the ~40 GB/s NCCL reaches on a 400 Gb/s NIC."""
    t = _topo(16)
    for backend in ("deepep", "hybridep"):
        assert (t.expert_all_to_all_s(64 * MB, 8, 16, per_node=True, backend=backend)
                > t.expert_all_to_all_s(64 * MB, 8, 16, per_node=True))


def test_the_measured_rate_follows_the_nic_and_interpolates_between_node_counts():
    fast = topology(get_gpu("h100-sxm"), num_gpus=32, inter_node_gbps=800)
    slow = _topo(32)
    assert fast.ep_dispatch_bytes_per_s("hybridep", 4) == pytest.approx(2 * slow.ep_dispatch_bytes_per_s("hybridep", 4))
    rates = [slow.ep_dispatch_bytes_per_s("hybridep", n) for n in (2, 3, 4, 6, 8, 16)]
    assert rates[0] > rates[1] > rates[2] > rates[3] > rates[4] == rates[5]  # clamped past the last measurement
    assert slow.ep_dispatch_bytes_per_s("ncclep", 4) is None


def test_inside_one_nvlink_domain_the_backend_changes_nothing():
    t = _topo(8)
    assert (t.expert_all_to_all_s(64 * MB, 8, 8, per_node=True, backend="hybridep")
            == t.expert_all_to_all_s(64 * MB, 8, 8, per_node=True))


def test_deepep_sees_nodes_of_eight_even_inside_an_nvl72_rack():
    """DeepEP's normal kernels take each 8 ranks as one NVLink node and Megatron-Core gives them no multi-node
    NVLink (only HybridEP supports it): EP 64 in one GB200 NVL72 rack crosses between 8 groups of 8 over RDMA."""
    from gpuwise.units import GB

    t = topology(get_gpu("gb200"), num_gpus=64)
    nvlink = t.expert_all_to_all_s(64 * MB, 8, 64, per_node=True)
    assert t.expert_all_to_all_s(64 * MB, 8, 64, per_node=True, backend="hybridep") == nvlink
    deepep = t.expert_all_to_all_s(64 * MB, 8, 64, per_node=True, backend="deepep")
    logical = 64 * MB * 8 * (1 - (1 - 1 / 8) ** 8)
    scale = t.inter.busbw_bytes_per_s / (400 / 8 * GB * 0.8)
    assert deepep == pytest.approx(t.inter.latency_s * 6 + logical / (_published_rate("deepep", 8) * GB * scale))
    assert deepep > 5 * nvlink
    assert t.expert_all_to_all_s(64 * MB, 8, 8, per_node=True, backend="deepep") == t.expert_all_to_all_s(
        64 * MB, 8, 8, per_node=True)  # one group of 8: NVLink


def test_the_backend_is_megatrons_option_and_deepep_by_default():
    kw = dict(gpu="h100-sxm", num_gpus=16, ep=16, seq=4096, global_batch=64, framework="megatron", zero=1,
              moe_token_dispatcher="flex")
    default = gpuwise.train("qwen3-30b-a3b", **kw)
    deepep = gpuwise.train("qwen3-30b-a3b", moe_flex_dispatcher_backend="deepep", **kw)
    hybrid = gpuwise.train("qwen3-30b-a3b", moe_flex_dispatcher_backend="hybridep", **kw)
    assert default.request.job.flex_backend == "deepep"
    assert default.perf.step.breakdown["ep_comm"] == deepep.perf.step.breakdown["ep_comm"]
    assert hybrid.perf.step.breakdown["ep_comm"] != deepep.perf.step.breakdown["ep_comm"]
    assert any("hybridep's kernels" in a for a in hybrid.assumptions)
    with pytest.raises(gpuwise.errors.InvalidArgument, match="add --moe-token-dispatcher flex"):
        gpuwise.train("qwen3-30b-a3b", moe_flex_dispatcher_backend="hybridep",
                      **{**kw, "moe_token_dispatcher": "alltoall"})


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


def _collectives(monkeypatch, model, op="reduce_scatter", **kw):
    """The collectives of kind `op` a training step issues: (message bytes, ranks, stride, seconds)."""
    from gpuwise.estimate.comm import Topology

    seen, original = [], Topology.collective_s

    def spy(self, kind, message, group, inner=1):
        t = original(self, kind, message, group, inner)
        if kind == op:
            seen.append((message, group, inner, t))
        return t

    monkeypatch.setattr(Topology, "collective_s", spy)
    r = gpuwise.train(model, gpu="h100-sxm", seq=4096, micro_batch=1, **kw)
    return r, seen


MIXTRAL_EXPERT = 32 * 3 * 4096 * 14336
"""One whole Mixtral 8x7B expert per layer (w1, w3: 4096 x 14336; w2: 14336 x 4096) over 32 layers."""


def test_expert_gradients_are_reduced_over_the_expert_data_parallel_ranks(monkeypatch):
    """Parallel folding: with EP 8 over 64 data-parallel ranks each expert lives on 64 / 8 = 8 ranks, one per EP
    group (stride 8, one per node), and only those reduce its gradient; the dense weights reduce over all 64."""
    r, seen = _collectives(monkeypatch, "mixtral-8x7b", num_gpus=64, ep=8, global_batch=64, framework="megatron",
                           zero=1)
    grad = 4 if r.request.job.grad_reduce_in_fp32 else 2
    assert sorted((g, s) for _, g, s, _ in seen) == [(8, 8), (64, 1)]
    by_group = {g: msg for msg, g, _, _ in seen}
    assert by_group[8] == MIXTRAL_EXPERT * grad
    dense = 46_702_792_704 - 8 * MIXTRAL_EXPERT  # transformers' parameter count less the eight experts
    assert by_group[64] == dense * grad


def test_experts_spread_over_every_data_parallel_rank_need_no_gradient_reduction(monkeypatch):
    """EP 16 on 16 data-parallel ranks: every expert lives on one rank (expert data parallelism 1), so the step's
    gradient reduction is the dense weights' alone: the same as when the experts are not trained at all."""
    r, seen = _collectives(monkeypatch, "qwen3-30b-a3b", num_gpus=16, ep=16, global_batch=16, framework="megatron",
                           zero=1)
    assert r.layout.expert_dp == 1
    dense = [msg for msg, g, _, _ in seen if g == 16]
    grad = 4 if r.request.job.grad_reduce_in_fp32 else 2
    experts = 48 * 128 * 3 * 2_048 * 768 // 16
    assert dense == [(30_532_122_624 - 16 * experts) * grad]  # transformers' count less every expert


def test_the_expert_all_to_all_strides_over_expert_tp_whatever_cp(monkeypatch):
    """Megatron-Core folds EP over consecutive ranks (its expert rank generator has no CP): with CP 2 the EP 8 group
    is still 8 neighbouring GPUs, one node."""
    from gpuwise.estimate.comm import Topology

    seen, original = [], Topology.expert_all_to_all_s

    def spy(self, token_bytes, top_k, group, inner=1, **kw):
        seen.append((group, inner))
        return original(self, token_bytes, top_k, group, inner, **kw)

    monkeypatch.setattr(Topology, "expert_all_to_all_s", spy)
    gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, cp=2, ep=8, seq=8192, global_batch=16,
                  framework="megatron", zero=1)
    assert seen and all(inner == 1 for _, inner in seen)



def test_expert_data_parallelism_without_dense_data_parallelism_still_reduces(monkeypatch):
    """TP 4 with experts folded as EP 2 x ETP 1: one dense data-parallel rank, but every expert on 4 / 2 = 2 ranks,
    whose gradients must meet (the memory model shards their optimizer states over the same 2)."""
    r, seen = _collectives(monkeypatch, "qwen3-30b-a3b", num_gpus=4, tp=4, etp=1, ep=2, global_batch=4,
                           framework="megatron", zero=1)
    assert r.layout.dp == 1 and r.layout.expert_dp == 2
    assert any(g == 2 and t > 0 for _, g, _, t in seen)
    assert r.perf.step.breakdown["dp_comm"] > 0


def test_frozen_experts_are_still_gathered_under_fsdp(monkeypatch):
    """LoRA trains no expert, but FSDP full shard still gathers the frozen experts' shards for every pass."""
    r, seen = _collectives(monkeypatch, "qwen3-30b-a3b", op="all_gather", num_gpus=16, ep=8, global_batch=16,
                           framework="torchtitan", fsdp="full", finetune="lora")
    assert r.layout.expert_dp == 2
    # 48 layers x 128 experts x 3 matrices of 2,048 x 768, over 8 EP ranks, in bf16, gathered over 2 ranks
    experts = 48 * 128 * 3 * 2_048 * 768 // 8 * 2
    assert (experts, 2) in [(msg, g) for msg, g, _, _ in seen]


def test_torchao_float8_all_gather_sends_the_block_matrices_in_fp8(monkeypatch):
    """torchtitan's enable_fsdp_float8_all_gather (`--fp8-param-gather` under FSDP2): the Float8Linear block matrices'
    shards travel in fp8 (1 B), the embeddings, norms and output layer in bf16 (2 B)."""
    kw = dict(num_gpus=8, fsdp="full", global_batch=8, framework="torchtitan", precision="fp8",
              float8_recipe="tensorwise")  # the recipe torchtitan's float8 all-gather ran under (before 2026-04-27)
    _, bf16_gather = _collectives(monkeypatch, "llama-3.1-8b", op="all_gather", **kw)
    _, fp8_gather = _collectives(monkeypatch, "llama-3.1-8b", op="all_gather", fp8_param_gather=True, **kw)
    # Llama-3.1-8B: 8,030,261,248 parameters; the embedding and output layer 128,256 x 4,096 each, the norms
    # 65 x 4,096; the rest are the blocks' matrices
    other = 2 * 128_256 * 4_096 + 65 * 4_096
    blocks = 8_030_261_248 - other
    assert 2 * (blocks + other) in [m for m, *_ in bf16_gather]
    assert blocks + 2 * other in [m for m, *_ in fp8_gather]
    assert 2 * (blocks + other) not in [m for m, *_ in fp8_gather]


def test_the_float8_all_gather_holds_gathered_blocks_in_fp8():
    """Memory: FSDP2 holds two gathered units (the one in use, the one prefetched); with the float8 all-gather a
    block's matrices arrive in fp8 while the embedding unit stays bf16, so the largest gathered unit is whichever is
    bigger in bytes. Llama-3.1-405B at TP 8: a block is (16,384 x 34,816 + 3 x 16,384 x 53,248) / 8 + 2 x 16,384
    parameters, the embedding 128,256 x 16,384 / 8."""
    kw = dict(gpu="h100-sxm", num_gpus=128, fsdp="full", tp=8, global_batch=16, framework="torchtitan",
              precision="fp8", ac="full", float8_recipe="tensorwise")
    block = (16_384 * 34_816 + 3 * 16_384 * 53_248) // 8 + 2 * 16_384
    embedding = 128_256 * 16_384 // 8
    bf16 = gpuwise.train("llama-3.1-405b", **kw).memory.buffers
    fp8 = gpuwise.train("llama-3.1-405b", fp8_param_gather=True, **kw).memory.buffers
    assert bf16 - fp8 == 2 * (2 * block - max(block, 2 * embedding))


def _block(attn_f=1.0, exp_f=1.0, attn_b=2.0, exp_d=1.0, exp_w=1.0):
    from gpuwise.estimate.step_time import _BlockTime

    return _BlockTime(forward=attn_f + exp_f, backward=attn_b + exp_d + exp_w, recompute=0.0, attention_forward=0.0,
                      attention_backward=0.0, gemm_forward=0.0, gemm_backward=0.0, weight_cast=0.0,
                      expert_forward=exp_f, expert_dgrad=exp_d, expert_wgrad=exp_w)


@pytest.mark.parametrize("parts", [(1.0, 1.0, 2.0, 1.0, 1.0), (0.3, 2.0, 0.5, 3.0, 2.0), (2.0, 0.2, 4.0, 0.3, 0.3)])
@pytest.mark.parametrize("a2a", [0.0, 0.1, 0.8, 1.7, 4.0, 20.0])
def test_the_ep_overlap_schedule_hides_no_more_than_the_compute_and_never_more_than_it_sends(parts, a2a):
    """Megatron-Core's combined 1F1B: four all-to-alls per layer and micro-batch, each beside one part of the other
    micro-batch's layer. Exposed time lies between what the whole compute could hide (4 a2a - compute) and sending
    everything exposed; the overlapped rest slows the compute by OVERLAP_SLOWDOWN."""
    from gpuwise.estimate.step_time import OVERLAP_SLOWDOWN, _ep_overlap_exposed

    bt = _block(*parts)
    compute = sum(parts)
    for delay in (False, True):
        exposed = _ep_overlap_exposed(bt, a2a, delay_wgrad=delay)
        assert max(0.0, 4 * a2a - compute) <= exposed + 1e-12
        assert exposed <= 4 * a2a + 1e-12  # what it hides it pays back at OVERLAP_SLOWDOWN < 1 at most
        assert exposed >= OVERLAP_SLOWDOWN * min(4 * a2a, compute) - 1e-12
    if a2a == 0.0:
        assert _ep_overlap_exposed(bt, a2a) == 0.0
    # delaying the weight gradients lets the dispatch backward start earlier: never more exposed
    assert _ep_overlap_exposed(bt, a2a, delay_wgrad=True) <= _ep_overlap_exposed(bt, a2a) + 1e-12


def test_an_all_to_all_hides_only_behind_the_part_issued_beside_it():
    """Each all-to-all longer than its partner part shows the difference even when the whole layer's compute could
    have covered all four (the model before 2026-11-27 hid 4 a2a behind forward + backward)."""
    from gpuwise.estimate.step_time import _ep_overlap_exposed

    from gpuwise.estimate.step_time import _exposed

    bt = _block(attn_f=1.0, exp_f=1.0, attn_b=3.0, exp_d=0.5, exp_w=0.5)  # 6 of compute, the attention's backward long
    pooled = _exposed(4 * 1.4, 6.0)  # 5.6 of comm would fit in 6 of compute: only the slowdown would show
    assert _ep_overlap_exposed(bt, 1.4) > pooled + 0.5


def test_the_comm_overlap_pair_of_megatron_bridge_is_priced_within_its_measurement():
    """Megatron-Bridge skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md @067f987 ('Correctness-first alltoall
    smoke'): Qwen3-30B-A3B on 16 H100 (EP 16 across two nodes, alltoall dispatcher, unfused permutation, no CUDA
    graphs, delay_wgrad_compute off) ran 41.25 s per step without EP overlap and 31.31 s with it: both within 12%
    (the overlap once priced at 22.7 s, 38% too fast)."""
    kw = dict(gpu="h100-sxm", num_gpus=16, seq=4096, global_batch=1024, micro_batch=1, tp=1, pp=1, ep=16, zero=1,
              recompute="none", precision="bf16", grad_reduce_in_fp32=False, framework="megatron",
              moe_token_dispatcher="alltoall")
    plain = gpuwise.train("qwen3-30b-a3b", **kw).perf.step.step_time_s
    overlap = gpuwise.train("qwen3-30b-a3b", moe_a2a_overlap=True, **kw).perf.step.step_time_s
    assert plain == pytest.approx(41.25, rel=0.12)
    assert overlap == pytest.approx(31.31, rel=0.12)


def test_delayed_weight_gradients_need_the_ep_overlap():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="--delay-wgrad-compute .* --moe-a2a-overlap"):
        gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, ep=16, framework="megatron",
                      delay_wgrad_compute=True)
    with pytest.raises(gpuwise.errors.InvalidArgument, match="--delay-wgrad-compute"):
        gpuwise.plan("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, seq=4096, global_batch=256, ep=16,
                     framework="megatron", delay_wgrad_compute=True)



def test_delayed_weight_gradients_let_the_dispatch_backward_start_earlier():
    """Megatron-LM's Qwen3-235B-A22B MoE recipe on 128 B200 (examples/moe_recipes, delay_wgrad_compute true): its
    experts' backward outlasts an exchange, so running their weight gradients after the dispatch backward is issued
    (and the attention's after its input gradients) shortens the step; never lengthens it."""
    kw = dict(gpu="b200", num_gpus=128, seq=4096, global_batch=3072, micro_batch=3, tp=2, sp=True, pp=4, vpp=12, ep=16,
              etp=1, pp_first_layers=23, pp_last_layers=23, zero=1, precision="fp8", framework="megatron",
              fp8_param_gather=True, moe_token_dispatcher="flex", moe_a2a_overlap=True, moe_permute_fusion=True)
    plain = gpuwise.train("qwen3-235b-a22b", **kw).perf.step
    delayed = gpuwise.train("qwen3-235b-a22b", delay_wgrad_compute=True, **kw).perf.step
    assert delayed.breakdown["ep_comm"] < plain.breakdown["ep_comm"]
    assert delayed.step_time_s < plain.step_time_s


def test_micro_batches_without_a_partner_pay_their_exchange_in_full():
    """One micro-batch per step: nothing to pair its forward with, so EP overlap hides nothing (the slowdown aside)."""
    kw = dict(gpu="h100-sxm", num_gpus=16, seq=4096, global_batch=16, micro_batch=1, ep=16, framework="megatron",
              moe_token_dispatcher="alltoall")
    plain = gpuwise.train("qwen3-30b-a3b", **kw).perf.step.breakdown["ep_comm"]
    overlap = gpuwise.train("qwen3-30b-a3b", moe_a2a_overlap=True, **kw).perf.step.breakdown["ep_comm"]
    assert overlap == pytest.approx(plain, rel=1e-6)


def test_a_recomputed_module_is_rebuilt_in_its_own_part_of_the_layer():
    """Under EP overlap the experts' recompute (mlp, moe, shared_experts) runs inside their backward, the attention's
    (core_attn, mla_up_proj) inside the attention's: the experts' share is all of moe's but the router, none of
    core_attn's, and a mix of both."""
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.recompute import expert_recompute_share

    spec = load_model("qwen3-30b-a3b").spec
    assert expert_recompute_share(spec, "none", 4096, 0) == 0.0
    assert expert_recompute_share(spec, "selective:core_attn", 4096, 0) == 0.0
    assert 0.95 < expert_recompute_share(spec, "selective:moe", 4096, 0) < 1.0  # the router is the attention side's
    both = expert_recompute_share(spec, "selective:core_attn+moe", 4096, 0)
    assert 0.0 < both < expert_recompute_share(spec, "selective:moe", 4096, 0)
