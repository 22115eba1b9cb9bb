"""`hf` activations against the bytes a real transformers model saves for backward (meta device).

The oracle: build the model from its config on the meta device in bf16, training mode, run forward with labels
under `torch.autograd.graph.saved_tensors_hooks`, and sum the storages packed for backward (deduplicated by
storage, parameters excluded). gpuwise's prediction is the layers' and outside-the-layers' activations plus the
fp32 log-softmax the loss keeps (4 B per logit): the other parts of the `logits` entry are transient.

Two substitutions keep the oracle faithful to a GPU run:
- transformers' default attention is SDPA, which on a GPU in bf16 without a padding mask runs the flash
  kernel (saving q, k, v, the output and fp32 log-sum-exp). On the meta device SDPA takes the math path and
  materializes the score matrix, which no such GPU run does; so the test registers an attention function
  that calls aten's flash-attention op, whose meta implementation allocates exactly what the kernel saves.
- dropout: off the fused CUDA kernel (meta, CPU) aten keeps a noise tensor in the activation dtype instead of
  a 1-byte mask, so GPT-2 and OPT run with dropout set to 0 here; the mask term is checked separately.
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

register("gpu_sdpa")

BASE = dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=3, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=32000, max_position_embeddings=8192)
NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, dropout=0.0)
CASES = [
    ("llama", {}, 1, 2048),
    ("llama", {"hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16, "num_key_value_heads": 4}, 2, 1024),
    ("qwen2", {}, 2, 512),
    ("qwen3", {"head_dim": 64}, 1, 1024),
    ("mistral", {"sliding_window": None}, 1, 4096),
    ("olmo2", {}, 1, 1024),
    ("phi3", {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 1}, 1, 1024),
    ("gemma", {"head_dim": 64}, 2, 1024),
    ("gpt_neox", {}, 1, 2048),
    ("opt", {"ffn_dim": 2048, "word_embed_proj_dim": 512, **NO_DROPOUT}, 1, 1024),
    ("gpt2", {"n_embd": 768, "n_head": 12, "n_layer": 3, "n_positions": 2048, **NO_DROPOUT}, 2, 1024),
]


def _saved_bytes(config: dict, batch: int, seq: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                                  attn_implementation="gpu_sdpa")
    return saved_bytes(model, batch, seq)


@pytest.mark.parametrize(("family", "overrides", "batch", "seq"), CASES,
                         ids=[f"{f}-h{o.get('hidden_size', o.get('n_embd', BASE['hidden_size']))}-B{b}-S{s}" for f, o, b, s in CASES])
def test_hf_activations_within_5_percent_of_saved_tensors(family, overrides, batch, seq) -> None:
    base = {"vocab_size": BASE["vocab_size"]} if family == "gpt2" else BASE  # GPT-2 spells its sizes n_*
    config = {"model_type": family, **base, **overrides}
    spec = spec_from_hf_config(config)
    act = stage_activations(spec, Layout(num_gpus=1), 0, TrainJob(framework="hf", seq=seq), micro_batch=batch,
                            num_microbatches=1)
    predicted = act.layers + act.outside_layers + 4 * batch * seq * spec.vocab_size
    assert predicted == pytest.approx(_saved_bytes(config, batch, seq), rel=0.05)


def test_dropout_adds_one_byte_masks_per_residual_branch() -> None:
    # CUDA's fused dropout keeps a bool mask: two per layer (attention and MLP outputs) plus one on the embeddings.
    base = {"model_type": "gpt2", "n_embd": 256, "n_head": 8, "n_layer": 2, "vocab_size": 1000}
    job, kw = TrainJob(framework="hf", seq=512), dict(micro_batch=1, num_microbatches=1)
    with_p = stage_activations(spec_from_hf_config(base), Layout(num_gpus=1), 0, job, **kw)
    without = stage_activations(spec_from_hf_config({**base, **NO_DROPOUT}), Layout(num_gpus=1), 0, job, **kw)
    assert with_p.total - without.total == (2 * 2 + 1) * 512 * 256
