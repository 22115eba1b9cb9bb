"""The model spec: a typed, frozen description of a decoder-only transformer's architecture.

It is family-independent: `hf_config.py` translates each Hugging Face `model_type` into these fields,
and everything downstream (parameter counts, KV cache, FLOPs, memory) reads only this. A field that a
family does not have is None or False, never a made-up default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FULL = "full"
SLIDING = "sliding"
LINEAR = "linear"
"""A layer whose token mixer is a recurrence (Gated DeltaNet, Mamba-2): a fixed state per sequence, no KV cache."""
LINEAR_MIXER_NAMES = {"gated_deltanet": "Gated DeltaNet", "mamba2": "Mamba-2"}
"""`LinearMixerSpec.kind` -> the mixer's name as its papers give it."""

NONE = "none"
"""A layer with no token mixer, only its feed-forward part (Nemotron-H's MLP and MoE layers)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MoESpec:
    """Mixture-of-experts feed-forward blocks."""

    num_experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Routed experts each token goes through."""
    expert_intermediate_size: int
    """FFN width of one routed expert."""
    shared_intermediate_size: int = 0
    """Total FFN width of the always-on shared expert(s) (0 = none); DeepSeek: n_shared * moe width."""
    shared_expert_gate: bool = False
    """Qwen2-MoE's sigmoid gate (hidden -> 1) on the shared expert."""
    router_bias: bool = False
    """The router (hidden -> experts) has a bias (gpt-oss)."""
    expert_bias: bool = False
    """Every routed expert's projections have biases (gpt-oss: gate_up_proj_bias, down_proj_bias)."""
    clamped_glu: bool = False
    """The experts' gated activation clamps its two halves first (gpt-oss: swiglu_limit, the gate to at most the
    limit and the linear half to within it)."""
    moe_layers: tuple[bool, ...] = ()
    """Per layer: True where the FFN is MoE, False where it is a dense FFN (leading dense layers)."""
    router_scales: bool = False
    """Gemma 4's router: a learned scale per hidden channel and one per expert beside its projection."""
    beside_dense: bool = False
    """Gemma 4: the MoE runs beside the layer's dense MLP (both, each with its own norms), not instead of it."""
    latent_size: int | None = None
    """Latent MoE (Nemotron 3 Super/Ultra's moe_latent_size): the routed experts read and write this width, between a
    projection down from the hidden size and one back up; None: they work in the hidden size."""

    def __post_init__(self) -> None:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} > num_experts {self.num_experts}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearMixerSpec:
    """The recurrent token mixer of hybrid models' `LINEAR` layers.

    gated_deltanet (Qwen3-Next): `num_groups` key heads of `state_dim`, `num_heads` value heads of `head_dim`; the
    state per head is state_dim x head_dim. mamba2 (Granite 4, Nemotron-H): `num_heads` heads of `head_dim` channels,
    `num_groups` groups of B/C of `state_dim`; the SSM state per head is head_dim x state_dim. Both run a causal
    depthwise convolution of `conv_kernel` taps over `conv_dim` channels, whose last conv_kernel - 1 inputs are kept."""

    kind: str
    num_heads: int
    head_dim: int
    state_dim: int
    num_groups: int
    conv_kernel: int
    conv_bias: bool = False
    proj_bias: bool = False
    out_bias: bool | None = None
    """Bias of the output projection where it differs from the input's (Falcon-H1: projectors_bias); None: proj_bias."""
    gated_norm: bool = True
    """The gated RMSNorm over the inner channels before out_proj (Falcon-H1 only with mamba_rms_norm)."""
    ssm_state_bytes: float | None = None
    """Bytes per element of the recurrent state where the model fixes it (Nemotron-H's config: mamba_ssm_cache_dtype
    float32, which vLLM follows); None: the model's 16-bit dtype. The convolution window keeps the model dtype."""

    @property
    def ssm_elements(self) -> int:
        return self.num_heads * self.head_dim * self.state_dim

    @property
    def conv_elements(self) -> int:
        return self.conv_dim * (self.conv_kernel - 1)

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.inner + 2 * self.num_groups * self.state_dim

    @property
    def state_elements(self) -> int:
        """Elements one sequence keeps in one layer: the recurrent state and the convolution's window."""
        return self.ssm_elements + self.conv_elements

    @property
    def in_proj_width(self) -> int:
        """Output width of the layer's input projections (params.py `_linear_mixer`): the output gate z and the
        convolution's channels (q, k, v or x, B, C), plus per head Mamba-2's dt or Gated DeltaNet's beta and decay."""
        return self.inner + self.conv_dim + (self.num_heads if self.kind == "mamba2" else 2 * self.num_heads)

    @property
    def name(self) -> str:
        """The mixer's name as its papers give it."""
        return LINEAR_MIXER_NAMES.get(self.kind, self.kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed K/V (and Q)."""

    q_lora_rank: int | None
    """Rank of the Q down-projection; None = plain q_proj (DeepSeek-V2-Lite)."""
    kv_lora_rank: int
    """Width of the compressed KV latent (what MLA-aware engines cache)."""
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    """The decoupled RoPE key, shared by all heads, cached beside the latent."""
    v_head_dim: int
    index_n_heads: int = 0
    """DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention): query heads of its scorer; 0 = no indexer."""
    index_head_dim: int = 0
    """Width of the indexer's keys, one per token and layer, cached beside the latent."""
    indexer_layers: tuple[bool, ...] = ()
    """Per layer: whether it runs its own indexer (GLM-5.2's indexer_types 'full'), or reuses the previous one's top-k
    ('shared': no indexer weights, no indexer keys cached); () = every layer has one."""

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def has_indexer(self, layer: int) -> bool:
        return bool(self.index_head_dim) and (not self.indexer_layers or self.indexer_layers[layer])

    @property
    def indexer_share(self) -> float:
        """Share of the layers with their own indexer (1 when every layer has one, 0 without an indexer)."""
        if not self.index_head_dim:
            return 0.0
        return sum(self.indexer_layers) / len(self.indexer_layers) if self.indexer_layers else 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Architecture of a decoder-only transformer, as Hugging Face transformers instantiates it."""

    family: str
    """The config's `model_type` (llama, qwen2_moe, gpt2 ...)."""
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    """Key/value heads: = num_heads for MHA, 1 for MQA, in between for GQA."""
    head_dim: int
    intermediate_size: int
    """Width of the dense FFN (0 if every layer is MoE)."""
    gated_mlp: bool
    """SwiGLU/GeGLU style: gate and up projections (3 matrices) instead of 2."""
    activation: str
    activation_params: int = 0
    """Learned scalars of the MLP's activation per layer (Apertus' xIELU: alpha_p, alpha_n)."""
    norm: str
    """'rmsnorm' or 'layernorm'."""
    norm_bias: bool
    """LayerNorm with a bias (shift) vector."""
    norms_per_layer: int
    """Normalization layers in each block (2 for pre-norm, 4 for Gemma 2/3's sandwich, 1 for parallel blocks)."""
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    attention_sinks: bool = False
    """A learned sink logit per query head in every attention layer (gpt-oss `self_attn.sinks`)."""
    qk_norm: str = "none"
    """'none', 'head' (one RMSNorm of head_dim shared by heads: Qwen3, Gemma 3) or 'full' (over all heads: OLMo 2)."""
    fused_qkv: bool = False
    """One QKV matrix in the checkpoint (GPT-2, NeoX, BLOOM, Falcon, Phi-3); same parameters either way."""
    tie_word_embeddings: bool
    lm_head_bias: bool = False
    position: str
    """'rope', 'learned' or 'alibi'."""
    learned_positions: int = 0
    """Rows of the learned position-embedding table (GPT-2: n_positions, OPT: max_positions + 2)."""
    embedding_norm: bool = False
    """LayerNorm right after the token embedding (BLOOM)."""
    final_norm: bool = True
    embed_proj_dim: int | None = None
    """OPT-350m: embeddings live in a smaller dim with project_in/project_out (no bias) around the stack."""
    max_position_embeddings: int | None = None
    """The model's advertised maximum context (None if the config does not say)."""
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    """Per layer: 'full' or 'sliding' attention."""
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    linear: LinearMixerSpec | None = None
    """The recurrent mixer of the `LINEAR` layers (hybrid models), None when every layer attends."""
    layer_kv: tuple[tuple[int, int], ...] = ()
    """Per layer (KV heads, head size) where they differ between layers (Gemma 4's full-attention layers: fewer KV
    heads of twice the size); () = every layer has num_kv_heads of head_dim."""
    kv_shared_layers: tuple[bool, ...] = ()
    """Per layer: it reuses an earlier layer's keys and values (Gemma 4's num_kv_shared_layers): no k/v projections,
    nothing cached; () = none does."""
    no_v_proj_layers: tuple[bool, ...] = ()
    """Per layer: its values are its keys (Gemma 4's attention_k_eq_v on full-attention layers): no v projection;
    both are still cached."""
    ffn_widths: tuple[int, ...] = ()
    """Per layer dense MLP width where it varies (Gemma 4's double-wide MLP in KV-sharing layers); () = intermediate_size."""
    per_layer_input: tuple[int, int] | None = None
    """Gemma's per-layer input embeddings (PLE): (vocabulary, width per layer) of the packed table; None = none."""
    parallel_mixer: bool = False
    """Every attending layer also runs the `linear` mixer beside its attention, on the same input (Falcon-H1): such a
    layer caches K/V per token and keeps the mixer's state per sequence."""
    ffn_layers: tuple[bool, ...] = ()
    """Per layer: whether it has a feed-forward part (Nemotron-H's mixer-only layers have none); () = every layer."""
    attn_output_gate: bool = False
    """q_proj also yields a sigmoid gate on the attention output (Qwen3-Next): twice the query width."""
    torch_dtype: str | None = None
    """Checkpoint dtype as the config states it (bfloat16, float16, float32) or None."""
    checkpoint_quant: str | None = None
    """Quantization the checkpoint ships in (e.g. 'fp8' for DeepSeek-V3), from quantization_config."""
    hidden_dropout: float = 0.0
    """Dropout on the residual branches (GPT-2's resid_pdrop, OPT's dropout): a 1-byte mask per element in training."""
    attention_dropout: float = 0.0
    """Dropout on the attention probabilities (flash kernels regenerate it from the RNG state)."""
    hf_expands_kv_cache: bool = False
    """transformers caches K/V broadcast to all query heads for this architecture (Falcon's new decoder)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What was assumed or left out while parsing (e.g. 'vision tower not counted')."""
    wrapper: str | None = None
    """The vision-language config whose language model this is (its model_type: llama4, qwen3_5 ...); None for a
    text-only checkpoint. Engines treat such checkpoints as multimodal (SGLang graphs no multimodal prefill)."""

    def __post_init__(self) -> None:
        positive = {
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "vocab_size": self.vocab_size,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
        }
        for key, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_heads} is not a multiple of num_key_value_heads {self.num_kv_heads}"
            )
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers")
        if self.moe is not None and len(self.moe.moe_layers) != self.num_layers:
            raise ValueError("moe.moe_layers must have one entry per layer")
        if self.ffn_layers and len(self.ffn_layers) != self.num_layers:
            raise ValueError("ffn_layers must have one entry per layer")

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and any(self.moe.moe_layers)

    @property
    def attention_kind(self) -> str:
        """'mla', 'mha', 'mqa' or 'gqa'."""
        if self.mla is not None:
            return "mla"
        if self.num_kv_heads == self.num_heads:
            return "mha"
        if self.num_kv_heads == 1:
            return "mqa"
        return "gqa"

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == SLIDING)

    @property
    def num_attention_layers(self) -> int:
        """Layers that attend (and cache K/V): neither recurrent nor mixer-less."""
        return sum(1 for t in self.layer_types if t not in (LINEAR, NONE))

    def kv_dims(self, layer: int) -> tuple[int, int]:
        """(KV heads, head size) of one layer's attention."""
        return self.layer_kv[layer] if self.layer_kv else (self.num_kv_heads, self.head_dim)

    def caches_kv(self, layer: int) -> bool:
        """Whether the layer caches keys and values of its own (attends, and does not reuse another layer's)."""
        return self.layer_types[layer] not in (LINEAR, NONE) and not (self.kv_shared_layers
                                                                        and self.kv_shared_layers[layer])

    @property
    def varying_attention(self) -> bool:
        """Attention whose shape varies by layer (Gemma 4): the kernel models assume one shape and are not used."""
        return bool(self.layer_kv or self.kv_shared_layers or self.per_layer_input or self.ffn_widths
                    or (self.moe is not None and self.moe.beside_dense))

    @property
    def hybrid(self) -> bool:
        """Some layers do not attend (recurrent or feed-forward only), or run a recurrent mixer beside attention."""
        return self.num_attention_layers < self.num_layers or self.parallel_hybrid

    @property
    def parallel_hybrid(self) -> bool:
        """Attention and a recurrent mixer side by side in the same layers (Falcon-H1), which no speed model covers."""
        return self.parallel_mixer and self.linear is not None

    def has_ffn(self, layer: int) -> bool:
        """Whether layer `layer` has a feed-forward part (Nemotron-H's mixer layers have none)."""
        return not self.ffn_layers or bool(self.ffn_layers[layer])

    def has_linear_mixer(self, layer: int) -> bool:
        """Whether layer `layer` keeps a recurrent state: a LINEAR layer, or any attending one of a parallel hybrid."""
        t = self.layer_types[layer]
        return t == LINEAR or (self.parallel_hybrid and t != NONE)

    @property
    def num_linear_layers(self) -> int:
        """Layers with a recurrent state (hybrid models: instead of a KV cache, or beside it in a parallel one)."""
        return sum(1 for i in range(self.num_layers) if self.has_linear_mixer(i))
