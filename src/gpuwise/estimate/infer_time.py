"""Inference latency: prefill (time to first token) and decode (time per output token), kernel by kernel.

A decode step for `batch` sequences at `context` cached tokens runs every block's kernels once with `batch` GEMM
rows: the weights are read once for the whole batch (memory-bound until the batch reaches the ridge point), each
sequence's K/V cache is read by the attention kernel, and every kernel pays the fixed per-kernel cost. Engines
that do not replay decode as CUDA graphs also pay host launch time per kernel; the step takes the larger of the
GPU time and the host time (the host runs ahead of the GPU), plus the engine's per-step overhead.
Prefill runs the prompt through the same kernels with `batch x prompt` rows (in `prefill_chunk` pieces for
llama.cpp) and computes logits for the last token only.

Multi-GPU: tensor parallelism splits every matrix and adds two all-reduces per block; layer split gives each GPU
contiguous blocks that one token visits in turn (no speed-up for one sequence) and adds one hop per boundary.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, replace
from functools import lru_cache

from ..catalog._toml import load_toml
from ..catalog.attention_kernels import band_work, flash_tiles
from ..catalog.devices import DeviceProfile
from ..errors import InvalidArgument
from ..model.spec import ModelSpec
from ..units import GB
from .comm import Topology
from .engines import SERVING_ENGINES as ENGINES, release_version
from .kernels import attention_s, matmul_s, memory_s, recurrent_scan_s
from .layer_ops import (ROUTED_GEMMS, attention_head_dim, block_ops, block_parts, block_signature, head_gemm,
                        keys_per_query, recurrent_blocks)


@dataclass(frozen=True, slots=True)
class EnginePerf:
    name: str
    multi_gpu: str
    cuda_graphs: bool
    host_s_per_kernel: float
    launch_gap_s: float
    step_overhead_s: float
    kernels_per_block: int
    kernel_style: str
    gemv_bytes_per_s_per_sm: float
    gemm_efficiency: float
    hopper_mma_factor: float
    quantized_gemm_factor: float
    prefill_chunk: int
    source: str
    metal_gemm_efficiency: float = 0.0
    """llama.cpp's Metal matrix kernels on Apple GPUs: their share of the GPU's FP16 (= FP32) ALU peak."""
    frontend_latency_s: float = 0.0
    """Serving over HTTP: fixed latency of a request's tokens on their way to the client (estimate/serving.Frontend)."""
    frontend_request_s: float = 0.0
    """Serving over HTTP: the server process's CPU time to take in one request."""
    frontend_token_s: float = 0.0
    """Serving over HTTP: the server process's CPU time to stream one output token."""
    step_overhead_s_per_request: float = 0.0
    """Host time per running request per decode step that the GPU waits for (synchronous scheduling)."""
    paged_decode: bool = False
    """Decode attention runs FlashAttention's paged-KV kernels (vLLM, SGLang): the cache streams at the profile's
    `paged_decode_bandwidth`."""
    fused_moe: bool = False
    """A MoE layer's routed experts run as the Triton fused_moe call (vLLM, SGLang): the profile's measured
    `fused_moe_call_s` stands for the routing, sort, quantization, grouped GEMM and sum kernels' fixed cost."""
    prefill_host_s_per_kernel: float = 0.0
    """Host time per kernel of a prefill pass the engine runs eagerly (SGLang's "extend" where its piecewise CUDA
    graphs are off: before 0.5.10 by default, plan/infer.sglang_prefill_graph_rows): the CPU launches the block's
    kernels one by one, so a short prefill takes
    max(its kernels' GPU time, the launches); 0: prefill costs no host time beyond the kernels (graphed or compiled)."""
    prefill_graphs_from: str = ""
    """The first version that graphs prefill by default (SGLang 0.5.10: piecewise CUDA graphs), '' if none does."""
    prefill_graph_rows_mla: int = 0
    """MLA models: the most tokens a graphed prefill pass takes (longer ones run eagerly); others: every chunk."""
    prefill_graph_eager_families: tuple[str, ...] = ()
    """Model types whose prefill the engine never graphs (its architecture blacklist)."""
    async_scheduling_from: str = ""
    """The first version that schedules step n + 1 while step n runs by default (vLLM 0.14: async scheduling), so
    `step_overhead_s_per_request` no longer shows; '' if none does."""
    async_step_overhead_s: float | None = None
    """`step_overhead_s` when the engine schedules asynchronously (the host's part of the step overlaps the GPU);
    None: the same either way."""
    frontend_from: tuple[tuple[str, float, float, float], ...] = ()
    """Frontend figures of later releases: (first version, latency_s, request_s, token_s), oldest first; the
    `frontend_*` fields above hold for the versions before the first."""

    def frontend_figures(self, version: str | None) -> tuple[float, float, float]:
        """(latency_s, request_s, token_s) of the engine's HTTP server at release `version` (None: the newest)."""
        figures = (self.frontend_latency_s, self.frontend_request_s, self.frontend_token_s)
        given = None if version is None else release_version(version, self.name)
        for first, *later in self.frontend_from:
            if given is None or given >= release_version(first, self.name):
                figures = tuple(later)
        return figures


FUSED_MOE_KERNELS = 6
"""Kernels of a MoE layer the fused_moe call replaces in the kernel model (layer_ops.block_ops: top-k, permute, the
two grouped GEMMs, activation, unpermute; the router GEMM and shared experts run apart)."""


FP8_QUANT_BYTES = 3.0
"""Bytes per element of a GEMM input quantized to fp8 before an fp8 GEMM: read in 16 bits, written in 8 (its scales,
one per token or per 128-element group, are a rounding error)."""


def activation_quant(ops, rows: int, *, expert_rows: float | None = None,
                     expert_copies: float | None = None) -> tuple[int, int, float]:
    """(kernels, of them for the routed experts, elements) that quantize a block's fp8 GEMM inputs in inference.

    W8A8 fp8 checkpoints run each linear as a quantize kernel on its input, then the fp8 GEMM: vLLM's Fp8LinearOp
    (scaled_fp8_quant, then cutlass_scaled_mm; its norm + quant fusion pass is off by default under the V1 engine) and
    SGLang's fp8 linears (scaled_fp8_quant, or per_token_group_quant_fp8 for block-scaled checkpoints such as
    DeepSeek's, whose fused_moe quantizes the routed tokens and the experts' intermediate the same way). One kernel per
    GEMM input: the router (16 or 32 bits) and the shared-expert gate stay unquantized, and MLA's q_a and kv_a read
    one input through one fused projection (fused_qkv_a_proj_with_mqa). The routed experts quantize the tokens they
    see once (`expert_rows` x hidden: `rows`, or the tokens gathered from every data-parallel attention rank), then
    the intermediate of the copies this GPU's experts run (`expert_copies`: tokens x top-k over the expert-parallel
    ranks; default the GEMMs' own rows)."""
    names = {g.name for g in ops.gemms}
    kernels = experts = 0
    elements = 0.0
    for g in ops.gemms:
        if g.name in ("router", "shared_gate") or (g.name == "kv_a" and "q_a" in names):
            continue
        kernels += 1
        if g.name == "experts_up":
            experts += 1
            elements += (rows if expert_rows is None else expert_rows) * g.k
        elif g.name == "experts_down":
            experts += 1
            elements += (g.m * g.count if expert_copies is None else expert_copies) * g.k
        else:
            elements += g.m * g.count * g.k
    return kernels, experts, elements


def fused_moe_kernel_costs(profile: DeviceProfile) -> float:
    """The fixed costs the kernel model already charges for the kernels one fused-MoE call stands for: its two grouped
    GEMMs' (a GEMM's fixed time) and the other four (top-k, sort, activation, weighted sum: any kernel's)."""
    return 2 * profile.gemm_fixed_s + (FUSED_MOE_KERNELS - 2) * profile.kernel_overhead_s


@lru_cache(maxsize=None)
def engine_perf(name: str) -> EnginePerf:
    rows = load_toml("engine_perf.toml")["engine"]
    if name not in rows:
        raise InvalidArgument(f"unknown engine '{name}'; use one of: {', '.join(ENGINES)}")
    r = rows[name]
    return EnginePerf(name, r["multi_gpu"], bool(r["cuda_graphs"]), r["host_us_per_kernel"] * 1e-6,
                      r["launch_gap_us"] * 1e-6, r["step_overhead_us"] * 1e-6, int(r["kernels_per_block"]), r["kernel_style"],
                      float(r["gemv_gb_s_per_sm"]) * GB, float(r["gemm_efficiency"]),
                      float(r["hopper_mma_factor"]), float(r["quantized_gemm_factor"]), int(r["prefill_chunk"]),
                      r["source"], float(r.get("metal_gemm_efficiency", 0.0)),
                      float(r.get("frontend_latency_ms", 0.0)) * 1e-3, float(r.get("frontend_request_ms", 0.0)) * 1e-3,
                      float(r.get("frontend_token_us", 0.0)) * 1e-6,
                      float(r.get("step_overhead_us_per_request", 0.0)) * 1e-6, bool(r.get("paged_decode", False)),
                      bool(r.get("fused_moe", False)), float(r.get("prefill_host_us_per_kernel", 0.0)) * 1e-6,
                      str(r.get("prefill_graphs_from", "")), int(r.get("prefill_graph_rows_mla", 0)),
                      tuple(r.get("prefill_graph_eager_families", ())), str(r.get("async_scheduling_from", "")),
                      float(r["async_step_overhead_us"]) * 1e-6 if "async_step_overhead_us" in r else None,
                      tuple((v, float(f["latency_ms"]) * 1e-3, float(f["request_ms"]) * 1e-3,
                             float(f["token_us"]) * 1e-6)
                            for v, f in sorted(r.get("frontend_from", {}).items(),
                                               key=lambda kv: release_version(kv[0], name))))


def decode_kv_bandwidth(profile: DeviceProfile, engine: EnginePerf, spec: ModelSpec) -> float:
    """Bytes/s at which a decode step streams the KV cache: the paged kernel's (`DeviceProfile.paged_decode_bandwidth`)
    for engines that run one, except an MLA latent cache, which they stream with FlashMLA at copy bandwidth."""
    return profile.paged_decode_bandwidth if engine.paged_decode and spec.mla is None else profile.bandwidth


@dataclass(frozen=True, slots=True)
class PassTime:
    """One forward pass (a prefill chunk or a decode step) of all blocks and the head."""

    seconds: float
    gemm_s: float
    attention_s: float
    stream_s: float
    comm_s: float
    host_s: float
    overhead_s: float
    flops: float
    bytes: float
    """DRAM bytes the kernels move (weights, K/V, activations)."""
    bound: str
    """'compute' or 'memory' (which roofline term is larger for the pass as a whole), or 'host' when kernel
    launches take longer than the kernels."""


def _active_experts(spec: ModelSpec, rows: int, ep: int = 1) -> float | None:
    """Expected distinct routed experts touched by `rows` tokens (uniform routing) on the busiest of `ep` ranks that
    each hold num_experts / ep of them whole (expert parallelism); ep = 1: all the experts touched.

    Each expert is touched with probability p = 1 - (1 - k/E)^rows, so a rank's count is Binomial(E/ep, p) and the
    step waits for the rank with the most: E[max of ep counts] = sum over x >= 1 of 1 - F(x - 1)^ep (the ranks taken
    as independent). With ep = 1 that is E p. At one token and EP 8, DeepSeek-V3's 8 experts of 256 land on the
    busiest rank 2-3 at a time, not 1, and that rank reads 2-3 experts' weights; a large batch touches nearly every
    expert on every rank, where the two agree."""
    moe = spec.moe
    if moe is None:
        return None
    e, k = moe.num_experts, moe.top_k
    p = 1 - (1 - k / e) ** rows
    if ep <= 1:
        return e * p
    n = max(1, e // ep)
    if p >= 1.0:
        return float(n)
    lp, lq, lfn = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    expected, cdf = 0.0, 0.0
    for x in range(n):  # Binomial(n, p) pmf in logs: (1 - p)^n underflows for large batches and EP groups
        cdf += math.exp(lfn - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * lp + (n - x) * lq)
        expected += 1 - min(1.0, cdf) ** ep
    return expected


def forward_pass_s(spec: ModelSpec, *, profile: DeviceProfile, topo: Topology, engine: EnginePerf, dtype: str,
                   weight_bytes_per_param: float, kv_bytes_per_element: float, rows: int, sequences: int,
                   context: float, num_gpus: int, decode: bool, logits_rows: int,
                   expert_parallel: bool = False, dp_attention: bool = False) -> PassTime:
    """One forward pass over all blocks: `rows` query rows from `sequences` sequences, each seeing `context` keys.

    `expert_parallel`: the routed experts are spread whole over the tensor-parallel GPUs (vLLM
    --enable-expert-parallel) instead of each expert split over them; the tokens are replicated on every GPU after
    attention, each GPU runs its own experts on the tokens routed to them, and the same all-reduce sums the result.

    `dp_attention`: data-parallel attention (SGLang --enable-dp-attention; vLLM --data-parallel-size with
    --enable-expert-parallel): `rows`, `sequences` are ONE GPU's own requests; every GPU holds the attention and dense
    weights whole and runs them on its own rows, while the routed experts are spread over all `num_gpus` GPUs and see
    every GPU's tokens (all-gather before the experts, reduce-scatter after, in each MoE layer)."""
    dp = num_gpus if (dp_attention and spec.moe is not None) else 1
    tp = 1 if dp > 1 else (num_gpus if engine.multi_gpu == "tp" else 1)
    e = 2.0
    device = profile.gpu
    gemv_bw = profile.bandwidth
    if engine.gemv_bytes_per_s_per_sm and device.sm_count:
        gemv_bw = min(gemv_bw, engine.gemv_bytes_per_s_per_sm * device.sm_count)
    own_rate = None  # the engine's own GEMM kernels (llama.cpp): a share of the fp16-accumulate peak
    if engine.gemm_efficiency:
        # Apple's GPUs: the fp32 peak, the one figure the catalog has (no 16-bit matrix rate is published)
        peak16 = (device.peak_flops.get("fp16_fp16acc") or device.peak_flops.get("fp16")
                  or device.peak_flops.get("bf16") or device.peak_flops.get("fp32"))
        if peak16:
            hopper = engine.hopper_mma_factor if (device.architecture or "").startswith("Hopper") else 1.0
            quant = engine.quantized_gemm_factor if weight_bytes_per_param < 1.9 else 1.0
            share = engine.metal_gemm_efficiency if device.vendor == "apple" and engine.metal_gemm_efficiency \
                else engine.gemm_efficiency
            own_rate = peak16 * share * hopper * quant
    gemm = attn = stream = comm = 0.0
    flops = nbytes = 0.0
    kernels = 0
    launched = 0  # the model's own kernels of the pass (block_ops), for an eager prefill's launches
    cache: dict = {}
    for layer in range(spec.num_layers):
        sig = block_signature(spec, layer)
        keys = context if decode else keys_per_query(spec, layer, int(context))
        if decode and spec.sliding_window and sig[1] == "sliding":
            keys = min(keys, spec.sliding_window)
        key = (sig, keys)
        hit = cache.get(key)
        if hit is None:
            ep = dp if dp > 1 else (tp if (expert_parallel and spec.moe is not None) else 1)
            # the busiest rank's touched experts: the step waits for it
            active = _active_experts(spec, rows * dp, ep) if decode else None
            ops = block_ops(spec, layer, tokens=rows, keys=keys, tp=tp, ep=ep, etp=1 if ep > 1 else None,
                            kv_rows=sequences * keys if decode else None, active_experts=active,
                            style=engine.kernel_style, sequences=sequences if decode else None)
            if dp > 1:  # the experts run on every GPU's tokens: their GEMMs at dp x rows, each GPU its 1/dp of them
                moe_ops = block_ops(spec, layer, tokens=rows * dp, keys=keys, tp=dp, ep=dp, etp=1,
                                    active_experts=active, style=engine.kernel_style)
                experts = [g for g in moe_ops.gemms if g.name.startswith("experts_")]
                ops = replace(ops, gemms=tuple(g for g in ops.gemms if not g.name.startswith("experts_")) + tuple(experts))
            g = f = b = 0.0
            for op in ops.gemms:
                # the routed experts of a layer run as one grouped kernel (vLLM/SGLang fused_moe, TensorRT-LLM's MoE
                # plugin, llama.cpp's mul_mat_id): every touched expert's weights are read once, one launch
                moved = op.n * op.k * weight_bytes_per_param + (op.m * op.k + op.m * op.n) * e
                if own_rate is not None:
                    g += max(op.flops / own_rate, op.count * moved / gemv_bw) + profile.kernel_overhead_s
                else:
                    g += matmul_s(profile, op.m, op.n, op.k, dtype, e, weight_bytes_per_param, batch=op.count,
                                  grouped=op.name in ROUTED_GEMMS)
                f += op.flops
                b += op.count * moved
            attn_bytes = ops.attention_io_elements * (kv_bytes_per_element if decode else e)
            attn_flops = ops.attention_flops
            mla = spec.mla
            if decode and mla is not None and engine.name != "hf" and attn_flops > 0:
                # MLA-aware engines decode on the latent (FlashMLA, weight absorption): each GPU reads every cached
                # token's latent + RoPE key once, and each of its query heads scores the latent + RoPE key and sums
                # the latent values: 2 x (2 x kv_lora_rank + rope) FLOPs per head and key
                latent = mla.kv_lora_rank + mla.qk_rope_head_dim
                attn_bytes = sequences * keys * latent * kv_bytes_per_element
                attn_flops = 2.0 * (2 * mla.kv_lora_rank + mla.qk_rope_head_dim) * (spec.num_heads / tp) * keys * rows
            # prefill: a flash kernel over the prompt (or the sliding window); decode reads the cache, memory-bound
            window = spec.sliding_window if (spec.sliding_window and sig[1] == "sliding") else None
            kernel_seq = None if decode else min(context, window or context)
            # a prefill kernel's thread blocks: a tile of 128 query rows per sequence and head on the GPU
            seqs = max(1, sequences)
            tiles = None if decode else flash_tiles(seqs, spec.num_heads / tp, rows / seqs)
            # a sliding window's prefill kernel runs every key tile its band touches (`band_work`)
            work = attn_flops if decode else attn_flops * band_work(window, context)
            a = attention_s(profile, work, attn_bytes, backward=False, seq=kernel_seq,
                            bandwidth=decode_kv_bandwidth(profile, engine, spec) if decode else None,
                            head_dim=None if decode else attention_head_dim(spec),
                            tiles=tiles) if attn_flops > 0 else 0.0
            if ops.recurrent_kind is not None:  # a hybrid model's recurrent layer: its scan, or its state in decode
                a += recurrent_scan_s(profile, ops.recurrent_kind, ops.recurrent_flops, ops.recurrent_state_bytes,
                                      seq_len=None if decode else int(context),
                                      blocks=0 if decode else recurrent_blocks(spec, sequences, tp))
                attn_flops += ops.recurrent_flops
                attn_bytes += ops.recurrent_state_bytes
            mixer = 1 if (attn_flops > 0 or ops.recurrent_kind is not None) else 0  # its fixed cost is in `a`
            s = memory_s(profile, ops.stream_bytes) + (ops.kernels - len(ops.gemms) - mixer) * profile.kernel_overhead_s
            fused = (engine.fused_moe and profile.fused_moe_call_s and spec.moe is not None
                     and spec.moe.moe_layers[layer])
            if fused:
                # the fused call's measured fixed cost, beyond the per-kernel costs of the kernels it stands for
                # (top-k, sort, activation, sum and the two grouped GEMMs; its quantization too)
                s += max(0.0, profile.fused_moe_call_s - fused_moe_kernel_costs(profile))
            q_kernels = q_bytes = 0
            if dtype == "fp8":  # W8A8: each GEMM input quantized by a kernel of its own (`activation_quant`)
                moe_here = spec.moe is not None and spec.moe.moe_layers[layer]
                seen = rows * dp  # the tokens this GPU's experts see (gathered from every DP attention rank)
                q_kernels, q_experts, q_elements = activation_quant(
                    ops, rows, expert_rows=seen,
                    expert_copies=seen * spec.moe.top_k / ep if moe_here else None)
                q_bytes = q_elements * FP8_QUANT_BYTES
                s += memory_s(profile, q_bytes) + (q_kernels - (q_experts if fused else 0)) * profile.kernel_overhead_s
            hit = cache[key] = (g, a, s, f + attn_flops, b + attn_bytes + ops.stream_bytes + q_bytes,
                                ops.kernels + q_kernels)
        gemm += hit[0]
        attn += hit[1]
        stream += hit[2]
        flops += hit[3]
        nbytes += hit[4]
        # each part (mixer, feed-forward) ends in a TP all-reduce; an engine's per-block kernel count is a two-part
        # block's
        parts = block_parts(spec, layer)
        kernels += engine.kernels_per_block * parts / 2
        launched += hit[5] + (parts if tp > 1 else 0)  # and the all-reduces
        if tp > 1:
            comm += parts * topo.collective_s("all_reduce", rows * spec.hidden_size * e, tp)
        if dp > 1 and spec.moe.moe_layers[layer]:
            launched += 2  # the all-gather before the experts and the reduce-scatter after
            gathered = rows * dp * spec.hidden_size * e
            comm += (topo.collective_s("all_gather", gathered, dp) + topo.collective_s("reduce_scatter", gathered, dp))
    hg = head_gemm(spec, logits_rows, tp)
    head = matmul_s(profile, hg.m, hg.n, hg.k, dtype, e, weight_bytes_per_param)
    gemm += head
    flops += hg.flops
    nbytes += hg.n * hg.k * weight_bytes_per_param
    if engine.multi_gpu == "layer-split" and num_gpus > 1:
        comm += (num_gpus - 1) * topo.collective_s("send_recv", rows * spec.hidden_size * e, 2, topo.gpus_per_node)
    graphed = engine.cuda_graphs and decode
    host = 0.0 if graphed else kernels * engine.host_s_per_kernel
    if not decode and engine.prefill_host_s_per_kernel:
        host = max(host, (launched + 1) * engine.prefill_host_s_per_kernel)  # + the LM head
    gaps = 0.0 if graphed else kernels * engine.launch_gap_s
    gpu = gemm + attn + stream + comm + gaps
    overhead = engine.step_overhead_s + sequences * engine.step_overhead_s_per_request if decode else 0.0
    peak = profile.matmul_flops(dtype) or 1.0
    if host > gpu:
        bound = "host"
    else:
        bound = "compute" if flops / peak > nbytes / profile.bandwidth else "memory"
    return PassTime(seconds=max(gpu, host) + overhead, gemm_s=gemm, attention_s=attn, stream_s=stream, comm_s=comm,
                    host_s=host, overhead_s=overhead, flops=flops, bytes=nbytes, bound=bound)
