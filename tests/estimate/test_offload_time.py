"""CPU offload costs time: PCIe copies and the CPU optimizer step (the planner's pruning relies on it)."""

from __future__ import annotations

import pytest

import gpuwise

CASES = [
    dict(model="llama-3.1-8b", gpu="h100-sxm", num_gpus=8, zero=2, seq=4096, global_batch=8),
    dict(model="llama-3.1-8b", gpu="a100-sxm-80gb", num_gpus=8, fsdp="full", seq=2048, global_batch=16),
    dict(model="qwen3-4b", gpu="rtx-4090", num_gpus=1, seq=2048, global_batch=4, recompute="full"),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("offload", [("optimizer",), ("optimizer", "params")])
def test_offload_never_makes_a_step_faster(case, offload):
    case = dict(case)
    model, gpu = case.pop("model"), case.pop("gpu")
    if "fsdp" in case and "params" not in offload:  # FSDP2 has no optimizer-only offload (CPUOffloadPolicy)
        pytest.skip("FSDP2 offloads parameters and optimizer states together")
    if "params" in offload and "fsdp" not in case and case.get("zero") != 3:
        case.pop("zero", None)
        case["zero"] = 3
    base = gpuwise.train(model, gpu=gpu, **case)
    off = gpuwise.train(model, gpu=gpu, offload=offload, **case)
    assert off.memory.total < base.memory.total
    assert off.perf.step.breakdown["optimizer"] == 0.0  # the step runs on the CPU ...
    assert off.perf.step.breakdown["offload"] > 0.0  # ... and costs its host time and copies
    assert off.perf.step.step_time_s > base.perf.step.step_time_s


def test_cpu_optimizer_streams_the_host_states_at_the_measured_cpu_adam_rate():
    r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, zero=2, seq=4096, global_batch=8,
                      offload=("optimizer",))
    from gpuwise.catalog.devices import network_defaults

    host = network_defaults()["host_memory_gb_s_per_gpu"] * 1e9
    # host memory: fp32 master + two Adam moments + the bf16 gradient partition for 1/8 of 8.03B parameters; the
    # step reads and writes the 12 B of states, reads the 2 B gradient once and writes the 2 B new weight: 28 B per
    # parameter at the CPU Adam rate (the gradient is not streamed as a state, devices.toml's derivation)
    assert r.memory.cpu == pytest.approx(14 * 8.03e9 / 8, rel=0.01)
    cpu_step = 28 * 8.03e9 / 8 / host
    assert cpu_step <= r.perf.step.breakdown["offload"] < cpu_step * 1.1  # + the weights' copy back over PCIe
