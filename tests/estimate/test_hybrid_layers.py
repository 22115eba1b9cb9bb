"""Hybrid models' recurrent layers (Gated DeltaNet, Mamba-2): their kernels (estimate/layer_ops.py,
estimate/kernels.py `recurrent_scan_s`), serving, and training time, FLOPs and saved tensors."""

from __future__ import annotations

import json

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.kernels import RECURRENT_SCAN_FLOPS, recurrent_scan_s
from gpuwise.estimate.kv_cache import state_bytes_per_sequence
from gpuwise.estimate.layer_ops import block_ops
from gpuwise.model.params import tensor_inventory
from gpuwise.model.spec import LINEAR, NONE

HYBRIDS = ("qwen3-next-80b-a3b-thinking", "qwen3.5-27b", "qwen3.5-35b-a3b", "nemotron-3-nano-30b-a3b")


@pytest.mark.parametrize("name", HYBRIDS)
def test_projection_flops_are_twice_the_weights_each_token_reads(name: str) -> None:
    """The GEMMs block_ops lists for a layer's token mixer multiply every weight of it once per token: 2 FLOPs per
    weight, as the parameter inventory (checked against transformers in tests/model/test_params_oracle.py) has
    them. Two independent descriptions of the same layers."""
    spec = load_model(name).spec
    inventory = tensor_inventory(spec)
    for layer in range(spec.num_layers):
        kind = spec.layer_types[layer]
        if kind == NONE:
            continue
        prefix = "ssm_" if kind == LINEAR else "attn_"
        weights = sum(t.numel for t in inventory if t.layer == layer and t.role.startswith(prefix)
                      and len(t.shape) == 2)
        ops = block_ops(spec, layer, tokens=1, keys=1)
        names = ("mixer_in", "mixer_out") if kind == LINEAR else ("qkv", "o")
        assert sum(g.flops for g in ops.gemms if g.name in names) == 2 * weights, (name, layer)


@pytest.mark.parametrize("name", HYBRIDS)
def test_decode_reads_and_writes_each_sequence_state_once(name: str) -> None:
    """In decode a recurrent layer reads and writes each sequence's state (and convolution window) once: twice the
    state that kv_cache.state_bytes_per_sequence holds for it, whatever the context."""
    spec = load_model(name).spec
    layer = spec.layer_types.index(LINEAR)
    per_layer = state_bytes_per_sequence(spec, tp=2, layers=range(layer, layer + 1))
    short, long = (block_ops(spec, layer, tokens=8, keys=k, tp=2, kv_rows=8 * k, sequences=8) for k in (100, 100_000))
    assert short.recurrent_state_bytes == pytest.approx(2 * 8 * per_layer)
    assert long == short  # no per-token cache: the context does not enter
    assert short.attention_flops == 0 and short.attention_io_elements == 0


def test_mixer_less_layers_are_their_feed_forward_part_alone() -> None:
    """Nemotron-H's MLP and MoE layers run no token mixer, its Mamba-2 and attention layers no feed-forward part."""
    spec = load_model("nemotron-3-nano-30b-a3b").spec
    for layer, kind in enumerate(spec.layer_types):
        names = {g.name for g in block_ops(spec, layer, tokens=64, keys=64).gemms}
        if kind == NONE:
            assert not names & {"qkv", "o", "mixer_in", "mixer_out"} and names
        else:
            assert not names & {"mlp_up", "mlp_down", "experts_up", "router"}


def test_scan_rate_reproduces_the_measured_kernel_times() -> None:
    """flashinfer PR #3788 times flash-linear-attention's Gated DeltaNet prefill on an H100 (Qwen3.5-397B's shape at
    TP 1: 64 value heads of 128): 0.279 ms at 2,048 tokens, 1.045 ms at 8,192, 8.633 ms at 65,536; vLLM PR #27299
    runs its Mamba-2 SSD at 1.07-1.29e7 tokens/s over granite-4.0-h-small's 128 heads of 64 (state 128)."""
    h100 = default_profile(get_gpu("h100-sxm"))
    for tokens, ms in ((2048, 0.279), (8192, 1.045), (65536, 8.633)):
        flops = 4 * 128 * 128 * 64 * tokens
        assert recurrent_scan_s(h100, "gated_deltanet", flops, 0.0) * 1e3 == pytest.approx(ms, rel=0.1)
    tokens = 16384
    seconds = recurrent_scan_s(h100, "mamba2", 4 * 64 * 128 * 128 * tokens, 0.0)
    assert 1.07e7 <= tokens / seconds <= 1.29e7
    # other GPUs: by SM count, never above their matrix peak's share (a B300's 148 SMs run it ~1.1x an H100)
    b300 = default_profile(get_gpu("b300"))
    ratio = recurrent_scan_s(h100, "mamba2", 1e12, 0.0) / recurrent_scan_s(b300, "mamba2", 1e12, 0.0)
    assert 1.0 < ratio < 1.25
    assert set(RECURRENT_SCAN_FLOPS) == {"gated_deltanet", "mamba2"}


def test_what_a_hybrid_cannot_train_with_is_said_in_one_line() -> None:
    """Context parallelism over recurrent layers and torchtitan's per-op checkpointing have no model; Falcon-H1's
    parallel hybrid is not timed at all."""
    with pytest.raises(InvalidArgument, match="context parallelism over its recurrent layers"):
        gpuwise.train("qwen3.5-27b", gpu="h100", num_gpus=8, cp=2, seq=8192)
    with pytest.raises(InvalidArgument, match="per-op checkpointing"):
        gpuwise.train("qwen3.5-35b-a3b", gpu="h100", num_gpus=8, framework="torchtitan", ac="selective")


@pytest.mark.parametrize("name", HYBRIDS)
def test_training_flops_count_the_kernels_the_step_runs(name: str) -> None:
    """flops.forward_flops (the MFU numerator) and layer_ops.block_ops (what the step time prices) are written apart;
    over a whole model they agree: GEMM FLOPs, the recurrent scans and the attention core of the attending layers."""
    from gpuwise.estimate.flops import forward_flops
    from gpuwise.estimate.layer_ops import head_gemm, keys_per_query

    spec = load_model(name).spec
    seq = 4096
    f = forward_flops(spec, seq)
    gemm = scan = attn = 0.0
    for layer in range(spec.num_layers):
        ops = block_ops(spec, layer, tokens=seq, keys=keys_per_query(spec, layer, seq))
        gemm += sum(g.flops for g in ops.gemms if not g.name.startswith("experts"))
        scan += ops.recurrent_flops
        attn += ops.attention_flops
    routed = f.routed_experts  # block_ops runs balanced expert GEMMs: the same FLOPs up to rounding
    assert f.total - routed == pytest.approx(gemm + scan + attn + head_gemm(spec, seq).flops, rel=1e-9)
    assert f.recurrent_scan == pytest.approx(scan) and f.recurrent_scan > 0


@pytest.mark.parametrize("name", ["nemotron-3-nano-30b-a3b", "qwen3.5-27b"])
@pytest.mark.parametrize("framework", ["megatron", "hf"])
def test_hybrid_training_keeps_the_memory_and_time_properties(name: str, framework: str) -> None:
    """Memory never falls when the micro-batch or the sequence grows; checkpointing never raises activations; the
    step never gets shorter when the sequence or the batch grows; MFU stays below 1."""
    def run(**kw):
        base = dict(num_gpus=8, seq=2048, micro_batch=1, global_batch=16, framework=framework, zero=1)
        if "nemotron" in name:
            base["ep"] = 8
        return gpuwise.train(name, gpu="h100-sxm", **{**base, **kw})

    base = run()
    # two micro-batches per rank on both sides (one alone frees the gradients at the backward's start: a real fall)
    assert run(micro_batch=2, global_batch=32).memory.total >= base.memory.total
    longer = run(seq=4096)
    assert longer.memory.activations_per_microbatch > base.memory.activations_per_microbatch
    assert longer.perf.step.step_time_s > base.perf.step.step_time_s
    assert run(global_batch=32).perf.step.step_time_s > base.perf.step.step_time_s
    modes = ["none", "selective", "full"] + (["selective:moe"] if framework == "megatron" and "nemotron" in name
                                             else [])
    act = {m: run(recompute=m).memory.activations_per_microbatch for m in modes}
    assert act["full"] <= act["selective"] <= act["none"]
    assert all(v <= act["none"] for v in act.values())
    assert 0 < base.perf.mfu < 1 and 0 < base.perf.hfu < 1


def test_hybrid_inference_is_timed() -> None:
    r = gpuwise.infer("qwen3.5-27b", gpu="h100", num_gpus=2, batch=8, prompt_tokens=2048, output_tokens=256)
    assert 0 < r.ttft_s < 10 and 0 < r.tpot_s < 1


def test_a_recurrent_layer_decodes_at_a_cost_that_does_not_grow_with_the_context() -> None:
    """Per output token, a hybrid's decode grows with the context only through its attention layers: from 1k to
    64k tokens the step slows by the extra KV its attention layers read at the paged decode kernel's bandwidth
    (Hopper: 55% of HBM), nothing more for the 36 recurrent layers of the 48. With 2 KV heads over 4 GPUs each GPU
    holds and reads one whole head (vLLM replicates them), as kv_bytes_per_token counts it."""
    from gpuwise.estimate.kv_cache import kv_bytes_per_token

    spec = load_model("qwen3-next-80b-a3b-thinking").spec
    batch, gpus = 32, 4

    def tpot(context: int) -> float:
        return gpuwise.infer("qwen3-next-80b-a3b-thinking", gpu="h200", num_gpus=gpus, batch=batch,
                             prompt_tokens=context, output_tokens=64).tpot_s

    grow = tpot(65536) - tpot(1024)
    h200 = default_profile(get_gpu("h200-sxm"))
    kv = batch * (65536 - 1024) * kv_bytes_per_token(spec, 2.0, "vllm", gpus)
    assert grow == pytest.approx(kv / (0.552 * h200.gpu.memory_bandwidth_bytes_per_s), rel=0.2)


def test_a_larger_decode_batch_never_takes_less_time_per_step() -> None:
    steps = [gpuwise.infer("nemotron-3-nano-30b-a3b", gpu="b200", batch=b, prompt_tokens=1024,
                           output_tokens=128).tpot_s for b in (1, 8, 64, 256)]
    assert steps == sorted(steps)


def test_serving_holds_one_state_slot_per_running_request() -> None:
    """A hybrid's recurrent state takes pool memory per running request: the engine runs no more requests than the
    pool holds with their states, and its token pool is what the state slots leave."""
    r = gpuwise.infer("qwen3.5-27b", gpu="h100", engine="vllm", prompt_tokens=1000, output_tokens=200,
                      num_prompts=64, max_concurrency=64)
    state = state_bytes_per_sequence(load_model("qwen3.5-27b").spec)
    assert "recurrent-state slots" in r.serving.kv_capacity_reason
    pool = r.memory.estimate.details["kv_pool_bytes"]
    per_token = 65536  # 16 attention layers x 4 KV heads x 256 x 2 (K and V) x 2 bytes
    slots, tokens = r.serving.load.limits.max_num_seqs, r.serving.kv_capacity_tokens
    assert slots * state + tokens * per_token <= pool < slots * state + (tokens + 16) * per_token + state
    assert slots * (state + 1200 * per_token) <= pool  # each slot's request fits with its whole context
    assert 40 < slots < 100  # vLLM's default on an H100 is 1,024: the states cap it (~147 MiB each)


def test_a_parallel_hybrid_is_still_refused_in_one_line() -> None:
    """Falcon-H1 runs attention and a Mamba-2 mixer side by side in each layer: not timed, said so."""
    from gpuwise.model.hf_config import spec_from_hf_config

    spec = spec_from_hf_config({"model_type": "falcon_h1"})
    with pytest.raises(InvalidArgument, match="beside attention"):
        block_ops(spec, 0, tokens=8, keys=8)


@pytest.mark.parametrize(("name", "gpu", "gpus"), [("qwen3.5-27b", "h100", 1), ("nemotron-3-nano-30b-a3b", "b200", 1),
                                                   ("qwen3-next-80b-a3b-thinking", "h200", 2)])
def test_a_lone_request_under_load_takes_the_static_time(name: str, gpu: str, gpus: int) -> None:
    """The serving simulation prices the same kernels as the static answer: one request at a time (rate far below
    what the engine serves, no HTTP server) gets the static TTFT and TPOT, the recurrent state charged per request
    and not per prompt row."""
    static = gpuwise.infer(name, gpu=gpu, num_gpus=gpus, prompt_tokens=8000, output_tokens=64)
    loaded = gpuwise.infer(name, gpu=gpu, num_gpus=gpus, prompt_tokens=8000, output_tokens=64, request_rate=0.01,
                           num_prompts=3, offline=True).serving.result
    assert loaded.ttft_s.mean == pytest.approx(static.ttft_s, rel=0.03)
    assert loaded.tpot_s.mean == pytest.approx(static.tpot_s, rel=0.03)


def test_state_slots_at_the_edges(tmp_path) -> None:
    """hybrid_slots: a pool too small for one request leaves no token room (then `infer` refuses in one line); a model
    whose every layer is recurrent has slots and no per-token cache; an explicit request limit is kept when the
    pool allows more."""
    import json

    from gpuwise.plan.serve import hybrid_slots

    slots, tokens, _ = hybrid_slots(0.0, 1000.0, 1e6, 64, 100, 16)
    assert (slots, tokens) == (1, 0)
    slots, tokens, _ = hybrid_slots(1e9, 0.0, 1e6, 4096, 500, 16)
    assert slots == 1000 and tokens == slots * 500
    slots, _, _ = hybrid_slots(1e12, 1000.0, 1e6, 32, 500, 16)
    assert slots == 32
    with pytest.raises(InvalidArgument, match="no room for a KV cache"):
        gpuwise.infer("qwen3.5-27b", gpu="rtx-4090", request_rate=1, num_prompts=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "granitemoehybrid"}))  # its default config: every layer Mamba-2
    for engine in ("vllm", "sglang"):
        r = gpuwise.infer(str(path), gpu="h100", num_gpus=2, engine=engine, request_rate=2, num_prompts=20)
        assert r.serving.result.completed == 20 and "recurrent-state slots" in r.serving.kv_capacity_reason
    r = gpuwise.infer("nemotron-3-nano-30b-a3b", gpu="b200", engine="vllm", max_num_seqs=16, max_concurrency=64,
                      num_prompts=64, prompt_tokens=512, output_tokens=64)
    assert r.serving.load.limits.max_num_seqs == 16 and r.serving.result.max_running <= 16


def test_picking_gpus_to_train_a_hybrid_costs_them(capsys) -> None:
    from gpuwise.cli.main import main

    assert main(["pick", "--task", "train", "nemotron-3-nano-30b-a3b", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranked"] and not any(c["rule"] == "unknown" for c in doc["rejected"])


def test_recurrent_layers_keep_what_their_kernels_save() -> None:
    """Bytes per token (bf16) a recurrent layer keeps, written out from the kernels' save_for_backward lists
    (docs/training-memory.md): Nemotron-3-Nano's Mamba-2 (inner 4,096, 8 groups of state 128, 64 heads) and
    Qwen3.5-27B's Gated DeltaNet (48 value heads and 16 key heads of 128, inner 6,144, conv 10,240)."""
    from gpuwise.estimate.activations import linear_mixer_saved

    nano = load_model("nemotron-3-nano-30b-a3b").spec
    zxbcdt = 2 * (2 * 4096 + 2 * 8 * 128 + 64)  # the in_proj output's copy the fused kernel keeps
    out_x = 2 * 4096                             # the scan's output before the gate
    rstd = 4 * 8                                 # the gated norm's, per group
    assert linear_mixer_saved(nano, 2.0, "hf") == zxbcdt + out_x + rstd
    assert linear_mixer_saved(nano, 2.0, "megatron") == zxbcdt + out_x + rstd + 2 * 2 * 4096  # norm and out_proj in
    qwen = load_model("qwen3.5-27b").spec
    conv_in = 2 * 10240
    kernel_qkv = 2 * (2 * 48 * 128 + 6144)       # q and k repeated to the 48 value heads, and v
    norm_and_out = 2 * 3 * 6144                  # o, the gate z, out_proj's input
    per_head = 48 * (4 + 2 + 2 * 64 + 4 + 8)     # g (fp32), beta, A (64, 16-bit), norm rstd, q/k l2norm rstd
    hf = conv_in + kernel_qkv + norm_and_out + per_head
    assert linear_mixer_saved(qwen, 2.0, "hf") == hf
    assert linear_mixer_saved(qwen, 2.0, "megatron") == hf + 2 * 2 * 16 * 128 + 8 * 16  # q, k before the l2norm


def test_a_nemotron_layer_has_one_part_and_a_transformer_block_two() -> None:
    from gpuwise.estimate.layer_ops import block_parts

    nano = load_model("nemotron-3-nano-30b-a3b").spec
    assert {block_parts(nano, i) for i in range(nano.num_layers)} == {1}
    qwen = load_model("qwen3.5-27b").spec
    assert {block_parts(qwen, i) for i in range(qwen.num_layers)} == {2}
    # and so half the TP all-reduces: a Nemotron step's TP communication per layer is half a two-part block's
    r = gpuwise.train("nemotron-3-nano-30b-a3b", gpu="h100-sxm", num_gpus=16, tp=2, ep=8, seq=4096, micro_batch=1,
                      global_batch=8, framework="megatron", zero=1)
    q = gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, tp=2, ep=8, seq=4096, micro_batch=1,
                      global_batch=8, framework="megatron", zero=1)
    per_layer = [x.perf.step.breakdown["tp_comm"] / x.request.model.spec.num_layers / x.request.model.spec.hidden_size
                 for x in (r, q)]
    # (their hidden sizes differ, 2,688 and 2,048, so the all-reduces' fixed latency makes it inexact; two parts per
    # Nemotron layer would double it)
    assert per_layer[0] == pytest.approx(per_layer[1] / 2, rel=0.1)


def test_the_scan_backward_takes_its_measured_share(monkeypatch) -> None:
    """The step grows by the scan's forward time x the change in RECURRENT_BACKWARD_RATIO, for every recurrent layer."""
    from gpuwise.estimate import step_time as st

    kw = dict(gpu="h100-sxm", num_gpus=8, seq=4096, micro_batch=1, global_batch=8, framework="megatron", zero=1)
    st._CACHE.clear()
    base = gpuwise.train("qwen3.5-27b", **kw).perf.step.breakdown["backward"]
    monkeypatch.setattr(st, "RECURRENT_BACKWARD_RATIO", st.RECURRENT_BACKWARD_RATIO + 1.0)
    st._CACHE.clear()
    more = gpuwise.train("qwen3.5-27b", **kw).perf.step.breakdown["backward"]
    st._CACHE.clear()
    spec = load_model("qwen3.5-27b").spec
    h100 = default_profile(get_gpu("h100-sxm"))
    lm = spec.linear
    scan = recurrent_scan_s(h100, lm.kind, 4 * lm.head_dim * lm.state_dim * lm.num_heads * 4096, 0.0)
    assert more - base == pytest.approx(spec.num_linear_layers * (scan - h100.kernel_overhead_s), rel=1e-6)


def test_planning_a_hybrid_for_memory_with_torchtitan_skips_its_per_op_policy() -> None:
    from gpuwise.cli.main import main

    assert main(["plan", "qwen3.5-27b", "--gpu", "h100", "--num-gpus", "8", "--seq", "4096", "--global-batch", "32",
                 "--framework", "torchtitan", "--objective", "memory"]) == 0


@pytest.mark.parametrize(("gpu", "heads", "tokens", "ms"), [
    ("h100-sxm", 8, 65536, 1.954), ("h100-sxm", 8, 8192, 0.259), ("b300", 8, 65536, 2.065),
    ("h100-sxm", 64, 65536, 8.633), ("h100-sxm", 64, 8192, 1.045)])
def test_few_heads_per_gpu_leave_the_delta_rule_latency_bound(gpu: str, heads: int, tokens: int, ms: float) -> None:
    """flash-linear-attention's Gated DeltaNet prefill, one sequence, value heads of 128, as flashinfer PRs #3866
    (H100), #4078 (B300) and #3788 (H100, TP 1) time it: with Qwen3.5-397B's 8 heads per GPU (TP 8) the chunks' serial
    state passing sets the time on both GPUs; with all 64 heads the FLOPs do."""
    from gpuwise.estimate.layer_ops import recurrent_blocks

    spec = load_model("qwen3.5-397b-a17b").spec
    assert spec.linear.num_heads == 64 and spec.linear.head_dim == 128
    tp = 64 // heads
    profile = default_profile(get_gpu(gpu))
    flops = 4 * 128 * 128 * heads * tokens
    t = recurrent_scan_s(profile, "gated_deltanet", flops, 0.0, seq_len=tokens, blocks=recurrent_blocks(spec, 1, tp))
    assert t * 1e3 == pytest.approx(ms, rel=0.12)


@pytest.mark.parametrize(("name", "framework"), [("nemotron-3-nano-30b-a3b", "megatron"), ("qwen3.5-27b", "fsdp"),
                                                 ("qwen3.5-35b-a3b", "torchtitan"), ("nemotron-3-nano-30b-a3b", "hf")])
def test_hybrid_memory_keeps_issue_17s_properties(name: str, framework: str) -> None:
    """The training-memory properties tests/estimate/test_memory_properties.py samples over attention-only models,
    for the hybrids in frameworks that run them: memory never falls when the micro-batch or the sequence grows, and
    no checkpointing mode keeps more than none."""
    def memory(**kw):
        kw = dict(dict(num_gpus=8, seq=2048, micro_batch=1, global_batch=16, framework=framework), **kw)
        if framework != "megatron" and kw["num_gpus"] > 1:
            kw.setdefault("fsdp", "full")
        return gpuwise.train(name, gpu="h100-sxm", **kw).memory

    small, big = memory(), memory(micro_batch=2, global_batch=32)
    assert big.total >= small.total and big.required >= small.required
    short, long = memory(num_gpus=1, global_batch=2), memory(num_gpus=1, global_batch=2, seq=8192)
    assert long.total >= short.total and long.activations_per_microbatch > short.activations_per_microbatch
    none = memory(num_gpus=1, global_batch=2, recompute="none")
    # torchtitan's selective is its per-op policy, refused for recurrent layers (test_planning_a_hybrid_...)
    for mode in ("full", "layer:2", "block:4") + (("selective",) if framework != "torchtitan" else ()):
        kept = memory(num_gpus=1, global_batch=2, recompute=mode)
        assert kept.activations_per_microbatch <= none.activations_per_microbatch * (1 + 1e-9), mode
        assert kept.moments["end_of_forward"] <= none.moments["end_of_forward"] * (1 + 1e-9), mode
