"""The GPU benchmark scripts of benchmarks/ run end to end on the CPU (`--device cpu`, tiny shapes): what they
import from gpuwise exists and their logic runs, so that a lent GPU's few minutes are not spent on an ImportError."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("script, args", [
    ("fp8_linear.py", []),
    ("moe_grouped_gemm.py", ["--models", "qwen3-30b-a3b:8", "--tokens", "1024"]),
    ("moe_layer.py", ["--tokens", "4096", "--profile"]),
    ("moe_permute.py", ["--tokens", "4096"]),
    ("attention_train.py", ["--seqs", "64", "--heads", "2"]),
    ("prefill_sustained.py", ["--model", "qwen3-0.6b", "--layers", "1", "--shapes", "1x64,2x32", "--seconds", "0.5"]),
    ("megatron_expert_extras.py", ["--experts", "2"]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_benchmark_dry_run_on_cpu(script: str, args: list[str], tmp_path) -> None:
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=str(BENCH.parent / "src"))
    done = subprocess.run([sys.executable, script, "--device", "cpu", "--json", str(out), *args], cwd=BENCH, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "failed" not in done.stdout, done.stdout[-2000:]
    assert out.stat().st_size > 0


def test_cudnn_sdpa_prices_its_committed_run_on_cpu() -> None:
    """benchmarks/cudnn_sdpa.py needs cuDNN's frontend on a GPU to measure; its --predict table runs anywhere."""
    env = dict(os.environ, PYTHONPATH=str(BENCH.parent / "src"))
    done = subprocess.run([sys.executable, "cudnn_sdpa.py", "--predict", "results/h200-sxm/cudnn-sdpa.json"], cwd=BENCH,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("| cudnn-frontend |") == 32
