"""Model states per GPU against published arithmetic: the ZeRO paper, Megatron-LM's table, the rule of thumb."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.catalog.models import load_model
from gpuwise.estimate.job import TrainJob
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.model_states import bytes_per_param, model_states, optimizer_state_bytes
from gpuwise.model.params import Tensor, param_counts

GB = 1e9


@pytest.mark.parametrize(("sharding", "expected_gb"), [("ddp", 120), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)])
def test_zero_paper_worked_example(sharding, expected_gb) -> None:
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, N_d = 64, K = 12 (mixed-precision Adam).
    per_param = bytes_per_param(framework="deepspeed", precision="bf16", optimizer="adamw",
                                layout=Layout(num_gpus=64, sharding=sharding))
    assert round(sum(per_param.values()) * 7.5e9 / GB, 1) == expected_gb


@pytest.mark.parametrize(("precision", "dist_opt", "expected"), [
    # Megatron-LM docs/source/distrib_optimizer.md: bytes per parameter, d = data-parallel size
    ("fp16", False, 20), ("bf16", False, 18), ("fp32", False, 16),
    ("fp16", True, 4 + 16 / 8), ("bf16", True, 6 + 12 / 8), ("fp32", True, 8 + 8 / 8),
])
def test_megatron_distributed_optimizer_table(precision, dist_opt, expected) -> None:
    layout = Layout(num_gpus=8, sharding="zero1" if dist_opt else "ddp")
    per_param = bytes_per_param(framework="megatron", precision=precision, optimizer="adamw", layout=layout)
    assert sum(per_param.values()) == pytest.approx(expected)


def test_rule_of_thumb_eight_bytes_per_param_in_pure_16_bit() -> None:
    # 16-bit weights + 16-bit grads + two 16-bit Adam moments = 8 B/param: an 80 GB GPU holds ~10B params of
    # model states with plain data parallelism; fp32 master weights and states double it (16 B, ~5B params).
    pure = sum(bytes_per_param(framework="fsdp", precision="bf16-pure", optimizer="adamw",
                               layout=Layout(num_gpus=1)).values())
    mixed = sum(bytes_per_param(framework="deepspeed", precision="bf16", optimizer="adamw",
                                layout=Layout(num_gpus=1)).values())
    assert pure == 8 and 80 * GB / pure == 10e9
    assert mixed == 16 and 80 * GB / mixed == 5e9


def test_eight_bit_adam_states_follow_bitsandbytes_blocks() -> None:
    big = Tensor("ffn_up", 0, (4096, 4096))
    assert optimizer_state_bytes("adamw-8bit", big, big.numel, 4) == pytest.approx(big.numel * (2 + 8 / 256))
    small = Tensor("norm", 0, (4095,))  # under min_8bit_size: two fp32 states
    assert optimizer_state_bytes("adamw-8bit", small, small.numel, 4) == 8 * 4095


def test_adafactor_keeps_row_and_column_factors() -> None:
    m = Tensor("ffn_up", 0, (1000, 300))
    assert optimizer_state_bytes("adafactor", m, m.numel, 4) == 4 * (1000 + 300)
    v = Tensor("norm", 0, (300,))
    assert optimizer_state_bytes("adafactor", v, v.numel, 4) == 4 * 300


def test_model_states_of_a_real_model_use_its_exact_parameter_count() -> None:
    spec = load_model("llama-3.1-8b").spec
    p = param_counts(spec).total
    s = model_states(spec, Layout(num_gpus=64, sharding="zero3"), 0, TrainJob(framework="deepspeed"))
    assert s.total == pytest.approx(16 * p / 64)


def test_tensor_and_pipeline_parallel_split_the_parameters() -> None:
    spec = load_model("llama-3.1-8b").spec
    total = param_counts(spec).total
    held = [model_states(spec, Layout(num_gpus=8, tp=2, pp=4), stage, TrainJob(framework="megatron")).params_on_rank
            for stage in range(4)]
    norms = sum(t.numel for t in _vectors(spec))  # norms are replicated over TP, not split
    assert sum(held) * 2 == pytest.approx(total + norms, rel=1e-9)


def _vectors(spec):
    from gpuwise.model.params import tensor_inventory

    return [t for t in tensor_inventory(spec) if not t.is_matrix]


def test_lora_trains_only_the_adapters_and_qlora_stores_an_nf4_base() -> None:
    spec = load_model("llama-3.1-8b").spec
    layout = Layout(num_gpus=1)
    full = model_states(spec, layout, 0, TrainJob(framework="hf"))
    lora = model_states(spec, layout, 0, TrainJob(framework="hf", finetune="lora", lora_rank=16))
    qlora = model_states(spec, layout, 0, TrainJob(framework="hf", finetune="qlora", lora_rank=16))
    h, kv, inter, n = 4096, 1024, 14336, 32
    adapters = 16 * n * ((h + h) * 2 + (h + kv) * 2 + (h + inter) * 3)  # q, o; k, v; gate, up, down
    assert lora.trainable_params == adapters
    assert lora.optimizer == 8 * adapters and lora.grads == 4 * adapters
    assert qlora.params < 0.4 * lora.params  # NF4 matrices, 16-bit embeddings and head
    assert qlora.total < lora.total < full.total


def test_optimizer_offload_moves_states_to_host_memory() -> None:
    spec = load_model("llama-3.1-8b").spec
    job = TrainJob(framework="deepspeed")
    on = model_states(spec, Layout(num_gpus=8, sharding="zero2"), 0, job)
    off = model_states(spec, Layout(num_gpus=8, sharding="zero2"), 0, replace(job, offload=frozenset({"optimizer"})))
    assert off.optimizer == off.master_weights == off.grads == 0
    # ZeRO-Offload (DeepSpeed's stage_1_and_2.py, cpu_offload): gradient partitions are copied to pinned host memory
    # as they are reduced, and the fp32 step runs there.
    assert off.cpu == pytest.approx(on.optimizer + on.master_weights + on.grads)


@pytest.mark.parametrize("framework", ["torchtune", "fsdp", "torchtitan"])
@pytest.mark.parametrize("precision", ["bf16", "bf16-pure"])
def test_fsdp_cpu_offload_moves_the_sharded_gradients_whatever_the_parameter_dtype(framework, precision) -> None:
    # FSDP2 CPUOffloadPolicy (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce: the reduced
    # shard goes `.to(torch.device("cpu"), non_blocking=True)` when its parameter offloads) and FSDP1
    # CPUOffload(offload_params=True): the sharded gradients live on the host, with fp32 or bf16 parameters alike
    # (torchtune's full fine-tunes keep bf16 parameters).
    spec = load_model("llama-3.1-8b").spec
    layout = Layout(num_gpus=8, sharding="fsdp-full")
    job = TrainJob(framework=framework, precision=precision)
    on = model_states(spec, layout, 0, job)
    off = model_states(spec, layout, 0, replace(job, offload=frozenset({"params", "optimizer"})))
    assert on.grads > 0 and off.grads == 0
    assert off.params + off.master_weights + off.optimizer == 0
    assert off.cpu == pytest.approx(on.params + on.master_weights + on.grads + on.optimizer)


def test_zero_infinity_parameter_offload_keeps_the_gradient_partitions_on_the_gpu() -> None:
    # DeepSpeed ZeRO-3 offload_param alone: the fp16/bf16 partitions go to the host, the gradients stay (they reach
    # the host only with offload_optimizer, as in the test above).
    spec = load_model("llama-3.1-8b").spec
    layout = Layout(num_gpus=8, sharding="zero3")
    job = TrainJob(framework="deepspeed")
    on = model_states(spec, layout, 0, job)
    off = model_states(spec, layout, 0, replace(job, offload=frozenset({"params"})))
    assert on.grads > 0 and off.grads == pytest.approx(on.grads) and off.params < on.params


def test_without_an_optimizer_the_autocast_fp32_weights_remain_and_megatron_drops_its_master() -> None:
    hf = bytes_per_param(framework="hf", precision="bf16", optimizer="none", layout=Layout(num_gpus=1))
    assert hf == {"params": 2, "master_weights": 4, "grads": 4, "optimizer": 0}
    mg = bytes_per_param(framework="megatron", precision="bf16", optimizer="none", layout=Layout(num_gpus=1))
    assert mg == {"params": 2, "master_weights": 0, "grads": 4, "optimizer": 0}


def test_zero1_with_fsdp2_style_weights_shards_only_the_optimizer_states() -> None:
    z1 = bytes_per_param(framework="fsdp", precision="bf16", optimizer="adamw", layout=Layout(num_gpus=8, sharding="zero1"))
    assert z1 == {"params": 2, "master_weights": 4, "grads": 4, "optimizer": 1}
    full = bytes_per_param(framework="fsdp", precision="bf16", optimizer="adamw",
                           layout=Layout(num_gpus=8, sharding="fsdp-full"))
    assert full == {"params": 0, "master_weights": 0.5, "grads": 0.5, "optimizer": 1}


@pytest.mark.parametrize(("exp_avg", "exp_avg_sq", "per_param"), [
    # Megatron's precision-aware optimizer: the two AdamW moments in the dtypes given, 4 + 4 B by default
    ("bf16", "bf16", 4.0), ("bf16", None, 6.0), ("fp8", "bf16", 3.0), ("fp32", "fp32", 8.0)])
def test_precision_aware_optimizer_moments(exp_avg, exp_avg_sq, per_param) -> None:
    spec = load_model("llama-3.1-8b").spec
    layout = Layout(num_gpus=8, sharding="zero1")
    job = TrainJob(framework="megatron", precision="bf16", optimizer="adamw", exp_avg_dtype=exp_avg,
                   exp_avg_sq_dtype=exp_avg_sq)
    base = model_states(spec, layout, 0, replace(job, exp_avg_dtype=None, exp_avg_sq_dtype=None))
    got = model_states(spec, layout, 0, job)
    assert got.optimizer == pytest.approx(base.optimizer * per_param / 8.0)
    assert (got.params, got.master_weights, got.grads) == (base.params, base.master_weights, base.grads)


def test_precision_aware_optimizer_is_megatron_s_adamw_option() -> None:
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.errors import InvalidArgument
    from gpuwise.plan.train import TrainRequest, train

    model, gpu = load_model("llama-3.1-8b"), get_gpu("h100-sxm")
    with pytest.raises(InvalidArgument, match="needs --framework megatron"):
        TrainRequest(model=model, gpu=gpu, framework="torchtitan", exp_avg_dtype="bf16")
    with pytest.raises(InvalidArgument, match="moment of AdamW"):
        TrainRequest(model=model, gpu=gpu, framework="megatron", optimizer="sgd", exp_avg_sq_dtype="bf16")
    with pytest.raises(InvalidArgument, match="Megatron-LM does not run"):  # bitsandbytes' 8-bit AdamW
        TrainRequest(model=model, gpu=gpu, framework="megatron", optimizer="adamw-8bit")
    with pytest.raises(InvalidArgument, match="add --zero 1"):  # the precision-aware optimizer is the distributed one's
        TrainRequest(model=model, gpu=gpu, num_gpus=8, framework="megatron", exp_avg_dtype="bf16")
    # model parallelism with 8-bit AdamW and no framework named: a trainer that runs it, not Megatron
    assert TrainRequest(model=model, gpu=gpu, num_gpus=8, tp=2, optimizer="adamw-8bit").job.framework == "torchtitan"
    import gpuwise

    with pytest.raises(InvalidArgument, match="--exp-avg-dtype"):  # the Python API checks the value too
        gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, framework="megatron",
                     exp_avg_dtype="int4")
    kw = dict(model=model, gpu=gpu, num_gpus=8, framework="megatron", zero=1, seq=4096, global_batch=8)
    fp32, bf16 = (train(TrainRequest(**kw, exp_avg_dtype=d, exp_avg_sq_dtype=d)) for d in ("fp32", "bf16"))
    assert bf16.memory.total < fp32.memory.total
    # the step streams half the moment bytes
    assert bf16.perf.step.breakdown["optimizer"] < fp32.perf.step.breakdown["optimizer"]
