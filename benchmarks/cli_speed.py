"""Wall time of `gpuwise fit` / `train` as a user runs it: a fresh process each time (imports included).

    python benchmarks/cli_speed.py [--runs 15]

Prints the median and worst wall time per command. The issue's budget is 0.3 s on a 2-core machine;
this is a benchmark that prints figures, not a timed test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["fit", "llama-3.1-8b", "--gpu", "h100"],
    ["fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "llamacpp", "--weights", "Q4_K_M", "--json"],
    ["fit", "deepseek-r1", "--gpu", "h200", "--num-gpus", "8", "--json"],
    ["fit", "qwen3-235b-a22b", "--gpu", "a100-sxm-80gb", "--num-gpus", "8", "--engine", "hf"],
    ["train", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "8", "--seq", "8192", "--global-batch", "64",
     "--fsdp", "full", "--json"],
    ["train", "llama-3.1-405b", "--gpu", "h100", "--num-gpus", "16384", "--tp", "8", "--pp", "16", "--cp", "16", "--pp-first-layers", "7", "--pp-last-layers", "7",
     "--seq", "131072", "--global-batch", "128", "--sp", "--zero", "1", "--framework", "megatron"],
    ["train", "deepseek-v3", "--gpu", "h200", "--num-gpus", "2048", "--pp", "16", "--pp-first-layers", "1", "--ep", "64", "--seq", "4096",
     "--global-batch", "8192", "--zero", "1", "--framework", "megatron", "--json"],
    ["models"],
    ["models", "--fits", "2x rtx-3090"],  # issue 20: the whole catalog in <= 0.5 s
    ["models", "--fits", "h100", "--engine", "vllm", "--json"],
    ["gpus"],
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("gpuwise")
    base = [exe] if exe else [sys.executable, "-m", "gpuwise"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    print(f"launcher: {' '.join(base)}; {args.runs} runs each; {os.cpu_count()} CPUs")
    for cmd in COMMANDS:
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            proc = subprocess.run(base + cmd, capture_output=True, env=env)
            times.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr.decode())
        print(f"{statistics.median(times) * 1000:7.1f} ms median  {max(times) * 1000:7.1f} ms worst  "
              f"gpuwise {' '.join(cmd)}")


if __name__ == "__main__":
    main()
