"""`gpuwise calibrate`'s GEMM sweep: which dtypes and shapes run on a device, and timing one GEMM.

GEMM TFLOP/s per dtype (fp32 without TF32, tf32, bf16, fp16, fp8 via `torch._scaled_mm` where the GPU has it) over
square and LLM-shaped problems, each timed with timing.py's discipline (inputs rotated through more than twice the
L2 cache, random normal values). Fitting the performance model to the sweep is calibrate_fit.py's job.
"""

from __future__ import annotations

from ..errors import InvalidArgument
from ..units import MiB
from ..dtypes import peak_operand_bytes
from .timing import Stats, budget_reps, buffers_to_rotate, time_op

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")

# (m, n, k): square sweeps, and the GEMMs of a Llama-3.1-8B / 70B layer at 8,192 tokens per micro-batch
# (QKV, attention output, gate+up, down), which is where training time goes.
_LLM_SHAPES = ((8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336),
               (8192, 10240, 8192), (8192, 57344, 8192), (8192, 8192, 28672))
_SQUARES_GPU = (256, 512, 1024, 2048, 4096, 6144, 8192, 12288, 16384)
_SQUARES_GPU_QUICK = (1024, 4096, 8192)
_SQUARES_CPU = (128, 256, 512, 1024)
_SQUARES_CPU_QUICK = (128, 256, 512)
_ONE_ROW_GPU = ((1024, 1024), (2048, 2048), (4096, 4096), (4096, 8192), (8192, 8192), (8192, 14336), (8192, 28672))
_ONE_ROW_GPU_QUICK = ((2048, 2048), (4096, 8192), (8192, 14336))
_ONE_ROW_CPU = ((256, 256), (512, 512), (1024, 1024), (1024, 2048))
"""(k, n) of the one-row GEMMs x[1, k] @ w[k, n] whose times against bytes give a memory-bound GEMM's line (a decode
step's weight GEMMs: 2 MB to 470 MB in bf16 on a GPU)."""
_FP32_MAX_DIM = 8192
"""fp32 without tensor cores is ~15x slower than bf16: its sweep stops at 8,192 to keep calibrate in minutes."""


def parse_dtypes(text: str | None) -> tuple[str, ...]:
    if not text:
        return DTYPES
    out = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in DTYPES]
    if bad or not out:
        raise InvalidArgument(f"--dtypes: unknown {', '.join(bad) or 'empty list'} (choose from {', '.join(DTYPES)})")
    return out


def unsupported(torch, dev, dtype: str) -> str | None:
    """None when `dtype` GEMMs can run on `dev`, else why not."""
    if dev.type == "cpu":
        if dtype == "tf32":
            return "TF32 is a tensor-core mode of NVIDIA GPUs (Ampere and later), not a CPU format"
        if dtype == "fp8":
            return "fp8 GEMMs need an NVIDIA GPU of compute capability 8.9+ (Ada, Hopper, Blackwell)"
        return None
    major, minor = torch.cuda.get_device_capability(dev)
    if dtype in ("tf32", "bf16") and major < 8:
        return f"{dtype} needs compute capability 8.0+ (this GPU is {major}.{minor})"
    if dtype == "fp8":
        if (major, minor) < (8, 9):
            return f"fp8 needs compute capability 8.9+ (this GPU is {major}.{minor})"
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return f"this PyTorch ({torch.__version__}) has no float8 GEMM (torch._scaled_mm)"
    return None


def shapes(dev, dtype: str, quick: bool) -> list[tuple[int, int, int]]:
    """The (m, n, k) problems the sweep times for `dtype` on `dev`."""
    if dev.type == "cpu":
        return [(s, s, s) for s in (_SQUARES_CPU_QUICK if quick else _SQUARES_CPU)]
    squares = _SQUARES_GPU_QUICK if quick else _SQUARES_GPU
    llm = _LLM_SHAPES[2:4] if quick else _LLM_SHAPES
    out = [(s, s, s) for s in squares] + list(llm)
    if dtype == "fp32":
        out = [s for s in out if max(s) <= _FP32_MAX_DIM]
    return out


def one_row_sizes(dev, quick: bool) -> tuple[tuple[int, int], ...]:
    if dev.type == "cpu":
        return _ONE_ROW_CPU[:3] if quick else _ONE_ROW_CPU
    return _ONE_ROW_GPU_QUICK if quick else _ONE_ROW_GPU


def _cache_bytes(torch, dev) -> int:
    if dev.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 64 * MiB)
    return 64 * MiB  # a server CPU's last-level cache is tens of MiB: assume 64 MiB


def time_gemm(torch, dev, dtype: str, m: int, n: int, k: int, quick: bool) -> Stats:
    """One m x n x k GEMM in `dtype` (the caller sets TF32 on or off for fp32/tf32), timed over rotated inputs."""
    tdt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp8": torch.float32}[dtype]
    set_bytes = int((m * k + k * n) * peak_operand_bytes(dtype))
    count = buffers_to_rotate(set_bytes, _cache_bytes(torch, dev))
    if dev.type == "cuda":  # never let the rotation itself take more than a quarter of the free memory
        free, _ = torch.cuda.mem_get_info(dev)
        count = max(1, min(count, int(free * 0.25) // max(1, set_bytes + m * n * 4)))
    a = [torch.randn(m, k, device=dev, dtype=tdt) for _ in range(count)]
    if dtype == "fp8":
        f8 = torch.float8_e4m3fn
        a = [x.to(f8) for x in a]
        b = [torch.randn(n, k, device=dev).to(f8).t() for _ in range(count)]  # column-major B, as _scaled_mm wants
        one = torch.ones((), device=dev, dtype=torch.float32)

        def fn(i: int):
            return torch._scaled_mm(a[i % count], b[i % count], one, one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)
    else:
        b = [torch.randn(k, n, device=dev, dtype=tdt) for _ in range(count)]
        out = torch.empty(m, n, device=dev, dtype=tdt)

        def fn(i: int):
            return torch.matmul(a[i % count], b[i % count], out=out)

    warmup, reps = budget_reps(torch, dev, fn, quick)
    return time_op(torch, dev, fn, warmup=warmup, reps=reps)
