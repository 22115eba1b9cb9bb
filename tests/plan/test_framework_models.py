"""Which training framework builds which model: torchtitan has no Mamba-2 layer (its model library builds attention,
MLA and Gated DeltaNet), so it is refused for Mamba-2 hybrids when asked for, and never proposed for them by
`pick`, `doctor` or the planner; Megatron-LM (Megatron-Bridge's Nemotron-H recipes) and FSDP are."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument
from gpuwise.plan.train import model_problem

MAMBA = "nemotron-3-nano-30b-a3b"
GDN = "qwen3.5-27b"


def test_torchtitan_is_refused_for_mamba2_with_the_frameworks_that_run_it() -> None:
    for call in (lambda: gpuwise.train(MAMBA, gpu="h100-sxm", num_gpus=8, framework="torchtitan"),
                 lambda: gpuwise.plan(MAMBA, gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=64,
                                      framework="torchtitan")):
        with pytest.raises(InvalidArgument, match="no Mamba-2 layer.*--framework megatron.*fsdp"):
            call()


@pytest.mark.parametrize("name", [GDN, "llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3"])
def test_torchtitan_runs_attention_mla_and_gated_deltanet_models(name: str) -> None:
    assert model_problem("torchtitan", load_model(name).spec) is None


def test_an_automatic_torchtitan_choice_says_why_it_cannot_be_for_mamba2() -> None:
    """Model parallelism with an optimizer Megatron-LM does not run (or torchao's float8) picks torchtitan when no
    framework is named; for a Mamba-2 hybrid that choice is refused in one line naming both reasons."""
    with pytest.raises(InvalidArgument, match="Megatron-LM does not run would be torchtitan, but torchtitan has no "
                                              "Mamba-2 layer"):
        gpuwise.train(MAMBA, gpu="h100-sxm", num_gpus=8, tp=2, optimizer="adamw-8bit")
    assert gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, tp=2, optimizer="adamw-8bit").framework == \
        "torchtitan"


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_pick_trains_a_mamba2_hybrid_on_megatron_and_a_gdn_hybrid_on_torchtitan(precision: str) -> None:
    """fp8 plans run torchtitan compiled (torchao's float8) and Megatron-LM uncompiled (Transformer Engine's)."""
    mamba = gpuwise.pick(MAMBA, task="train", gpus=["b200"], max_gpus=8, seq=4096, global_batch=64, top=5,
                         precision=precision)
    assert mamba.ranked and all(c.setup.startswith("megatron:") for c in mamba.ranked)
    gdn = gpuwise.pick(GDN, task="train", gpus=["b200"], max_gpus=8, seq=4096, global_batch=64, top=5,
                       precision=precision)
    titan = "torchtitan + compile:" if precision == "fp8" else "torchtitan:"
    assert gdn.ranked and all(c.setup.startswith(titan) for c in gdn.ranked)


def test_recipes_for_a_mamba2_plan_write_a_note_instead_of_a_torchtitan_job() -> None:
    from gpuwise.plan.recipe import recipes

    res = gpuwise.plan(MAMBA, gpu="b200", num_gpus=8, seq=4096, global_batch=64, framework="megatron", top=1)
    files = recipes(res, res.plans[0])
    assert "torchtitan.toml" not in files and "no Mamba-2 layer" in files["torchtitan.note.md"]
    assert "megatron.args" in files


def test_doctor_moves_a_megatron_mamba2_job_to_fsdp_when_it_adds_gpus() -> None:
    d = gpuwise.doctor(MAMBA, gpu="h100-sxm", num_gpus=2, framework="megatron", tp=2, seq=8192, global_batch=8)
    more = [r for r in d.remedies if r.name == "more-gpus"]
    assert more and all(r.options.get("framework") == "fsdp" for r in more)
    llama = gpuwise.doctor("llama-3.1-70b", gpu="h100-sxm", num_gpus=2, framework="megatron", tp=2, seq=8192,
                           global_batch=8)
    assert {r.options.get("framework") for r in llama.remedies if r.name == "more-gpus"} == {"torchtitan"}
