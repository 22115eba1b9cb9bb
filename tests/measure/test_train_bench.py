"""`gpuwise bench train`: real steps under torchrun with gloo on CPU, and the configuration checks."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from gpuwise.catalog.models import load_model
from gpuwise.cli import main, parser
from gpuwise.errors import InvalidArgument
from gpuwise.measure.dist import DistEnv
from gpuwise.measure.train_config import configure
from gpuwise.model.params import param_counts

FIXTURE = "tests/fixtures/configs/tiny-llama.json"


def _torchrun(*argv: str, nproc: int = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "gpuwise", "bench", "train", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)


def _doc(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


@pytest.mark.parametrize("layout", [["--fsdp", "full", "--recompute", "full", "--global-batch", "4"],
                                    ["--fsdp", "full", "--recompute", "op", "--global-batch", "4"],
                                    ["--tp", "2", "--sp", "--fsdp", "full", "--optimizer-impl", "foreach"]])
def test_torchrun_two_ranks_with_gloo_reports_numbers(layout: list[str]) -> None:
    doc = _doc(_torchrun(FIXTURE, "--device", "cpu", "--steps", "2", "--warmup-steps", "1", "--seq", "64",
                         "--micro-batch", "1", "--json", *layout))
    assert doc["command"] == "bench train" and doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert len(doc["step_times_s"]) == 2 and all(t > 0 and math.isfinite(t) for t in doc["step_times_s"])
    cmp_ = doc["comparison"]
    assert cmp_["step_time_s"]["measured"] > 0 and cmp_["tokens_per_s"]["measured"] > 0
    # tokens/s = global batch x seq / step time
    lay = doc["layout"]
    assert math.isclose(cmp_["tokens_per_s"]["measured"],
                        lay["global_batch"] * lay["seq"] / cmp_["step_time_s"]["measured"])
    # On CPU there is no peak, no CUDA memory and nothing to predict for: unknown, never 0.
    assert lay["optimizer_impl"] == ("foreach" if "foreach" in layout else "fused")
    assert cmp_["mfu"]["measured"] is None and cmp_["peak_allocated_bytes"]["measured"] is None
    assert cmp_["step_time_s"]["predicted"] is None and doc["gpu"] is None
    # The model built has the parameters gpuwise counts (tests/spec checks those against transformers).
    assert doc["model"]["params_built"] == param_counts(load_model(FIXTURE).spec).total


def test_shrunk_model_with_a_prediction_for_a_gpu() -> None:
    doc = _doc(_torchrun("gpt2", "--layers", "2", "--gpu", "h100-sxm", "--device", "cpu", "--steps", "1",
                         "--warmup-steps", "1", "--seq", "64", "--zero", "0", "--json"))
    assert doc["model"]["layers_built"] == 2 and doc["model"]["layers_full"] == 12
    assert doc["layout"]["sharding"] == "ddp"
    cmp_ = doc["comparison"]
    assert cmp_["step_time_s"]["predicted"] > 0 and cmp_["step_time_s"]["error"] is None  # CPU vs H100: no error
    assert doc["full_model_predicted_step_time_s"] > cmp_["step_time_s"]["predicted"]
    assert doc["mfu_denominator"]["flops_per_s_per_gpu"] == 989.5e12 and doc["mfu_denominator"]["dtype"] == "bf16"
    assert any("not comparable" in n for n in doc["notes"])


def _cfg(*argv: str, world: int = 2):
    args = parser().parse_args(["bench", "train", *argv])
    return configure(args, DistEnv(0, world, 0, world))


def test_configuration_maps_to_the_prediction_options() -> None:
    cfg = _cfg(FIXTURE, "--tp", "2", "--sp", "--fsdp", "full", "--micro-batch", "2", "--global-batch", "8",
               world=4)
    assert (cfg.dp, cfg.accumulation, cfg.tokens_per_step) == (2, 2, 8 * 2048)
    opts = cfg.train_options()
    assert opts["fsdp"] == "full" and opts["tp"] == 2 and opts["sp"] and opts["framework"] == "torchtitan"
    assert opts["sdpa_backend"] == "flash"  # the bench model calls plain F.scaled_dot_product_attention; no CUDA here
    from gpuwise.catalog.gpus import get_gpu

    # re-predicting a saved run on a CPU: PyTorch's own order on that GPU today (the H100 runs' traces show cuDNN's
    # kernels, benchmarks/results/h100-sxm/kernels-*.json)
    assert cfg.train_options(get_gpu("h100-sxm"))["sdpa_backend"] == "cudnn"
    assert cfg.train_options(get_gpu("a100-sxm-80gb"))["sdpa_backend"] == "flash"
    assert opts["optimizer_impl"] == "fused"  # torchtitan's default, as bench train's
    assert _cfg(FIXTURE, "--optimizer-impl", "foreach").train_options()["optimizer_impl"] == "foreach"
    assert _cfg(FIXTURE).sharding == "ddp" and _cfg(FIXTURE, world=1).sharding == "none"


@pytest.mark.parametrize("argv, world", [
    (["--tp", "3"], 2),                              # does not divide the ranks
    (["--tp", "2"], 4),                              # TP x DP needs FSDP2's 2-D mesh
    (["--sp"], 2),                                   # SP without TP
    (["--global-batch", "3"], 2),                    # not a multiple of dp x micro-batch
    (["--layers", "99"], 1),                         # more layers than the model has
    (["--fsdp", "full", "--zero", "0"], 2),          # conflicting
    (["--recompute", "block:2"], 2),                 # Megatron's mode: not one bench train runs
    (["--recompute", "layer:0"], 2),                 # N >= 1
])
def test_bad_configurations_are_invalid_arguments(argv: list[str], world: int) -> None:
    with pytest.raises(InvalidArgument):
        _cfg(FIXTURE, *argv, world=world)


def test_plan_file_layout_and_its_limits(tmp_path, capsys) -> None:
    plan = tmp_path / "plan.json"
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--seq", "4096",
                 "--global-batch", "64", "--no-pp", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["plans"][0]
    plan.write_text(json.dumps(doc))
    if first["cp"] > 1 or first["ep"] > 1 or first["sharding"] not in ("ddp", "fsdp-full", "fsdp-grad-op",
                                                                        "zero2", "zero3"):
        with pytest.raises(InvalidArgument):
            _cfg("llama-3.1-8b", "--plan", str(plan), world=8)
        return
    cfg = _cfg("llama-3.1-8b", "--plan", str(plan), world=8)
    assert (cfg.tp, cfg.micro_batch, cfg.global_batch, cfg.seq) == (first["tp"], first["micro_batch"], 64, 4096)
    with pytest.raises(InvalidArgument):  # the plan is for 8 ranks
        _cfg("llama-3.1-8b", "--plan", str(plan), world=2)
    with pytest.raises(InvalidArgument):  # and for another model
        _cfg("gpt2", "--plan", str(plan), world=8)


def test_one_gpu_for_every_rank_is_refused() -> None:
    """Under torchrun each rank takes its LOCAL_RANK GPU; `--device cuda:N` would stack them all on one."""
    from gpuwise.measure import dist
    from gpuwise.measure._deps import MeasureUnavailable

    with pytest.raises(MeasureUnavailable, match="every rank on one GPU"):
        dist.init(DistEnv(0, 2, 0, 2), "cuda:1", "gpuwise bench train")


def test_the_default_sequence_fits_the_model() -> None:
    """The README's `bench train gpt2 --device cpu` ran 2,048 tokens into GPT-2's 1,024 positions (issue 21, item 11):
    the default is 2,048 or the model's maximum if smaller; an explicit --seq beyond it is still refused."""
    assert _cfg("gpt2", world=2).seq == 1024
    assert _cfg(FIXTURE, world=2).seq == min(2048, load_model(FIXTURE).spec.max_position_embeddings or 2048)
    with pytest.raises(InvalidArgument, match="learned positions"):
        _cfg("gpt2", "--seq", "2048", world=2)
