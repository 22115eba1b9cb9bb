"""The decoder bench train runs has exactly the parameters gpuwise counts (= transformers', tests/spec), and
computes a causal language model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuwise.catalog.models import load_model, search_models
from gpuwise.errors import InvalidArgument
from gpuwise.measure.torch_model import build, check_supported
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
