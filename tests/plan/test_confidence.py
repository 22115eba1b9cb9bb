"""Every training prediction says how sure it is (issue 18): its category's band on held-out published runs, and
what in its configuration no published run covers."""

from __future__ import annotations

import json
import re

import pytest

import gpuwise
from gpuwise.catalog._toml import load_toml
from gpuwise.cli import main
from gpuwise.plan.confidence import ATTENTION_DOMINATED, MIN_ROWS, speed_category, speed_confidence
from gpuwise.plan.train import train_confidence

BASE = dict(moe=False, cp=1, seq=8192, vendor="nvidia", architecture="Hopper", precision="bf16",
            framework="torchtitan", tp=1, pp=1)


@pytest.mark.parametrize("change, category", [
    ({}, "dense_fsdp"),
    ({"framework": "megatron", "tp": 8}, "megatron_3d"),
    ({"framework": "megatron"}, "dense_fsdp"),
    ({"precision": "fp8"}, "fp8"),
    ({"architecture": "Blackwell", "precision": "fp8"}, "blackwell"),
    ({"vendor": "amd", "architecture": "CDNA 3", "precision": "fp8"}, "amd"),
    ({"cp": 4, "seq": 131072, "vendor": "amd"}, "context_parallel"),
    ({"cp": 2, "seq": 16384}, "dense_fsdp"),
    ({"moe": True, "cp": 4, "seq": 131072}, "moe_ep"),
])
def test_categories_follow_the_sources_rule_most_specific_first(change, category):
    assert speed_category(**{**BASE, **change}) == category


def _bands():
    return load_toml("speed_validation.toml")


def test_a_prediction_reports_its_categorys_held_out_band():
    r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, fsdp="full", framework="torchtitan", ac="op")
    c = train_confidence(r)
    band = _bands()["held_out"]["dense_fsdp"]
    assert c.category == "dense_fsdp"
    if band["runs"] >= MIN_ROWS:
        assert (c.runs, c.median_abs_error, c.p90_abs_error) == (band["runs"], band["median"], band["p90"])
    assert c.outside == ()
    assert f"±{100 * c.median_abs_error:.0f}%" in c.describe()


def test_a_category_with_too_few_held_out_runs_takes_the_band_of_all():
    bands = _bands()["held_out"]
    c = speed_confidence(category="no_such_category", gpu="h100-sxm", precision="bf16", framework="megatron",
                         degrees={}, num_gpus=8, seq=4096, finetune="full")
    assert not c.of_category and c.runs == bands["all"]["runs"]
    assert "fewer than" in c.describe()


def test_configurations_outside_the_validated_runs_are_named():
    r = gpuwise.train("llama-3.1-8b", gpu="l40s", finetune="qlora", framework="unsloth")
    c = train_confidence(r)
    joined = "; ".join(c.outside)
    assert "GPU l40s" in joined and "qlora fine-tuning" in joined and "framework unsloth" in joined
    # LoRA has published speed runs (MLPerf's Llama 2 70B LoRA): not named
    lora = gpuwise.train("llama-2-70b", gpu="h100-sxm", num_gpus=8, seq=8192, global_batch=8, micro_batch=1,
                         framework="megatron", precision="fp8", finetune="lora", lora_targets="q,k,v,o")
    assert not any("fine-tuning" in o for o in train_confidence(lora).outside)
    covered = _bands()["covered"]
    tp, seq, gpus = 2 * covered["max_degree"]["tp"], 2 * covered["max_seq"], 2 * covered["max_gpus"]
    c = speed_confidence(category="megatron_3d", gpu="h100-sxm", precision="bf16", framework="megatron",
                         degrees={"tp": tp, "pp": 1, "cp": 1, "ep": 1}, num_gpus=gpus, seq=seq, finetune="full")
    assert [o.split(" (")[0] for o in c.outside] == [f"tp {tp}", f"{gpus:,} GPUs", f"sequence {seq:,}"]


def test_an_optimizer_no_published_run_used_is_named():
    covered = _bands()["covered"]["optimizers"]
    assert "adamw" in covered and "sgd" not in covered
    base = dict(gpu="h100-sxm", num_gpus=8, fsdp="full", framework="torchtitan", ac="op")
    for optimizer, named in (("adamw", False), ("sgd", True)):
        r = gpuwise.train("llama-3.1-8b", optimizer=optimizer, **base)
        c = train_confidence(r)
        assert any("optimizer sgd" in o for o in c.outside) is named


def test_text_and_json_carry_the_band_and_the_warnings(capsys):
    assert main(["train", "llama-3.1-8b", "--gpu", "l40s", "--finetune", "lora"]) == 0
    out = capsys.readouterr().out
    assert "how sure: ±" in out and "outside what was validated: GPU l40s" in out
    assert main(["train", "llama-3.1-8b", "--gpu", "l40s", "--finetune", "lora", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["speed_confidence"]
    assert doc["category"] == "dense_fsdp" and doc["held_out_runs"] >= 1
    assert 0 < doc["median_abs_error"] <= doc["p90_abs_error"]
    assert any(o.startswith("GPU l40s") for o in doc["outside_validated"])


LONG_DEEPSPEED = dict(gpu="h200-sxm", num_gpus=8, global_batch=8, micro_batch=1, zero=3, framework="deepspeed",
                     recompute="full", offload=("optimizer",), fused_loss=True)


def _attention_share_by_hand(seq: int) -> float:
    """Llama-3.1-8B's causal attention core over its forward FLOPs per token, from its shapes: scores and values
    2 x 2 x heads x head_dim per key, (seq + 1) / 2 keys on average; the weight matmuls 2 x their parameters (the
    32 blocks and the LM head)."""
    h, layers, heads, head_dim, kv, ffn, vocab = 4096, 32, 32, 128, 8, 14336, 128256
    core = layers * 4 * heads * head_dim * (seq + 1) / 2
    weights = layers * (h * heads * head_dim * 2 + 2 * h * kv * head_dim + 3 * h * ffn) + vocab * h
    return core / (core + 2 * weights)


def test_an_attention_dominated_step_answers_to_the_attention_dominated_band():
    """Past ATTENTION_DOMINATED of its FLOPs in attention, a step reports the held-out attention-dominated band
    when it is wider than its category's, with the range of those runs' errors; below it, its category's."""
    bands = _bands()["held_out"]
    attention, dense = bands["attention_dominated"], bands["dense_fsdp"]
    assert attention["runs"] >= MIN_ROWS and attention["low"] < 0 < attention["high"]
    long = gpuwise.train("llama-3.1-8b", seq=262144, **LONG_DEEPSPEED)
    c = train_confidence(long)
    assert c.attention_share == pytest.approx(_attention_share_by_hand(262144), rel=0.02)
    assert c.attention_share >= ATTENTION_DOMINATED and c.category == "dense_fsdp"
    assert attention["p90"] > dense["p90"]  # so the wider band is the attention-dominated one
    assert (c.runs, c.p90_abs_error, c.error_range) == (attention["runs"], attention["p90"],
                                                       (attention["low"], attention["high"]))
    assert f"from {100 * attention['low']:+.0f}% to {100 * attention['high']:+.0f}%" in c.describe()
    short = gpuwise.train("llama-3.1-8b", seq=8192, **LONG_DEEPSPEED)
    c = train_confidence(short)
    assert c.attention_share == pytest.approx(_attention_share_by_hand(8192), rel=0.02)
    assert c.attention_share < ATTENTION_DOMINATED and c.error_range is None
    assert (c.runs, c.p90_abs_error) == (dense["runs"], dense["p90"])


def test_the_attention_dominated_band_never_narrows_a_categorys():
    bands = _bands()["held_out"]
    for category, band in bands.items():
        if category in ("all", "attention_dominated") or band["runs"] < MIN_ROWS:
            continue
        c = speed_confidence(category=category, gpu="h100-sxm", precision="bf16", framework="megatron",
                             degrees={}, num_gpus=8, seq=131072, finetune="full", attention_share=0.9)
        assert c.p90_abs_error == max(band["p90"], bands["attention_dominated"]["p90"])
        assert (c.error_range is None) == (band["p90"] >= bands["attention_dominated"]["p90"])


def test_json_carries_the_attention_share_and_which_band(capsys):
    argv = ["train", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "8", "--seq", "262144", "--global-batch", "8",
            "--micro-batch", "1", "--zero", "3", "--framework", "deepspeed", "--recompute", "full", "--offload",
            "optimizer", "--fused-loss", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)["speed_confidence"]
    band = _bands()["held_out"]["attention_dominated"]
    assert doc["band"] == "attention_dominated" and doc["error_range"] == [band["low"], band["high"]]
    assert doc["attention_flops_share"] >= ATTENTION_DOMINATED
    assert main(argv[:argv.index("262144")] + ["8192"] + argv[argv.index("262144") + 1:]) == 0
    doc = json.loads(capsys.readouterr().out)["speed_confidence"]
    assert doc["band"] == "category" and doc["error_range"] is None


def test_fp8_kernels_no_published_run_used_are_named(monkeypatch):
    """The scored runs' fp8 kernel families are written with the bands; a family outside them is named."""
    from gpuwise.plan import confidence

    covered = _bands()["covered"]["fp8_kernels"]
    assert {"te", "compiled"} <= set(covered) and "eager" not in covered  # every torchao run published compiled
    base = dict(gpu="h100-sxm", num_gpus=8, framework="torchtitan", precision="fp8")
    eager, compiled = gpuwise.train("llama-3.1-8b", **base), gpuwise.train("llama-3.1-8b", **base, compile=True)
    outside = train_confidence(eager).outside
    assert any(o.startswith("fp8 quantized by torchao's float8 without torch.compile") for o in outside), outside
    assert not any("fp8 quantized" in o for o in train_confidence(compiled).outside)
    data = dict(_bands())
    data["covered"] = dict(data["covered"], fp8_kernels=["te", "compiled", "eager"])
    monkeypatch.setattr(confidence, "_bands", lambda: data)
    assert not any("fp8 quantized" in o for o in train_confidence(eager).outside)


@pytest.mark.parametrize("framework, band", [
    ("megatron", "megatron_deepspeed"), ("deepspeed", "megatron_deepspeed"), ("hf", "hf_trainers"),
    ("unsloth", "hf_trainers"), ("torchtitan", "pytorch_native"), ("fsdp", "pytorch_native"),
    ("torchtune", "pytorch_native"),
])
def test_memory_bands_follow_the_framework_family(framework, band):
    from gpuwise.plan.confidence import memory_category

    assert memory_category(framework) == band


def test_a_memory_prediction_reports_its_bands_held_out_figures_in_text_and_json(capsys):
    """The band comes from catalog/data/memory_validation.toml (written from the held-out rows of
    validation/memory_sources); the text and the JSON quote the same figures."""
    bands = load_toml("memory_validation.toml")["held_out"]
    assert main(["train", "llama-3.1-8b", "--gpu", "h100", "--finetune", "qlora", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["memory_confidence"]
    band = bands["hf_trainers"]
    assert doc["category"] == "hf_trainers" and doc["held_out_runs"] == band["runs"] >= MIN_ROWS
    assert doc["median_abs_error"] == pytest.approx(band["median"], abs=1e-4)
    assert doc["wrong_verdicts"] == band["wrong_verdicts"] and doc["held_out_verdicts"] == band["verdicts"]
    assert main(["train", "llama-3.1-8b", "--gpu", "h100", "--finetune", "qlora"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("how sure (peak per GPU)"))
    assert f"±{100 * band['median']:.0f}% typical" in line and f"{band['runs']} held-out published peaks" in line
    right = band["verdicts"] - band["wrong_verdicts"]
    assert f"right on {right} of {band['verdicts']}" in line


def test_a_memory_prediction_names_what_no_published_measurement_covers():
    from gpuwise.plan.confidence import train_memory_confidence

    covered = load_toml("memory_validation.toml")["covered"]
    assert "sgd" not in covered["optimizers"] and "adamw" in covered["optimizers"]
    plain = train_memory_confidence(gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, fsdp="full"))
    assert plain.outside == ()
    sgd = train_memory_confidence(gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, fsdp="full",
                                                optimizer="sgd"))
    assert sgd.outside == ("optimizer sgd (no published memory measurement)",)


def _eager_moe(gpu: str, **extra):
    return gpuwise.train("qwen3-30b-a3b", gpu=gpu, num_gpus=8, ep=8, seq=4096, global_batch=64, micro_batch=1,
                         framework="megatron", **extra)


def test_eager_megatron_moe_on_a_grace_host_is_named_as_host_bound_risk():
    def named(r) -> bool:
        return any("Grace host" in o for o in train_confidence(r).outside)

    assert named(_eager_moe("gb200"))
    assert not named(_eager_moe("gb200", cuda_graph_scope="attn,moe_router,moe_preprocess"))
    assert not named(_eager_moe("b200"))  # x86 host
    dense = gpuwise.train("llama-3.1-8b", gpu="gb200", num_gpus=8, framework="megatron", seq=4096, global_batch=64)
    assert not named(dense)


def test_the_host_bound_warning_matches_the_published_runs_it_cites():
    """The warning quotes the scored eager Grace MoE runs: while gpuwise prices no host launches they stay well
    beyond its usual error (when a change fixes them, this fails and the warning goes)."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.plan.confidence import HOST_BOUND_HOSTS
    from validation.speed import load, score

    eager = [r for r in load() if r["options"].get("framework") == "megatron" and r["category"] == "moe_ep"
             and not r["options"].get("cuda_graph_scope") and "DeepSeek" in r["name"]
             and get_gpu(r["gpu"]).host_cpu == "grace"]
    ratios = sorted(1 + score(r).error for r in eager)
    assert len(ratios) == 2 and min(ratios) > 1.5
    quoted = [float(x) for x in re.findall(r"([0-9.]+)x", HOST_BOUND_HOSTS["grace"].split("prediction")[0])[-2:]]
    assert quoted == pytest.approx(ratios, abs=0.1)
