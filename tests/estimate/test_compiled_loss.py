"""torchtitan's compiled loss (compile.components with "loss"): the cross-entropy keeps the 16-bit logits, checked on
the real Inductor graph with saved-tensor hooks; what that does to a training job's memory; and the reserve of
FSDP's gradient pool on its own stream once the loss no longer sets the backward's peak."""

from __future__ import annotations

import re

import pytest

from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.activations import logits_bytes_per_element
from gpuwise.plan.train import TrainRequest, train

GiB = 1 << 30


@pytest.mark.slow
def test_the_compiled_cross_entropy_saves_the_16_bit_logits_only() -> None:
    """torchtitan's loss, `cross_entropy(pred.flatten(0, 1).float(), labels)`, compiled by Inductor (CPU here; the
    partitioner's choice of saved tensors is the same graph decision on CUDA): 2 B per logit (the bf16 input) plus a
    few floats per row, where the eager loss keeps fp32 log-probabilities."""
    torch = pytest.importorskip("torch")

    def ce(pred, labels):
        return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    tokens, vocab = 128, 2048
    pred = torch.randn(1, tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (1, tokens))
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    compiled = torch.compile(ce)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = compiled(pred, labels)
    except Exception as exc:  # noqa: BLE001 - no C++ toolchain for Inductor's CPU backend on this machine
        pytest.skip(f"torch.compile unavailable here: {type(exc).__name__}")
    grad = torch.autograd.grad(loss, pred)[0]
    per_element = sum(saved.values()) / (tokens * vocab)
    assert per_element == pytest.approx(logits_bytes_per_element("torchtitan", 2.0, compiled_loss=True)[0], abs=0.05)
    assert grad.dtype == torch.bfloat16  # the gradient comes back in the logits' 16 bits


def _llama8b(**kw):
    return TrainRequest(model=load_model("llama-3-8b"), gpu=get_gpu("h100-sxm"), num_gpus=8, fsdp="full", seq=8192,
                        global_batch=8, micro_batch=1, framework="torchtitan", ac="op", **kw)


def test_a_compiled_loss_holds_16_bit_logits_and_their_gradient() -> None:
    tokens_logits = 8192 * load_model("llama-3-8b").spec.vocab_size
    compiled = train(_llama8b(compile=True)).memory
    eager_loss = train(_llama8b(compile=True, compile_loss=False)).memory
    assert compiled.logits == pytest.approx(tokens_logits * (2 + 2), rel=1e-6)
    assert eager_loss.logits == pytest.approx(tokens_logits * 12, rel=1e-6)
    assert compiled.torch_allocated < eager_loss.torch_allocated
    assert train(_llama8b()).memory.logits == eager_loss.logits  # without --compile the loss runs eager


def test_no_compile_loss_is_torchtitan_s_option() -> None:
    with pytest.raises(InvalidArgument, match="torchtitan"):
        TrainRequest(model=load_model("llama-3-8b"), gpu=get_gpu("h100-sxm"), framework="megatron",
                     compile_loss=False)


def test_compile_components_names_what_torchtitan_compiles() -> None:
    """compile.components ["loss"]: the loss compiled, the blocks eager (torchtitan's DeepSeek-V3 configs);
    ["model", "loss"] is --compile, ["model"] is --compile --no-compile-loss."""
    tokens_logits = 8192 * load_model("llama-3-8b").spec.vocab_size
    loss_only = train(_llama8b(compile_components="loss"))
    assert loss_only.request.compile is False and loss_only.request.job.compile_loss
    assert loss_only.memory.logits == pytest.approx(tokens_logits * (2 + 2), rel=1e-6)
    # the blocks keep what eager PyTorch keeps: the same activations as no compile at all
    assert loss_only.memory.activations == train(_llama8b()).memory.activations
    both = train(_llama8b(compile_components="model, loss")).memory
    assert both == train(_llama8b(compile=True)).memory
    model_only = train(_llama8b(compile_components="model")).memory
    assert model_only == train(_llama8b(compile=True, compile_loss=False)).memory
    assert train(_llama8b(compile_components="")).memory == train(_llama8b()).memory
    # the list is resolved into --compile / --no-compile-loss: a replace() that drops it keeps what it said
    from dataclasses import replace

    req = _llama8b(compile_components="model")
    assert (req.compile, req.compile_loss) == (True, False)
    assert replace(req, compile_components=None).job.compile_loss is False


@pytest.mark.parametrize(("kw", "needle"), [
    ({"compile_components": "loss,optimizer"}, "unknown component 'optimizer'"),
    ({"compile_components": "loss", "framework": "fsdp"}, "torchtitan's compile.components"),
    ({"compile_components": "loss", "compile": True}, "--compile compiles the model"),
    ({"compile_components": "model,loss", "compile_loss": False}, "--no-compile-loss leaves the loss out"),
])
def test_compile_components_refuses_what_it_cannot_mean(kw, needle) -> None:
    base = dict(model=load_model("llama-3-8b"), gpu=get_gpu("h100-sxm"), framework="torchtitan")
    with pytest.raises(InvalidArgument, match=re.escape(needle)):
        TrainRequest(**{**base, **kw})


def test_fsdp_s_gradient_pool_is_reserved_beside_the_backward_s_start() -> None:
    """Qwen3-32B, FSDP over 8, full checkpointing, compiled loss: the allocated peak is the backward's end (every
    gradient shard held), but the compute stream's pool keeps the loss moment's high-water while the reduce-scattered
    gradients fill the side stream's own pool: the reserve holds them beside it (torchtitan's Qwen3 32B configs:
    89.33 GiB eager loss, 81.85 GiB compiled, commit d66b72a6a)."""
    req = TrainRequest(model=load_model("qwen3-32b"), gpu=get_gpu("h100-sxm"), num_gpus=8, fsdp="full", seq=4096,
                       global_batch=16, micro_batch=2, recompute="full", framework="torchtitan", compile=True)
    mem = train(req).memory
    assert mem.moment == "backward"
    assert mem.torch_reserved >= mem.moments["end_of_forward"] + mem.grads
    assert mem.torch_reserved > mem.torch_allocated * (1 + 0.05)
    assert mem.torch_reserved / GiB == pytest.approx(81.85, rel=0.05)
