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
assert not any(m.split('.')[0] in ('torch', 'transformers') for m in sys.modules)
print('OK')
"""


def test_core_runs_without_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("OK")
