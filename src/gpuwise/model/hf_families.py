"""One parser per config.json `model_type`: the family's architecture as a `ModelSpec` (see hf_config.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..errors import ConfigError
from .hf_fields import DIMENSION_BOUNDS, Cfg, common_llama_like, dtype, head_dim, layer_types, sliding
from .spec import FULL, LINEAR, NONE, SLIDING, LinearMixerSpec, MLASpec, ModelSpec, MoESpec


def _llama(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg)
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _mistral(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False)
    window = sliding(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=layer_types(cfg, f["num_layers"], window))


def _mixtral(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False)
    window = sliding(cfg)
    n = f["num_layers"]
    moe = MoESpec(
        num_experts=cfg.int("num_local_experts"),
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=f["intermediate_size"],
        moe_layers=(True,) * n,
    )
    f["intermediate_size"] = 0
    return ModelSpec(**f, sliding_window=window, layer_types=layer_types(cfg, n, window), moe=moe)


def _qwen_window(cfg: Cfg) -> int | None:
    return sliding(cfg) if cfg.bool("use_sliding_window") else None


def _qwenlayer_types(cfg: Cfg, n: int, window: int | None, moe_rule: bool = False) -> tuple[str, ...]:
    if isinstance(cfg.raw.get("layer_types"), list):
        return layer_types(cfg, n, window)
    mwl = cfg.int("max_window_layers", required=False, minimum=0) or 0
    if moe_rule:  # configuration_qwen2_moe.py: alternate layers below max_window_layers
        return tuple(
            SLIDING if ((i + 1) % 2 and i < mwl and cfg.bool("use_sliding_window")) else FULL for i in range(n)
        )
    return tuple(SLIDING if (window is not None and i >= mwl) else FULL for i in range(n))


def _qwen2(cfg: Cfg) -> ModelSpec:
    # modeling_qwen2.py: q/k/v carry a bias, o_proj does not (hard-coded, not a config key).
    f = common_llama_like(cfg, qkv_bias=True, o_bias=False, mlp_bias=False)
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_qwenlayer_types(cfg, f["num_layers"], window))


def _qwen_moe_layers(cfg: Cfg, n: int, num_experts: int) -> tuple[bool, ...]:
    only_dense = set(cfg.get("mlp_only_layers") or [])
    step = cfg.int("decoder_sparse_step")
    return tuple((i not in only_dense) and num_experts > 0 and (i + 1) % step == 0 for i in range(n))


def _qwen2_moe(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, qkv_bias=True, o_bias=False, mlp_bias=False)
    n = f["num_layers"]
    experts = cfg.int("num_experts", minimum=0)
    shared = cfg.int("shared_expert_intermediate_size", minimum=0)
    moe = MoESpec(
        num_experts=experts,
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=cfg.int("moe_intermediate_size"),
        shared_intermediate_size=shared,
        shared_expert_gate=True,
        moe_layers=_qwen_moe_layers(cfg, n, experts),
    )
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_qwenlayer_types(cfg, n, window, moe_rule=True),
                     moe=moe)


def _qwen3(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, mlp_bias=False, qk_norm="head")
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_qwenlayer_types(cfg, f["num_layers"], window))


def _qwen3_moe(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, mlp_bias=False, qk_norm="head")
    n = f["num_layers"]
    experts = cfg.int("num_experts", minimum=0)
    moe = MoESpec(
        num_experts=experts,
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=cfg.int("moe_intermediate_size"),
        moe_layers=_qwen_moe_layers(cfg, n, experts),
    )
    window = _qwen_window(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=layer_types(cfg, n, window), moe=moe)


def _gpt_oss(cfg: Cfg) -> ModelSpec:
    # modeling_gpt_oss.py: biases on q/k/v/o (attention_bias), the router and every expert; a sink logit per head;
    # every layer MoE; sliding and full attention layers alternate (layer_types).
    f = common_llama_like(cfg, mlp_bias=False, attention_sinks=True)
    n = f["num_layers"]
    moe = MoESpec(
        num_experts=cfg.int("num_local_experts"),
        top_k=cfg.int("num_experts_per_tok", "experts_per_token"),
        expert_intermediate_size=f["intermediate_size"],
        router_bias=True,
        expert_bias=True,
        clamped_glu=cfg.get("swiglu_limit") is not None,
        moe_layers=(True,) * n,
    )
    f["intermediate_size"] = 0
    window = sliding(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=layer_types(cfg, n, window), moe=moe)


def _pattern_types(cfg: Cfg, n: int, window: int | None, pattern: int | str | None) -> tuple[str, ...]:
    """Explicit layer_types, else a repeating pattern with its last layer full (OLMo 3: every 4th layer full;
    EXAONE 4: sliding_window_pattern, an int or a string of L (local) and G (global)), all full without a window."""
    if isinstance(cfg.raw.get("layer_types"), list) or window is None or not pattern:
        return layer_types(cfg, n, window) if window is not None or isinstance(cfg.raw.get("layer_types"), list) \
            else (FULL,) * n
    if isinstance(pattern, str):
        return tuple(SLIDING if pattern[i % len(pattern)].upper() == "L" else FULL for i in range(n))
    return tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n))


def _olmo3(cfg: Cfg) -> ModelSpec:
    # modeling_olmo3.py: OLMo 2's block (q/k norms over all heads, norms after attention and MLP) with sliding layers
    f = common_llama_like(cfg, mlp_bias=False, qk_norm="full")
    window = sliding(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=_pattern_types(cfg, f["num_layers"], window, 4))


def _exaone4(cfg: Cfg) -> ModelSpec:
    # modeling_exaone4.py: per-head q/k norms, norms after attention and MLP, no biases
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm="head")
    window = sliding(cfg)
    pattern = cfg.get("sliding_window_pattern")
    return ModelSpec(**f, sliding_window=window, layer_types=_pattern_types(cfg, f["num_layers"], window, pattern))


def _seed_oss(cfg: Cfg) -> ModelSpec:
    # modeling_seed_oss.py: q/k/v biases (attention_bias), o_proj's own switch (attention_out_bias)
    f = common_llama_like(cfg, o_bias=cfg.bool("attention_out_bias"))
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _glm4(cfg: Cfg) -> ModelSpec:
    # modeling_glm4.py (GLM-4-0414): q/k/v biases, no o_proj bias, fused gate_up_proj, norms before and after both
    # attention and MLP
    f = common_llama_like(cfg, o_bias=False, mlp_bias=False, norms_per_layer=4)
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _nemotron(cfg: Cfg) -> ModelSpec:
    # modeling_nemotron.py: LayerNorm1P (weight and bias), a plain up/down MLP with squared ReLU
    f = common_llama_like(cfg, gated_mlp=False, norm="layernorm", norm_bias=True,
                          mlp_bias=cfg.bool("mlp_bias"))
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _apertus(cfg: Cfg) -> ModelSpec:
    # modeling_apertus.py: per-head q/k norms, a plain up/down MLP whose xIELU activation learns two scalars
    f = common_llama_like(cfg, gated_mlp=False, qk_norm="head", mlp_bias=cfg.bool("mlp_bias"),
                          activation_params=2)
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _glm4_moe(cfg: Cfg) -> ModelSpec:
    # modeling_glm4_moe.py: q/k/v biases (attention_bias) but none on o_proj, optional per-head q/k norms; DeepSeek-V3's
    # MoE (first_k_dense_replace dense layers, shared experts, a sigmoid router whose correction bias is a buffer)
    f = common_llama_like(cfg, o_bias=False, mlp_bias=False, qk_norm="head" if cfg.bool("use_qk_norm") else "none")
    n = f["num_layers"]
    width = cfg.int("moe_intermediate_size")
    first_dense = cfg.int("first_k_dense_replace", required=False, minimum=0) or 0
    moe = MoESpec(
        num_experts=cfg.int("n_routed_experts"),
        top_k=cfg.int("num_experts_per_tok"),
        expert_intermediate_size=width,
        shared_intermediate_size=(cfg.int("n_shared_experts", required=False, minimum=0) or 0) * width,
        moe_layers=tuple(i >= first_dense for i in range(n)),
    )
    notes: tuple[str, ...] = ()
    if cfg.raw.get("num_nextn_predict_layers"):
        notes = ("multi-token-prediction layers are not counted (transformers does not instantiate them)",)
    return ModelSpec(**f, moe=moe, layer_types=(FULL,) * n, notes=notes)


def _llama4_text(cfg: Cfg) -> ModelSpec:
    # modeling_llama4.py: MoE layers (moe_layers, else every interleave_moe_layer_step-th) with one shared expert of the
    # experts' width and a router without bias; dense layers of intermediate_size_mlp; q/k L2 norms without weights;
    # chunked local attention (attention_chunk_size) on the RoPE layers, full attention on the NoPE ones
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False)
    n = f["num_layers"]
    step = cfg.int("interleave_moe_layer_step")
    explicit = cfg.raw.get("moe_layers")
    moe_at = set(explicit) if isinstance(explicit, list) else set(range(step - 1, n, step))
    width = f["intermediate_size"]
    moe = MoESpec(num_experts=cfg.int("num_local_experts"), top_k=cfg.int("num_experts_per_tok"),
                  expert_intermediate_size=width, shared_intermediate_size=width,
                  moe_layers=tuple(i in moe_at for i in range(n)))
    f["intermediate_size"] = cfg.int("intermediate_size_mlp")
    chunk = cfg.int("attention_chunk_size", required=False)
    if isinstance(cfg.raw.get("layer_types"), list):
        types = layer_types(cfg, n, chunk)
    else:
        interval = cfg.int("no_rope_layer_interval")
        rope = cfg.raw.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        types = tuple(SLIDING if (r and chunk is not None) else FULL for r in rope)
    notes = ("chunked local attention counted as a sliding window of attention_chunk_size: the cache holds at most one "
             "chunk per such layer",) if chunk is not None and SLIDING in types else ()
    return ModelSpec(**f, sliding_window=chunk, layer_types=types, moe=moe, notes=notes)


def _hybrid_types(cfg: Cfg, n: int, interval: int | None) -> tuple[str, ...]:
    """Per layer FULL or LINEAR: explicit layer_types ('linear_attention' / 'mamba' vs 'full_attention' /
    'attention'), else every interval-th layer full (Qwen3-Next's full_attention_interval), else all linear (Granite
    4's class default)."""
    explicit = cfg.raw.get("layer_types")
    if isinstance(explicit, list) and explicit:
        if len(explicit) != n:
            raise ConfigError(f"config.json: layer_types has {len(explicit)} entries for {n} layers")
        out = []
        for t in explicit:
            if str(t) in ("linear_attention", "mamba"):
                out.append(LINEAR)
            elif str(t) in ("full_attention", "attention"):
                out.append(FULL)
            else:
                raise ConfigError(f"config.json: unknown layer type '{t}'")
        return tuple(out)
    if interval:
        return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(n))
    return (LINEAR,) * n


def _gated_deltanet(cfg: Cfg, n: int, ssm_dtype_key: str | None = None) -> dict:
    """Qwen3-Next's and Qwen3.5's Gated DeltaNet mixer and which layers run it (every full_attention_interval-th
    layer attends instead, 4 by default), as ModelSpec fields. `ssm_dtype_key`: the config key that fixes the
    recurrent state's dtype (Qwen3.5's mamba_ssm_dtype, which vLLM's Qwen3_5ForConditionalGenerationConfig copies
    into mamba_ssm_cache_dtype)."""
    ssm_dtype = cfg.raw.get(ssm_dtype_key) if ssm_dtype_key else None
    linear = LinearMixerSpec(kind="gated_deltanet", num_heads=cfg.int("linear_num_value_heads"),
                             head_dim=cfg.int("linear_value_head_dim"), state_dim=cfg.int("linear_key_head_dim"),
                             num_groups=cfg.int("linear_num_key_heads"), conv_kernel=cfg.int("linear_conv_kernel_dim"),
                             ssm_state_bytes={"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}.get(str(ssm_dtype)))
    return dict(linear=linear, layer_types=_hybrid_types(cfg, n, cfg.int("full_attention_interval", required=False)
                                                         or 4))


def _qwen3_next(cfg: Cfg) -> ModelSpec:
    # modeling_qwen3_next.py: Gated DeltaNet layers and gated full-attention layers (q_proj doubled for the output
    # gate, per-head q/k norms, no biases) every full_attention_interval-th; Qwen2-MoE's sparse MLP
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm="head", attn_output_gate=True)
    n = f["num_layers"]
    experts = cfg.int("num_experts", minimum=0)
    moe = MoESpec(num_experts=experts, top_k=cfg.int("num_experts_per_tok"),
                  expert_intermediate_size=cfg.int("moe_intermediate_size"),
                  shared_intermediate_size=cfg.int("shared_expert_intermediate_size", minimum=0),
                  shared_expert_gate=True, moe_layers=_qwen_moe_layers(cfg, n, experts))
    return ModelSpec(**f, moe=moe, **_gated_deltanet(cfg, n))


def _qwen3_5(cfg: Cfg) -> ModelSpec:
    # modeling_qwen3_5.py / modeling_qwen3_5_moe.py (Qwen3.5): Qwen3-Next's layers (Gated DeltaNet, its input
    # projection split in four; gated attention with per-head q/k norms, biases per attention_bias) with a dense MLP
    # (qwen3_5_text) or, in every layer, Qwen3-Next's MoE with its gated shared expert (qwen3_5_moe_text)
    moe_model = cfg.family == "qwen3_5_moe_text"
    base = Cfg({**cfg.raw, "intermediate_size": 1}, cfg.family) if moe_model else cfg  # no dense MLP: no width
    f = common_llama_like(base, mlp_bias=False, qk_norm="head", attn_output_gate=True)
    n = f["num_layers"]
    moe = None
    if moe_model:
        moe = MoESpec(num_experts=cfg.int("num_experts"), top_k=cfg.int("num_experts_per_tok"),
                      expert_intermediate_size=cfg.int("moe_intermediate_size"),
                      shared_intermediate_size=cfg.int("shared_expert_intermediate_size", minimum=0),
                      shared_expert_gate=True, moe_layers=(True,) * n)
        f["intermediate_size"] = 0
    return ModelSpec(**f, moe=moe, **_gated_deltanet(cfg, n, "mamba_ssm_dtype"))


def _minimax_m2(cfg: Cfg) -> ModelSpec:
    # modeling_minimax_m2.py (MiniMax-M2, M2.5, M2.7): full attention with RMSNorms over the whole q and k widths, no
    # biases, a MoE of num_local_experts in every layer (its e_score_correction_bias is a buffer, not a parameter); the
    # multi-token-prediction modules are not built by transformers
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm="full")
    n = f["num_layers"]
    moe = MoESpec(num_experts=cfg.int("num_local_experts"), top_k=cfg.int("num_experts_per_tok"),
                  expert_intermediate_size=f["intermediate_size"], moe_layers=(True,) * n)
    f["intermediate_size"] = 0
    notes = (("multi-token-prediction modules are not counted (transformers does not instantiate them)",)
             if cfg.raw.get("use_mtp") else ())
    return ModelSpec(**f, layer_types=(FULL,) * n, moe=moe, notes=notes)


def _granitemoehybrid(cfg: Cfg) -> ModelSpec:
    # modeling_granitemoehybrid.py (Granite 4): per layer a Mamba-2 mixer or attention, then a MoE (when
    # num_local_experts > 0) beside an always-on shared MLP (fused gate/up input_linear, output_linear)
    f = common_llama_like(cfg, mlp_bias=False)
    n = f["num_layers"]
    hidden = f["hidden_size"]
    experts = cfg.int("num_local_experts", minimum=0)
    shared = cfg.int("shared_intermediate_size")
    moe = None
    if experts:
        moe = MoESpec(num_experts=experts, top_k=cfg.int("num_experts_per_tok"),
                      expert_intermediate_size=f["intermediate_size"], shared_intermediate_size=shared,
                      moe_layers=(True,) * n)
        f["intermediate_size"] = 0
    else:
        f["intermediate_size"] = shared
    heads = cfg.int("mamba_n_heads")
    d_head = cfg.get("mamba_d_head")
    inner = cfg.int("mamba_expand") * hidden
    if d_head in (None, "auto"):
        if inner % heads:
            raise ConfigError(f"config.json: mamba_n_heads {heads} does not divide mamba_expand x hidden_size {inner}")
        d_head = inner // heads
    linear = LinearMixerSpec(kind="mamba2", num_heads=heads, head_dim=int(d_head), state_dim=cfg.int("mamba_d_state"),
                             num_groups=cfg.int("mamba_n_groups"), conv_kernel=cfg.int("mamba_d_conv"),
                             conv_bias=cfg.bool("mamba_conv_bias", True), proj_bias=cfg.bool("mamba_proj_bias"))
    return ModelSpec(**f, layer_types=_hybrid_types(cfg, n, None), moe=moe, linear=linear)


def _falcon_h1(cfg: Cfg) -> ModelSpec:
    # modeling_falcon_h1.py: a parallel hybrid: every layer runs attention AND a Mamba-2 mixer on the same normed input
    # (their outputs summed), then a gated MLP. The mixer's width is mamba_d_ssm (else mamba_expand x hidden); its
    # in_proj bias is mamba_proj_bias, its out_proj bias projectors_bias; the gated RMSNorm only with mamba_rms_norm.
    # The multipliers (embedding, key, mlp, ssm, lm_head) are scalars: no parameters.
    f = common_llama_like(cfg)
    hidden = f["hidden_size"]
    inner = cfg.int("mamba_d_ssm", required=False) or cfg.int("mamba_expand") * hidden
    heads = cfg.int("mamba_n_heads")
    d_head = cfg.get("mamba_d_head")
    if d_head in (None, "auto"):
        d_head = inner // heads
    if heads * int(d_head) != inner:
        raise ConfigError(f"config.json: mamba_n_heads {heads} x mamba_d_head {d_head} is not the mixer's width "
                          f"{inner} (mamba_d_ssm)")
    linear = LinearMixerSpec(kind="mamba2", num_heads=heads, head_dim=int(d_head), state_dim=cfg.int("mamba_d_state"),
                             num_groups=cfg.int("mamba_n_groups"), conv_kernel=cfg.int("mamba_d_conv"),
                             conv_bias=cfg.bool("mamba_conv_bias", True), proj_bias=cfg.bool("mamba_proj_bias"),
                             out_bias=cfg.bool("projectors_bias"), gated_norm=cfg.bool("mamba_rms_norm"))
    return ModelSpec(**f, layer_types=(FULL,) * f["num_layers"], linear=linear, parallel_mixer=True)


_NEMOTRON_H_KINDS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe",
                     "mamba": "linear_attention", "attention": "full_attention"}


def _nemotron_h(cfg: Cfg) -> ModelSpec:
    # modeling_nemotron_h.py: one norm and ONE mixer per layer (hybrid_override_pattern / layers_block_type: M Mamba-2,
    # * attention, - plain squared-ReLU MLP, E MoE of plain experts with shared experts), no FFN beside the mixer
    raw = cfg.raw
    pattern = raw.get("layers_block_type") or raw.get("layer_types") or raw.get("hybrid_override_pattern")
    if pattern is None:
        pattern = ["linear_attention", "moe", "full_attention", "mlp"]  # NemotronHConfig's default
    kinds = [_NEMOTRON_H_KINDS.get(str(k), str(k)) for k in pattern]
    if not kinds or any(k not in ("linear_attention", "full_attention", "mlp", "moe") for k in kinds):
        raise ConfigError(f"config.json: nemotron_h layer pattern {pattern!r} is not made of M, *, - and E")
    n = len(kinds)
    if n > DIMENSION_BOUNDS["num_hidden_layers"]:
        raise ConfigError(f"config.json: a {n:,}-layer pattern is beyond any real model (at most "
                          f"{DIMENSION_BOUNDS['num_hidden_layers']:,})")
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    # q/k/v/o never have biases, and the LM head is never tied (_tied_weights_keys = {}), whatever the config says
    f = common_llama_like(Cfg({**raw, "num_hidden_layers": n}, cfg.family), gated_mlp=False, norms_per_layer=1,
                          activation=str(cfg.get("mlp_hidden_act") or "relu2"), qkv_bias=False, o_bias=False,
                          tie_word_embeddings=False)
    f["head_dim"] = cfg.int("head_dim", required=False) or hidden // heads
    moe = None
    if "moe" in kinds:
        width = cfg.int("moe_intermediate_size")
        moe = MoESpec(num_experts=cfg.int("n_routed_experts", "num_local_experts"),
                      top_k=cfg.int("num_experts_per_tok"), expert_intermediate_size=width,
                      shared_intermediate_size=(cfg.int("n_shared_experts", required=False, minimum=0) or 0)
                      * cfg.int("moe_shared_expert_intermediate_size"),
                      moe_layers=tuple(k == "moe" for k in kinds),
                      latent_size=cfg.int("moe_latent_size", required=False) or None)
    ssm_dtype = raw.get("mamba_ssm_cache_dtype", cfg.defaults.get("mamba_ssm_cache_dtype"))
    linear = LinearMixerSpec(
        kind="mamba2", num_heads=cfg.int("mamba_num_heads"), head_dim=cfg.int("mamba_head_dim"),
        state_dim=cfg.int("ssm_state_size"), num_groups=cfg.int("n_groups", "mamba_n_groups"),
        conv_kernel=cfg.int("conv_kernel", "mamba_d_conv"),
        conv_bias=cfg.bool("use_conv_bias", cfg.bool("mamba_conv_bias", True)) if "use_conv_bias" in raw
        else cfg.bool("mamba_conv_bias", True),
        proj_bias=cfg.bool("use_bias"),
        ssm_state_bytes={"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}.get(str(ssm_dtype)))
    types = tuple({"linear_attention": LINEAR, "full_attention": FULL}.get(k, NONE) for k in kinds)
    return ModelSpec(**f, layer_types=types, moe=moe, linear=linear,
                     ffn_layers=tuple(k in ("mlp", "moe") for k in kinds))


def _gemma(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, mlp_bias=False)
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _gemma2(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, mlp_bias=False, norms_per_layer=4)
    n = f["num_layers"]
    window = sliding(cfg)
    if isinstance(cfg.raw.get("layer_types"), list):
        types = layer_types(cfg, n, window)
    else:  # configuration_gemma2.py: even layers (0, 2, ...) use the sliding window
        types = tuple(SLIDING if (i + 1) % 2 else FULL for i in range(n))
    return ModelSpec(**f, sliding_window=window, layer_types=types)


def _gemma3_text(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, mlp_bias=False, norms_per_layer=4, qk_norm="head")
    n = f["num_layers"]
    window = sliding(cfg)
    if isinstance(cfg.raw.get("layer_types"), list):
        types = layer_types(cfg, n, window)
    else:  # configuration_gemma3.py: 5 sliding layers, then 1 global, repeated
        pattern = cfg.int("sliding_window_pattern")
        types = tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n))
    return ModelSpec(**f, sliding_window=window, layer_types=types)


def _gemma4_text(cfg: Cfg) -> ModelSpec:
    # modeling_gemma4.py (Gemma 4): Gemma 3's block (4 norms, per-head q/k norms; the v norm has no scale) with
    # full-attention layers of their own shape (global_head_dim, num_global_key_value_heads; with attention_k_eq_v no
    # v projection, the keys serve as values), the last num_kv_shared_layers reusing earlier layers' K/V (no k/v
    # projections, nothing cached; with use_double_wide_mlp a twice-wide MLP), optional per-layer input embeddings
    # (PLE) and, with enable_moe_block, a MoE beside every dense MLP
    raw = cfg.raw
    f = common_llama_like(cfg, mlp_bias=False, norms_per_layer=4, qk_norm="head",
                          activation=str(cfg.get("hidden_activation") or "gelu_pytorch_tanh"))
    n = f["num_layers"]
    window = sliding(cfg)
    if isinstance(raw.get("layer_types"), list):
        types = list(layer_types(cfg, n, window))
    else:  # 5 sliding layers, then 1 full, repeated
        types = [SLIDING if (i + 1) % 6 else FULL for i in range(n)]
    types[-1] = FULL  # Gemma4TextConfig forces the last layer to full attention
    k_eq_v = cfg.bool("attention_k_eq_v")
    explicit = raw.get("per_layer_config")
    if isinstance(explicit, dict):
        overrides = {int(k): v for k, v in explicit.items() if isinstance(v, dict)}
    else:
        full: dict = {"head_dim": cfg.int("global_head_dim", required=False) or 512}
        global_kv = cfg.int("num_global_key_value_heads", required=False)
        if global_kv is not None and k_eq_v:
            full["num_key_value_heads"] = global_kv
        overrides = {i: full for i, t in enumerate(types) if t == FULL}
    layer_kv = tuple((int(overrides.get(i, {}).get("num_key_value_heads", f["num_kv_heads"])),
                      int(overrides.get(i, {}).get("head_dim", f["head_dim"]))) for i in range(n))
    if any(kv <= 0 or hd <= 0 or f["num_heads"] % kv for kv, hd in layer_kv):
        raise ConfigError("config.json: a layer's num_key_value_heads must divide num_attention_heads")
    if any(hd > DIMENSION_BOUNDS["head_dim"] for _, hd in layer_kv):
        raise ConfigError(f"config.json: a layer's head_dim is beyond any real model (at most "
                          f"{DIMENSION_BOUNDS['head_dim']:,})")
    shared_n = cfg.int("num_kv_shared_layers", required=False, minimum=0) or 0
    if shared_n > n:
        raise ConfigError(f"config.json: num_kv_shared_layers {shared_n} is more than the {n} layers")
    shared = tuple(i >= n - shared_n for i in range(n))
    wide = cfg.bool("use_double_wide_mlp")
    widths = tuple(f["intermediate_size"] * (2 if wide and s else 1) for s in shared)
    ple_dim = cfg.int("hidden_size_per_layer_input", required=False, minimum=0) or 0
    moe = None
    if cfg.bool("enable_moe_block"):
        moe = MoESpec(num_experts=cfg.int("num_experts"), top_k=cfg.int("top_k_experts"),
                      expert_intermediate_size=cfg.int("moe_intermediate_size"), router_scales=True,
                      beside_dense=True, moe_layers=(True,) * n)
    return ModelSpec(**f, sliding_window=window, layer_types=tuple(types), moe=moe,
                     layer_kv=layer_kv if len(set(layer_kv)) > 1 else (),
                     kv_shared_layers=shared if any(shared) else (),
                     no_v_proj_layers=tuple(k_eq_v and t == FULL for t in types) if k_eq_v else (),
                     ffn_widths=widths if len(set(widths)) > 1 else (),
                     per_layer_input=(cfg.int("vocab_size_per_layer_input"), ple_dim) if ple_dim else None)


def _phi3(cfg: Cfg) -> ModelSpec:
    f = common_llama_like(cfg, qkv_bias=False, o_bias=False, mlp_bias=False, fused_qkv=True)
    window = sliding(cfg)
    return ModelSpec(**f, sliding_window=window, layer_types=layer_types(cfg, f["num_layers"], window))


def _olmo2(cfg: Cfg) -> ModelSpec:
    # modeling_olmo2.py: q_norm/k_norm over all heads; norms after attention and after the MLP only.
    f = common_llama_like(cfg, mlp_bias=False, qk_norm="full")
    return ModelSpec(**f, layer_types=layer_types(cfg, f["num_layers"], None))


def _gpt_dims(cfg: Cfg, hidden_key: str) -> tuple[int, int, int]:
    """(hidden, heads, layers) for the GPT-2/BLOOM spellings (n_embd/n_embed, n_head, n_layer)."""
    hidden = cfg.int(hidden_key, "hidden_size")
    heads = cfg.int("n_head", "num_attention_heads")
    n = cfg.int("n_layer", "num_hidden_layers")
    if hidden % heads:
        raise ConfigError(f"config.json: {hidden_key} {hidden} is not divisible by n_head {heads}")
    return hidden, heads, n


def _gpt2(cfg: Cfg) -> ModelSpec:
    hidden, heads, n = _gpt_dims(cfg, "n_embd")
    positions = cfg.int("n_positions", "max_position_embeddings")
    return ModelSpec(
        family="gpt2", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=hidden // heads,
        intermediate_size=cfg.int("n_inner", required=False) or 4 * hidden, gated_mlp=False,
        activation=str(cfg.get("activation_function")), norm="layernorm", norm_bias=True, norms_per_layer=2,
        qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
        tie_word_embeddings=cfg.bool("tie_word_embeddings", True), position="learned",
        learned_positions=positions, max_position_embeddings=positions, layer_types=(FULL,) * n,
        torch_dtype=dtype(cfg),
    )


def _gpt_neox(cfg: Cfg) -> ModelSpec:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    n = cfg.int("num_hidden_layers")
    bias = cfg.bool("attention_bias", True)
    return ModelSpec(
        family="gpt_neox", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=head_dim(cfg, hidden, heads), intermediate_size=cfg.int("intermediate_size"),
        gated_mlp=False, activation=str(cfg.get("hidden_act")), norm="layernorm", norm_bias=True,
        norms_per_layer=2, qkv_bias=bias, o_bias=bias, mlp_bias=True, fused_qkv=True,
        tie_word_embeddings=cfg.bool("tie_word_embeddings"), position="rope",
        max_position_embeddings=cfg.int("max_position_embeddings", required=False), layer_types=(FULL,) * n,
        torch_dtype=dtype(cfg),
    )


def _falcon(cfg: Cfg) -> ModelSpec:
    raw = dict(cfg.raw)
    # Very old Falcon configs (model_type RefinedWeb/RefinedWebModel) used n_head/n_layer/n_head_kv.
    for old, new in (("n_head", "num_attention_heads"), ("n_layer", "num_hidden_layers"),
                     ("n_head_kv", "num_kv_heads"), ("n_embed", "hidden_size")):
        if old in raw and new not in raw:
            raw[new] = raw[old]
    if raw.get("model_type") == "RefinedWeb":
        raw.setdefault("new_decoder_architecture", True)
    cfg = Cfg(raw, "falcon")
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    n = cfg.int("num_hidden_layers")
    new_arch = cfg.bool("new_decoder_architecture")
    multi_query = cfg.bool("multi_query", True)
    if new_arch or not multi_query:
        kv = cfg.int("num_kv_heads", required=False) or heads
    else:
        kv = 1
    parallel = cfg.bool("parallel_attn", True)
    n_ln = cfg.int("num_ln_in_parallel_attn", required=False)
    if n_ln is None and new_arch:
        n_ln = 2
    norms = 2 if (not parallel or n_ln == 2) else 1
    bias = cfg.bool("bias")
    alibi = cfg.bool("alibi")
    return ModelSpec(
        family="falcon", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=kv, head_dim=head_dim(cfg, hidden, heads),
        intermediate_size=cfg.int("ffn_hidden_size", required=False) or 4 * hidden, gated_mlp=False,
        activation=str(cfg.get("activation")), norm="layernorm", norm_bias=True, norms_per_layer=norms,
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, fused_qkv=True,
        tie_word_embeddings=cfg.bool("tie_word_embeddings", True), position="alibi" if alibi else "rope",
        max_position_embeddings=cfg.int("max_position_embeddings", required=False), layer_types=(FULL,) * n,
        torch_dtype=dtype(cfg),
        # modeling_falcon.py broadcasts K/V to every query head before caching when new_decoder_architecture.
        hf_expands_kv_cache=new_arch and kv != heads,
    )


def _opt(cfg: Cfg) -> ModelSpec:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    n = cfg.int("num_hidden_layers")
    proj = cfg.int("word_embed_proj_dim", required=False) or hidden
    bias = cfg.bool("enable_bias", True)
    max_pos = cfg.int("max_position_embeddings")
    final_norm = cfg.bool("do_layer_norm_before", True) and not cfg.bool("_remove_final_layer_norm")
    if not cfg.bool("layer_norm_elementwise_affine", True):
        raise ConfigError("config.json: OPT with layer_norm_elementwise_affine=false is not supported")
    return ModelSpec(
        family="opt", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=head_dim(cfg, hidden, heads), intermediate_size=cfg.int("ffn_dim"),
        gated_mlp=False, activation=str(cfg.get("activation_function")), norm="layernorm", norm_bias=True,
        norms_per_layer=2, qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        tie_word_embeddings=cfg.bool("tie_word_embeddings", True), position="learned",
        learned_positions=max_pos + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2 rows
        final_norm=final_norm, embed_proj_dim=proj if proj != hidden else None,
        max_position_embeddings=max_pos, layer_types=(FULL,) * n, torch_dtype=dtype(cfg),
    )


def _bloom(cfg: Cfg) -> ModelSpec:
    hidden, heads, n = _gpt_dims(cfg, "n_embed")
    return ModelSpec(
        family="bloom", hidden_size=hidden, num_layers=n, vocab_size=cfg.int("vocab_size"), num_heads=heads,
        num_kv_heads=heads, head_dim=hidden // heads, intermediate_size=4 * hidden, gated_mlp=False,
        activation="gelu", norm="layernorm", norm_bias=True, norms_per_layer=2, qkv_bias=True, o_bias=True,
        mlp_bias=True, fused_qkv=True, tie_word_embeddings=cfg.bool("tie_word_embeddings", True),
        position="alibi", embedding_norm=True, max_position_embeddings=None, layer_types=(FULL,) * n,
        torch_dtype=dtype(cfg),
    )


def _glm_dsa_layers(cfg: Cfg, n: int) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """GLM-5 (configuration_glm_moe_dsa.py): per layer (its own indexer, a MoE MLP), from indexer_types /
    index_topk_pattern / index_topk_freq + index_skip_topk_offset, and mlp_layer_types / first_k_dense_replace."""
    raw = cfg.raw
    kinds = raw.get("indexer_types")
    if kinds is None and raw.get("index_topk_pattern") is not None:
        pattern = raw["index_topk_pattern"]
        kinds = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern] if isinstance(pattern, str) else pattern
    if kinds is None:
        freq = max(int(raw.get("index_topk_freq") or 1), 1)
        offset = int(raw.get("index_skip_topk_offset") if raw.get("index_skip_topk_offset") is not None else 2)
        kinds = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    mlp = raw.get("mlp_layer_types")
    if mlp is None:
        dense = min(cfg.int("first_k_dense_replace", required=False, minimum=0) or 0, n)
        mlp = ["dense"] * dense + ["sparse"] * (n - dense)
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in ("full", "shared") for k in kinds):
        raise ConfigError(f"config.json: indexer_types must list 'full' or 'shared' for each of the {n} layers")
    if not isinstance(mlp, list) or len(mlp) != n or any(k not in ("dense", "sparse") for k in mlp):
        raise ConfigError(f"config.json: mlp_layer_types must list 'dense' or 'sparse' for each of the {n} layers")
    return tuple(k == "full" for k in kinds), tuple(k == "sparse" for k in mlp)


def _deepseek(cfg: Cfg) -> ModelSpec:
    # DeepSeek-V2/V3/V3.2, and GLM-5 (modeling_glm_moe_dsa.py: V3.2's MLA, indexer and MoE, some layers reusing the
    # previous indexer's top-k)
    v3 = cfg.family in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")
    dsa = cfg.family in ("deepseek_v32", "glm_moe_dsa")
    f = common_llama_like(cfg, mlp_bias=False if v3 else cfg.bool("mlp_bias"))
    n = f["num_layers"]
    mla = MLASpec(
        q_lora_rank=cfg.int("q_lora_rank", required=False),
        kv_lora_rank=cfg.int("kv_lora_rank"),
        qk_nope_head_dim=cfg.int("qk_nope_head_dim"),
        qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
        v_head_dim=cfg.int("v_head_dim"),
        index_n_heads=(cfg.int("index_n_heads") if dsa else 0),
        index_head_dim=(cfg.int("index_head_dim") if dsa else 0),
    )
    first_dense = cfg.int("first_k_dense_replace", required=False, minimum=0) or 0
    moe_at = tuple(i >= first_dense for i in range(n))
    if cfg.family == "glm_moe_dsa":
        indexers, moe_at = _glm_dsa_layers(cfg, n)
        mla = replace(mla, indexer_layers=() if all(indexers) else indexers)
    experts = cfg.int("n_routed_experts")
    top_k = cfg.int("num_experts_per_tok")
    moe = MoESpec(
        num_experts=experts,
        top_k=top_k,
        expert_intermediate_size=cfg.int("moe_intermediate_size"),
        shared_intermediate_size=(cfg.int("n_shared_experts", required=False, minimum=0) or 0)
        * cfg.int("moe_intermediate_size"),
        moe_layers=moe_at,
    )
    notes: tuple[str, ...] = ()
    if cfg.raw.get("num_nextn_predict_layers"):
        notes = ("multi-token-prediction layers are not counted (transformers does not instantiate them)",)
    if mla.index_head_dim:
        notes += ("DeepSeek Sparse Attention: its indexer keys are in the KV cache; speed is costed as dense MLA "
                  f"attention (the indexer's scoring and the top-{cfg.int('index_topk', required=False) or 2048} "
                  "sparse attention are not modelled)",)
    # MLA: 'head_dim' in transformers' config is the rope dim; the attention uses MLASpec's dims.
    f["head_dim"] = mla.qk_head_dim
    return ModelSpec(**f, mla=mla, moe=moe, layer_types=(FULL,) * n, notes=notes)


PARSERS: dict[str, Callable[[Cfg], ModelSpec]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2, "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3, "qwen3_moe": _qwen3_moe, "gemma": _gemma, "gemma2": _gemma2, "gemma3_text": _gemma3_text,
    "phi3": _phi3, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "falcon": _falcon, "opt": _opt, "bloom": _bloom,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "deepseek_v32": _deepseek, "olmo2": _olmo2, "gpt_oss": _gpt_oss,
    "smollm3": _llama,  # modeling_smollm3.py: Llama's block; no_rope_layers only skip RoPE (no parameters)
    "granite": _llama,  # modeling_granite.py: Llama's block (its multipliers are scalars in the config)
    "ministral": _mistral, "olmo3": _olmo3, "exaone4": _exaone4, "seed_oss": _seed_oss, "glm4": _glm4,
    "nemotron": _nemotron, "apertus": _apertus, "glm4_moe": _glm4_moe, "llama4_text": _llama4_text,
    "qwen3_next": _qwen3_next, "granitemoehybrid": _granitemoehybrid, "nemotron_h": _nemotron_h,
    "falcon_h1": _falcon_h1,
    "qwen3_5_text": _qwen3_5, "qwen3_5_moe_text": _qwen3_5,
    "glm_moe_dsa": _deepseek, "gemma4_text": _gemma4_text, "minimax_m2": _minimax_m2,
    "ministral3": _mistral,  # modeling_ministral3.py (Ministral 3, Devstral 2, Mistral Small 3.2's text): Mistral's block
    # the language models of Qwen's vision-language models: Qwen2's, Qwen3's and Qwen3-MoE's blocks (M-RoPE and
    # DeepStack add no parameters to them)
    "qwen2_vl_text": _qwen2, "qwen2_5_vl_text": _qwen2, "qwen3_vl_text": _qwen3, "qwen3_vl_moe_text": _qwen3_moe,
}
