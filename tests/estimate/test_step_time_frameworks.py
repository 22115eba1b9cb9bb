"""What a framework's kernels cost in the step (issue 18): PyTorch's SDPA attention against Transformer Engine's on
Hopper, torch.compile's fused pointwise kernels, an fp8 recipe's casts and its 16-bit output layer, and torchtitan's
sequence-parallel TP plan."""

from __future__ import annotations

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.estimate import step_time as st
from gpuwise.estimate.kernels import attention_s

from _block_spy import first_block  # noqa: E402

MODEL = "llama-3.1-8b"
ONE = dict(num_gpus=1, seq=8192, micro_batch=1)


def _blocks(monkeypatch, **options):
    return first_block(monkeypatch, MODEL, **options)


def test_pytorch_attention_runs_flashattention2_rates_on_hopper_but_not_on_ampere():
    """FlashAttention-3 paper (arXiv 2407.08608) Fig. 5, H100 head dim 128, causal forward: FlashAttention-2 (what SDPA
    runs) 333 TFLOP/s at 8k and 335 at 16k, cuDNN (Transformer Engine) 529 and 539, at boost clock; training
    sustains 0.892 of it (H100 MSMF 708.5 / MAMF 794.5)."""
    h100 = default_profile(get_gpu("h100-sxm"))
    flops = 1e12
    best = attention_s(h100, flops, 0.0, backward=False)
    sdpa = attention_s(h100, flops, 0.0, backward=False, sdpa=True)
    assert sdpa / best == pytest.approx(h100.attention_forward_efficiency / h100.sdpa_forward_efficiency, rel=1e-3)
    sustained = 708.5 / 794.5
    assert flops / sdpa / 1e12 == pytest.approx(335 * sustained, rel=0.01)
    at_8k = attention_s(h100, flops, 0.0, backward=False, sdpa=True, seq=8192)
    assert flops / at_8k / 1e12 == pytest.approx(333 * sustained, rel=0.01)
    cudnn_8k = attention_s(h100, flops, 0.0, backward=False, seq=8192)
    assert flops / cudnn_8k / 1e12 == pytest.approx(529 * sustained, rel=0.01)
    a100 = default_profile(get_gpu("a100-sxm-80gb"))
    assert attention_s(a100, flops, 0.0, backward=True) == attention_s(a100, flops, 0.0, backward=True, sdpa=True)


def test_sdpa_flash_is_slower_than_transformer_engines_attention_on_h100(monkeypatch):
    """PyTorch trainers on a PyTorch older than 2.11 (SDPA's default order then flash first: fsdp, torchtune, older
    torchtitan) run FlashAttention-2; torchtitan asks for cuDNN first today (#1776), and since PyTorch 2.11 so does
    SDPA's own order on sm90 and sm100: the kernel Transformer Engine runs for Megatron."""
    _, old_tt = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", sdpa_backend="flash", **ONE)
    _, old_fsdp = _blocks(monkeypatch, gpu="h100-sxm", framework="fsdp", sdpa_backend="flash", **ONE)
    _, fsdp = _blocks(monkeypatch, gpu="h100-sxm", framework="fsdp", **ONE)
    _, tt = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", **ONE)
    _, mg = _blocks(monkeypatch, gpu="h100-sxm", framework="megatron", **ONE)
    assert old_tt.attention_forward > 1.5 * mg.attention_forward
    assert old_fsdp.attention_forward == old_tt.attention_forward
    assert fsdp.attention_forward == tt.attention_forward == mg.attention_forward
    assert old_tt.gemm_forward == mg.gemm_forward


@pytest.mark.parametrize("gpu, cudnn_first", [("h100-sxm", True), ("h200-sxm", True), ("h20", True), ("b200", True),
                                              ("gb200", True), ("b300", True), ("gb300", True), ("rtx-5090", False),
                                              ("rtx-pro-6000", False), ("dgx-spark", False),
                                              ("a100-sxm-80gb", False), ("rtx-4090", False)])
def test_sdpas_default_order_follows_pytorch_2_11_per_gpu(gpu, cudnn_first):
    """sdp_utils.cpp check_prefer_cudnn_attention (PyTorch 2.11+ wheels, cuDNN 9.19 and later past its 9.15 guard):
    cuDNN first on compute capability 9.x and 10.x (sm90, sm100, sm103); the sm12x Blackwell chips keep flash
    first."""
    from gpuwise.estimate.job import TrainJob, sdpa_prefers_cudnn

    g = get_gpu(gpu)
    assert sdpa_prefers_cudnn(g) is cudnn_first
    hf = TrainJob(framework="hf")
    assert hf.sdpa_flash_on(g) is not cudnn_first
    assert TrainJob(framework="hf", sdpa_backend="flash").sdpa_flash_on(g) is True  # an older PyTorch's default
    assert TrainJob(framework="hf", attn_implementation="flash_attention_2").sdpa_flash_on(g) is True  # the package
    assert TrainJob(framework="megatron").sdpa_flash_on(g) is False
    assert TrainJob(framework="hf").sdpa_flash_on(get_gpu("mi300x")) is True  # ROCm: no cuDNN backend


def test_flashattention2_on_data_center_blackwell_runs_at_its_measured_rate():
    """tritonbench PR #171 (flash_v2 on a B200, head dim 128, forward): 330.6 TFLOP/s at 16k non-causal; causal by
    FlashAttention-2's H100 ratio 335 / 370; flash-attention #1589: backward 334.0 at 16k head dim 64, to head dim 128
    by 322 / 291 and causal by the same ratio; sustained at 0.822 of the burst clock."""
    flops = 1e12
    ratio = 335 / 370
    for gpu, peak in (("b200", 2250), ("gb200", 2500)):
        p = default_profile(get_gpu(gpu))
        fwd = flops / attention_s(p, flops, 0.0, backward=False, sdpa=True) / 1e12
        bwd = flops / attention_s(p, flops, 0.0, backward=True, sdpa=True) / 1e12
        assert fwd == pytest.approx(330.6 * ratio * 0.822, rel=0.02)
        assert bwd == pytest.approx(334.0 * 322 / 291 * ratio * 0.822, rel=0.02)
        cudnn = flops / attention_s(p, flops, 0.0, backward=False) / 1e12
        assert 3.5 < cudnn / fwd < 5  # a quarter of cuDNN's forward rate
    b300 = default_profile(get_gpu("b300"))  # with --sdpa-backend flash
    assert b300.sdpa_forward_efficiency == pytest.approx(default_profile(get_gpu("b200")).sdpa_forward_efficiency)


def test_megatron_takes_no_sdpa_backend():
    from gpuwise.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="Transformer Engine"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="megatron", sdpa_backend="flash")
    with pytest.raises(InvalidArgument, match="--sdpa-backend"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="torchtitan", sdpa_backend="xformers")


def test_rocm_sdpa_runs_aotriton_and_the_flash_attn_package_runs_ck(monkeypatch):
    """On ROCm, PyTorch's SDPA (no cuDNN backend there) runs AOTriton, whose backward AMD's own tuning database
    measures at 78.0 TFLOP/s (gfx942, bf16, head dim 128, causal, 2,048 tokens); the flash-attn package is its
    Composable Kernel build (ROCm/flash-attention#142: backward 194.4 TFLOP/s non-causal at 16k). On NVIDIA GPUs
    both are the FlashAttention-2 kernels."""
    mi300x = default_profile(get_gpu("mi300x"))
    flops = 1e12
    sdpa = attention_s(mi300x, flops, 0.0, backward=True, sdpa=True, seq=2048)
    assert flops / sdpa / 1e12 == pytest.approx(78.0, rel=0.02)
    ck = attention_s(mi300x, flops, 0.0, backward=True, sdpa=True, flash_attn=True, seq=16384)
    assert flops / ck / 1e12 == pytest.approx(194.43 * 335 / 370, rel=0.02)  # causal by FA2's causal share at 16k
    forward = [attention_s(mi300x, flops, 0.0, backward=False, sdpa=True, flash_attn=f) for f in (False, True)]
    assert forward[0] == forward[1]  # no AOTriton forward rate published: the CK build's stands in
    h100 = default_profile(get_gpu("h100-sxm"))
    assert h100.flash_attn_backward_efficiency is None
    assert attention_s(h100, flops, 0.0, backward=True, sdpa=True, flash_attn=True) == \
        attention_s(h100, flops, 0.0, backward=True, sdpa=True)
    amd = dict(gpu="mi300x", framework="torchtitan", **ONE)
    _, tt = _blocks(monkeypatch, **amd)  # asks for cuDNN first, which ROCm lacks: SDPA's flash backend
    _, flash = _blocks(monkeypatch, sdpa_backend="flash", **amd)
    _, package = _blocks(monkeypatch, **{**amd, "framework": "fsdp"}, attn_implementation="flash_attention_2")
    _, fsdp = _blocks(monkeypatch, **{**amd, "framework": "fsdp"})  # SDPA, flash first
    assert fsdp.attention_backward == flash.attention_backward
    assert tt.attention_backward == flash.attention_backward
    assert package.attention_backward < 0.6 * flash.attention_backward
    assert package.attention_forward == flash.attention_forward
    _, nv = _blocks(monkeypatch, gpu="h100-sxm", framework="fsdp", sdpa_backend="flash", **ONE)
    _, nv_package = _blocks(monkeypatch, gpu="h100-sxm", framework="fsdp", attn_implementation="flash_attention_2",
                            **ONE)
    assert nv_package.attention_backward == nv.attention_backward


def test_flash_attn_triton_is_priced_within_the_fa2_papers_triton_comparison(monkeypatch):
    """--attn-implementation triton (llm-foundry's attn_impl triton: flash-attn's Triton kernels of 2022), priced by a
    proxy: the FlashAttention-2 paper (section 4.1, A100) measures FlashAttention-2 "around 1.3-1.5x faster than
    FlashAttention in Triton in the forward pass and around 2x faster in the backward pass" (OpenAI's Triton kernel);
    the catalog's shares must stay inside that statement, and the block's attention must be slower than the package's
    FlashAttention-2 by them while its GEMMs are untouched."""
    from gpuwise.catalog.attention_kernels import flash_attn_triton_share

    assert 1 / 1.5 <= flash_attn_triton_share(backward=False) <= 1 / 1.3
    assert flash_attn_triton_share(backward=True) == pytest.approx(1 / 2, rel=0.05)
    for gpu in ("h100-sxm", "a100-sxm-80gb", "b200"):
        _, fa2 = _blocks(monkeypatch, gpu=gpu, framework="fsdp", attn_implementation="flash_attention_2", **ONE)
        _, tri = _blocks(monkeypatch, gpu=gpu, framework="fsdp", attn_implementation="triton", **ONE)
        assert tri.gemm_forward == fa2.gemm_forward and tri.gemm_backward == fa2.gemm_backward
        assert 1.3 < tri.attention_forward / fa2.attention_forward <= 1.5
        assert 1.8 < tri.attention_backward / fa2.attention_backward <= 2.0
    r = gpuwise.train(MODEL, gpu="h100-sxm", framework="fsdp", attn_implementation="triton", num_gpus=8, seq=4096,
                      global_batch=8, micro_batch=1)
    assert any("Triton kernels" in a for a in r.assumptions)


@pytest.mark.parametrize("gpu,options,kernel", [
    ("h100-sxm", dict(framework="megatron"), "transformer_engine"),
    ("h100-sxm", dict(framework="megatron", attention="unfused"), "unfused"),
    ("h100-sxm", dict(framework="torchtitan"), "sdpa_cudnn"),
    ("h100-sxm", dict(framework="hf", sdpa_backend="flash"), "sdpa_flash"),
    ("a100-sxm-80gb", dict(framework="fsdp"), "sdpa_flash"),  # SDPA's order puts flash first off Hopper/Blackwell
    ("mi300x", dict(framework="fsdp"), "sdpa_aotriton"),
    ("h100-sxm", dict(framework="fsdp", attn_implementation="flash_attention_2"), "flash_attn"),
    ("h100-sxm", dict(framework="fsdp", attn_implementation="triton"), "flash_attn_triton"),
    ("h200-sxm", dict(framework="deepspeed", attn_implementation="flash_attention_3"), "flash_attn_3"),
    ("b200", dict(framework="hf", attn_implementation="flash_attention_4"), "flash_attn_4"),
])
def test_attention_kernel_names_what_the_step_prices(gpu, options, kernel):
    from gpuwise.estimate.job import TrainJob

    assert TrainJob(**options).attention_kernel(get_gpu(gpu)) == kernel


def test_attn_implementation_conflicts_get_one_clear_error():
    from gpuwise.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="Transformer Engine"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="megatron", attn_implementation="sdpa")
    with pytest.raises(InvalidArgument, match="give one of them"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="hf", attn_implementation="flash_attention_2",
                      sdpa_backend="cudnn")
    with pytest.raises(InvalidArgument, match="--attn-implementation"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="hf", attn_implementation="eager_paged")
    with pytest.raises(InvalidArgument, match="calls PyTorch's SDPA"):  # torchtitan never calls the package
        gpuwise.train(MODEL, gpu="h100-sxm", framework="torchtitan", attn_implementation="flash_attention_2")
    with pytest.raises(InvalidArgument, match="calls PyTorch's SDPA"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="torchtune", attn_implementation="triton")
    with pytest.raises(InvalidArgument, match="give one of them"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="fsdp", attn_implementation="triton", sdpa_backend="flash")
    with pytest.raises(InvalidArgument, match="no cuDNN backend"):  # PyTorch's ROCm builds
        gpuwise.train(MODEL, gpu="mi300x", framework="torchtitan", sdpa_backend="cudnn")
    with pytest.raises(InvalidArgument, match="no cuDNN backend"):
        gpuwise.plan(MODEL, gpu="mi300x", num_gpus=8, seq=4096, global_batch=8, framework="torchtitan",
                     sdpa_backend="cudnn")


def test_compile_fuses_pointwise_work_but_not_gemms(monkeypatch):
    _, eager = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", **ONE)
    _, compiled = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", compile=True, **ONE)
    assert compiled.gemm_forward == eager.gemm_forward
    assert compiled.attention_forward == eager.attention_forward
    assert compiled.forward < eager.forward and compiled.backward < eager.backward


def test_fp8_pays_for_its_casts_so_it_gains_less_than_its_gemms(monkeypatch):
    r16, b16 = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", compile=True, **ONE)
    r8, b8 = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", compile=True, precision="fp8", **ONE)
    gemm_gain = b16.gemm_forward / b8.gemm_forward
    step_gain = r16.perf.step.step_time_s / r8.perf.step.step_time_s
    assert 1.5 < gemm_gain and 1.0 < step_gain < gemm_gain
    # the casts: the fp8 block's forward beyond its GEMMs is more than the bf16 block's
    assert b8.forward - b8.gemm_forward > b16.forward - b16.gemm_forward


def test_fp8_keeps_the_output_layer_in_16_bits(monkeypatch):
    """torchao's float8 skips the output layer; Transformer Engine's output_layer is not an fp8 module."""
    calls = []
    real = st.matmul_s

    def spy(profile, m, n, k, dtype, *a, **kw):
        calls.append((m, n, k, dtype))
        return real(profile, m, n, k, dtype, *a, **kw)

    monkeypatch.setattr(st, "matmul_s", spy)
    st._CACHE.clear()
    r = gpuwise.train("qwen3-0.6b", gpu="h100-sxm", framework="megatron", precision="fp8", num_gpus=1, seq=2048)
    st._CACHE.clear()
    vocab = r.request.model.spec.vocab_size
    head = [c for c in calls if vocab in c[:3]]
    blocks = [c for c in calls if vocab not in c[:3]]
    assert len(head) == 3 and {c[3] for c in head} == {"bf16"}
    assert blocks and {c[3] for c in blocks} == {"fp8"}


def test_torchtitan_tp_splits_the_norms_along_the_sequence():
    kw = dict(gpu="h100-sxm", num_gpus=8, tp=8, seq=8192, micro_batch=4, fsdp="full")
    tt = gpuwise.train("llama-3.1-70b", framework="torchtitan", ac="full", **kw)
    mg = gpuwise.train("llama-3.1-70b", framework="megatron", recompute="full", **kw)
    assert tt.layout.sp and not mg.layout.sp
    assert tt.memory.activations_per_microbatch < mg.memory.activations_per_microbatch


def test_an_overlapped_collective_slows_the_compute_it_hides_behind():
    """arXiv 2507.03114: compute runs 18.9% slower while NCCL kernels overlap it; what exceeds the window shows in
    full; host copies (copy engines, no SMs) cost nothing while hidden."""
    assert st._exposed(1.0, 10.0) == pytest.approx(st.OVERLAP_SLOWDOWN * 1.0)
    assert st._exposed(10.0, 1.0) == pytest.approx(9.0)
    assert st._exposed(0.0, 5.0) == 0.0
    assert st._copy_exposed(1.0, 10.0) == 0.0


def _bytes_per_weight_element(monkeypatch, **options) -> float:
    """Seconds of one block's cached fp8 weight quantization, as bytes per weight element at the profile's bandwidth
    (its kernel launches taken off)."""
    r, bt = _blocks(monkeypatch, **options)
    prof = r.perf.profile
    spec = r.request.model.spec
    h, f = spec.hidden_size, spec.intermediate_size
    weights = h * (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim + spec.num_heads * spec.head_dim * h \
        + 3 * h * f
    return (bt.weight_cast - 4 * prof.kernel_overhead_s) * prof.bandwidth / weights


def test_megatron_quantizes_fp8_weights_once_per_step_torchao_in_every_micro_batch(monkeypatch):
    """Megatron-Core passes is_first_microbatch to Transformer Engine's linear layers (megatron/core/extensions/
    transformer_engine.py, TELinear.forward), which quantize each weight, and on Hopper transpose it, on the first
    micro-batch and reuse the cache: read 2 B and write 1 B, then 1 B read and 1 written for the transpose, once per
    step. torchao's float8 quantizes the weights in every forward and backward."""
    one = dict(gpu="h100-sxm", precision="fp8", num_gpus=1, seq=4096, micro_batch=1)
    assert _bytes_per_weight_element(monkeypatch, framework="megatron", **one) == pytest.approx(5.0, rel=1e-6)
    _, tt = _blocks(monkeypatch, framework="torchtitan", compile=True, **one)
    assert tt.weight_cast == 0.0
    steps = {}
    for fw in ("megatron", "torchtitan"):
        t1 = gpuwise.train(MODEL, framework=fw, global_batch=1, **one).perf.step.breakdown["forward"]
        t8 = gpuwise.train(MODEL, framework=fw, global_batch=8, **one).perf.step.breakdown["forward"]
        steps[fw] = t8 / t1
    assert steps["torchtitan"] == pytest.approx(8.0, rel=1e-9)
    assert 7.0 < steps["megatron"] < 8.0  # the weights' quantization is paid once, not eight times


def test_a_gemms_fixed_time_is_charged_once():
    """matmul_s carries each GEMM's fixed time (the GEMM line's intercept) and attention_s the attention kernel's;
    the per-kernel overhead is charged once to each other kernel: one more microsecond per kernel adds (kernels - GEMMs)
    microseconds to a block's forward (the streaming kernels and the attention kernel)."""
    from dataclasses import replace

    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.layer_ops import block_ops

    spec = load_model(MODEL).spec
    base = default_profile(get_gpu("h100-sxm"))
    slower = replace(base, kernel_overhead_s=base.kernel_overhead_s + 1e-6)
    args = (4096, 4096, 1, 1, 1, "bf16", 2.0, "none", False, "megatron", "flash", False, None)
    f0 = st._time_block(base, spec, 0, *args).forward
    f1 = st._time_block(slower, spec, 0, *args).forward
    ops = block_ops(spec, 0, tokens=4096, keys=2048)
    assert f1 - f0 == pytest.approx((ops.kernels - len(ops.gemms)) * 1e-6, rel=1e-6)


def test_torchao_fp8_without_compile_is_slower_than_bf16_and_te_casts_are_cheapest(monkeypatch):
    """torchao's float8 eager (six cast kernels, strided fp8 transposes; benchmarks/results/h200-sxm/fp8-linear.json:
    an fp8 layer 0.56-0.76x as fast as bf16) loses to bf16 eager; compiled it gains; Transformer Engine's fused casts
    (--fp8-backend te, as Composer's amp_fp8 runs under FSDP) cost less than either. The GEMMs are the same."""
    _, b16 = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", **ONE)
    eager, b_eager = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", precision="fp8", **ONE)
    comp, b_comp = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", precision="fp8", compile=True, **ONE)
    te, b_te = _blocks(monkeypatch, gpu="h100-sxm", framework="fsdp", precision="fp8", fp8_backend="te", **ONE)
    block = {name: b.forward + b.backward for name, b in (("bf16", b16), ("eager", b_eager), ("te", b_te))}
    assert block["eager"] > block["bf16"] > block["te"]
    assert b_eager.gemm_forward == b_comp.gemm_forward == b_te.gemm_forward
    _, b16c = _blocks(monkeypatch, gpu="h100-sxm", framework="torchtitan", compile=True, **ONE)

    _, b16f = _blocks(monkeypatch, gpu="h100-sxm", framework="fsdp", **ONE)

    def casts(b, plain):  # the forward beyond GEMMs, attention and the same job's bf16 streaming kernels
        return (b.forward - b.gemm_forward - b.attention_forward) - (plain.forward - plain.gemm_forward
                                                                     - plain.attention_forward)
    assert casts(b_eager, b16) > casts(b_comp, b16c) > casts(b_te, b16f) > 0
    assert eager.request.job.fp8_kernels == "torchao" and te.request.job.fp8_kernels == "te"
    assert te.request.job.te_fp8 and not eager.request.job.te_fp8


def test_fp8_backend_is_refused_where_it_means_nothing():
    from gpuwise.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="--precision fp8"):
        gpuwise.train(MODEL, gpu="h100-sxm", precision="bf16", fp8_backend="te")
    with pytest.raises(InvalidArgument, match="Transformer Engine"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="megatron", precision="fp8", fp8_backend="torchao")
    with pytest.raises(InvalidArgument, match="--fp8-backend"):
        gpuwise.train(MODEL, gpu="h100-sxm", precision="fp8", fp8_backend="msamp")


def test_plan_prices_the_fp8_backend_it_is_given_and_hands_it_to_train():
    from gpuwise.errors import InvalidArgument

    base = dict(gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=64, framework="fsdp", precision="fp8", top=1)
    eager, te = gpuwise.plan(MODEL, **base), gpuwise.plan(MODEL, **base, fp8_backend="te")
    assert te.plans[0].step_time_s < eager.plans[0].step_time_s
    options = te.plans[0].train_options(te.request)
    assert options["fp8_backend"] == "te"
    checked = gpuwise.train(MODEL, gpu="h100-sxm", **{k: v for k, v in options.items() if v is not None})
    assert checked.perf.step.step_time_s == pytest.approx(te.plans[0].step_time_s, rel=1e-6)
    with pytest.raises(InvalidArgument, match="Transformer Engine"):
        gpuwise.plan(MODEL, **dict(base, framework="megatron"), fp8_backend="torchao")
    with pytest.raises(InvalidArgument, match="torchao's float8"):  # torchtitan's recipe writes torchao's converter
        gpuwise.plan(MODEL, **dict(base, framework="torchtitan"), fp8_backend="te")


def test_moe_permute_runs_fused_only_under_megatron_with_moe_permute_fusion(monkeypatch):
    """Megatron-Core's default (and torchtitan) gathers and scatter-adds the routed copies with PyTorch's index ops;
    --moe-permute-fusion runs Transformer Engine's fused permute. The difference is the permute's bytes alone."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.errors import InvalidArgument
    from gpuwise.estimate.kernels import memory_s
    from gpuwise.estimate.layer_ops import MEGATRON_UNFUSED_PERMUTE_BYTES, PERMUTE_BYTES

    one = dict(gpu="h100-sxm", num_gpus=8, ep=8, seq=4096, micro_batch=1, global_batch=8, framework="megatron")
    moe = "qwen3-30b-a3b"

    def block(**kw):
        return first_block(monkeypatch, moe, **{**one, **kw})

    r, plain = block()
    _, fused = block(moe_permute_fusion=True)
    spec = r.request.model.spec
    tokens = one["seq"] * one["micro_batch"]
    extra = memory_s(default_profile(get_gpu("h100-sxm")),
                     (MEGATRON_UNFUSED_PERMUTE_BYTES - PERMUTE_BYTES) * (spec.moe.top_k + 1) * spec.hidden_size
                     * tokens)
    assert plain.forward - fused.forward == pytest.approx(extra, rel=1e-9)
    assert plain.backward - fused.backward == pytest.approx(2 * extra, rel=1e-9)
    assert not r.request.job.moe_permute_fused
    with pytest.raises(InvalidArgument, match="Megatron"):
        gpuwise.train(moe, **{**one, "framework": "torchtitan"}, moe_permute_fusion=True)
    with pytest.raises(InvalidArgument, match="has none"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="megatron", moe_permute_fusion=True)


def test_torchtitan_runs_its_experts_as_one_grouped_gemm(monkeypatch):
    """torchtitan's torch._grouped_mm packs every local expert's tiles into shared waves; Megatron's Transformer
    Engine grouped linear runs cuBLAS per expert. At few rows per expert (Qwen3-30B-A3B, 128 experts, one 4,096-token
    micro-batch on one GPU: 256 rows each) the packed kernel is far faster."""
    one = dict(gpu="h100-sxm", num_gpus=1, seq=4096, micro_batch=1, global_batch=1)
    seen = {framework: first_block(monkeypatch, "qwen3-30b-a3b", framework=framework, **one)[1]
            for framework in ("torchtitan", "megatron")}
    assert seen["torchtitan"].gemm_forward < 0.7 * seen["megatron"].gemm_forward


def test_flash_attention_3_and_4_are_priced_from_their_papers_and_a_published_kernel_ratio():
    """FlashAttention-3 (transformers' attn_implementation "flash_attention_3", Hopper): the catalog's shares must be
    the FA3 paper's own FA3 / cuDNN ratios (H100, head dim 128, 16k: causal forward 616 / 539; the causal backward,
    each non-causal backward times its forward's causal share, (561 x 616 / 648) / (516 x 539 / 595)), a consistency
    check of the rounded constants against the paper's figures in the same file. FlashAttention-4 on a B200 against
    ml-engineering's measurements (FA4 on a B200 over FA3 on an H200, Llama-3.1-8B's attention, causal, forward +
    backward): its kernel benchmark's 1.95x at 32K is the point FA4's backward share was fitted to; 1.88x at 8K and
    the in-step 1.87x at 8K (bench_decompose.py: 834 / 447 TFLOP/s) were not, and gpuwise, whose two kernels share one
    sequence curve, holds 1.95x at every length: they check it within 5%."""
    from gpuwise.catalog._toml import load_toml

    paper = load_toml("attention_kernels.toml")
    fa3, cudnn = paper["fa3"], paper["cudnn"]
    h200 = default_profile(get_gpu("h200-sxm"))
    b200 = default_profile(get_gpu("b200"))
    flops = 1e12
    for backward, expected in ((False, fa3["forward_causal"][-1] / cudnn["forward_causal"][-1]),
                               (True, (fa3["backward"][-1] * fa3["forward_causal"][-1] / fa3["forward"][-1])
                                / (cudnn["backward"][-1] * cudnn["forward_causal"][-1] / cudnn["forward"][-1]))):
        best = attention_s(h200, flops, 0.0, backward=backward)
        ours = attention_s(h200, flops, 0.0, backward=backward, package="flash_attention_3")
        assert best / ours == pytest.approx(expected, rel=0.005)

    def pair(profile, package, seq):  # forward + backward of one causal attention, gpuwise's FLOP convention
        return (attention_s(profile, flops, 0.0, backward=False, seq=seq, package=package)
                + attention_s(profile, 2.5 * flops, 0.0, backward=True, seq=seq, package=package))

    for seq, measured in ((8192, 1.88), (8192, 834 / 447), (32768, 1.95)):
        ratio = pair(h200, "flash_attention_3", seq) / pair(b200, "flash_attention_4", seq)
        assert ratio == pytest.approx(measured, rel=0.05)


def test_flash_attention_3_and_4_run_only_where_gpuwise_has_their_rates(monkeypatch):
    from gpuwise.errors import InvalidArgument

    deepspeed = dict(framework="deepspeed", zero=3, num_gpus=8, seq=32768, global_batch=8, micro_batch=1)
    for gpu, package in (("a100-sxm-80gb", "flash_attention_3"), ("b200", "flash_attention_3"),
                         ("h100-sxm", "flash_attention_4"), ("mi300x", "flash_attention_3")):
        with pytest.raises(InvalidArgument, match="prices it on"):
            gpuwise.train(MODEL, gpu=gpu, attn_implementation=package, **deepspeed)
    with pytest.raises(InvalidArgument, match="prices it on"):  # the planner runs the same check
        gpuwise.plan(MODEL, gpu="a100-sxm-80gb", num_gpus=8, seq=8192, global_batch=64, framework="deepspeed",
                     attn_implementation="flash_attention_3")
    with pytest.raises(InvalidArgument, match="calls PyTorch's SDPA"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="torchtitan", attn_implementation="flash_attention_3")
    with pytest.raises(InvalidArgument, match="give one of them"):
        gpuwise.train(MODEL, gpu="h100-sxm", framework="hf", attn_implementation="flash_attention_3",
                      sdpa_backend="cudnn")
    _, sdpa = _blocks(monkeypatch, gpu="h100-sxm", framework="hf", **ONE)  # SDPA's cuDNN backend
    _, fa3 = _blocks(monkeypatch, gpu="h100-sxm", framework="hf", attn_implementation="flash_attention_3", **ONE)
    assert fa3.gemm_forward == sdpa.gemm_forward
    assert 1.05 < sdpa.attention_forward / fa3.attention_forward < 1.25
    r = gpuwise.train(MODEL, gpu="h200-sxm", attn_implementation="flash_attention_3", **deepspeed)
    assert any("FlashAttention-3" in a for a in r.assumptions)
