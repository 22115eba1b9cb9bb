"""LoRA on a frozen base: `hf` activations against what a real transformers model saves for backward (meta device).

The same oracle as test_activations_hf_oracle.py (saved_tensors_hooks, storages deduplicated, parameters left
out, aten's flash attention standing in for SDPA), on a model whose weights are frozen and whose targeted linears
get PEFT's LoRA forward, `base(x) + lora_B(lora_A(dropout(x))) * scale` with 16-bit adapters and no autocast
(PEFT with autocast_adapter_dtype=False, gpuwise's bf16-pure): autograd then keeps a matmul's input only for a
weight that trains, so what the frozen base would keep for its own gradients is gone.

Not modelled: ahead of the first adapter nothing requires grad, so the first block keeps less (all of its
attention when only the MLP is adapted): at most one block's attention terms, 3% of this 16-layer model.
"""

from __future__ import annotations

import warnings

import pytest

from gpuwise.estimate.activations import stage_activations
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.layout import Layout
from gpuwise.model import spec_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _meta_flash import register, saved_bytes  # noqa: E402

ATTN = register("gpu_sdpa_lora")
CONFIG = dict(model_type="llama", hidden_size=512, intermediate_size=1376, num_hidden_layers=16, num_attention_heads=8,
              num_key_value_heads=2, vocab_size=4096, max_position_embeddings=4096)
PROJ = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
        "down": "down_proj"}


class _LoRA(torch.nn.Module):
    """PEFT's LoRA Linear forward (peft/tuners/lora/layer.py), adapters in the base's dtype."""

    def __init__(self, base: torch.nn.Linear, rank: int, dropout: float) -> None:
        super().__init__()
        self.base = base
        kw = dict(bias=False, dtype=base.weight.dtype, device=base.weight.device)
        self.lora_A = torch.nn.Linear(base.in_features, rank, **kw)
        self.lora_B = torch.nn.Linear(rank, base.out_features, **kw)
        self.dropout = torch.nn.Dropout(dropout) if dropout > 0 else torch.nn.Identity()

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * 2.0


def _saved_bytes(targets: tuple[str, ...], dropout: float, batch: int, seq: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(**CONFIG)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=ATTN)
            model.requires_grad_(False)
            for layer in model.model.layers:
                for short in targets:
                    owner = layer.self_attn if short in ("q", "k", "v", "o") else layer.mlp
                    setattr(owner, PROJ[short], _LoRA(getattr(owner, PROJ[short]), 8, dropout))
    return saved_bytes(model, batch, seq)


def _predicted(targets: tuple[str, ...], dropout: float, batch: int, seq: int) -> float:
    spec = spec_from_hf_config(CONFIG)
    job = TrainJob(framework="hf", precision="bf16-pure", seq=seq, finetune="lora", lora_rank=8,
                   lora_targets=",".join(targets), lora_dropout=dropout)
    act = stage_activations(spec, Layout(num_gpus=1), 0, job, micro_batch=batch, num_microbatches=1)
    return act.layers + act.outside_layers + 4 * batch * seq * spec.vocab_size  # + the loss's fp32 log-softmax


@pytest.mark.parametrize("targets", [("q", "v"), ("q", "k", "v", "o", "gate", "up", "down"), ("gate", "up", "down")],
                         ids=["q,v", "all-linear", "mlp"])
def test_frozen_base_keeps_what_the_adapters_and_the_ops_need(targets) -> None:
    assert _predicted(targets, 0.0, 2, 1024) == pytest.approx(_saved_bytes(targets, 0.0, 2, 1024), rel=0.05)


def test_frozen_base_saves_far_less_than_full_fine_tuning() -> None:
    # the check that the oracle above is not trivially met: full fine-tuning's terms would miss it by far
    spec = spec_from_hf_config(CONFIG)
    full = stage_activations(spec, Layout(num_gpus=1), 0, TrainJob(framework="hf", precision="bf16-pure", seq=1024),
                             micro_batch=2, num_microbatches=1)
    oracle = _saved_bytes(("q", "v"), 0.0, 2, 1024)
    assert full.layers + full.outside_layers + 4 * 2 * 1024 * spec.vocab_size > 1.3 * oracle


def test_lora_dropout_gives_each_adapter_its_own_input() -> None:
    # Off the fused CUDA kernel aten's dropout keeps a noise tensor of the activation dtype (2 B) where CUDA keeps a
    # 1-byte mask; the oracle's difference is therefore gpuwise's plus 1 B per adapted input element.
    targets = ("q", "k", "v", "o", "gate", "up", "down")
    tokens, layers = 2 * 1024, CONFIG["num_hidden_layers"]
    inputs = 5 * CONFIG["hidden_size"] + CONFIG["intermediate_size"]  # q, k, v, o, gate, up read h; down reads ffn
    oracle = _saved_bytes(targets, 0.1, 2, 1024) - _saved_bytes(targets, 0.0, 2, 1024)
    predicted = _predicted(targets, 0.1, 2, 1024) - _predicted(targets, 0.0, 2, 1024)
    assert predicted + tokens * layers * inputs == pytest.approx(oracle, rel=0.05)
