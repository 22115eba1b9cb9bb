"""Parameter inventory and counts.

`tensor_inventory` lists every parameter tensor that transformers instantiates for a `ModelSpec`,
with a role named like llama.cpp's GGUF tensors (token_embd, attn_q, ffn_down, ffn_up_exps ...), so
that quantization mixes can pick a type per tensor. Counts are sums over it, so they are exact:
`tests/model/test_params_oracle.py` compares them with `sum(p.numel() for p in model.parameters())`
of the real transformers model built on the meta device (tied weights counted once, buffers such as
rotary frequencies or DeepSeek-V3's e_score_correction_bias not counted, as in transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .spec import LINEAR, NONE, ModelSpec


@dataclass(frozen=True, slots=True)
class Tensor:
    """One parameter tensor (or a bias / norm vector)."""

    role: str
    """GGUF-style name: token_embd, pos_embd, output, attn_q, attn_kv_b, ffn_down_exps, norm, bias ..."""
    layer: int | None
    """Block index, or None for tensors outside the blocks."""
    shape: tuple[int, ...]
    experts: int = 1
    """Routed experts stacked in this tensor (their count multiplies numel; only top_k are active)."""

    @property
    def numel(self) -> int:
        n = self.experts
        for d in self.shape:
            n *= d
        return n

    @property
    def is_matrix(self) -> bool:
        """2-D weights (per expert): what weight quantization applies to."""
        return len(self.shape) == 2 and self.role not in ("bias", "norm")


@dataclass(frozen=True, slots=True)
class ParamCounts:
    total: int
    """All parameters, tied embeddings counted once (= transformers' model.parameters())."""
    active: int
    """Parameters one token goes through: total minus the routed experts it skips (MoE)."""
    embedding: int
    """Token (and learned position) embeddings."""
    lm_head: int
    """Output projection; 0 when tied to the token embedding."""
    routed_experts: int
    """Parameters in routed experts (0 for dense models)."""

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.lm_head


def _linear(role: str, layer: int | None, n_in: int, n_out: int, bias: bool) -> list[Tensor]:
    out = [Tensor(role, layer, (n_out, n_in))]
    if bias:
        out.append(Tensor("bias", layer, (n_out,)))
    return out


def _norm(spec: ModelSpec, layer: int | None, dim: int) -> list[Tensor]:
    out = [Tensor("norm", layer, (dim,))]
    if spec.norm_bias:
        out.append(Tensor("bias", layer, (dim,)))
    return out


def _linear_mixer(spec: ModelSpec, i: int) -> list[Tensor]:
    """A hybrid model's recurrent layer (modeling_qwen3_next.py Qwen3NextGatedDeltaNet; modeling_granitemoehybrid.py
    and modeling_nemotron_h.py Mamba2 mixers)."""
    lm = spec.linear
    assert lm is not None
    h = spec.hidden_size
    conv = [Tensor("ssm_conv1d", i, (lm.conv_dim, 1, lm.conv_kernel))] + (
        [Tensor("bias", i, (lm.conv_dim,))] if lm.conv_bias else [])
    heads = [Tensor("ssm_dt", i, (lm.num_heads,)), Tensor("ssm_a", i, (lm.num_heads,))]
    if lm.kind == "gated_deltanet":
        keys = 2 * lm.num_groups * lm.state_dim  # q and k
        return (_linear("ssm_in", i, h, keys + 2 * lm.inner, False)  # in_proj_qkvz: q, k, v and the output gate z
                + _linear("ssm_ba", i, h, 2 * lm.num_heads, False)  # in_proj_ba: beta and the decay input per head
                + conv + heads + [Tensor("norm", i, (lm.head_dim,))]
                + _linear("ssm_out", i, lm.inner, h, False))
    # mamba2: in_proj gives z and x (inner each), B and C (groups x state each) and dt (one per head)
    out_bias = lm.proj_bias if lm.out_bias is None else lm.out_bias
    return (_linear("ssm_in", i, h, 2 * lm.inner + 2 * lm.num_groups * lm.state_dim + lm.num_heads, lm.proj_bias)
            + conv + heads + [Tensor("ssm_d", i, (lm.num_heads,))]
            + ([Tensor("norm", i, (lm.inner,))] if lm.gated_norm else [])
            + _linear("ssm_out", i, lm.inner, h, out_bias))


def _attention(spec: ModelSpec, i: int) -> list[Tensor]:
    if spec.layer_types[i] == LINEAR:
        return _linear_mixer(spec, i)
    h = spec.hidden_size
    t: list[Tensor] = []
    mla = spec.mla
    if mla is not None:
        # DeepSeek-V2/V3 (modeling_deepseek_v3.py): q via a low-rank pair, K/V via a shared latent.
        nh = spec.num_heads
        bias = spec.qkv_bias  # attention_bias applies to q_a_proj, kv_a_proj_with_mqa and o_proj
        if mla.q_lora_rank is None:
            t += _linear("attn_q", i, h, nh * mla.qk_head_dim, False)
        else:
            t += _linear("attn_q_a", i, h, mla.q_lora_rank, bias)
            t.append(Tensor("norm", i, (mla.q_lora_rank,)))
            t += _linear("attn_q_b", i, mla.q_lora_rank, nh * mla.qk_head_dim, False)
        t += _linear("attn_kv_a_mqa", i, h, mla.kv_lora_rank + mla.qk_rope_head_dim, bias)
        t.append(Tensor("norm", i, (mla.kv_lora_rank,)))
        t += _linear("attn_kv_b", i, mla.kv_lora_rank, nh * (mla.qk_nope_head_dim + mla.v_head_dim), False)
        t += _linear("attn_output", i, nh * mla.v_head_dim, h, spec.o_bias)
        if mla.has_indexer(i):  # DeepSeek-V3.2 (modeling_deepseek_v32.py DeepseekV32Indexer), GLM-5
            t += _linear("indexer_q", i, mla.q_lora_rank or h, mla.index_n_heads * mla.index_head_dim, False)
            t += _linear("indexer_k", i, h, mla.index_head_dim, False)
            t += [Tensor("norm", i, (mla.index_head_dim,)), Tensor("bias", i, (mla.index_head_dim,))]  # LayerNorm
            t += _linear("indexer_weights", i, h, mla.index_n_heads, False)
        return t
    kv_heads, hd = spec.kv_dims(i)
    q_out = spec.num_heads * hd
    kv_out = kv_heads * hd
    embed = spec.hidden_size
    own_kv = not (spec.kv_shared_layers and spec.kv_shared_layers[i])  # Gemma 4: shared layers reuse K/V
    t += _linear("attn_q", i, embed, q_out * (2 if spec.attn_output_gate else 1), spec.qkv_bias)
    if own_kv:
        t += _linear("attn_k", i, embed, kv_out, spec.qkv_bias)
        if not (spec.no_v_proj_layers and spec.no_v_proj_layers[i]):  # Gemma 4's attention_k_eq_v
            t += _linear("attn_v", i, embed, kv_out, spec.qkv_bias)
    t += _linear("attn_output", i, q_out, embed, spec.o_bias)
    if spec.attention_sinks:
        t.append(Tensor("attn_sinks", i, (spec.num_heads,)))
    if spec.qk_norm == "head":
        t += [Tensor("norm", i, (hd,))] + ([Tensor("norm", i, (hd,))] if own_kv else [])
    elif spec.qk_norm == "full":
        t += [Tensor("norm", i, (q_out,)), Tensor("norm", i, (kv_out,))]
    return t


def _dense_mlp(spec: ModelSpec, i: int, width: int, suffix: str = "", bias: bool | None = None) -> list[Tensor]:
    h = spec.hidden_size
    b = spec.mlp_bias if bias is None else bias
    t: list[Tensor] = []
    if spec.gated_mlp:
        t += _linear("ffn_gate" + suffix, i, h, width, b)
    t += _linear("ffn_up" + suffix, i, h, width, b)
    t += _linear("ffn_down" + suffix, i, width, h, b)
    return t


def _moe_mlp(spec: ModelSpec, i: int) -> list[Tensor]:
    moe = spec.moe
    assert moe is not None
    h = spec.hidden_size
    e, w = moe.num_experts, moe.expert_intermediate_size
    t = [Tensor("ffn_gate_inp", i, (e, h))]  # the router
    if moe.router_bias:
        t.append(Tensor("bias", i, (e,)))
    if moe.router_scales:  # Gemma 4: a scale per hidden channel and one per expert
        t += [Tensor("router_scale", i, (h,)), Tensor("router_scale", i, (e,))]
    if moe.beside_dense:  # Gemma 4: the MoE's own pre-norm and the two post-norms that mix it with the MLP
        t += [Tensor("norm", i, (h,))] * 3
    # transformers v5 stores routed experts fused as 3-D tensors (E, 2w, h) and (E, h, w).
    d = moe.latent_size or h  # latent MoE: the experts work in the latent width
    if moe.latent_size:
        t += _linear("ffn_latent_in", i, h, d, spec.mlp_bias) + _linear("ffn_latent_out", i, d, h, spec.mlp_bias)
    if spec.gated_mlp:
        t.append(Tensor("ffn_gate_exps", i, (w, d), experts=e))
    t.append(Tensor("ffn_up_exps", i, (w, d), experts=e))
    t.append(Tensor("ffn_down_exps", i, (d, w), experts=e))
    if moe.expert_bias:  # gpt-oss: gate_up_proj_bias (E, 2w) and down_proj_bias (E, h)
        t.append(Tensor("bias", i, ((2 if spec.gated_mlp else 1) * w,), experts=e))
        t.append(Tensor("bias", i, (h,), experts=e))
    if moe.shared_intermediate_size:
        t += _dense_mlp(spec, i, moe.shared_intermediate_size, suffix="_shexp")
    if moe.shared_expert_gate:
        t.append(Tensor("ffn_gate_inp_shexp", i, (1, h)))
    return t


def _block(spec: ModelSpec, i: int) -> list[Tensor]:
    t: list[Tensor] = []
    for _ in range(spec.norms_per_layer):
        t += _norm(spec, i, spec.hidden_size)
    if spec.layer_types[i] != NONE:
        t += _attention(spec, i)
    if spec.parallel_mixer and spec.layer_types[i] not in (LINEAR, NONE):
        t += _linear_mixer(spec, i)  # Falcon-H1: the Mamba-2 mixer beside attention
    width = spec.ffn_widths[i] if spec.ffn_widths else spec.intermediate_size
    moe_here = spec.moe is not None and spec.moe.moe_layers[i]
    if not spec.has_ffn(i):
        pass
    elif moe_here and not spec.moe.beside_dense:
        t += _moe_mlp(spec, i)
    else:
        t += _dense_mlp(spec, i, width) + (_moe_mlp(spec, i) if moe_here else [])
    if spec.per_layer_input:  # Gemma's PLE: a gate down to the per-layer width, a projection back, a norm
        dim = spec.per_layer_input[1]
        t += _linear("ple_gate", i, spec.hidden_size, dim, False) + _linear("ple_proj", i, dim, spec.hidden_size,
                                                                            False)
        t += _norm(spec, i, spec.hidden_size)
    t += [Tensor("act_param", i, (1,))] * spec.activation_params
    return t


@lru_cache(maxsize=256)
def tensor_inventory(spec: ModelSpec) -> tuple[Tensor, ...]:
    """Every parameter tensor transformers builds for this spec (tied lm_head listed once, as token_embd)."""
    h = spec.hidden_size
    emb_dim = spec.embed_proj_dim or h
    t: list[Tensor] = [Tensor("token_embd", None, (spec.vocab_size, emb_dim))]
    if spec.learned_positions:
        t.append(Tensor("pos_embd", None, (spec.learned_positions, h)))
    if spec.embedding_norm:
        t += _norm(spec, None, h)
    if spec.embed_proj_dim:  # OPT-350m: project_in / project_out, no bias
        t.append(Tensor("proj_in", None, (h, emb_dim)))
        t.append(Tensor("proj_out", None, (emb_dim, h)))
    if spec.per_layer_input:  # Gemma's per-layer embeddings, all layers packed in one table, and their projection
        vocab, dim = spec.per_layer_input
        packed = spec.num_layers * dim
        t += [Tensor("ple_embd", None, (vocab, packed)), Tensor("ple_model_proj", None, (packed, h))]
        t += _norm(spec, None, dim)
    for i in range(spec.num_layers):
        t += _block(spec, i)
    if spec.final_norm:
        t += _norm(spec, None, h)
    if not spec.tie_word_embeddings:
        t.append(Tensor("output", None, (spec.vocab_size, emb_dim)))
        if spec.lm_head_bias:
            t.append(Tensor("bias", None, (spec.vocab_size,)))
    return tuple(t)


@lru_cache(maxsize=256)
def param_counts(spec: ModelSpec) -> ParamCounts:
    inv = tensor_inventory(spec)
    total = sum(x.numel for x in inv)
    embedding = sum(x.numel for x in inv if x.role in ("token_embd", "pos_embd", "ple_embd"))
    lm_head = sum(x.numel for x in inv if x.role == "output")
    routed = sum(x.numel for x in inv if x.experts > 1 or x.role.endswith("_exps"))
    active = total
    if spec.moe is not None and routed:
        skipped_share = 1 - spec.moe.top_k / spec.moe.num_experts
        active = total - round(routed * skipped_share)
    return ParamCounts(total=total, active=active, embedding=embedding, lm_head=lm_head, routed_experts=routed)
