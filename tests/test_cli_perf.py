"""`gpuwise infer`, `gpuwise roofline` and the speed part of `gpuwise train --json`."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_train_json_has_the_speed_keys(capsys):
    d = _json(capsys, ["train", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "16", "--seq", "4096",
                       "--global-batch", "32", "--fsdp", "full", "--recompute", "full", "--train-tokens", "1e11",
                       "--json"])
    for key in ("step_time_s", "mfu", "hfu", "tokens_per_s", "tokens_per_s_per_gpu", "time_breakdown_s",
                "train_time_s", "gpu_hours", "cost_usd", "energy_kwh", "mfu_denominator", "topology"):
        assert key in d, key
    assert d["mfu_denominator"]["dtype"] == "bf16"
    assert sum(d["time_breakdown_s"].values()) == pytest.approx(d["step_time_s"], rel=1e-4)
    assert d["tokens_per_s"] == pytest.approx(32 * 4096 / d["step_time_s"], rel=1e-4)
    assert d["train_time_s"] == pytest.approx(1e11 / d["tokens_per_s"], rel=1e-4)
    assert d["topology"]["gpus_per_node"] == 8


def test_train_flags_change_the_network(capsys):
    base = ["train", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "64", "--seq", "4096", "--global-batch", "64",
            "--json"]
    fast = _json(capsys, base)
    slow = _json(capsys, base + ["--inter-node-gbps", "25"])
    assert slow["time_breakdown_s"]["dp_comm"] > fast["time_breakdown_s"]["dp_comm"]
    priced = _json(capsys, base + ["--train-tokens", "1e9", "--usd-per-gpu-hour", "1"])
    assert priced["usd_per_gpu_hour"] == 1 and priced["cost_usd"] == pytest.approx(priced["gpu_hours"], rel=1e-4)


def test_infer_json(capsys):
    d = _json(capsys, ["infer", "llama-3.1-8b", "--gpu", "h100", "--batch", "4", "--prompt-tokens", "1000",
                       "--output-tokens", "200", "--samples", "2", "--json"])
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s", "output_tokens_per_s_per_sequence", "requests_per_s",
                "compute_bound_batch", "usd_per_million_output_tokens", "samples_curve", "prefill"):
        assert key in d, key
    assert d["output_tokens_per_s"] == pytest.approx(8 / d["tpot_s"], rel=1e-4)
    assert d["prefill"]["bound"] == "compute" and d["decode_first_step"]["bound"] == "memory"


def test_infer_trtllm_and_unknown_price(capsys):
    d = _json(capsys, ["infer", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--weights", "fp8", "--json"])
    assert d["compute_dtype"] == "fp8"
    d = _json(capsys, ["infer", "llama-3.1-8b", "--gpu", "gaudi2", "--json"])
    assert d["usd_per_million_output_tokens"] is None


def test_roofline_text_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "roof.svg"
    assert main(["roofline", "llama-3.1-8b", "--gpu", "h100", "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ridge 295 FLOP/byte" in text and out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["infer", "llama-3.1-8b", "--gpu", "h100", "--engine", "tgi"], "invalid choice"),
    (["infer", "llama-3.1-8b", "--gpu", "h100", "--prompt-tokens", "0"], "at least 1"),
    (["infer", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--weights", "Q4_K_M"], "GGUF"),
    (["roofline", "llama-3.1-8b", "--gpu", "h100", "--dtype", "fp4"], "no fp4 peak"),
    (["roofline", "llama-3.1-8b", "--gpu", "h100", "--plot", "x.gif"], ".png or .svg"),
    (["train", "llama-3.1-8b", "--gpu", "h100", "--inter-node-gbps", "-3"], "positive number"),
    (["train", "llama-3.1-8b", "--gpu", "h100", "--profile", "/nonexistent.json"], "no such file"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse rejects the value itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
