"""torchtitan's per-op selective checkpointing (`--ac op`) against the ops a real transformers model runs.

The oracle: run the model on the meta device under a dispatch mode that sees every aten op in forward order, and
apply torchtitan's policy to each decoder layer as torchtitan does (torchtitan/models/llama3/infra/parallelize.py,
`_save_list` and `_custom_policy`): the layer keeps its input, and the outputs of the ops on the save list
(aten.mm, the flash SDPA op, reduce-scatter, max) except every second mm counted from the layer's start. gpuwise's
prediction is `op_saved_per_token` (estimate/recompute.py), which lists a block's matmuls from the model spec:
the two must agree, so that a family whose matmul order differs (fused QKV, another MLP) is caught.

Flash attention on meta: aten's flash op allocates what the CUDA kernel returns (output and fp32 log-sum-exp).
"""

from __future__ import annotations

import warnings

import pytest

from gpuwise.estimate.recompute import op_saved_per_token
from gpuwise.model import spec_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

SAVE_LIST = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
             torch.ops.aten.max.default}


from _meta_flash import register  # noqa: E402

register("gpu_sdpa_op_policy")

BASE = dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096)
CASES = [
    ("llama", {}),
    ("qwen3", {"head_dim": 64}),
    ("mistral", {"sliding_window": None}),
    ("gemma", {"head_dim": 64}),
    ("olmo2", {}),
    ("qwen2", {"num_key_value_heads": 8}),
]


class _Policy(TorchDispatchMode):
    """Counts the bytes torchtitan's op policy keeps, layer by layer."""

    def __init__(self) -> None:
        super().__init__()
        self.in_layer = False
        self.mm = 0
        self.kept = 0

    def start_layer(self, hidden: torch.Tensor) -> None:
        self.in_layer, self.mm = True, 0
        self.kept += hidden.numel() * hidden.element_size()  # the checkpoint region's input

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.in_layer and func in SAVE_LIST:
            if func == torch.ops.aten.mm.default:
                self.mm += 1
                if self.mm % 2 == 0:
                    return out
            outs = out if isinstance(out, (tuple, list)) else (out,)
            self.kept += sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor))
        return out


def _op_sac_bytes(config: dict, batch: int, seq: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                                  attn_implementation="gpu_sdpa_op_policy")
    model.train()
    policy = _Policy()
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda mod, args, kw: policy.start_layer(args[0] if args else kw["hidden_states"]),
                                        with_kwargs=True)
        layer.register_forward_hook(lambda *a: setattr(policy, "in_layer", False))
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with policy, torch.no_grad():
        model.model(input_ids=ids)
    return policy.kept


@pytest.mark.parametrize(("family", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_op_policy_matches_the_ops_a_real_model_runs(family, overrides) -> None:
    config = {"model_type": family, **BASE, **overrides}
    spec = spec_from_hf_config(config)
    batch, seq = 2, 256
    predicted = sum(op_saved_per_token(spec, layer, e=2.0, tp=1, sp=False) for layer in range(spec.num_layers))
    # the dispatch mode also sees the philox seed/offset scalars SDPA returns: a few bytes per layer
    assert predicted * batch * seq == pytest.approx(_op_sac_bytes(config, batch, seq), rel=0.01)
