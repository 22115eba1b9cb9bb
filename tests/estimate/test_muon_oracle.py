"""`--optimizer muon` against torch.optim.Muon itself (PyTorch 2.9+): the state it allocates and the FLOPs of its
Newton-Schulz iterations.

The oracle builds a small transformers model on the CPU, gives its 2-D hidden matrices to torch.optim.Muon and the
rest (embeddings, LM head, norms) to AdamW, as torch.optim.Muon's documentation and every framework shipping Muon
do, takes one step, and sums the state tensors the two optimizers hold (AdamW's scalar `step` counters aside).
FlopCounterMode counts the matmuls of one Muon step on one matrix.
"""

from __future__ import annotations

import warnings

import pytest

from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate import muon
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.model_states import model_states, stage_tensors
from gpuwise.model import spec_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIGS = [
    dict(model_type="llama", hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, vocab_size=256, max_position_embeddings=128),
    dict(model_type="qwen3", hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=128, tie_word_embeddings=True),
]


def _torch_state_bytes(config: dict) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(**config)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    embeddings = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings()) for p in m.parameters()}
    params = list({id(p): p for p in model.parameters()}.values())  # a tied LM head is the embedding
    hidden = [p for p in params if p.ndim == 2 and id(p) not in embeddings]
    rest = [p for p in params if not (p.ndim == 2 and id(p) not in embeddings)]
    opts = [torch.optim.Muon(hidden), torch.optim.AdamW(rest)]
    for p in params:
        p.grad = torch.randn_like(p)
    for o in opts:
        o.step()
    return sum(v.numel() * v.element_size() for o in opts for st in o.state.values() for k, v in st.items()
               if k != "step" and torch.is_tensor(v))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c["model_type"])
def test_muon_state_bytes_equal_torch_optim_muon_with_adamw(config) -> None:
    spec = spec_from_hf_config(config)
    job = TrainJob(framework="fsdp", precision="bf16", optimizer="muon")  # fp32 parameters: fp32 states
    states = model_states(spec, Layout(num_gpus=1), 0, job)
    assert states.optimizer == _torch_state_bytes(config)


@pytest.mark.parametrize("shape", [(96, 64), (64, 160), (32, 32)])
def test_newton_schulz_flops_equal_torch_optim_muon(shape) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    p = torch.nn.Parameter(torch.randn(*shape))
    opt = torch.optim.Muon([p])
    p.grad = torch.randn_like(p)
    with FlopCounterMode(display=False) as counter:
        opt.step()
    ours = muon.NS_STEPS * sum(2 * m * n * k for m, n, k in muon._iteration_gemms(shape))
    assert counter.get_total_flops() == ours


def test_newton_schulz_work_divides_over_the_sharded_optimizer() -> None:
    """Under a distributed optimizer each rank orthogonalizes its share of the matrices; replicated, all of them;
    the embeddings and LM head (AdamW's) cost nothing."""
    from gpuwise.catalog.models import load_model

    spec = load_model("llama-3.1-8b").spec
    profile = default_profile(get_gpu("h100-sxm"))
    groups = stage_tensors(spec, Layout(num_gpus=8), 0).groups
    whole = muon.orthogonalize_s(profile, groups, dtype="bf16", ranks=1, expert_ranks=1, ep=1)
    shared = muon.orthogonalize_s(profile, groups, dtype="bf16", ranks=8, expert_ranks=8, ep=1)
    assert shared == pytest.approx(whole / 8)
    matrices = [rt for rt in groups if muon.updates(rt.tensor)]
    assert not any(rt.tensor.role in ("token_embd", "output") for rt in matrices)
    # 32 blocks of q, o (4096 x 4096), k, v (1024 x 4096), gate, up, down (14336 x 4096): ~666 TFLOP in five steps
    flops = sum(rt.count * muon.NS_STEPS * sum(2 * m * n * k for m, n, k in muon._iteration_gemms(rt.tensor.shape))
                for rt in matrices)
    assert flops == pytest.approx(6.66e14, rel=0.01)
    assert flops / profile.matmul_flops("bf16") < whole < 1.3 * flops / profile.matmul_flops("bf16")


def test_muon_step_time_and_memory_in_a_training_answer() -> None:
    import gpuwise

    adamw = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, zero=1, framework="megatron")
    mu = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, zero=1, framework="megatron", optimizer="muon")
    assert mu.memory.optimizer < adamw.memory.optimizer  # one momentum instead of two moments
    assert mu.perf.step.breakdown["optimizer"] > adamw.perf.step.breakdown["optimizer"]  # plus Newton-Schulz


def test_muon_is_not_offloaded_and_the_searches_leave_offload_out(capsys) -> None:
    import gpuwise
    from gpuwise.cli import main

    code = main(["train", "llama-3.1-8b", "--gpu", "h100-sxm", "--optimizer", "muon", "--offload", "optimizer"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "muon" in err
    plans = gpuwise.plan("llama-3.1-70b", gpu="h100-sxm", num_gpus=16, optimizer="muon", seq=4096, global_batch=64)
    assert plans.plans and not any(p.offload for p in plans.plans)
    for optimizer, offered in (("adamw", True), ("muon", False)):
        remedies = gpuwise.doctor("llama-3.1-70b", gpu="h100-sxm", num_gpus=8, optimizer=optimizer, seq=4096,
                                  global_batch=64).remedies
        assert any(r.name == "offload" for r in remedies) is offered
