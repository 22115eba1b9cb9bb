"""NVFP4 training (`--precision nvfp4`): Transformer Engine's NVFP4BlockScaling under Megatron-Core and torchao's NVFP4
training under torchtitan, on data-center Blackwell. The GEMM rates and quantization costs are checked against the
kernel measurements they come from, and one of those measurements checks the existing fp8 model independently:
Transformer Engine's GEMM profiling on a B300 (docs/examples/gemm_profiling/gemm_profiling.rst @ 1609c890) times
a 5B model's twelve linears at 15,872 tokens pre-quantized and under te.Linear autocast, for BF16, MXFP8 and NVFP4."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu, with_memory
from gpuwise.catalog.models import load_model
from gpuwise.estimate.activations import layer_terms
from gpuwise.estimate.job import NVFP4_ELEMENT_BYTES, NVFP4_WEIGHT_CACHE_BYTES, TrainJob
from gpuwise.estimate.kernels import matmul_s, memory_s
from gpuwise.estimate.recompute import op_saved_per_token
from gpuwise.estimate.step_time import FP8_QUANTIZE, NVFP4_QUANTIZE

M = 15872
TE_BENCH_LINEARS = ((M, 4096, 12288), (M, 4096, 4096), (M, 4096, 16384), (M, 16384, 4096))
"""(tokens, in, out) of the tutorial's four linears (hidden 4,096, MLP 16,384, 32 heads)."""


def _layer_gemms_s(profile, dtype: str) -> float:
    return sum(matmul_s(profile, m, n, k, dtype, 2.0) + matmul_s(profile, m, k, n, dtype, 2.0)
               + matmul_s(profile, k, n, m, dtype, 2.0) for m, k, n in TE_BENCH_LINEARS)


@pytest.mark.parametrize("dtype, measured_ms, tol",
                         [("fp4", 3.764, 0.02), ("fp8", 7.161, 0.03), ("bf16", 13.102, 0.07)])
def test_b300_gemm_rates_reproduce_transformer_engines_profiling(dtype, measured_ms, tol):
    """Pre-quantized per-layer GEMM time (forward, input and weight gradients): NVFP4 is where Blackwell Ultra's fp4
    efficiency (0.40) was read; MXFP8 and BF16 come from other sources (MAMF) and land within 1.3% and 6%."""
    assert _layer_gemms_s(default_profile(get_gpu("b300")), dtype) * 1e3 == pytest.approx(measured_ms, rel=tol)


def test_b200_nvfp4_runs_at_torchaos_measured_multiple_of_bf16():
    """torchao's bench_matmul on a B200 (pytorch/ao PR #2427): NVFP4 5.37 / 5.50 / 4.46 PFLOP/s against bf16 1.42 /
    1.45 / 1.41 at 8192 / 6144 / 4096 cubed; the model's ratio stays within 15% at each size (the harness runs bf16
    above the sustained rate gpuwise prices, so the ratio, not the rate, is compared)."""
    b200 = default_profile(get_gpu("b200"))
    for n, fp4, bf16 in ((8192, 5.37, 1.42), (6144, 5.50, 1.45), (4096, 4.46, 1.41)):
        ratio = matmul_s(b200, n, n, n, "bf16", 2.0) / matmul_s(b200, n, n, n, "fp4", 2.0)
        assert ratio == pytest.approx(fp4 / bf16, rel=0.15)


@pytest.mark.parametrize("quantize, measured_ms, tol", [(FP8_QUANTIZE["te"], 1.823, 0.02),
                                                        (NVFP4_QUANTIZE["te"], 2.689, 0.01)],
                         ids=["mxfp8", "nvfp4"])
def test_b300_quantization_overhead_matches_autocast_minus_prequantized(quantize, measured_ms, tol):
    """Each of the tutorial's twelve te.Linear calls quantizes its input and its weight for both usages: MXFP8's
    1.823 ms per layer is an independent check of the fp8 family's 3 + 2 bytes per element; NVFP4's 2.689 ms is
    where its 7.35 bytes were read."""
    b300 = default_profile(get_gpu("b300"))
    ops = [shape for m, k, n in TE_BENCH_LINEARS for shape in ((m, k, n), (m, n, k), (k, m, n))]
    elements = sum(a * b + b * c for a, b, c in ops)
    t = memory_s(b300, (quantize.cast + quantize.transpose) * elements)
    t += 2 * len(ops) * quantize.kernels * b300.kernel_overhead_s
    assert t * 1e3 == pytest.approx(measured_ms, rel=tol)


def test_torchao_nvfp4_prices_its_measured_triton_kernels():
    """torchao's GB200 timings at 2048 x 28,672 (benchmarks/prototype/nvfp4_training/README.md): RHT amax 46.0 us
    plus the row/column quantize 117.3 us (activations) or 166.6 us (gradients, stochastic rounding); the family
    prices their mean per element."""
    gb200 = default_profile(get_gpu("gb200"))
    n = 2048 * 28672
    act, grad = (46.0 + 117.3) * 1e-6, (46.0 + 166.6) * 1e-6
    q = NVFP4_QUANTIZE["compiled"]
    assert memory_s(gb200, (q.cast + q.transpose) * n) == pytest.approx((act + grad) / 2, rel=0.03)


def _train(model="llama-3-70b", **kw):
    base = dict(gpu="gb200", num_gpus=64, seq=8192, global_batch=256, micro_batch=1, tp=2, pp=4, vpp=5, sp=True,
                zero=1, recompute="none", framework="megatron", gpus_per_node=72)
    return gpuwise.train(model, **{**base, **kw})


def test_nvfp4_is_faster_than_fp8_and_bf16_and_its_mfu_is_of_the_fp4_peak():
    bf16, fp8, fp4 = (_train(precision=p).perf for p in ("bf16", "fp8", "nvfp4"))
    assert fp4.step.step_time_s < fp8.step.step_time_s < bf16.step.step_time_s
    gb200 = get_gpu("gb200")
    assert fp4.mfu == pytest.approx(fp8.mfu * fp8.step.step_time_s / fp4.step.step_time_s
                                    * gb200.peak_flops["fp8"] / gb200.peak_flops["fp4"], rel=1e-6)
    assert 0 < fp4.mfu <= fp4.hfu < 1


def test_transformer_engine_saves_nvfp4_linear_inputs_and_caches_both_weight_copies():
    """The saved input of every linear is its columnwise NVFP4 copy (0.5625 B per element) instead of fp8's 1 B, and
    each block matrix carries the rowwise and columnwise NVFP4 copies (1.0078 B) beside its bf16 weight."""
    spec = load_model("llama-3-70b").spec
    e = 2.0
    fp8 = layer_terms(spec, 0, framework="megatron", e=e, saved_input_bytes=1.0).per_token(1, False, 0)
    fp4 = layer_terms(spec, 0, framework="megatron", e=e, saved_input_bytes=NVFP4_ELEMENT_BYTES).per_token(1, False, 0)
    bf16 = layer_terms(spec, 0, framework="megatron", e=e).per_token(1, False, 0)
    h, f, out = spec.hidden_size, spec.intermediate_size, spec.num_heads * spec.head_dim
    # the qkv, fc1 (gate and up share one) and fc2 inputs shrink; the out-projection's quantized copy is kept beside
    # the flash output (test_a_quantized_out_projection_input_is_kept_beside_the_flash_output)
    inputs = 2 * h + f
    assert bf16 - fp8 == pytest.approx((e - 1.0) * inputs - 1.0 * out)
    assert fp8 - fp4 == pytest.approx((1.0 - NVFP4_ELEMENT_BYTES) * (inputs + out))
    # NVFP4: 4-bit E2M1 elements and one E4M3 scale byte per 1 x 16 block (activations) or 16 x 16 block (weights,
    # the recipes' 2D weight scaling); TE caches a rowwise and a columnwise copy of each weight
    assert NVFP4_ELEMENT_BYTES == pytest.approx(0.5 + 1 / 16)
    assert NVFP4_WEIGHT_CACHE_BYTES == pytest.approx(2 * (0.5 + 1 / 256))
    job = TrainJob(framework="megatron", precision="nvfp4")
    assert job.fp8_weight_bytes == NVFP4_WEIGHT_CACHE_BYTES
    mem = {p: _train(precision=p).memory for p in ("fp8", "nvfp4")}
    # Transformer Engine's cached weight copies: one 1-byte fp8 copy per block-matrix element on Blackwell
    fp8_cache, fp4_cache = (mem[p].states.transient_params for p in ("fp8", "nvfp4"))
    assert fp4_cache == pytest.approx(fp8_cache * 2 * (0.5 + 1 / 256), rel=1e-9)  # two copies, not one
    assert mem["nvfp4"].activations < mem["fp8"].activations


def test_torchtitans_per_op_policy_keeps_no_output_of_the_opaque_nvfp4_linear():
    """torchtitan saves aten.mm outputs (every second) but not torchao's custom nvfp4_linear op: under NVFP4 a block
    keeps its input, the attention output and log-sum-exp only, and every linear runs again in the backward."""
    spec = load_model("llama-3.1-8b").spec
    kept = op_saved_per_token(spec, 0, e=2.0, tp=1, sp=False, keeps_matmuls=False)
    assert kept == pytest.approx(2.0 * spec.hidden_size + 2.0 * spec.num_heads * spec.head_dim + 4 * spec.num_heads)
    kw = dict(gpu="gb200", num_gpus=4, seq=2048, micro_batch=32, global_batch=128, fsdp="full", framework="torchtitan",
              compile=True, ac="op", fused_loss=True)
    nv = gpuwise.train("llama-3.1-8b", precision="nvfp4", **kw)
    mx = gpuwise.train("llama-3.1-8b", precision="fp8", **kw)
    assert nv.memory.activations < mx.memory.activations
    flops = nv.flops
    assert flops.recompute == pytest.approx(flops.forward.total - flops.forward.lm_head - flops.forward.attention_core)


@pytest.mark.parametrize("kw, match", [
    (dict(gpu="h100-sxm"), "data-center Blackwell"),
    (dict(gpu="rtx-5090"), "data-center Blackwell"),
    (dict(framework="torchtune", tp=1, pp=1, vpp=1, sp=False, zero=None, fsdp="full"),
     "framework megatron or torchao"),
    (dict(fp8_param_gather=True), "needs --precision fp8"),
])
def test_what_nvfp4_cannot_run_is_refused(kw, match):
    with pytest.raises(gpuwise.errors.InvalidArgument, match=match):
        _train(precision="nvfp4", **kw)


@pytest.mark.parametrize("gpu, refused", [("a100-sxm-80gb", True), ("v100-sxm2-32gb", True), ("mi250x", True),
                                           ("rtx-4090", False), ("h100-sxm", False), ("mi300x", False)])
def test_fp8_training_needs_fp8_tensor_cores(gpu, refused):
    """Transformer Engine refuses fp8 below compute capability 8.9 and torchao's float8 likewise, so `train`, `plan`
    and `pick` refuse it on a GPU whose catalog entry has no fp8 rate (it was priced in 16 bits before), and keep it on
    Ada, Hopper and CDNA 3."""
    from gpuwise.plan.train import fp8_hardware_problem

    assert (fp8_hardware_problem(get_gpu(gpu)) is not None) == refused
    kw = dict(gpu=gpu, num_gpus=8, seq=2048, global_batch=16, precision="fp8")
    if refused:
        with pytest.raises(gpuwise.errors.InvalidArgument, match="fp8 tensor cores"):
            gpuwise.train("llama-3.2-1b", **kw)
        with pytest.raises(gpuwise.errors.InvalidArgument, match="fp8 tensor cores"):
            gpuwise.plan("llama-3.2-1b", **kw)
    else:
        assert gpuwise.train("llama-3.2-1b", **kw).perf.peak_dtype == "fp8"
    # a GPU known by its memory alone has no rates to judge by: its memory is still estimated in fp8
    assert fp8_hardware_problem(with_memory(None, "80GiB")) is None


def test_nvfp4_is_modelled_for_full_training():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="not --finetune lora"):
        gpuwise.train("llama-3.1-8b", gpu="b200", precision="nvfp4", framework="megatron", finetune="lora")


def test_torchtitans_routed_experts_stay_in_bf16(monkeypatch):
    """torchtitan's NVFP4 converter swaps nn.Linear only ('MoE experts are out of scope', PR 3914): the grouped
    routed experts run and save in bf16 (same GEMM time, same saved expert inputs as bf16), the attention and the
    shared linears in NVFP4."""
    from _block_spy import first_block

    kw = dict(gpu="b200", num_gpus=8, seq=4096, global_batch=64, micro_batch=1, framework="torchtitan",
              compile=True, fsdp="full", ep=8)
    blocks = {p: first_block(monkeypatch, "qwen3-30b-a3b", precision=p, **kw)[1] for p in ("bf16", "nvfp4")}
    # the experts' part of the forward (EP overlap's split) is the same GEMMs at the same rate, the rest in NVFP4
    assert blocks["nvfp4"].expert_forward == pytest.approx(blocks["bf16"].expert_forward, rel=1e-12)
    assert blocks["nvfp4"].gemm_forward < blocks["bf16"].gemm_forward
    bf16, fp4 = (gpuwise.train("qwen3-30b-a3b", precision=p, **kw).perf.step for p in ("bf16", "nvfp4"))
    spec = load_model("qwen3-30b-a3b").spec
    terms = {p: layer_terms(spec, 0, framework="torchtitan", e=2.0, saved_input_bytes=b) for p, b in (("bf16", 0.0),
                                                                                       ("nvfp4", NVFP4_ELEMENT_BYTES))}
    assert terms["nvfp4"].replicated["expert_inputs"] == terms["bf16"].replicated["expert_inputs"]
    assert terms["nvfp4"].split["routed_experts"] == terms["bf16"].split["routed_experts"]
    assert fp4.breakdown["forward"] > 0.8 * bf16.breakdown["forward"]  # no 2-4x fp4 gain on the experts
    assert any("routed experts in bf16" in a for a in gpuwise.train("qwen3-30b-a3b", precision="nvfp4",
                                                                      **kw).assumptions)


def test_torchao_keeps_each_blocks_transposed_nvfp4_weight_until_its_backward():
    """torchao's NVFP4 linear saves its weight's transposed NVFP4 copy (a tensor FSDP does not free) for the input
    gradient: 0.504 B per block-matrix element of the stage, unsharded, held without checkpointing and rebuilt in
    the recompute with it."""
    kw = dict(gpu="gb200", num_gpus=4, seq=2048, micro_batch=8, global_batch=32, fsdp="full", framework="torchtitan",
              compile=True, fused_loss=True, precision="nvfp4")
    none, op = (gpuwise.train("llama-3.1-8b", ac=ac, **kw).memory for ac in ("none", "op"))
    spec = load_model("llama-3.1-8b").spec
    h, f, q, kv = spec.hidden_size, spec.intermediate_size, spec.num_heads * spec.head_dim, \
        spec.num_kv_heads * spec.head_dim
    block_matrices = spec.num_layers * (h * (q + 2 * kv) + q * h + 3 * h * f)
    assert none.states.block_casts == pytest.approx(block_matrices * (0.5 + 1 / 256), rel=1e-9)
    # per-op checkpointing frees the activations it recomputes and the saved weight copies with them, nothing else
    assert none.torch_allocated - op.torch_allocated == pytest.approx(
        (none.activations - op.activations) + none.states.block_casts, rel=1e-9)


def test_the_megatron_default_for_nvfp4_and_no_tp_overlap():
    """Without --framework, NVFP4 trains under Megatron-Core (the web page sends none); TE's userbuffers TP overlap
    is refused with it, as NVIDIA's recipes turn it off."""
    r = gpuwise.train("llama-3.1-8b", gpu="b200", precision="nvfp4")
    assert r.framework == "megatron" and "NVFP4" in r.framework_reason
    with pytest.raises(gpuwise.errors.InvalidArgument, match="TP overlap not supported yet"):
        gpuwise.train("llama-3.1-8b", gpu="b200", num_gpus=8, tp=2, precision="nvfp4", framework="megatron",
                      tp_comm_overlap=True)
    from gpuwise.serve import api
    assert api.handle("GET", "train", "model=llama-3.1-8b&gpu=b200&precision=nvfp4")[0] == 200


def test_torchao_refuses_linears_not_divisible_by_128():
    with pytest.raises(gpuwise.errors.InvalidArgument, match="hidden size is 2880"):
        gpuwise.train("gpt-oss-120b", gpu="b200", num_gpus=8, framework="torchtitan", fsdp="full", precision="nvfp4")


def test_a_quantized_out_projection_input_is_kept_beside_the_flash_output():
    """The flash kernel keeps its 16-bit output for its backward; an out-projection that saves a quantized copy of
    its input (Transformer Engine's fp8, NVFP4) keeps that beside it (TE's FusedAttnFunc saves `out`)."""
    spec = load_model("llama-3.1-8b").spec
    out = spec.num_heads * spec.head_dim
    for lin in (1.0, NVFP4_ELEMENT_BYTES):
        t = layer_terms(spec, 0, framework="megatron", e=2.0, saved_input_bytes=lin)
        assert t.split["attention_output"] == pytest.approx(lin * out)
        assert t.split["flash_output"] == pytest.approx(2.0 * out)
    bf16 = layer_terms(spec, 0, framework="megatron", e=2.0)
    assert bf16.split["attention_output"] == pytest.approx(2.0 * out) and "flash_output" not in bf16.split
    # recomputing the attention core rebuilds the flash output: only the projection's copy stays
    kw = dict(gpu="h100-sxm", num_gpus=8, framework="megatron", precision="fp8")
    none, core = (gpuwise.train("llama-3.1-8b", recompute=r, **kw).memory.activations_per_microbatch
                  for r in ("none", "selective"))
    assert none - core == pytest.approx(spec.num_layers * 4096 * 2.0 * out, rel=1e-9)  # seq 4096, micro-batch 1
    kw["precision"] = "bf16"
    none, core = (gpuwise.train("llama-3.1-8b", recompute=r, **kw).memory.activations_per_microbatch
                  for r in ("none", "selective"))
    assert none == pytest.approx(core, rel=1e-9)  # one 16-bit output, which the projection saves itself
    # a gated attention output (Qwen3.5, Qwen3-Next) already counts the 16-bit output in its own term
    gated = load_model("qwen3.5-35b-a3b").spec
    full = next(i for i, k in enumerate(gated.layer_types) if k == "full")
    assert "flash_output" not in layer_terms(gated, full, framework="megatron", e=2.0, saved_input_bytes=1.0).split


def test_the_planner_keeps_to_torchaos_divisible_dimensions():
    """Qwen2.5-0.5B's query width (896) splits into 448 at TP 2: torchtitan's NVFP4 refuses it, so the planner offers
    TP 1 only and refuses an explicit TP 2."""
    kw = dict(gpu="b200", num_gpus=8, precision="nvfp4", framework="torchtitan", seq=4096, global_batch=64)
    plans = gpuwise.plan("qwen2.5-0.5b", top=50, **kw).plans
    assert plans and all(p.layout.tp == 1 for p in plans)
    with pytest.raises(gpuwise.errors.InvalidArgument, match="query width / TP is 448"):
        gpuwise.plan("qwen2.5-0.5b", tp=2, **kw)


def test_layers_kept_in_bf16_cost_what_bf16_layers_cost():
    """Megatron-Core's --first-last-layers-bf16 (and torchtitan's bf16-tail NVFP4 configs): each layer kept in bf16
    runs and saves as under bf16 and keeps no quantized weight copy, so with identical blocks the forward moves by
    k / L of the way to a bf16 job, and Transformer Engine's cache shrinks to (L - k) / L."""
    kw = dict(gpu="b200", num_gpus=8, seq=4096, global_batch=64, micro_batch=1, zero=1, recompute="none",
              framework="megatron")
    layers = load_model("llama-3.1-8b").spec.num_layers
    fp4 = gpuwise.train("llama-3.1-8b", precision="nvfp4", **kw)
    bf16 = gpuwise.train("llama-3.1-8b", precision="bf16", **kw)
    for start, end in ((0, 4), (2, 3)):
        k = start + end
        mixed = gpuwise.train("llama-3.1-8b", precision="nvfp4", num_layers_at_start_in_bf16=start,
                              num_layers_at_end_in_bf16=end, **kw)
        step = lambda r: r.perf.step.breakdown["forward"]  # noqa: E731
        assert step(mixed) - step(fp4) == pytest.approx(k / layers * (step(bf16) - step(fp4)), rel=1e-6)
        cache = lambda r: r.memory.states.transient_params  # noqa: E731
        assert cache(mixed) == pytest.approx(cache(fp4) * (layers - k) / layers, rel=1e-9)
        assert fp4.memory.activations < mixed.memory.activations < bf16.memory.activations


@pytest.mark.parametrize("kw, match", [
    (dict(precision="bf16", num_layers_at_end_in_bf16=2), "apply to --precision fp8 or nvfp4"),
    (dict(precision="fp8", framework="torchtitan", num_layers_at_end_in_bf16=2, tp=1, pp=1, vpp=1, sp=False,
          zero=None, fsdp="full"), "not torchtitan with fp8"),
    (dict(precision="nvfp4", num_layers_at_start_in_bf16=81), "must be a whole number from 0 to the model.s 80"),
    (dict(precision="nvfp4", num_layers_at_start_in_bf16=60, num_layers_at_end_in_bf16=20), "leaves no layer"),
    (dict(precision="nvfp4", num_layers_at_end_in_bf16=-1), "must be a whole number"),
])
def test_what_bf16_layers_cannot_do_is_one_line(kw, match):
    with pytest.raises(gpuwise.errors.InvalidArgument, match=match):
        _train(**kw)


def test_under_interleaving_the_bf16_layers_sit_on_the_ranks_that_hold_their_chunks():
    """Llama-3.1-8B, PP 4 x VPP 4: chunk c of rank r holds layers 2(4c + r) and 2(4c + r) + 1, so the last four layers
    are on ranks 2 and 3, two each, and the slowest rank has two bf16 layers: the step is that of the last two alone."""
    from gpuwise.estimate.layout import Layout
    from gpuwise.estimate.pipeline import rank_bf16_layers

    lay = Layout(num_gpus=32, pp=4, vpp=4)
    assert rank_bf16_layers(lay, 32, frozenset(range(28, 32))) == frozenset({16, 17, 24, 25})
    assert rank_bf16_layers(Layout(num_gpus=32, pp=4), 32, frozenset({28})) == frozenset({28})
    kw = dict(gpu="b200", num_gpus=32, seq=4096, global_batch=64, micro_batch=1, zero=1, recompute="none",
              framework="megatron", precision="nvfp4", pp=4, vpp=4)
    step = {e: gpuwise.train("llama-3.1-8b", num_layers_at_end_in_bf16=e, **kw).perf.step.step_time_s for e in (2, 4)}
    assert step[4] == pytest.approx(step[2], rel=1e-9)


def test_bf16_layers_keep_bf16_weights_and_16_bit_attention():
    b200 = dict(gpu="b200", num_gpus=8, seq=4096, global_batch=64, micro_batch=1, zero=1, recompute="none",
                framework="megatron", precision="fp8")
    gather = {k: gpuwise.train("llama-3.1-8b", fp8_param_gather=True, num_layers_at_start_in_bf16=k,
                               num_layers_at_end_in_bf16=k, **b200).memory.params for k in (0, 4)}
    spec = load_model("llama-3.1-8b").spec
    h, f, q, kv = spec.hidden_size, spec.intermediate_size, spec.num_heads * spec.head_dim, \
        spec.num_kv_heads * spec.head_dim
    # 8 layers' matrices at 2 B instead of Blackwell's 1-byte fp8 weights
    assert gather[4] - gather[0] == pytest.approx(8 * (h * (q + 2 * kv) + q * h + 3 * h * f) * (2 - 1), rel=1e-9)
    h100 = dict(b200, gpu="h100-sxm")
    dpa = {k: gpuwise.train("llama-3.1-8b", fp8_dot_product_attention=True, num_layers_at_start_in_bf16=k,
                            num_layers_at_end_in_bf16=k, **h100).memory.activations_per_microbatch for k in (0, 4)}
    plain = {k: gpuwise.train("llama-3.1-8b", num_layers_at_start_in_bf16=k, num_layers_at_end_in_bf16=k,
                              **h100).memory.activations_per_microbatch for k in (0, 4)}
    # the bf16 layers' attention saves 16-bit tensors: the fp8-attention saving shrinks by their share
    assert (plain[4] - dpa[4]) == pytest.approx((plain[0] - dpa[0]) * 24 / 32, rel=1e-6)


def test_the_megatron_recipe_and_the_doctor_keep_the_bf16_layers_valid(tmp_path):
    from gpuwise.cli import main

    assert main(["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--seq", "4096", "--global-batch",
                 "64", "--framework", "megatron", "--precision", "fp8", "--num-layers-at-start-in-bf16", "1",
                 "--num-layers-at-end-in-bf16", "1", "--emit", str(tmp_path / "r")]) == 0
    args = (tmp_path / "r" / "megatron.args").read_text()
    assert "--fp8-recipe tensorwise" in args and "--first-last-layers-bf16" in args  # delayed scaling refuses them
    names = {r.name for r in gpuwise.doctor("llama-3.1-70b", gpu="h100-sxm", num_gpus=8, seq=8192, global_batch=64,
                                            micro_batch=1, framework="megatron", precision="fp8", zero=1,
                                            num_layers_at_start_in_bf16=2, num_layers_at_end_in_bf16=2).remedies}
    assert "lora" in names and any(n.startswith("more-gpus") for n in names)
