"""Flash attention for transformers models on the meta device, shared by the saved-tensor oracles.

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
