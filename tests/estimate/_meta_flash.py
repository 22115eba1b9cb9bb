"""Flash attention for transformers models on the meta device, and the saved-tensor count, shared by the oracles.

On meta, SDPA takes the math path and materializes the score matrix, which no bf16 GPU run does. This attention
function calls aten's flash-attention op instead, whose meta implementation allocates what the CUDA kernel returns
(the output and the fp32 log-sum-exp). Register it under a name without "flash" in it: transformers reserves those
for its hub kernels.
"""

from __future__ import annotations

import torch
import transformers


def _flash_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    out = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout, True, False,
                                                             scale=scaling)[0]
    return out.transpose(1, 2).contiguous(), None


def register(name: str) -> str:
    """Register the function as transformers attention implementation `name`; return the name."""
    transformers.AttentionInterface.register(name, _flash_attention)
    return name


def saved_bytes(model, batch: int, seq: int) -> int:
    """Bytes autograd keeps for one forward of `model` (meta device) on `batch` x `seq` tokens: each saved tensor's
    storage counted once, parameters excluded."""
    model.train()
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage._cdata not in params:
            seen.setdefault(storage._cdata, storage.nbytes())
        return t

    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(seen.values())
