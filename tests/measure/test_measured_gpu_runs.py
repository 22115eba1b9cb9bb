"""The training runs and loss measurements taken on lent GPUs (benchmarks/results/h100-sxm, h200-sxm) against what
today's model predicts for the same configurations: the peak allocated memory of one-GPU `bench train` runs
(every checkpointing mode torchtitan has, three model families) and the loss's bytes per logit element."""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import statistics

import pytest

from gpuwise.estimate.activations import logits_bytes_per_element

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _benchmark(name: str):
    """A script of benchmarks/ as a module."""
    spec = importlib.util.spec_from_file_location(name, RESULTS.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench_vs_model():
    return _benchmark("bench_vs_model")


def test_peak_allocated_memory_of_the_measured_runs() -> None:
    """Most runs within 3% (the backward's start: the loss's gradients, not one rebuilt block, on top of the saved
    activations; checkpointed blocks hold no 16-bit weight copies); the median within 1.5%."""
    rows = [r for folder in ("h100-sxm", "h200-sxm") for r in _bench_vs_model().rows(RESULTS / folder, "foreach")]
    assert len(rows) >= 20
    errors = [abs(r["alloc_now"] / r["alloc_measured"] - 1) for r in rows]
    assert statistics.median(errors) <= 0.015, sorted(errors)
    assert sum(e <= 0.03 for e in errors) >= 0.85 * len(errors), sorted(errors)
    checkpointed = [e for r, e in zip(rows, errors) if "ac-" in r["run"] or "recompute" in r["run"]]
    assert len(checkpointed) >= 10 and max(checkpointed) <= 0.035, sorted(checkpointed)


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/loss-memory-*.json")), ids=lambda p: p.name)
def test_loss_bytes_per_logit_element(path: pathlib.Path) -> None:
    """torchtitan's cross-entropy keeps the fp32 log-probabilities (4 B) and peaks at 12 B in its backward; under
    loss parallel (TP > 1) at 16 B (torch/distributed/tensor/parallel/loss.py's unfused backward)."""
    rows = {r["loss"]: r for r in json.loads(path.read_text())["rows"]}
    for name, parallel in (("torchtitan", False), ("loss-parallel", True)):
        saved, peak = logits_bytes_per_element("torchtitan", 2.0, loss_parallel=parallel)
        assert rows[name]["saved_bytes_per_element"] == pytest.approx(saved, abs=0.1)
        assert rows[name]["backward_peak_bytes_per_element"] == pytest.approx(peak, abs=0.1)


def _fp8_layers() -> dict[str, dict[str, dict]]:
    rows = json.loads((RESULTS / "h200-sxm" / "fp8-linear.json").read_text())["rows"]
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        out.setdefault(r["weight"], {})[r["what"]] = r
    return out


@pytest.mark.parametrize("kind, measured", [("eager", "fp8 layer eager"), ("compiled", "fp8 layer whole-compiled")])
def test_fp8_linear_layers_on_h200(kind: str, measured: str) -> None:
    """One linear layer's training passes in dynamic tensorwise fp8 (torchao's float8, eager or compiled) on an H200
    (benchmarks/fp8_linear.py: the input, the weight and the output gradient each cast and transposed once), priced
    as step_time prices a block's weight GEMMs: three fp8 GEMMs and `fp8_quantize_s` at `FP8_QUANTIZE[kind]`. The
    former 5 + 2 bytes per element priced the eager layer 1.5x faster than bf16; it ran 0.56-0.76x as fast."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import matmul_s
    from gpuwise.estimate.layer_ops import Gemm
    from gpuwise.estimate.step_time import FP8_QUANTIZE, fp8_quantize_s

    profile = default_profile(get_gpu("h200-sxm"))
    layers = _fp8_layers()
    assert len(layers) == 4
    for name, d in layers.items():
        m, k, n = d["bf16 fwd"]["tokens"], d["bf16 fwd"]["k"], d["bf16 fwd"]["n"]
        gemms = (matmul_s(profile, m, n, k, "fp8", 1.0) + matmul_s(profile, m, k, n, "fp8", 1.0)
                 + matmul_s(profile, k, n, m, "fp8", 1.0))
        forward, backward, once = fp8_quantize_s(profile, FP8_QUANTIZE[kind], [Gemm(name, m, n, k)])
        assert once == 0.0
        assert gemms + forward + backward == pytest.approx(d[measured]["measured"], rel=0.10 if kind == "compiled"
                                                           else 0.05), name


def test_unfused_moe_permute_bytes_on_h200() -> None:
    """PyTorch's gather, atomic index_add_ and their backward kernels in one MoE layer's forward + backward (the
    kernel profile of benchmarks/moe_layer.py) move the routed copies at UNFUSED_PERMUTE_BYTES per element and pass,
    as gpuwise charges the permute (one pass forward, two backward)."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.kernels import memory_s
    from gpuwise.estimate.layer_ops import PERMUTE_BYTES, UNFUSED_PERMUTE_BYTES

    profile = default_profile(get_gpu("h200-sxm"))
    rows = [r for r in json.loads((RESULTS / "h200-sxm" / "moe-layer-profile.json").read_text())["rows"]
            if "kernels_s" in r]
    assert len(rows) >= 4
    for r in rows:
        spec = load_model(r["model"]).spec
        elements = (spec.moe.top_k + 1) * spec.hidden_size * r["tokens"]
        kernels = sum(s for name, s in r["kernels_s"].items() if name.startswith((
            "void at::native::vectorized_gather_kernel", "void at::native::indexFuncLargeIndex",
            "void (anonymous namespace)::indexing_backward_kernel")))
        assert kernels == pytest.approx(3 * memory_s(profile, UNFUSED_PERMUTE_BYTES * elements), rel=0.06), r["model"]
        assert kernels > 1.6 * 3 * memory_s(profile, PERMUTE_BYTES * elements)  # not the bytes they move


def test_expert_gemms_on_h200() -> None:
    """A rank's routed experts' GEMMs (benchmarks/moe_grouped_gemm.py, 90 points): priced by `gemm_passes_s` as
    torchtitan's `torch._grouped_mm` (one packed kernel) and as Megatron's per-expert cuBLAS GEMMs, each within a
    median 6% of its measured form; the per-expert price misses the grouped kernel by 1.5-3x at few rows per expert."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.layer_ops import Gemm
    from gpuwise.estimate.step_time import gemm_passes_s

    profile = default_profile(get_gpu("h200-sxm"))
    rows = json.loads((RESULTS / "h200-sxm" / "moe-grouped-gemm.json").read_text())["rows"]
    assert len(rows) >= 60
    grouped_err, loop_err, small = [], [], []
    for r in rows:
        g = Gemm(r["gemm"], r["rows_per_expert"], r["n"], r["k"], r["experts"])
        which = ("fwd", "dgrad", "wgrad").index(r["pass_"])
        packed = gemm_passes_s(profile, g, "bf16", 2.0, grouped=True)[which]
        each = gemm_passes_s(profile, g, "bf16", 2.0)[which]
        grouped_err.append(abs(packed / r["grouped_s"] - 1))
        loop_err.append(abs(each / r["loop_s"] - 1))
        if r["rows_per_expert"] <= 512 and r["pass_"] != "wgrad" and r["n"] <= 4096:
            small.append(each / r["grouped_s"])
    assert statistics.median(grouped_err) < 0.06 and statistics.median(loop_err) < 0.06
    assert small and min(small) > 1.3


def test_megatron_unfused_permute_bytes_on_h200() -> None:
    """Megatron-Core's unfused permute and unpermute (index_select, the copies weighted by bf16 probabilities,
    scatter_add_; benchmarks/moe_permute.py) cost MEGATRON_UNFUSED_PERMUTE_BYTES per element and pass on every
    measured shape; fp32 probabilities (--moe-router-dtype fp32) cost more still."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.layer_ops import MEGATRON_UNFUSED_PERMUTE_BYTES, UNFUSED_PERMUTE_BYTES

    bw = default_profile(get_gpu("h200-sxm")).bandwidth
    per_pass = {}
    for dtype in ("bf16", "fp32"):
        rows = json.loads((RESULTS / "h200-sxm" / f"moe-permute-{dtype}.json").read_text())["rows"]
        assert len(rows) >= 6
        per_pass[dtype] = [(r["forward_s"] + r["backward_s"]) / 3 * bw / ((r["top_k"] + 1) * r["hidden"] * r["tokens"])
                           for r in rows]
    assert statistics.median(per_pass["bf16"]) == pytest.approx(MEGATRON_UNFUSED_PERMUTE_BYTES, rel=0.05)
    assert min(per_pass["fp32"]) > max(per_pass["bf16"]) > UNFUSED_PERMUTE_BYTES


@pytest.mark.parametrize("path", ["h100-sxm/prefill-qwen3-14b.json", "h200-sxm/prefill-qwen3-14b.json",
                                  "h200-sxm/prefill-llama-3.1-8b.json"])
def test_prefill_on_lent_gpus(path: str) -> None:
    """Whole models' prefill with PyTorch's kernels (benchmarks/prefill_sustained.py): each of a block's GEMMs within
    15% of `matmul_s` and the cuDNN attention kernel of `attention_s` (with its thread blocks); the eager pass, with
    unfused pointwise work vLLM fuses, 0-15% slower than `forward_pass_s` prices vLLM's; no loss under sustained
    load."""
    from gpuwise.catalog.attention_kernels import flash_tiles
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.comm import topology
    from gpuwise.estimate.infer_time import engine_perf, forward_pass_s
    from gpuwise.estimate.kernels import attention_s, matmul_s
    from gpuwise.estimate.layer_ops import attention_head_dim, block_ops, keys_per_query

    d = json.loads((RESULTS / path).read_text())
    gpu = get_gpu(d["gpu"])
    profile = default_profile(gpu)
    spec = load_model(d["model"]).spec
    assert d["layers"] == spec.num_layers  # a whole-model run (not cut short with --layers)
    assert len(d["gemms"]) >= 4 and len(d["passes"]) >= 2  # what the committed runs hold: an emptied file fails
    for g in d["gemms"]:
        assert matmul_s(profile, g["m"], g["n"], g["k"], "bf16", 2.0) / g["measured_s"] == pytest.approx(1, abs=0.15)
    first = d["passes"][0]
    b, seq = first["sequences"], first["prompt"]
    ops = block_ops(spec, 0, tokens=b * seq, keys=keys_per_query(spec, 0, seq))
    attention = attention_s(profile, ops.attention_flops, ops.attention_io_elements * 2, backward=False, seq=seq,
                            head_dim=attention_head_dim(spec), tiles=flash_tiles(b, spec.num_heads, seq))
    assert attention / d["attention_backends_s"]["CUDNN_ATTENTION"] == pytest.approx(1, abs=0.15)
    for p in d["passes"]:
        predicted = forward_pass_s(spec, profile=profile, topo=topology(gpu, num_gpus=1), engine=engine_perf("vllm"),
                                   dtype="bf16", weight_bytes_per_param=2.0, kv_bytes_per_element=2.0,
                                   rows=p["sequences"] * p["prompt"], sequences=p["sequences"], context=p["prompt"],
                                   num_gpus=1, decode=False, logits_rows=p["sequences"]).seconds
        assert 0.85 < predicted / p["measured_s"] < 1.0, (p["sequences"], p["prompt"])
    s = d["sustained"]
    assert s["seconds"] >= 25  # the first 5 s and the last 20 s do not overlap
    assert s["last20s_median_s"] / s["first5s_median_s"] == pytest.approx(1, abs=0.03)


def test_cudnn_window_and_sinks_on_h200() -> None:
    """cuDNN's fused attention with gpt-oss's sliding window (128 keys) and attention sinks (benchmarks/cudnn_sdpa.py):
    a window layer priced over the key tiles its band touches (`band_work`) stands to the measured time as the full
    causal layer of the same shape does (within 12%: the plateau's own error cancels); the sink's backward cost per
    query row and head within 25% of `sink_backward_s` in every pair; the forward unchanged by the sink (2%)."""
    from gpuwise.catalog.attention_kernels import band_pairs, band_work, flash_tiles, sink_backward_s
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import attention_s

    d = json.loads((RESULTS / "h200-sxm" / "cudnn-sdpa.json").read_text())
    profile = default_profile(get_gpu(d["device"]))
    rows = {(r["shape"], r["batch"], r["seq"], r["variant"]): r for r in d["rows"] if r["kernel"] == "cudnn-frontend"}
    assert len(rows) == 32 and all(max(e.values()) < 5e-3 for e in (c["rel_err"] for c in d["checks"]))

    def ratio(r: dict) -> float:  # predicted / measured, forward + backward, no sink
        b, s, h, hd, w = r["batch"], r["seq"], r["heads"], r["head_dim"], r["window"]
        keys = band_pairs(0, s, w or s) / s  # layer_ops.keys_per_query
        flops = 4.0 * b * s * keys * h * hd * band_work(w, s)
        io = 2.0 * b * s * hd * (2 * h + 2 * r["kv_heads"])
        kw = dict(seq=min(s, w) if w else s, head_dim=hd, tiles=flash_tiles(b, h, s))
        predicted = (attention_s(profile, flops, io, backward=False, **kw)
                     + attention_s(profile, 2.5 * flops, 2 * io, backward=True, **kw))
        return predicted / (r["forward_s"] + r["backward_s"])

    for (shape, b, s, variant), r in rows.items():
        if variant == "window":
            assert ratio(r) / ratio(rows[shape, b, s, "causal"]) == pytest.approx(1, abs=0.12), (shape, b, s)
        if variant.endswith("+sink"):
            plain = rows[shape, b, s, variant.removesuffix("+sink")]
            added = r["backward_s"] - plain["backward_s"]
            assert added / sink_backward_s("cudnn", b * r["heads"] * s) == pytest.approx(1, abs=0.25), (shape, b, s)
            assert r["forward_s"] / plain["forward_s"] == pytest.approx(1, abs=0.02)


def test_megatron_expert_extras_on_h200() -> None:
    """Megatron-Core's gpt-oss expert bias loop and GLU offset as written (benchmarks/megatron_expert_extras.py):
    the bias's device time within 5% (forward) and 15% (backward) of `MEGATRON_EXPERT_BIAS_BYTES` at every shape;
    `torch.tensor(x, device=...)` waits for the device (the host blocked for the 50 ms GPU sleep ahead of it, which
    `moe_host_syncs` counts); the device idles after such a wait, before fc2 and the bias loop, for about
    `MOE_SYNC_GAP_S` (the median within a factor of 1.5 of it; measured on a DGX H100 for another layer)."""
    import statistics

    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import memory_s
    from gpuwise.estimate.layer_ops import MEGATRON_EXPERT_BIAS_BYTES
    from gpuwise.estimate.step_time import MOE_SYNC_GAP_S

    d = json.loads((RESULTS / "h200-sxm" / "megatron-expert-extras.json").read_text())
    profile = default_profile(get_gpu(d["device"]))
    rows = {(r["case"], r["local_experts"], r["rows_per_expert"], r["probs"]): r for r in d["rows"]}
    shapes = {k[1:] for k in rows}
    assert len(shapes) == 8 and len(rows) == 48
    for local, per, probs in shapes:
        elements = local * per * d["rows"][0]["hidden"]
        fwd_s = rows["bias_fwd", local, per, probs]["device_s"]
        bwd_s = rows["bias_fwd_bwd", local, per, probs]["device_s"] - fwd_s
        for (nbytes, per_expert, more), measured, tol in zip(
                MEGATRON_EXPERT_BIAS_BYTES["bf16" if probs == "bfloat16" else "fp32"], (fwd_s, bwd_s), (0.05, 0.15)):
            priced = memory_s(profile, nbytes * elements) + (per_expert * local + more) * profile.kernel_overhead_s
            assert priced / measured == pytest.approx(1, abs=tol), (local, per, probs)
    assert d["scalar_tensor"]["host_s"] > 0.04
    gaps = [rows[("sync_fc2_bias_fwd",) + s]["device_s"] - rows[("fc2_bias_fwd",) + s]["device_s"] for s in shapes]
    assert statistics.median(gaps) / MOE_SYNC_GAP_S == pytest.approx(1, abs=0.5)


def test_megatron_glu_clamp_on_h200() -> None:
    """weighted_bias_quick_geglu_impl's clamp of the fc1 output's halves as written
    (benchmarks/megatron_expert_extras.py `clamp_*`): device time within 5% of `MEGATRON_GLU_CLAMP_BYTES` forward
    and backward at every shape."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.estimate.kernels import memory_s
    from gpuwise.estimate.layer_ops import MEGATRON_GLU_CLAMP_BYTES

    d = json.loads((RESULTS / "h200-sxm" / "megatron-glu-clamp.json").read_text())
    profile = default_profile(get_gpu(d["device"]))
    rows = {(r["case"], r["local_experts"], r["rows_per_expert"]): r for r in d["rows"]}
    shapes = {k[1:] for k in rows}
    assert len(shapes) == 4 and len(rows) == 8
    for local, per in shapes:
        elements = local * per * 2 * d["rows"][0]["width"]
        fwd_s = rows["clamp_fwd", local, per]["device_s"]
        bwd_s = rows["clamp_fwd_bwd", local, per]["device_s"] - fwd_s
        for (nbytes, kernels), measured in zip(MEGATRON_GLU_CLAMP_BYTES, (fwd_s, bwd_s)):
            priced = memory_s(profile, nbytes * elements) + kernels * profile.kernel_overhead_s
            assert priced / measured == pytest.approx(1, abs=0.05), (local, per)


def test_hf_qlora_memory_on_h200() -> None:
    """transformers + PEFT + bitsandbytes QLoRA as TRL sets it up (benchmarks/hf_lora_memory.py --qlora: NF4 base with
    double quantization, prepare_model_for_kbit_training's fp32 casts, TRL's recast to bf16, adamw-8bit), Llama-3.1-8B,
    CodeLlama-34B (SDPA and eager attention) and Qwen3-14B in fp16, next to `gpuwise train --framework hf --finetune
    qlora`. Allocated: the 8B runs come out 4-11% high, the 2 B per logit element that transformers 5.17's loss saves
    over the 14 B gpuwise charges (benchmarks/results/h200-sxm/README.md); the others within 1%. Reserved: within 8%,
    the caching allocator's slack (9-26% of allocated with checkpointing) above the 5% allowance."""
    bench = _benchmark("hf_lora_memory")
    runs = [json.loads(p.read_text()) for p in sorted((RESULTS / "h200-sxm").glob("hf-qlora-*.json"))]
    runs = [r for r in runs if not r.get("alloc_conf")]
    assert len(runs) >= 6
    alloc_err, reserved_err = [], []
    for r in runs:
        args = argparse.Namespace(model=r["model"], seq=r["seq"], micro_batch=r["micro_batch"], rank=r["lora_rank"],
                                  targets=r["lora_targets"], no_gc=not r["gradient_checkpointing"], qlora=True,
                                  attn=r["attn"], precision=r["precision"], optimizer=r["optimizer"])
        mem = bench.predict(args, "h200-sxm").memory
        alloc_err.append(mem.torch_allocated / r["peak_allocated_bytes"] - 1)
        reserved_err.append(mem.torch_reserved / r["peak_reserved_bytes"] - 1)
    assert all(-0.03 <= e <= 0.12 for e in alloc_err), alloc_err
    assert statistics.median(abs(e) for e in alloc_err) <= 0.03, alloc_err
    assert all(abs(e) <= 0.08 for e in reserved_err), reserved_err
