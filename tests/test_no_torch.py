"""The analytical path must not import torch (nor transformers): it must work where they are absent
and stay fast. Run in a subprocess where importing torch is made to fail."""

from __future__ import annotations

import subprocess
import sys

CODE = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers', 'numpy', 'huggingface_hub'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from gpuwise.cli import main
for argv in (['fit', 'llama-3.1-8b', '--gpu', 'h100', '--json'], ['models', '--json'], ['gpus', '--json'],
             ['fit', 'deepseek-v3', '--gpu', 'h200', '--num-gpus', '8'],
             ['fit', 'mixtral-8x7b', '--gpu', 'rtx-4090', '--engine', 'llamacpp', '--weights', 'Q4_K_M'],
             ['train', 'llama-3.1-70b', '--gpu', 'h100', '--num-gpus', '64', '--tp', '8', '--pp', '4', '--json'],
             ['train', 'llama-3.1-8b', '--gpu', 'a100-80gb', '--finetune', 'qlora', '--optimizer', 'adamw-8bit'],
             ['infer', 'llama-3.1-8b', '--gpu', 'h100', '--batch', '8', '--json'],
             ['infer', 'llama-3-8b', '--gpu', 'rtx-4090', '--engine', 'llamacpp', '--weights', 'Q4_K_M'],
             ['roofline', 'llama-3.1-8b', '--gpu', 'h100', '--phase', 'prefill', '--json']):
    assert main(argv) == 0, argv
from gpuwise.serve.api import handle, openapi
assert handle('GET', 'fit', 'model=llama-3.1-8b&gpu=h100')[0] == 200 and openapi()['paths']
assert not any(m.split('.')[0] in ('torch', 'transformers') for m in sys.modules)
print('OK')
"""


def test_core_runs_without_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("OK")


MEASURE_CODE = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'pynvml'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from gpuwise.cli import main
for argv in (['calibrate', '--device', 'cpu', '--quick'], ['bench', 'train', 'gpt2', '--device', 'cpu'],
             ['bench', 'comm', '--device', 'cpu'], ['watch', '--once']):
    assert main(argv) == 2, argv
import gpuwise.measure.tracker, gpuwise.measure.rules, gpuwise.measure.callbacks  # importable without torch
assert 'torch' not in sys.modules
print('OK')
"""


def test_measurement_without_torch_or_nvml_is_one_line_each() -> None:
    """The `measure` extra missing: each command says so in one line on stderr and exits 2."""
    proc = subprocess.run([sys.executable, "-c", MEASURE_CODE], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("gpuwise: error:") for line in lines), lines
    assert sum("PyTorch" in line for line in lines) == 2  # calibrate, bench train; bench comm: torchrun first
    assert "NVML" in lines[3] or "nvidia-ml-py" in lines[3]
