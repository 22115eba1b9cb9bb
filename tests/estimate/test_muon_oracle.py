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


def _ns_one(profile, shape) -> float:
    """Five iterations on one matrix, composed here from the three products (m <= n)."""
    from gpuwise.estimate.kernels import matmul_s

    m, n = sorted(shape)
    return muon.NS_STEPS * (matmul_s(profile, m, m, n, "bf16", 2.0) + matmul_s(profile, m, m, m, "bf16", 2.0)
                            + matmul_s(profile, m, n, m, "bf16", 2.0))


def test_newton_schulz_work_divides_over_the_sharded_optimizer_down_to_the_largest_matrix() -> None:
    """Replicated, a rank orthogonalizes every hidden matrix (not the embeddings or the LM head, AdamW's); sharded
    over N ranks, 1/N of them, but never less than the largest matrix, which one rank does whole."""
    from gpuwise.catalog.models import load_model

    spec = load_model("llama-3.1-8b").spec
    profile = default_profile(get_gpu("h100-sxm"))
    groups = stage_tensors(spec, Layout(num_gpus=8), 0).groups
    # 32 blocks of q, o (4096 x 4096), k, v (1024 x 4096), gate, up (14336 x 4096) and down (4096 x 14336)
    shapes = {(4096, 4096): 2, (1024, 4096): 2, (14336, 4096): 3}
    whole = 32 * sum(k * _ns_one(profile, sh) for sh, k in shapes.items())
    def ns(ranks: int) -> float:
        return muon.orthogonalize_s(profile, groups, dtype="bf16", ranks=ranks, expert_ranks=ranks, ep=1)

    assert ns(1) == pytest.approx(whole)
    assert ns(8) == pytest.approx(whole / 8)
    floor = _ns_one(profile, (14336, 4096))
    assert ns(4096) == pytest.approx(floor)
    flops = 32 * sum(k * muon.NS_STEPS * sum(2 * m * n * q for m, n, q in muon._iteration_gemms(sh))
                     for sh, k in shapes.items())
    assert flops == pytest.approx(6.66e14, rel=0.01)  # the figure docs/performance.md gives
    assert muon.orthogonalize_flops(groups) == pytest.approx(flops)


def test_routed_experts_are_orthogonalized_by_the_expert_data_parallel_group() -> None:
    """Qwen3-30B-A3B on 8 GPUs with a distributed optimizer: with EP 1 each rank orthogonalizes 1/8 of all 128
    experts (the expert-data-parallel group is 8), with EP 8 its own 16 whole (the group is 1): the same work."""
    import gpuwise

    times = []
    for ep in (1, 8):
        r = gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, ep=ep, zero=1, framework="megatron",
                          optimizer="muon")
        layout = r.layout
        times.append(muon.orthogonalize_s(r.perf.profile, stage_tensors(r.request.model.spec, layout, 0).groups,
                                          dtype="bf16", ranks=layout.shard_size,
                                          expert_ranks=layout.expert_shard_size, ep=layout.ep))
    assert times[0] == pytest.approx(times[1])
    from gpuwise.model.params import Tensor

    assert muon.updates(Tensor("ffn_gate_inp", 0, (128, 2048)))  # the router is a 2-D hidden matrix (Megatron)
    assert not muon.updates(Tensor("token_embd", None, (151936, 2048)))


def test_the_step_waits_for_the_stage_with_the_most_orthogonalizing() -> None:
    """DeepSeek-V3 over 16 stages, the first holding 5 blocks (3 of them dense): a later stage, all MoE, has more
    Newton-Schulz work than the first, and the optimizer step is at least that stage's."""
    import gpuwise

    r = gpuwise.train("deepseek-v3", gpu="h200-sxm", num_gpus=256, pp=16, ep=8, zero=1, framework="megatron",
                      pp_first_layers=5, pp_last_layers=0, optimizer="muon", seq=4096, global_batch=1024)
    layout, spec = r.layout, r.request.model.spec

    def ns(stage: int) -> float:
        return muon.orthogonalize_s(r.perf.profile, stage_tensors(spec, layout, stage).groups, dtype="bf16",
                                    ranks=layout.shard_size, expert_ranks=layout.expert_shard_size, ep=layout.ep)

    assert ns(1) > ns(0)
    # the step's optimizer time is that stage's iterations plus streaming the states (a few ms here)
    assert ns(1) <= r.perf.step.breakdown["optimizer"] < ns(1) + 0.02


def test_tensor_parallelism_adds_the_gathered_fp32_momentum_to_the_workspace() -> None:
    """Megatron's duplicated TP mode gathers the largest matrix's fp32 momentum (4 x 4096 x 14336 bytes for
    Llama-3.1-8B's MLP matrices) beside the 16-bit iterate and the two 4096 x 4096 products."""
    from gpuwise.catalog.models import load_model

    spec = load_model("llama-3.1-8b").spec
    m, n = 4096, 14336
    for tp, gathered in ((1, 0), (2, 4 * m * n)):
        groups = stage_tensors(spec, Layout(num_gpus=8, tp=tp), 0).groups
        assert muon.workspace_bytes(groups, tp=tp, etp=1) == 2 * m * n + 4 * m * m + gathered


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
