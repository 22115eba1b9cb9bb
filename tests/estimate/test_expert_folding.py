"""MoE parallel folding (issue 18): expert parallelism over tp x cp x dp with expert TP 1 or the dense TP, as
Megatron-Core (--expert-tensor-parallel-size) and torchtitan (expert_tensor_parallel_degree) accept."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.layer_ops import block_ops
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.model_states import stage_tensors
from gpuwise.catalog.models import load_model

MOE = "qwen3-30b-a3b"


def test_ep_beyond_dp_is_accepted_when_the_experts_fold_over_tp():
    """TP 4 dense, EP 8 with expert TP 1 on 8 GPUs: EP 8 does not divide dp 2, but 8 x 1 divides tp x dp = 8."""
    r = gpuwise.train(MOE, gpu="h100-sxm", num_gpus=8, tp=4, sp=True, ep=8, etp=1, seq=4096)
    assert r.layout.ep == 8 and r.layout.expert_tp == 1 and r.layout.dp == 2
    with pytest.raises(InvalidArgument, match="--ep 8 x --etp 4 must divide"):
        gpuwise.train(MOE, gpu="h100-sxm", num_gpus=8, tp=4, ep=8, seq=4096)


def test_the_issues_layout_ep32_tp2_on_256_gpus_is_accepted():
    r = gpuwise.train("deepseek-v3", gpu="h100-sxm", num_gpus=256, tp=2, pp=8, ep=32, etp=1, seq=4096,
                      global_batch=512, recompute="full", pp_first_layers=5, pp_last_layers=8)
    assert r.layout.ep == 32 and r.layout.dp == 16  # EP 32 > dp 16: folded over tp x dp
    r = gpuwise.train(MOE, gpu="h100-sxm", num_gpus=256, tp=2, ep=32, seq=4096, global_batch=256)
    assert r.layout.ep == 32


@pytest.mark.parametrize("tp, ep, etp", [(4, 8, 1), (4, 2, 4), (2, 4, 1), (1, 8, 1)])
def test_each_rank_holds_an_ep_x_etp_share_of_the_experts(tp, ep, etp):
    spec = load_model(MOE).spec
    lay = Layout(num_gpus=8, tp=tp, ep=ep, etp=etp)
    held = stage_tensors(spec, lay, 0)
    experts_on_rank = sum(rt.numel * rt.count for rt in held.groups if rt.expert)
    total = sum(t.numel for t in spec_tensors(spec) if t.experts > 1 or t.role.endswith("_exps"))
    assert experts_on_rank * ep * etp == pytest.approx(total, rel=1e-9)


def spec_tensors(spec):
    from gpuwise.model.params import tensor_inventory

    return tensor_inventory(spec)


def test_expert_flops_per_rank_do_not_depend_on_the_expert_tp():
    spec = load_model(MOE).spec
    layer = next(i for i, m in enumerate(spec.moe.moe_layers) if m)

    def expert_flops(etp):
        ops = block_ops(spec, layer, tokens=8192, keys=4096, tp=4, ep=8, etp=etp)
        return sum(g.flops for g in ops.gemms if g.name.startswith("experts"))

    assert expert_flops(1) == pytest.approx(expert_flops(4), rel=0.01)
