"""Muon: which parameters it updates, and what its Newton-Schulz orthogonalization costs.

Muon (Keller Jordan, 2024; Moonlight, arXiv 2502.16982) keeps one momentum buffer per 2-D hidden weight matrix and
replaces the update by an approximately orthogonal matrix: a few Newton-Schulz iterations on the momentum. Every
framework that ships it steps the other parameters with AdamW: Megatron-Core (`--optimizer muon`,
megatron/core/optimizer/emerging_optimizers.py `_is_nonlinear_or_embedding`: parameters that are not 2-D, and the
embedding and output layer, go to `--muon-scalar-optimizer adam`), torchtitan's DistMuon, and torch.optim.Muon
(PyTorch 2.9, which refuses parameters that are not 2-D: "use AdamW for the embedding, head and scalar
parameters"). Routed experts are one 2-D matrix each (Megatron's grouped linears hold one weight per expert).

One quintic iteration on X (m x n, m <= n; the momentum normalized, transposed when it is tall) is
A = X X^T (2 m^2 n FLOPs), B = b A + c A A (2 m^3), X = a X + B X (2 m^2 n): three GEMMs, 5 iterations by default
(Megatron's `--muon-num-ns-steps 5`, Keller Jordan's reference). They run in bf16 (torch.optim.Muon casts the
momentum with `.bfloat16()`; Megatron's `--muon-fp32-matmul-prec medium`), so a GPU without bf16 tensor cores runs
them at its fp32 rate. Each matrix is orthogonalized whole: Megatron's `--muon-tp-mode` defaults to `duplicated`
(megatron/training/arguments.py and megatron/core/optimizer/optimizer_config.py @d98e8a6), which all-gathers a
tensor-parallel matrix and runs its iterations on every TP rank, and the distributed optimizers (Megatron's,
torchtitan's DistMuon in torchtitan/distributed/flex_shard) give each data-parallel rank whole matrices to
orthogonalize. So the work divides over the ranks that shard the optimizer, but never below the largest matrix,
which one rank does alone; without sharding every replica repeats all of it."""

from __future__ import annotations

from ..catalog.devices import DeviceProfile
from ..model.params import Tensor
from .kernels import matmul_s

NS_STEPS = 5
"""Newton-Schulz iterations per step (Megatron's --muon-num-ns-steps default, Keller Jordan's reference)."""

SCALAR_ROLES = ("token_embd", "pos_embd", "ple_embd", "output")
"""Matrices Muon leaves to AdamW: the embeddings and the output layer (Megatron's is_embedding_or_output_parameter)."""


def updates(t: Tensor) -> bool:
    """Whether Muon updates tensor `t` (a 2-D hidden weight matrix, per expert); AdamW steps the others."""
    return t.is_matrix and t.role not in SCALAR_ROLES


def _iteration_gemms(shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """The (m, n, k) GEMMs of one quintic iteration on a matrix of `shape`."""
    m, n = sorted(shape[-2:])
    return ((m, m, n), (m, m, m), (m, n, m))


def iteration_flops(shape: tuple[int, ...]) -> float:
    """FLOPs of the NS_STEPS iterations on one matrix of `shape`."""
    return NS_STEPS * sum(2.0 * m * n * k for m, n, k in _iteration_gemms(shape))


def orthogonalize_flops(tensors) -> float:
    """FLOPs of the iterations on every Muon matrix of `tensors` (model_states.RankTensor groups; all experts), on
    one rank that does them all."""
    return sum(rt.count * rt.tensor.experts * iteration_flops(rt.tensor.shape) for rt in tensors if updates(rt.tensor))


def ns_dtype(peak_flops: dict) -> str:
    """The dtype the iterations run at: bf16, or fp32 on a GPU without bf16 tensor cores (T4, V100)."""
    return "bf16" if peak_flops.get("bf16") else "fp32"


def orthogonalize_s(profile: DeviceProfile, tensors, *, dtype: str, ranks: int, expert_ranks: int,
                    ep: int) -> float:
    """Seconds of Newton-Schulz iterations on one rank: every Muon matrix of `tensors` (model_states.RankTensor
    groups of one pipeline stage, each a count of identical blocks' tensors; of the routed experts the rank's
    E / ep, each whole even when expert tensor parallelism splits it), divided over the `ranks` that share the
    optimizer's work (`expert_ranks` for the routed experts: the expert-data-parallel group), and at least the
    largest matrix's, which one rank orthogonalizes whole."""
    total = largest = 0.0
    for rt in tensors:
        t = rt.tensor
        if not updates(t):
            continue
        matrices = rt.count * (t.experts / ep if rt.expert else 1.0)
        one = NS_STEPS * sum(matmul_s(profile, m, n, k, dtype, 2.0) for m, n, k in _iteration_gemms(t.shape))
        total += matrices * one / max(1, expert_ranks if rt.expert else ranks)
        largest = max(largest, one)
    return max(total, largest)


def workspace_bytes(tensors, *, tp: int, etp: int) -> float:
    """Transient bytes of orthogonalizing the largest Muon matrix: its 16-bit iterate X (m x n) and the m x m
    products A and B, plus, when tensor parallelism splits it (`etp` for routed experts), the all-gathered fp32
    momentum (m x n)."""
    best = 0.0
    for rt in tensors:
        t = rt.tensor
        if not updates(t):
            continue
        m, n = sorted(t.shape[-2:])
        gathered = 4.0 * m * n if (etp if rt.expert else tp) > 1 else 0.0
        best = max(best, 2.0 * m * n + 2 * 2.0 * m * m + gathered)
    return best
