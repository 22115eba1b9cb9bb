"""torch.optim's fused and foreach AdamW (issue 18; H100 runs in benchmarks/results/h100-sxm): the element reads and
writes and the temporary the model charges, against what torch's own optimizer dispatches, and each framework's
default implementation."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.step_time import FOREACH_ADAMW_EXTRA_ACCESSES

FUSED_ADAMW_ACCESSES = 7  # fused kernel: p, g, m, v read; p, m, v written


def _accesses(impl: str) -> tuple[float, float]:
    """(element reads and writes per parameter, bytes per parameter of fresh tensors written) of one AdamW step with
    weight decay, counted from the aten ops torch.optim dispatches: each distinct tensor an op takes is read once,
    each tensor it mutates or returns written once."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    n = 1 << 16
    params = [torch.nn.Parameter(torch.randn(n)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(n)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, fused=impl == "fused", foreach=impl == "foreach")
    opt.step()  # the states exist from here on

    counts = {"rw": 0.0, "fresh": 0.0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            schema = func._schema
            mutated = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
            if kwargs.get("grad_scale") is None:
                # _fused_adamw_ marks its gradients mutable for the in-place unscale of a GradScaler run; without a
                # scale the kernel stores no gradient (aten/src/ATen/native/cuda/fused_adam_utils.cuh)
                mutated.discard("grads")
            seen = set()
            for arg, value in zip(schema.arguments, list(args) + [kwargs.get(a.name) for a in
                                                                   schema.arguments[len(args):]]):
                for t in tree_flatten(value)[0]:
                    if isinstance(t, torch.Tensor) and t.numel() >= n and t.data_ptr() not in seen:
                        seen.add(t.data_ptr())
                        counts["rw"] += t.numel() * (2 if arg.name in mutated else 1)
            if not mutated:
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.numel() >= n:
                        counts["rw"] += t.numel()
                        counts["fresh"] += t.numel() * t.element_size()
            return out

    with Count():
        opt.step()
    elements = 3 * n
    return counts["rw"] / elements, counts["fresh"] / elements


def test_fused_adamw_touches_each_state_once():
    rw, fresh = _accesses("fused")
    assert rw == FUSED_ADAMW_ACCESSES and fresh == 0


def test_foreach_adamw_extra_traffic_and_temporary_are_torch_s():
    """The model's 20 reads and writes per parameter, and its temporary of one fp32 state (estimate/train_memory.py:
    states.optimizer / 2 for AdamW's two states), are what _multi_tensor_adam dispatches."""
    rw, fresh = _accesses("foreach")
    assert rw == FUSED_ADAMW_ACCESSES + FOREACH_ADAMW_EXTRA_ACCESSES
    assert fresh == 4.0


def _train(**kw):
    return gpuwise.train("llama-3.2-1b", gpu="h100-sxm", num_gpus=1, seq=4096, micro_batch=2, **kw)


def test_foreach_is_slower_and_holds_a_temporary_at_the_step():
    fused, foreach = (_train(framework="torchtitan", optimizer_impl=impl) for impl in ("fused", "foreach"))
    opt_f, opt_e = (r.perf.step.breakdown["optimizer"] for r in (fused, foreach))
    assert opt_e / opt_f == pytest.approx(20 / 7, rel=0.15)  # bandwidth-bound: the ratio of element accesses
    assert foreach.memory.moments["optimizer_step"] - fused.memory.moments["optimizer_step"] == pytest.approx(
        foreach.memory.states.optimizer / 2)


@pytest.mark.parametrize("framework, foreach", [("torchtitan", False), ("torchtune", False), ("hf", False),
                                                ("fsdp", True), ("megatron", False), ("deepspeed", False)])
def test_each_framework_s_default_implementation(framework, foreach):
    assert TrainJob(framework=framework).optimizer_foreach is foreach
    assert TrainJob(framework=framework, optimizer="adafactor").optimizer_foreach is False


def test_megatron_and_deepspeed_refuse_a_torch_optim_implementation():
    with pytest.raises(InvalidArgument, match="own fused optimizer"):
        _train(framework="megatron", optimizer_impl="foreach")
    with pytest.raises(InvalidArgument, match="--optimizer-impl"):
        _train(framework="torchtitan", optimizer_impl="apex")
