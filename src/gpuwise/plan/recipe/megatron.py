"""Megatron-LM (megatron-core 0.19.2) command-line arguments for a plan."""

from __future__ import annotations

import shlex

from ...estimate.pipeline import virtual_stage_layers
from .common import MEGATRON_SOURCE, MEGATRON_VERSION, _commented, _differs_block, _header, _Job


def _megatron_pipeline(job: _Job) -> list[str]:
    lay, layers = job.lay, job.spec.num_layers
    flags = [f"--pipeline-model-parallel-size {lay.pp}"]
    if lay.pp == 1:
        return flags
    first, last, v = lay.pp_first_layers, lay.pp_last_layers, lay.vpp
    uneven = first is not None or last is not None
    if not uneven or all(n is None or n % v == 0 for n in (first, last)):
        if first is not None:
            flags.append(f"--decoder-first-pipeline-num-layers {first}")
        if last is not None:
            flags.append(f"--decoder-last-pipeline-num-layers {last}")
        if v > 1:
            flags.append(f"--num-virtual-stages-per-pipeline-rank {v}")
        return flags
    # Megatron needs the uneven first/last stage to divide by vpp; otherwise spell every chunk out:
    # E = embedding, t = transformer layer, L = loss, stages split by '|', in virtual-stage order.
    chunks = virtual_stage_layers(lay, layers)
    segs = [("E" if s == 0 else "") + (f"t*{n}" if n > 1 else "t" * n) + ("L" if s == len(chunks) - 1 else "")
            for s, n in enumerate(chunks)]
    flags.append(f"--pipeline-model-parallel-layout {shlex.quote(megatron_layout(segs))}")
    return flags


def megatron_layout(segments: list[str]) -> str:
    """Stage segments -> Megatron's layout string, runs of equal stages folded: ['Et', 't*2', 't*2', 'tL'] ->
    'Et|(t*2|)*2,tL' (PipelineParallelLayerLayout.parse_str_to_list unrolls '(x)*n' and 'c*n'; commas are cosmetic)."""
    out, i, last = [], 0, len(segments) - 1
    while i < last:
        j = i
        while j < last and segments[j] == segments[i]:
            j += 1
        out.append(f"({segments[i]}|)*{j - i}," if j - i > 1 else f"{segments[i]}|")
        i = j
    return "".join(out) + segments[last]


def _megatron_sharding(job: _Job) -> tuple[list[str], list[str]]:
    lay, req = job.lay, job.req
    # the precision-aware optimizer (16-bit moments, optimizer offload) and --fp8-param-gather assert the distributed
    # optimizer, even alone
    needs_dist_opt = bool(req.exp_avg_dtype or req.exp_avg_sq_dtype or "optimizer" in job.offload
                          or (req.fp8_param_gather and req.precision == "fp8"))
    if lay.dp * lay.cp == 1 and lay.sharding == "zero1" and needs_dist_opt:
        return ["--use-distributed-optimizer"], []
    if lay.dp * lay.cp == 1 and lay.sharding in ("zero1", "ddp"):
        return [], []
    s = lay.sharding
    overlap = ["--overlap-grad-reduce"]  # the step-time model hides the gradient reduce under the backward
    if s == "ddp":
        return overlap, []
    if s == "zero1":
        # the distributed optimizer; the step model overlaps its parameter all-gather with the next forward
        return ["--use-distributed-optimizer"] + overlap + ["--overlap-param-gather"], []
    fsdp = ["--use-megatron-fsdp", "--ckpt-format fsdp_dtensor"]  # validate_args requires this format with it
    if s == "zero2":
        return fsdp + ["--data-parallel-sharding-strategy optim_grads"], []
    if s in ("fsdp-grad-op", "fsdp-no-reshard"):
        return (fsdp + ["--data-parallel-sharding-strategy optim_grads"],
                [f"{s} -> Megatron-FSDP optim_grads (ZeRO-2): parameters stay whole between steps as well"])
    if s == "hsdp":
        group = lay.shard_group or lay.dp * lay.cp
        replicas = lay.dp * lay.cp // group
        return fsdp + ["--data-parallel-sharding-strategy optim_grads_params",
                       f"--num-distributed-optimizer-instances {replicas}"], []
    return fsdp + ["--data-parallel-sharding-strategy optim_grads_params"], []  # zero3, fsdp-full


def _megatron_model(job: _Job) -> tuple[list[str], list[str]]:
    spec, req = job.spec, job.req
    differs: list[str] = []
    f = [f"--num-layers {spec.num_layers}", f"--hidden-size {spec.hidden_size}",
         f"--num-attention-heads {spec.num_heads}"]
    if spec.intermediate_size:
        f.append(f"--ffn-hidden-size {spec.intermediate_size}")
    if spec.mla is not None:
        mla = spec.mla
        f.append("--multi-latent-attention")
        if mla.q_lora_rank is not None:
            f.append(f"--q-lora-rank {mla.q_lora_rank}")
        f += [f"--kv-lora-rank {mla.kv_lora_rank}", f"--qk-head-dim {mla.qk_nope_head_dim}",
              f"--qk-pos-emb-head-dim {mla.qk_rope_head_dim}", f"--v-head-dim {mla.v_head_dim}"]
    else:
        if spec.num_kv_heads != spec.num_heads:
            f += ["--group-query-attention", f"--num-query-groups {spec.num_kv_heads}"]
        if spec.head_dim * spec.num_heads != spec.hidden_size:
            f.append(f"--kv-channels {spec.head_dim}")
    max_pos = spec.max_position_embeddings or req.seq
    f += [f"--seq-length {req.seq}", f"--max-position-embeddings {max(max_pos, req.seq)}"]
    if spec.position == "rope":
        f.append("--position-embedding-type rope")
    elif spec.position == "learned":
        f.append("--position-embedding-type learned_absolute")
    else:
        differs.append(f"{spec.position} positions: Megatron-Core has no such position embedding")
    act = spec.activation.lower()
    if spec.gated_mlp and act in ("silu", "swish"):
        f.append("--swiglu")
    elif spec.gated_mlp or not act.startswith("gelu"):
        differs.append(f"activation {'gated ' if spec.gated_mlp else ''}{spec.activation}: not expressed "
                       "(Megatron's default GeLU MLP)")
    elif act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        differs.append(f"{spec.activation} is the tanh GeLU; Megatron's default is the exact one (--openai-gelu is "
                       "the tanh form)")
    f.append("--normalization " + ("RMSNorm" if spec.norm == "rmsnorm" else "LayerNorm"))
    biases = (spec.qkv_bias, spec.o_bias, spec.mlp_bias)
    if not any(biases):
        f.append("--disable-bias-linear")
    elif biases == (True, False, False):
        f += ["--disable-bias-linear", "--add-qkv-bias"]
    elif not all(biases):
        differs.append("this mix of linear biases is not expressed (Megatron: all or none, or QKV only)")
    if spec.qk_norm == "head":
        f.append("--qk-layernorm")
    elif spec.qk_norm != "none":
        differs.append(f"qk_norm {spec.qk_norm}: not expressed")
    if not spec.tie_word_embeddings:
        f.append("--untie-embeddings-and-output-weights")
    # Megatron's dropout defaults are 0.1; the model's own values:
    f += [f"--attention-dropout {spec.attention_dropout:g}", f"--hidden-dropout {spec.hidden_dropout:g}"]
    if spec.num_sliding_layers:
        differs.append("sliding-window layers: not expressed")
    if spec.moe is not None:
        moe = spec.moe
        f += [f"--num-experts {moe.num_experts}", f"--moe-router-topk {moe.top_k}",
              f"--moe-ffn-hidden-size {moe.expert_intermediate_size}"]
        if moe.shared_intermediate_size:
            f.append(f"--moe-shared-expert-intermediate-size {moe.shared_intermediate_size}")
        if not all(moe.moe_layers):
            f.append(f"--moe-layer-freq {shlex.quote(_run_length([int(x) for x in moe.moe_layers]))}")
        if job.lay.ep > 1 or job.req.moe_pad_expert_input_to_capacity:
            # the dispatcher the plan was priced with (Megatron's default, allgather, neither crosses EP ranks nor pads)
            f.append(f"--moe-token-dispatcher-type {job.req.moe_token_dispatcher}")
    return f, differs


def _run_length(xs: list[int]) -> str:
    """[0, 0, 0, 1, 1] -> '[0]*3+[1]*2' (the Python list expression --moe-layer-freq evaluates)."""
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j < len(xs) and xs[j] == xs[i]:
            j += 1
        parts.append(f"[{xs[i]}]*{j - i}")
        i = j
    return "+".join(parts)


def _megatron_args(job: _Job) -> tuple[str, str, list[str]]:
    lay, p, req = job.lay, job.plan, job.req
    differs: list[str] = []
    par = [f"--tensor-model-parallel-size {lay.tp}"]
    if lay.sp and lay.tp > 1:
        par.append("--sequence-parallel")
    if req.tp_comm_overlap and lay.tp > 1:  # Transformer Engine's userbuffers: needs SP, which the plan has with TP
        par.append("--tp-comm-overlap")
    par += _megatron_pipeline(job)
    par.append(f"--context-parallel-size {lay.cp}")
    if lay.ep > 1:
        par += [f"--expert-model-parallel-size {lay.ep}", f"--expert-tensor-parallel-size {lay.expert_tp}"]
    shard, d = _megatron_sharding(job)
    differs += d

    batch = [f"--micro-batch-size {p.micro_batch}", f"--global-batch-size {req.global_batch}"]
    recompute = {"none": [], "selective": ["--recompute-granularity selective"],
                 "full": ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]}
    precision = {"fp32": [], "bf16": ["--bf16"], "bf16-pure": ["--bf16"], "fp16": ["--fp16"],
                 "fp8": ["--bf16", "--fp8-format hybrid", "--fp8-recipe delayed"],
                 # TransformerConfig fp4 / fp4_recipe (core_v0.17.0: --fp4-format e2m1, the NVFP4BlockScaling recipe)
                 "nvfp4": ["--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4"]}[req.precision]
    if req.num_layers_at_start_in_bf16 or req.num_layers_at_end_in_bf16:  # TransformerConfig first_last_layers_bf16
        if req.precision == "fp8":  # get_fp8_context: "Delayed scaling does not support first / last layer in BF16"
            precision[precision.index("--fp8-recipe delayed")] = "--fp8-recipe tensorwise"
        precision += ["--first-last-layers-bf16", f"--num-layers-at-start-in-bf16 {req.num_layers_at_start_in_bf16}",
                      f"--num-layers-at-end-in-bf16 {req.num_layers_at_end_in_bf16}"]
    if req.precision == "fp8" and req.fp8_param_gather:
        precision.append("--fp8-param-gather")
    if not req.grad_reduce_in_fp32 and "--bf16" in precision:  # Megatron reads it under --bf16 only
        precision.append("--grad-reduce-in-bf16")  # the plan was priced with 16-bit gradient buffers
    if req.precision == "bf16-pure":
        differs.append("bf16-pure -> --bf16: Megatron keeps fp32 main parameters (--main-params-dtype is fp32 or "
                       "fp16)")
    offload = []
    if "optimizer" in job.offload:
        offload = ["--optimizer-cpu-offload", "--optimizer-offload-fraction 1.0", "--use-precision-aware-optimizer"]
    moments = [f"--{k.replace('_', '-')} {getattr(req, k)}" for k in ("exp_avg_dtype", "exp_avg_sq_dtype")
               if getattr(req, k) is not None]
    if moments:  # the precision-aware optimizer's moment dtypes
        offload = [*dict.fromkeys([*offload, "--use-precision-aware-optimizer"]), *moments]
    if "params" in job.offload:
        differs.append("parameter offload: Megatron-LM has none")
    if req.compile:
        differs.append("torch.compile: not a Megatron-LM option (Transformer Engine's fused kernels instead); the plan "
                       "was priced compiled")
    if "activations" in job.offload:
        differs.append("activation offload is not expressed")
    if req.optimizer not in ("adamw", "sgd"):
        differs.append(f"optimizer {req.optimizer}: Megatron offers adam (decoupled weight decay, i.e. AdamW), "
                       "sgd, muon ...; adam written")
    optimizer = [f"--optimizer {'sgd' if req.optimizer == 'sgd' else 'adam'}"]
    model, d = _megatron_model(job)
    differs += d

    launch = []  # the expert overlap, padding and CUDA graphs the plan was priced with
    if lay.ep > 1 and req.moe_token_dispatcher == "flex":
        launch.append(f"--moe-flex-dispatcher-backend {req.job().flex_backend}")
    if lay.ep > 1 and req.moe_a2a_overlap:
        launch.append("--overlap-moe-expert-parallel-comm")
        if req.delay_wgrad_compute:
            launch.append("--delay-wgrad-compute")
    if req.job().moe_permute_fused:  # the flex dispatcher is priced fused: DeepEP's permute follows the flag
        launch.append("--moe-permute-fusion")
    if req.use_transformer_engine_op_fuser:
        launch.append("--use-transformer-engine-op-fuser")
    if req.moe_pad_expert_input_to_capacity:
        launch += ["--moe-expert-capacity-factor 1.0", "--moe-pad-expert-input-to-capacity"]
        if req.moe_token_dispatcher == "flex":
            differs.append("padded experts under the flex dispatcher: HybridEP pads, DeepEP refuses it")
    scopes = sorted(req.job().cuda_graph_scope)
    if scopes == ["full_iteration"]:  # Megatron-LM asserts the NaN check off under a whole-iteration graph
        launch += ["--cuda-graph-impl full_iteration", "--no-check-for-nan-in-loss-and-grad"]
    elif scopes:  # Transformer Engine's scoped graphs (--cuda-graph-scope is the deprecated spelling)
        launch += ["--cuda-graph-impl transformer_engine", f"--cuda-graph-modules {' '.join(scopes)}"]
    groups = [("parallelism", par + shard + offload), ("batch", batch), ("recompute", recompute[p.recompute]),
              ("precision and optimizer", precision + optimizer), ("MoE overlap and CUDA graphs", launch),
              ("model shape (from the model's config)", model)]
    head = _header(job, MEGATRON_VERSION, MEGATRON_SOURCE)
    head += ["one flag per line; launch.sh reads them with shlex (comments allowed) and adds data, tokenizer and "
             "schedule flags",
             "not in gpuwise's model spec, set from config.json: --rotary-base (rope_theta), --norm-epsilon, "
             "--use-rope-scaling (Llama 3.1+)"]
    body = "\n".join(f"# {title}\n" + "".join(f"{line}\n" for line in lines) for title, lines in groups if lines)
    return "megatron.args", _commented(head) + _differs_block(differs) + "\n" + body, differs
