"""Roofline of a model's operations on a GPU: FLOPs, bytes moved, arithmetic intensity, bound, time.

For one phase (prefill of `batch` x `seq` tokens, or one decode step of `batch` sequences at `seq` cached
tokens), every kind of kernel of a transformer block is placed on the GPU's roofline: attainable FLOP/s =
min(peak, intensity x bandwidth). The ridge point (peak / bandwidth, FLOP per byte) separates memory-bound
operations (left) from compute-bound ones (right). The achievable line is shown beside the datasheet one: peak x
matmul efficiency, and the rate a memory-bound GEMM streams its operands at (DeviceProfile.gemm_bandwidth, what
estimate/kernels.matmul_s costs the weight GEMMs at), since the operations whose bound matters are the GEMMs; each
operation's time is max(FLOPs / achievable peak, bytes / its bandwidth), the streaming kernels (attention over the
cache, norms) at the copy bandwidth. Sums are over all blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..catalog.devices import DeviceProfile
from ..model.spec import ModelSpec
from .kernels import recurrent_scan_rate
from .layer_ops import block_ops, head_gemm, keys_per_query

STREAMING_OPS = ("attention (scores, values)", "norms, residuals, activation", "recurrent scan (state)")
"""The operation groups that are not weight GEMMs: timed at the copy bandwidth."""

Phase = Literal["prefill", "decode"]
PHASES: tuple[str, ...] = get_args(Phase)


@dataclass(frozen=True, slots=True)
class RooflineOp:
    name: str
    flops: float
    bytes: float
    time_s: float
    """At the achievable roofline (efficiencies applied)."""

    @property
    def intensity(self) -> float:
        """FLOP per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True, slots=True)
class Roofline:
    dtype: str
    peak_flops: float
    bandwidth_bytes_per_s: float
    achievable_flops: float
    achievable_bandwidth_bytes_per_s: float
    """The rate a memory-bound GEMM streams its operands at (the achievable line)."""
    ops: tuple[RooflineOp, ...]
    copy_bandwidth_bytes_per_s: float = 0.0
    """The streaming kernels' rate (attention over the cache, norms); 0: the achievable line's."""

    @property
    def ridge(self) -> float:
        """Datasheet ridge point, FLOP/byte (H100 SXM bf16: 989e12 / 3.35e12 = 295)."""
        return self.peak_flops / self.bandwidth_bytes_per_s

    @property
    def achievable_ridge(self) -> float:
        return self.achievable_flops / self.achievable_bandwidth_bytes_per_s

    def bandwidth(self, op: RooflineOp) -> float:
        """Bytes/s `op` streams at (`op_bandwidth`)."""
        return op_bandwidth(op.name, self.achievable_bandwidth_bytes_per_s,
                            self.copy_bandwidth_bytes_per_s or self.achievable_bandwidth_bytes_per_s)

    def bound(self, op: RooflineOp) -> str:
        return "compute" if op.intensity >= self.achievable_flops / self.bandwidth(op) else "memory"


def op_bandwidth(name: str, gemm_bandwidth: float, copy_bandwidth: float) -> float:
    """Bytes/s an operation group streams at: the copy rate for the streaming kernels, the GEMMs' rate for the rest."""
    return copy_bandwidth if name in STREAMING_OPS else gemm_bandwidth


def ridge_point(peak_flops: float, bandwidth_bytes_per_s: float) -> float:
    return peak_flops / bandwidth_bytes_per_s


def roofline(spec: ModelSpec, profile: DeviceProfile, *, dtype: str, phase: str, batch: int, seq: int,
             weight_bytes_per_param: float = 2.0, kv_bytes_per_element: float = 2.0) -> Roofline:
    """Operations of one prefill (batch x seq tokens) or one decode step (batch sequences at seq cached tokens)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}")
    gpu = profile.gpu
    peak = gpu.peak_flops[dtype]
    bw = gpu.memory_bandwidth_bytes_per_s
    a_peak = profile.matmul_flops(dtype)
    a_bw = profile.gemm_bandwidth
    decode = phase == "decode"
    rows = batch if decode else batch * seq
    e = 2.0
    sums: dict[str, list[float]] = {}

    def add(name: str, flops: float, nbytes: float) -> None:
        cur = sums.setdefault(name, [0.0, 0.0])
        cur[0] += flops
        cur[1] += nbytes

    for layer in range(spec.num_layers):
        keys = seq if decode else keys_per_query(spec, layer, seq)
        ops = block_ops(spec, layer, tokens=rows, keys=keys, kv_rows=batch * keys if decode else None,
                        sequences=batch if decode else None)
        for g in ops.gemms:
            if g.name.startswith("experts"):
                name = "experts"
            elif g.name.startswith("mixer"):
                name = "recurrent projections"
            elif g.name.startswith(("mlp", "shared")):
                name = "mlp"
            else:
                name = "attention projections" if g.name != "router" else "router"
            add(name, g.flops, g.count * (g.n * g.k * weight_bytes_per_param + (g.m * g.k + g.m * g.n) * e))
        if ops.recurrent_kind is not None:  # a hybrid model's recurrent layer: its scan (prefill), its state (decode)
            add("recurrent scan (state)", ops.recurrent_flops, ops.recurrent_state_bytes)
        else:
            add("attention (scores, values)", ops.attention_flops,
                ops.attention_io_elements * (kv_bytes_per_element if decode else e))
        add("norms, residuals, activation", 0.0, ops.stream_bytes)
    hg = head_gemm(spec, batch)
    add("lm head", hg.flops, hg.n * hg.k * weight_bytes_per_param + (hg.m * hg.k + hg.m * hg.n) * e)
    # a recurrent layer's chunked scan runs at its kernels' measured rate, far below the matrix peak
    rate = {"recurrent scan (state)": recurrent_scan_rate(profile, spec.linear.kind)} if spec.linear else {}
    out = tuple(RooflineOp(name, f, b, max(f / rate.get(name, a_peak), b / op_bandwidth(name, a_bw, profile.bandwidth)))
                for name, (f, b) in sums.items())
    return Roofline(dtype=dtype, peak_flops=peak, bandwidth_bytes_per_s=bw, achievable_flops=a_peak,
                    achievable_bandwidth_bytes_per_s=a_bw, ops=out, copy_bandwidth_bytes_per_s=profile.bandwidth)
