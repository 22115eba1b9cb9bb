"""What the number providers share: the `Fact` they return, how they format a value in a line, and the quantities
more than one topic needs (parameters, weight bytes, model-state bytes per parameter, activation bytes).

A provider is a function (gpu, model or None) -> list of facts: (key or None, value, line or None). A key puts the
value in `Explanation.numbers`; a line is shown to the user. Providers abstain (return nothing) where the catalog
has no value. The estimators are imported inside the functions that need them, so that `gpuwise explain` loads
only what its term uses.
"""

from __future__ import annotations

from collections.abc import Callable

from ...catalog.gpus import GPU
from ...catalog.models import LoadedModel
from ...units import GB, TFLOP

Fact = tuple[str | None, float | str | None, str | None]
Provider = Callable[[GPU, LoadedModel | None], list[Fact]]


def tflops(x: float) -> str:
    """FLOP/s as TFLOP/s, without the unit (the line names it)."""
    return f"{x / TFLOP:,.4g}"


def gbs(x: float) -> str:
    """Bytes/s as decimal GB/s, with the unit."""
    return f"{x / GB:,.4g} GB/s"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def gpu_fact(g: GPU) -> Fact:
    return ("gpu", g.id, None)


def model_fact(m: LoadedModel) -> Fact:
    return ("model", m.id, None)


def need_model(what: str) -> Fact:
    return (None, None, f"Pass a model for {what}.")


def params(m: LoadedModel) -> int:
    """All parameters of the model."""
    from ...model.params import param_counts

    return param_counts(m.spec).total


def weight_bytes(m: LoadedModel, fmt: str) -> int:
    """The model's weights in a weight format (bf16, fp8, nf4, Q4_K_M, ...)."""
    from ...quant.formats import get_weight_format

    return get_weight_format(fmt).weight_bytes(m.spec)


def state_bytes_per_param(framework: str, sharding: str, num_gpus: int, shard_group: int | None = None) -> float:
    """Model-state bytes per parameter on one GPU (bf16 mixed precision, AdamW), from the memory model."""
    from ...estimate.layout import Layout
    from ...estimate.job import job_default
    from ...estimate.model_states import bytes_per_param

    layout = Layout(num_gpus=num_gpus, sharding=sharding, shard_group=shard_group)
    return sum(bytes_per_param(framework=framework, precision=job_default("precision"),
                               optimizer=job_default("optimizer"), layout=layout).values())


def layer_activation_bytes(m: LoadedModel, *, seq: int, t: int = 1, sp: bool = False, recompute: str) -> float:
    """Korthikanti et al. activation bytes of all layers for one sequence (16-bit), per tensor-parallel rank."""
    from ...estimate.activations import korthikanti_layer_bytes

    s = m.spec
    return s.num_layers * korthikanti_layer_bytes(seq, 1, s.hidden_size, s.num_heads, t=t, sp=sp, recompute=recompute)
