"""Inference engine profiles: the few constants each engine's memory model needs, with their sources.

Every constant is here and nowhere else. None of them was measured by gpuwise yet (no GPU was lent
for this part); each carries the public source it comes from. `gpuwise calibrate` (later) replaces
the CUDA-context figure with a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..units import GiB, MiB

Engine = Literal["hf", "vllm", "llamacpp", "trtllm"]
"""Serving engines whose speed is modelled: transformers, vLLM, llama.cpp, TensorRT-LLM."""
MemoryEngine = Literal["hf", "vllm", "llamacpp"]
"""Engines whose memory layout is modelled (TensorRT-LLM's paged KV pool is taken as vLLM's)."""
ENGINES: tuple[str, ...] = get_args(MemoryEngine)
SERVING_ENGINES: tuple[str, ...] = get_args(Engine)

CUDA_CONTEXT_BYTES = int(0.5 * GiB)
"""CUDA context + kernels of a PyTorch process with lazy module loading (CUDA >= 11.7 default).
pytorch/pytorch PR #86509 measured 274 MiB (lazy) vs 636 MiB (eager); issues #107667 (~300 MB) and
#109888 (~400 MB) report similar. 0.5 GiB sits at the top of that range: contexts grow with the
number of loaded kernels (cuBLAS, flash attention, NCCL)."""

CUBLAS_WORKSPACE_BYTES = 32 * MiB
"""PyTorch's cuBLAS/cuBLASLt workspace per stream on Hopper (8.1 MiB elsewhere):
aten/src/ATen/cuda/CublasHandlePool.cpp. We use the larger value everywhere."""

GGML_CUDA_CONTEXT_BYTES = int(0.3 * GiB)
"""A llama.cpp (ggml-cuda) process: a CUDA context without PyTorch's kernel libraries. Estimate, not
sourced by a measurement; llama.cpp's own `--fit` leaves a 1 GiB margin per device (PR #16653)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VLLMDefaults:
    """vLLM V1 defaults (vllm/config/cache.py, vllm/engine/arg_utils.py, v0.11-0.13)."""

    gpu_memory_utilization: float = 0.9
    """Share of *total* GPU memory vLLM may use for weights, activations and the KV cache pool."""
    block_size: int = 16
    """Tokens per KV-cache page (vllm/platforms/cuda.py)."""
    non_torch_bytes: int = int(0.2 * GiB)
    """Memory outside PyTorch's allocator at TP=1 (NCCL, cuBLAS handles) as vLLM's startup log reports it."""
    cuda_graph_bytes: int = int(0.5 * GiB)
    """CUDA graph pools for the default capture sizes (vLLM logs 'Graph capturing finished ... took 0.5 GiB';
    order of magnitude, varies by model)."""
    profile_slack_bytes: int = 150 * MiB
    """vllm/v1/worker/gpu_worker.py keeps this much unaccounted as a safety margin."""

    @staticmethod
    def scheduler_limits(gpu_memory_bytes: int, gpu_id: str) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) that vLLM picks for the server (arg_utils.py):
        1024 / 8192 on GPUs with >= 70 GiB that are not A100s, else 256 / 2048."""
        if gpu_memory_bytes >= 70 * GiB and not gpu_id.startswith("a100"):
            return 1024, 8192
        return 256, 2048


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaCppDefaults:
    """llama.cpp defaults (common/common.h)."""

    n_ubatch: int = 512
    """Physical batch: the compute buffer is sized for this many tokens."""
    flash_attention: bool = True
    """FA is on by default on CUDA (-fa auto); with FA the attention scratch is ~2 bytes per (token, ctx)."""
    token_embedding_on_gpu: bool = False
    """llama.cpp keeps token_embd in host memory (only rows for the batch are gathered)."""
    ctx_pad: int = 256
    """llama.cpp rounds n_ctx up to a multiple of 256 KV cells (src/llama-context.cpp, GGML_PAD(n_ctx, 256))."""
    sched_copies: int = 4
    """With several GPUs the ggml scheduler keeps GGML_SCHED_MAX_COPIES = 4 copies of the inputs for pipeline
    parallelism, which multiplies the context-sized part of the compute buffer (ggml-backend.c)."""


VLLM = VLLMDefaults()
LLAMACPP = LlamaCppDefaults()

DEFAULT_CONTEXT = 4096
"""A realistic runtime context, not the model's advertised maximum: llama.cpp's default n_ctx before
Dec 2025 and Ollama's default num_ctx for GPUs under 24 GiB (ollama docs/context-length.mdx)."""
