"""`gpuwise train` on the command line: the JSON contract, the text view, and one-line errors with exit 2."""

from __future__ import annotations

import json

import pytest

from gpuwise.catalog.models import load_model
from gpuwise.cli import main
from gpuwise.estimate.flops import step_flops


def _json(capsys, *argv) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_documented_keys(capsys) -> None:
    doc = _json(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--seq", "4096",
                "--global-batch", "16", "--micro-batch", "1", "--fsdp", "full", "--recompute", "full")
    assert doc["schema_version"] == "1" and doc["command"] == "train"
    assert doc["params"] == 8030261248
    mem = doc["memory_per_gpu"]
    assert {"params", "grads", "optimizer", "activations", "buffers", "total"} <= set(mem)
    assert mem["total"] == sum(v for k, v in mem.items() if k != "total")
    assert {"model_per_step", "hardware_per_step", "model_per_token"} <= set(doc["flops"])
    assert doc["fits"] is True and doc["gpu_memory"] == doc["gpu"]["memory_bytes"]
    assert doc["max_micro_batch"] >= 1 and doc["layout"]["dp"] == 8
    assert doc["memory_peak"]["pipeline_stage"] == 0


def test_flops_convention_full_matches_the_flops_model(capsys) -> None:
    doc = _json(capsys, "llama-3.1-8b", "--gpu", "h100", "--seq", "2048", "--global-batch", "4",
                "--flops-convention", "full")
    expected = step_flops(load_model("llama-3.1-8b").spec, seq=2048, global_batch=4, convention="full")
    assert doc["flops"]["model_per_step"] == round(expected.model)
    assert doc["flops"]["model_per_token"] == round(expected.model / (2048 * 4))


def test_text_output_states_units_and_the_peak_rank(capsys) -> None:
    assert main(["train", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "32", "--tp", "8", "--pp", "4",
                 "--global-batch", "32", "--sp"]) == 0
    out = capsys.readouterr().out
    assert "GiB" in out and "pipeline stage 0 of 4" in out and "largest micro-batch" in out


BAD = [
    ["llama-3.1-8b", "--gpu", "h100", "--tp", "3"],
    ["llama-3.1-8b", "--gpu", "h100", "--num-gpus", "6", "--tp", "4"],
    ["llama-3.1-8b", "--gpu", "h100", "--num-gpus", "64", "--pp", "64"],
    ["llama-3.1-8b", "--gpu", "h100", "--global-batch", "2", "--micro-batch", "4"],
    ["llama-3.1-8b", "--gpu", "h100", "--zero", "3", "--fsdp", "full"],
    ["llama-3.1-8b", "--gpu", "h100", "--zero", "4"],
    ["llama-3.1-8b", "--gpu", "h100", "--num-gpus", "2", "--ep", "2"],
    ["mixtral-8x7b", "--gpu", "h100", "--num-gpus", "16", "--ep", "16"],
    ["llama-3.1-8b", "--gpu", "h100", "--seq", "0"],
    ["llama-3.1-8b", "--gpu", "h100", "--offload", "disk"],
    ["llama-3.1-8b", "--gpu", "nosuchgpu"],
    ["nosuchmodel", "--gpu", "h100"],
    ["llama-3.1-8b", "--gpu", "h100", "--fsdp", "hybrid", "--num-gpus", "8"],
    ["gpt2", "--gpu", "h100", "--seq", "4096"],
    ["llama-3.1-8b", "--gpu", "h100", "--finetune", "lora", "--lora-dropout", "1"],
    ["llama-3.1-8b", "--gpu", "h100", "--finetune", "lora", "--lora-dropout", "-0.1"],
    ["llama-3.1-8b", "--gpu", "h100", "--finetune", "lora", "--lora-dropout", "nan"],
    ["qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--framework", "megatron", "--cuda-graph-scope", "all"],
    ["qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--framework", "torchtitan", "--cuda-graph-scope", "attn"],
    ["llama-3.1-8b", "--gpu", "h100", "--framework", "megatron", "--cuda-graph-scope", "moe_router"],
    ["llama-3.1-8b", "--gpu", "h100", "--framework", "megatron", "--moe-pad-expert-input-to-capacity"],
    ["qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--framework", "fsdp", "--moe-pad-expert-input-to-capacity"],
    ["qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--framework", "megatron", "--ep", "8", "--moe-a2a-overlap",
     "--recompute", "full"],
    ["qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--framework", "torchtitan", "--moe-a2a-overlap"],
    ["llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--precision", "fp8"],
    ["llama-3.1-8b", "--gpu", "t4", "--precision", "fp8", "--framework", "megatron"],
]


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own errors (choices, types)
        return int(exc.code)


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a[2:]) or a[0] for a in BAD])
def test_bad_input_is_one_line_and_exit_2(argv, capsys) -> None:
    assert _exit_code(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuwise: error:") and "Traceback" not in err


def test_does_not_fit_names_the_cheapest_change_that_fits(capsys) -> None:
    """Issue 21, item 13: a DOES NOT FIT answer names one change that fits (the doctor's headline), and that change,
    fed back to `gpuwise train`, does fit."""
    doc = _json(capsys, "llama-3.1-70b", "--gpu", "a100-80gb", "--seq", "2048")
    assert doc["fits"] is False
    fix = doc["cheapest_fix"]
    assert fix is not None and fix["fits"] is True
    argv = ["llama-3.1-70b", "--gpu", "a100-80gb", "--seq", "2048"]
    for k, v in fix["options"].items():
        if v is not None:
            argv += [f"--{k.replace('_', '-')}", ",".join(v) if isinstance(v, list) else str(v)]
    assert _json(capsys, *argv)["fits"] is True
    assert main(["train", "llama-3.1-70b", "--gpu", "a100-80gb", "--seq", "2048"]) == 0
    out = capsys.readouterr().out
    assert f"cheapest change that fits: {fix['change']}" in out
    assert _json(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--finetune", "lora", "--seq", "2048")[
        "cheapest_fix"] is None


def test_does_not_fit_is_short_by_what_must_fit_with_the_allowance_beside(capsys) -> None:
    """The verdict compares allocated peak + runtime (memory_torch.required) with the GPU: the text's shortfall is
    that difference, and the total with the caching allocator's allowance is named beside it, not in its place."""
    argv = ["llama-3.1-70b", "--gpu", "h100-sxm", "--seq", "4096"]
    doc = _json(capsys, *argv)
    gib = 2**30
    short, total_short = doc["memory_torch"]["required"] - doc["gpu_memory"], -doc["headroom_bytes"]
    assert doc["fits"] is False and 0 < short < total_short
    assert main(["train", *argv]) == 0
    out = capsys.readouterr().out
    assert f"DOES NOT FIT: {short / gib:.2f} GiB short per GPU" in out
    assert f"{total_short / gib:.2f} GiB short with the caching allocator's" in out


def test_a_fix_that_fits_only_without_the_allowance_says_so(capsys) -> None:
    """Llama 3 405B on 8,192 H100 (Meta's layout, no recompute) is 0.47 GiB short; offloading the optimizer leaves a
    total above the card whose allocated peak + runtime fit, and the fix line says that is all it is over by."""
    argv = ["llama-3.1-405b", "--gpu", "h100-sxm", "--num-gpus", "8192", "--tp", "8", "--sp", "--pp", "16", "--vpp",
            "8", "--pp-first-layers", "7", "--pp-last-layers", "7", "--seq", "8192", "--global-batch", "2048",
            "--fsdp", "grad-op", "--framework", "megatron"]
    doc = _json(capsys, *argv)
    fix = doc["cheapest_fix"]
    assert doc["fits"] is False and fix["fits"] is True and fix["memory_per_gpu"] > doc["gpu_memory"]
    assert main(["train", *argv]) == 0
    assert "tight: over the card only by the caching allocator's allowance" in capsys.readouterr().out


def test_json_says_what_is_compiled_and_in_which_dtype_adam_keeps_its_moments(capsys) -> None:
    doc = _json(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--framework", "torchtitan",
                "--compile-components", "loss")
    assert doc["compile"] == {"blocks": False, "loss": True} and doc["adam_moment_dtypes"] is None
    doc = _json(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--framework", "megatron", "--zero",
                "1", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16")
    assert doc["compile"] == {"blocks": False, "loss": False}
    assert doc["adam_moment_dtypes"] == {"exp_avg": "bf16", "exp_avg_sq": "bf16"}
    assert doc["cuda_graph_scope"] == []


def test_json_names_the_cuda_graph_scope_and_the_host_wait_it_removes(capsys) -> None:
    argv = ["qwen3-30b-a3b", "--gpu", "h100-sxm", "--num-gpus", "8", "--framework", "megatron", "--ep", "8"]
    eager = _json(capsys, *argv)
    scoped = _json(capsys, *argv, "--cuda-graph-scope", "moe_router,attn")
    whole = _json(capsys, *argv, "--cuda-graph-scope", "full_iteration")
    assert scoped["cuda_graph_scope"] == ["attn", "moe_router"] and whole["cuda_graph_scope"] == ["full_iteration"]
    assert eager["time_breakdown_s"]["host_sync"] == scoped["time_breakdown_s"]["host_sync"] > 0
    assert "host_sync" not in whole["time_breakdown_s"] and whole["step_time_s"] < eager["step_time_s"]


def test_train_json_says_how_moe_layers_were_priced(capsys):
    """`moe` in train --json: the dispatch options as given and what they priced (fused permute, grouped experts);
    null for a dense model."""
    def doc(*argv):
        assert main(["train", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    moe = "qwen3-30b-a3b --gpu h100-sxm --num-gpus 16 --ep 16 --seq 4096 --global-batch 256".split()
    plain = doc(*moe, "--framework", "megatron")["moe"]
    assert plain == {"token_dispatcher": "alltoall", "flex_dispatcher_backend": None, "a2a_overlap": False,
                     "delay_wgrad_compute": False,
                     "pad_expert_input_to_capacity": False, "permute_fused": False, "te_op_fuser": False,
                     "grouped_experts": False}
    overlap = doc(*moe, "--framework", "megatron", "--moe-a2a-overlap", "--delay-wgrad-compute")["moe"]
    assert overlap["a2a_overlap"] is True and overlap["delay_wgrad_compute"] is True
    assert doc(*moe, "--framework", "megatron", "--moe-permute-fusion")["moe"]["permute_fused"] is True
    flex = doc(*moe, "--framework", "megatron", "--moe-token-dispatcher", "flex")["moe"]
    assert flex["permute_fused"] is True and flex["flex_dispatcher_backend"] == "deepep"  # Megatron-Core's default
    assert doc(*moe, "--framework", "megatron", "--moe-token-dispatcher", "flex", "--moe-flex-dispatcher-backend",
               "hybridep")["moe"]["flex_dispatcher_backend"] == "hybridep"
    assert doc(*moe, "--framework", "torchtitan")["moe"]["grouped_experts"] is True
    assert doc(*moe, "--framework", "megatron", "--use-transformer-engine-op-fuser")["moe"]["te_op_fuser"] is True
    assert doc("llama-3.1-8b", "--gpu", "h100-sxm")["moe"] is None


def test_options_the_trainer_cannot_run_are_refused_by_train_as_by_plan(capsys):
    """One rule for train and plan (plan.train.trainer_option_problem): TP overlap only where the trainer has it,
    torchtitan's async TP only compiled, fp8 weight gathers only in fp8, bf16 gradient buffers only in Megatron."""
    base = ["train", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", "2"]
    for extra, words in ((["--framework", "fsdp", "--tp-comm-overlap"], "neither"),
                         (["--framework", "torchtitan", "--tp-comm-overlap"], "torch.compile"),
                         (["--fp8-param-gather"], "--precision fp8"),
                         (["--framework", "torchtitan", "--no-grad-reduce-in-fp32"], "--framework megatron")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(base + ["--framework", "torchtitan", "--tp-comm-overlap", "--compile"]) == 0
    capsys.readouterr()
