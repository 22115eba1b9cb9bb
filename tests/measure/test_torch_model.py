"""The decoder bench train runs has exactly the parameters gpuwise counts (= transformers', tests/spec), and
computes a causal language model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuwise.catalog.models import load_model, search_models
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.recompute import block_matmuls
from gpuwise.measure import torch_model
from gpuwise.measure.torch_model import build, check_supported, set_recompute
from gpuwise.model.params import param_counts

FIXTURE = "tests/fixtures/configs/tiny-llama.json"


def _dense_catalog() -> list[str]:
    out = []
    for e in search_models(None):
        spec = load_model(e.id).spec
        try:
            check_supported(spec)
        except InvalidArgument:
            continue
        out.append(e.id)
    return out


@pytest.mark.parametrize("model_id", _dense_catalog())
def test_parameter_count_equals_the_inventory(model_id: str) -> None:
    spec = load_model(model_id).spec
    with torch.device("meta"):
        net = build(spec)
    assert sum(p.numel() for p in net.parameters()) == param_counts(spec).total


def test_unsupported_architectures_are_one_line_errors() -> None:
    for model_id in ("mixtral-8x7b", "deepseek-v3", "opt-350m"):
        with pytest.raises(InvalidArgument):
            check_supported(load_model(model_id).spec)


def test_tiny_model_is_causal_and_trains() -> None:
    spec = load_model(FIXTURE).spec
    torch.manual_seed(0)
    net = build(spec)
    tokens = torch.randint(0, spec.vocab_size, (2, 16))
    logits = net(tokens)
    assert logits.shape == (2, 16, spec.vocab_size)
    # Causal: changing a later token leaves the earlier positions' logits unchanged.
    changed = tokens.clone()
    changed[:, 10] = (changed[:, 10] + 1) % spec.vocab_size
    assert torch.allclose(net(changed)[:, :10], logits[:, :10], atol=1e-5)
    assert not torch.allclose(net(changed)[:, 10:], logits[:, 10:], atol=1e-5)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    first = None
    for _ in range(8):  # memorizing one batch: the loss must fall
        loss = torch.nn.functional.cross_entropy(net(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first * 0.8


def _grads(net, tokens) -> list:
    net.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    return [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("mode", ["full", "op", "layer:2"])
def test_checkpointing_modes_compute_the_same_gradients(mode: str) -> None:
    spec = load_model(FIXTURE).spec
    torch.manual_seed(0)
    net = build(spec)
    tokens = torch.randint(0, spec.vocab_size, (2, 16))
    plain = _grads(net, tokens)
    set_recompute(net, mode)
    for a, b in zip(_grads(net, tokens), plain):
        assert torch.allclose(a, b, atol=1e-6)


def test_layer_n_checkpoints_every_nth_block_counting_from_one() -> None:
    net = build(load_model("llama-3.2-1b").spec, device="meta")  # 16 blocks
    set_recompute(net, "layer:3")  # torchtitan: blocks 3, 6, 9, 12, 15 (1-based)
    assert [i for i, b in enumerate(net.blocks) if b.recompute == "full"] == [2, 5, 8, 11, 14]
    set_recompute(net, "op")
    assert {b.recompute for b in net.blocks} == {"op"}


def test_op_policy_keeps_the_odd_matmuls_gpuwise_counts(monkeypatch) -> None:
    """The per-op policy run on the bench model's real aten ops keeps the outputs of the matmuls estimate/recompute.py
    says it keeps (q, v, gate, down in a Llama block: the odd-numbered aten.mm)."""
    spec = load_model(FIXTURE).spec
    kept: list[tuple[bool, int]] = []
    make = torch_model.op_sac_policy

    def recording(torch_):
        policy = make(torch_)

        def wrapped(ctx, func, *args, **kwargs):
            decision = policy(ctx, func, *args, **kwargs)
            if func == torch.ops.aten.mm.default and decision.name == "MUST_SAVE":
                kept.append((ctx.is_recompute, args[1].shape[-1]))  # the mm's output width
            return decision

        return wrapped

    monkeypatch.setattr(torch_model, "op_sac_policy", recording)
    torch.manual_seed(0)
    net = build(spec)
    set_recompute(net, "op")
    _grads(net, torch.randint(0, spec.vocab_size, (2, 16)))
    mms = [m for m in block_matmuls(spec, 0) if not m.bias]  # aten.mm: the linears without a bias
    want = [m.out for i, m in enumerate(mms, start=1) if i % 2]
    assert [w for r, w in kept if not r] == want * spec.num_layers
