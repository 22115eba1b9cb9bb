"""Inference engine profiles: the few constants each engine's memory model needs, with their sources.

Every constant is here and nowhere else. None of them was measured by gpuwise yet (no GPU was lent
for this part); each carries the public source it comes from. `gpuwise calibrate` (later) replaces
the CUDA-context figure with a measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from ..units import GiB, MiB

Engine = Literal["hf", "vllm", "llamacpp", "trtllm", "sglang"]
"""Serving engines whose speed is modelled: transformers, vLLM, llama.cpp, TensorRT-LLM, SGLang."""
MemoryEngine = Literal["hf", "vllm", "llamacpp", "sglang"]
"""Engines whose memory layout is modelled (TensorRT-LLM's paged KV pool is taken as vLLM's)."""
PAGED_TP_ENGINES = frozenset({"vllm", "sglang"})
"""Engines that split every matrix over tensor parallelism and keep a paged KV pool."""
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


CUDA_RESERVED_BYTES = int(0.5 * GiB)
"""Memory nvidia-smi counts in a GPU's total that CUDA does not offer (cudaMemGetInfo's total, which vLLM multiplies
by gpu_memory_utilization): vLLM's startup logs print total_gpu_memory 79.19 GiB on H100 SXM (nvidia-smi 81,559 MiB =
79.65 GiB), 139.8 on H200 (140.4), 44.42 on L40S (44.99), 23.58 on RTX 3090 (24.0): 0.42-0.60 GiB
(validation/serving_sources/kv_capacity.toml, calibration rows)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VLLMDefaults:
    """vLLM V1 (v0.10+) memory rule and defaults (vllm/v1/worker/gpu_worker.py determine_available_memory):

    KV pool = gpu_memory_utilization x CUDA's total - weights - activation peak of the profiling run - non-torch
    memory allocated during it. The CUDA context and NCCL's start-up buffers were allocated before the baseline
    snapshot, CUDA graphs are captured after the pool is sized: neither comes out of the pool (they live in the
    1 - gpu_memory_utilization left over). Checked on startup logs: v0.19 Llama-3.1-8B on H100 at 0.95:
    0.95 x 79.19 - 14.99 - 1.89 - 0.25 = 58.10 GiB, logged 58.11.
    """

    gpu_memory_utilization: float = 0.9
    """Share of CUDA's total GPU memory vLLM may use for weights, activations and the KV cache pool."""
    block_size: int = 16
    """Tokens per KV-cache page (vllm/platforms/cuda.py)."""
    non_torch_bytes: int = int(0.25 * GiB)
    """Non-torch memory the profiling run adds at TP 1 (cuBLAS workspaces, ...): 0.13-0.35 GiB in the logs, 0.25 in
    every v0.19 TP-1 log (kv_capacity.toml, calibration rows)."""
    non_torch_bytes_tp: int = int(2.1 * GiB)
    """The same with tensor parallelism (NCCL and custom all-reduce buffers): 2.07-2.21 GiB in the v0.19 TP 2 and TP 4
    logs (calibration rows). v0.11 logged 0.54 GiB at TP 2, where this predicts a pool ~1.5 GiB smaller than that
    version's: the rule follows the newest version."""
    sampler_fp32_copies: float = 4.0
    """The profiling run's sampler warm-up holds about four fp32 [max_num_seqs, vocab] tensors (logits, probabilities
    and the top-p/top-k sort's values and indices): the v0.17-0.19 activation peaks of Llama-3.1-8B (1.89 GiB,
    1024 x 128,256 vocab: 3.85 copies), Qwen2.5-72B TP 2 (2.29 GiB: 3.9) and Llama-3.3-70B TP 4 (1.97 GiB: 4.0)
    (calibration rows). v0.11-0.15 held about 10 copies (Qwen3-14B: 5.64 GiB at v0.15, 2.23 at v0.17)."""
    sampler_fp32_copies_before_0_17: float = 10.0
    """v0.10-0.16: the activation peaks of Qwen3-14B at v0.15 (5.64 GiB: 9.7 copies of 1024 x 151,936), gpt-oss-20b
    at v0.11 (7.38 GiB: 9.6) and Llama-3.3-70B at v0.11 (4.84 GiB: 9.9) (calibration rows)."""
    non_torch_bytes_tp_before_0_17: int = int(0.55 * GiB)
    """v0.10-0.16 at TP 2: 0.54-0.55 GiB (v0.11 logs, calibration rows)."""
    cuda_graph_bytes: int = int(0.5 * GiB)
    """CUDA graph pools (logged 'Graph capturing finished ... took 0.4-1.9 GiB'): outside the pool, in the memory
    gpu_memory_utilization leaves free; only a utilization near 1 runs out of it."""

    def sampler_copies(self, version: tuple[int, int]) -> float:
        return self.sampler_fp32_copies if version >= (0, 17) else self.sampler_fp32_copies_before_0_17

    def non_torch(self, tp: int, version: tuple[int, int]) -> int:
        if tp == 1:
            return self.non_torch_bytes
        return self.non_torch_bytes_tp if version >= (0, 17) else self.non_torch_bytes_tp_before_0_17

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


@dataclass(frozen=True, slots=True, kw_only=True)
class SGLangDefaults:
    """SGLang's memory rule and defaults (python/sglang/srt/server_args.py, v0.4.7-0.5; model_runner.py):

    mem_fraction_static of the memory free at start (CUDA's total less the context) holds the weights and the KV
    pool; the rest is left for activations and CUDA graphs. Its default leaves a reserve by GPU size: (2.8 +
    tp x pp / 10) GiB under 35 GiB, (9.5 + tp x pp / 2) under 90, (12 + tp x pp / 2) under 160, else 32 GiB; the
    prefill chunk is 2,048 tokens under 35 GiB, 8,192 under 160 GiB, else 16,384; at most max_total_tokens / 2
    (and 4,096) requests run at once. Checked on QwQ-32B on 4 x L4 at 0.85: 0.85 x 21.5 - 15.54 = 2.74 GiB,
    logged 46,611 tokens = 2.84 GiB (kv_capacity.toml, calibration).
    """

    page_size: int = 1
    max_running_requests: int = 4096

    @staticmethod
    def mem_fraction_static(gpu_memory_bytes: int, tp: int) -> float:
        gib = gpu_memory_bytes / GiB
        if gib < 35:
            reserved = 2.8 + tp / 10
        elif gib < 90:
            reserved = 9.5 + tp / 2
        elif gib < 160:
            reserved = 12 + tp / 2
        else:
            reserved = 32.0
        return round((gib - reserved) / gib, 3)

    @staticmethod
    def chunked_prefill_size(gpu_memory_bytes: int) -> int:
        gib = gpu_memory_bytes / GiB
        return 2048 if gib < 35 else 8192 if gib < 160 else 16384


VLLM = VLLMDefaults()
SGLANG = SGLangDefaults()
VLLM_NEWEST = (0, 19)
"""The newest vLLM whose startup logs the memory rule was checked on; the default version."""
VLLM_OLDEST = (0, 10)
"""Before 0.10 vLLM sized its pool by other rules (the V0 engine): not modelled."""


def vllm_version(text: str | None) -> tuple[int, int]:
    """'0.11.0' -> (0, 11); None -> the newest modelled. Raises ValueError for text that is not a version."""
    if text is None:
        return VLLM_NEWEST
    parts = text.strip().lstrip("v").split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise ValueError(f"not a vLLM version: '{text}' (expected e.g. 0.11.0)")
    return int(parts[0]), int(parts[1])


_RELEASE = re.compile(r"v*(\d+)\.(\d+)(?:\.(\d+))?")  # leading v's skipped, as `vllm_version` skips them


def release_version(text: str, engine: str) -> tuple[int, int, int]:
    """'0.5.10' or 'v0.5.10.post1' -> (0, 5, 10); '0.5' -> (0, 5, 0) (what follows the numbers is ignored). Raises
    ValueError for text that does not start with a version."""
    m = _RELEASE.match(text.strip().lower())
    if m is None:
        raise ValueError(f"not a {engine} version: '{text}' (expected e.g. 0.5.10)")
    return int(m[1]), int(m[2]), int(m[3] or 0)


LLAMACPP = LlamaCppDefaults()

DEFAULT_CONTEXT = 4096
"""A realistic runtime context, not the model's advertised maximum: llama.cpp's default n_ctx before
Dec 2025 and Ollama's default num_ctx for GPUs under 24 GiB (ollama docs/context-length.mdx)."""
