"""Training FLOPs against torch.utils.flop_counter.FlopCounterMode on real transformers models.

Dense families run on the meta device (B=1..2, S=512..4096): `model_per_step` under the `full`
convention (what FlopCounterMode counts: dense attention, masked or not) must be within 1%.
MoE: meta tensors cannot follow data-dependent routing (routed experts show zero FLOPs there), so a
tiny real model runs on the CPU with eager attention and eager experts (FlopCounterMode counts neither the
CPU SDPA kernel nor torch._grouped_mm); its router sends each token to exactly top_k experts, which is
what the formula charges.
"""

from __future__ import annotations

import warnings

import pytest

from gpuwise.estimate.flops import forward_flops, step_flops
from gpuwise.model import spec_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

SMALL = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=8192)

DENSE = [
    ("llama", SMALL, 1, 512),
    ("llama", SMALL, 2, 2048),
    ("qwen2", SMALL, 2, 1024),
    ("qwen3", {**SMALL, "head_dim": 64}, 1, 4096),
    ("mistral", {**SMALL, "sliding_window": None}, 1, 1024),
    ("gemma2", {**SMALL, "head_dim": 32, "sliding_window": 256}, 1, 1024),
    ("phi3", {**SMALL, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 1}, 2, 512),
    ("gpt2", dict(n_embd=256, n_layer=2, n_head=8, vocab_size=1000, n_positions=4096), 2, 1024),
    ("gpt_neox", SMALL, 1, 2048),
    ("opt", dict(hidden_size=256, ffn_dim=688, num_hidden_layers=2, num_attention_heads=8, vocab_size=1000,
                 max_position_embeddings=4096, word_embed_proj_dim=128), 1, 1024),
    ("deepseek_v3", {**SMALL, "num_key_value_heads": 8, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                     "n_shared_experts": 1, "first_k_dense_replace": 2, "q_lora_rank": 96, "kv_lora_rank": 64,
                     "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "n_group": 2,
                     "topk_group": 1}, 1, 512),  # both layers dense: MLA attention on meta
]


def _counted(config: dict, batch: int, seq: int, device: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(**config)
        # On CPU, FlopCounterMode sees neither the fused SDPA kernel nor torch._grouped_mm (the default
        # experts kernel in transformers v5): use the eager implementations, whose matmuls it counts.
        kwargs = {"attn_implementation": "eager", "experts_implementation": "eager"} if device == "cpu" else {}
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
    model.train()
    ids = torch.randint(0, 1000, (batch, seq), device=device) if device == "cpu" else \
        torch.zeros(batch, seq, dtype=torch.long, device=device)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(input_ids=ids)
        out.logits.float().sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(("family", "overrides", "batch", "seq"), DENSE,
                         ids=[f"{f}-B{b}-S{s}" for f, _, b, s in DENSE])
def test_dense_model_flops_match_flop_counter(family, overrides, batch, seq) -> None:
    config = {"model_type": family, **overrides}
    predicted = step_flops(spec_from_hf_config(config), seq=seq, global_batch=batch, convention="full").model
    assert predicted == pytest.approx(_counted(config, batch, seq, "meta"), rel=0.01)


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_moe_flops_match_flop_counter_on_a_tiny_cpu_model(family) -> None:
    config = {"model_type": family, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 4,
              "num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "head_dim": 16}
    torch.manual_seed(0)
    predicted = step_flops(spec_from_hf_config(config), seq=256, global_batch=2, convention="full").model
    assert predicted == pytest.approx(_counted(config, 2, 256, "cpu"), rel=0.01)


def test_causal_halves_score_and_value_terms() -> None:
    spec = spec_from_hf_config({"model_type": "llama", **SMALL})
    full = forward_flops(spec, 2048, convention="full")
    causal = forward_flops(spec, 2048, convention="causal")
    assert causal.attention_core == pytest.approx(full.attention_core * 2049 / 4096)
    assert causal.mlp == full.mlp and causal.qkv == full.qkv


def test_six_n_per_token_plus_attention() -> None:
    # Dense model, no attention: 6 x (non-embedding matmul params + lm_head) per token.
    spec = spec_from_hf_config({"model_type": "llama", **SMALL})
    step = step_flops(spec, seq=1, global_batch=1, convention="causal")
    h, inter, v, layers = 256, 688, 1000, 2
    matmul_params = layers * (h * (256 + 2 * 64) + 256 * h + 3 * h * inter) + h * v
    attention = 3 * layers * 4 * 256 * 1  # one key per query at seq 1
    assert step.model == 6 * matmul_params + attention


def test_recompute_counts_in_hardware_flops_only() -> None:
    spec = spec_from_hf_config({"model_type": "llama", **SMALL})
    none = step_flops(spec, seq=1024, global_batch=4)
    sel = step_flops(spec, seq=1024, global_batch=4, recompute="selective")
    full = step_flops(spec, seq=1024, global_batch=4, recompute="full")
    assert none.model == sel.model == full.model
    assert none.hardware < sel.hardware < full.hardware
    assert full.hardware - full.model == pytest.approx(full.forward.total - full.forward.lm_head)


def test_frozen_base_weights_count_input_gradients_only() -> None:
    """LoRA/QLoRA: the base weights get no gradients. FlopCounterMode on a model whose parameters are all frozen
    (the input embeddings require grad, so the backward runs through every layer) counts what StepFlops.model
    charges for a frozen base: 2x forward + the attention core."""
    config = {"model_type": "llama", **SMALL}
    batch, seq = 2, 1024
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
    model.requires_grad_(False)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    counter = FlopCounterMode(display=False)
    with counter:
        model(inputs_embeds=embeds).logits.float().sum().backward()
    spec = spec_from_hf_config(config)
    frozen = step_flops(spec, seq=seq, global_batch=batch, convention="full", frozen_base=True)
    assert frozen.model == pytest.approx(counter.get_total_flops(), rel=0.01)
    assert frozen.model < step_flops(spec, seq=seq, global_batch=batch, convention="full").model
