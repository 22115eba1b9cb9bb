"""A plain PyTorch decoder built from a ModelSpec: the model `gpuwise bench train` runs.

It has exactly the parameter tensors `model/params.py` lists for the spec (so the same count as transformers;
tests/measure/test_torch_model.py checks it), pre-norm blocks (or parallel / sandwich blocks as the spec says),
rotary or learned positions, grouped-query attention through `F.scaled_dot_product_attention` (cuDNN's, flash or
memory-efficient kernels on GPUs in PyTorch's own order, as gpuwise's `attention=flash` assumes:
`train_config.plain_sdpa_backend`) and a gated or plain MLP. Module names are
simple and stable so that tensor parallelism can address them (`blocks.N.attn.q`, `blocks.N.mlp.down` ...).

What it does not build: mixture-of-experts layers, multi-head latent attention, OPT's projected embeddings. Sliding
windows are run as full causal attention (the same kernel and, below the window, the same FLOPs).
"""

from __future__ import annotations

from ..errors import InvalidArgument
from ..estimate.recompute import recompute_plan
from ..model.spec import ModelSpec
from ._deps import require_torch

ROPE_THETA = 10_000.0
"""Rotary base; its value changes nothing about speed or memory."""


def check_supported(spec: ModelSpec) -> None:
    if spec.moe is not None:
        raise InvalidArgument("bench train builds dense decoders; mixture-of-experts models are not supported yet")
    if spec.mla is not None:
        raise InvalidArgument("bench train does not build multi-head latent attention (DeepSeek) models yet")
    if spec.embed_proj_dim:
        raise InvalidArgument("bench train does not build projected embeddings (OPT-350m) models")
    if spec.hybrid:
        raise InvalidArgument("bench train does not build recurrent (Gated DeltaNet, Mamba-2) or mixer-less layers "
                              "(hybrid models) yet")


def _activation(F, name: str):
    n = (name or "").lower()
    if n in ("silu", "swish"):
        return F.silu
    if n == "relu":
        return F.relu
    if "tanh" in n or n in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return F.gelu


def build(spec: ModelSpec, *, device=None, dtype=None):
    """The decoder for `spec` as an `nn.Module` whose forward(tokens) returns logits (batch, seq, vocab)."""
    check_supported(spec)
    torch = require_torch("gpuwise bench train")
    nn, F = torch.nn, torch.nn.functional
    act = _activation(F, spec.activation)
    kw = {"device": device, "dtype": dtype}

    def norm(dim: int) -> nn.Module:
        if spec.norm == "rmsnorm":
            return nn.RMSNorm(dim, eps=1e-6, **kw)
        return nn.LayerNorm(dim, eps=1e-5, bias=spec.norm_bias, **kw)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, hd = spec.hidden_size, spec.head_dim
            self.head_dim = hd
            self.q = nn.Linear(h, spec.num_heads * hd, bias=spec.qkv_bias, **kw)
            self.k = nn.Linear(h, spec.num_kv_heads * hd, bias=spec.qkv_bias, **kw)
            self.v = nn.Linear(h, spec.num_kv_heads * hd, bias=spec.qkv_bias, **kw)
            self.o = nn.Linear(spec.num_heads * hd, h, bias=spec.o_bias, **kw)
            if spec.qk_norm == "head":
                self.q_norm, self.k_norm = norm(hd), norm(hd)
            elif spec.qk_norm == "full":
                self.q_norm, self.k_norm = norm(spec.num_heads * hd), norm(spec.num_kv_heads * hd)

        def forward(self, x):
            b, s = x.shape[0], x.shape[1]
            q, k, v = self.q(x), self.k(x), self.v(x)
            if spec.qk_norm == "full":
                q, k = self.q_norm(q), self.k_norm(k)
            # Heads from the local width: under tensor parallelism each rank holds heads / tp of them.
            q = q.view(b, s, -1, self.head_dim).transpose(1, 2)
            k = k.view(b, s, -1, self.head_dim).transpose(1, 2)
            v = v.view(b, s, -1, self.head_dim).transpose(1, 2)
            if spec.qk_norm == "head":
                q, k = self.q_norm(q), self.k_norm(k)
            if spec.position == "rope":
                q, k = _rope(torch, q, k)
            gqa = q.shape[1] != k.shape[1]
            if gqa and q.dtype == torch.float32:  # on CUDA, enable_gqa has only the flash (no fp32) and math kernels:
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # expand K/V for the memory-efficient one
                v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
                gqa = False
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            return self.o(y.transpose(1, 2).reshape(b, s, -1))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, w, bias = spec.hidden_size, spec.intermediate_size, spec.mlp_bias
            if spec.gated_mlp:
                self.gate = nn.Linear(h, w, bias=bias, **kw)
            self.up = nn.Linear(h, w, bias=bias, **kw)
            self.down = nn.Linear(w, h, bias=bias, **kw)

        def forward(self, x):
            if spec.gated_mlp:
                return self.down(act(self.gate(x)) * self.up(x))
            return self.down(act(self.up(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            n = spec.norms_per_layer
            self.attn_norm = norm(spec.hidden_size)
            if n >= 2:
                self.mlp_norm = norm(spec.hidden_size)
            if n >= 4:  # Gemma 2/3 sandwich: a norm after each sub-block too
                self.attn_post_norm, self.mlp_post_norm = norm(spec.hidden_size), norm(spec.hidden_size)
            self.attn, self.mlp = Attention(), MLP()
            self.recompute = "none"

        def _forward(self, x):
            n = spec.norms_per_layer
            if n == 1:  # parallel block (GPT-J, Falcon, NeoX with one norm): both read the same normed input
                y = self.attn_norm(x)
                return x + self.attn(y) + self.mlp(y)
            a = self.attn(self.attn_norm(x))
            x = x + (self.attn_post_norm(a) if n >= 4 else a)
            m = self.mlp(self.mlp_norm(x))
            return x + (self.mlp_post_norm(m) if n >= 4 else m)

        def forward(self, x):
            if self.recompute != "none" and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint

                if self.recompute == "op":
                    return checkpoint(self._forward, x, use_reentrant=False, context_fn=op_sac_context(torch))
                return checkpoint(self._forward, x, use_reentrant=False)
            return self._forward(x)

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h = spec.hidden_size
            self.embed = nn.Embedding(spec.vocab_size, h, **kw)
            if spec.learned_positions:
                self.pos = nn.Embedding(spec.learned_positions, h, **kw)
            if spec.embedding_norm:
                self.embed_norm = norm(h)
            self.blocks = nn.ModuleList(Block() for _ in range(spec.num_layers))
            if spec.final_norm:
                self.norm = norm(h)
            self.lm_head = nn.Linear(h, spec.vocab_size, bias=spec.lm_head_bias, **kw)
            if spec.tie_word_embeddings:
                self.lm_head.weight = self.embed.weight

        def forward(self, tokens):
            x = self.embed(tokens)
            if spec.learned_positions:
                x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
            if spec.embedding_norm:
                x = self.embed_norm(x)
            for block in self.blocks:
                x = block(x)
            if spec.final_norm:
                x = self.norm(x)
            return self.lm_head(x)

    return Decoder()


RECOMPUTE_MODES = "none, full, op or layer:N"
"""The activation checkpointing bench train runs, in torchtitan's terms (`activation_checkpoint.mode` full, or
selective with `selective_ac_option` op or N)."""


def set_recompute(model, mode: str) -> None:
    """Activation checkpointing per block, as torchtitan applies it (torchtitan/distributed/activation_checkpoint.py):
    `full` checkpoints every block (its input saved, its inside recomputed); `op` checkpoints every block under the
    per-op policy (op_sac_context); `layer:N` checkpoints every N-th block in full, counting from 1 (blocks N, 2N, ...),
    and leaves the others alone; `none` nothing."""
    plan = recompute_plan(mode)
    for i, block in enumerate(model.blocks):
        if plan.kind == "layer":
            block.recompute = "full" if (i + 1) % plan.n == 0 else "none"
        else:
            block.recompute = plan.kind


def op_sac_context(torch):
    """torchtitan's per-op selective checkpointing (`selective_ac_option = "op"`) as the `context_fn` of
    torch.utils.checkpoint: a fresh mm count for each block's forward and recompute (op_sac_policy)."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return lambda: create_selective_checkpoint_contexts(op_sac_policy(torch))


def op_sac_policy(torch):
    """torchtitan's per-op policy (models/llama3/infra/parallelize.py `_op_sac_save_list`,
    distributed/activation_checkpoint.py `_apply_op_sac`): the outputs of matmuls (aten.mm), the SDPA kernels,
    reduce-scatter and max are saved, except every second mm counted from the block's start (separately in the
    forward and in the recompute); everything else is recomputed. One policy per checkpointed call."""
    from torch.utils.checkpoint import CheckpointPolicy

    ops = torch.ops.aten
    save = {ops.mm.default, ops.max.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"):
        if hasattr(ops, name):
            save.add(getattr(ops, name).default)
    c10d = getattr(torch.ops, "_c10d_functional", None)
    if c10d is not None and hasattr(c10d, "reduce_scatter_tensor"):
        save.add(c10d.reduce_scatter_tensor.default)
    mms = {False: 0, True: 0}

    def policy(ctx, func, *args, **kwargs):
        if func == ops.mm.default:
            mms[ctx.is_recompute] += 1
        keep = func in save and not (func == ops.mm.default and mms[ctx.is_recompute] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _rope(torch, q, k):
    """Rotary position embedding (rotate-half form) over the sequence dim of (batch, heads, seq, head_dim)."""
    s, d = q.shape[-2], q.shape[-1]
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, device=q.device, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(s, device=q.device, dtype=torch.float32), inv)
    cos = torch.cat((ang.cos(), ang.cos()), dim=-1).to(q.dtype)
    sin = torch.cat((ang.sin(), ang.sin()), dim=-1).to(q.dtype)

    def rot(x):
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((-b, a), dim=-1)

    return q * cos + rot(q) * sin, k * cos + rot(k) * sin
