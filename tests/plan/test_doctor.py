"""`gpuwise doctor`: remedies are the train model's own figures, the combination is the best mix, CLI is robust."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import gpuwise
from gpuwise.api import doctor
from gpuwise.cli import main
from gpuwise.plan.doctor import HEADROOM_NOTE, SAME_TIME, Remedy, _fastest

JOB = dict(num_gpus=8, fsdp="full", seq=8192, micro_batch=4, global_batch=64)


@pytest.fixture(scope="module")
def oom():
    return doctor("llama-3.1-8b", gpu="h100-sxm", **JOB)


def test_every_remedy_is_what_train_predicts_for_its_options(oom):
    assert not oom.fits
    assert oom.remedies
    for x in oom.remedies:
        options = {**JOB, "framework": oom.base.framework, **x.options}
        gpu = options.pop("gpu", "h100-sxm")
        r = gpuwise.train("llama-3.1-8b", gpu=gpu, **options)
        assert x.memory_bytes == pytest.approx(r.memory.total)
        assert x.step_time_s == pytest.approx(r.perf.step.step_time_s)
        assert x.fits == r.fits


@pytest.mark.parametrize("framework", ["torchtitan", "torchtune"])
def test_adapters_keep_the_frameworks_own_sharding(framework):
    """torchtitan and torchtune shard with FSDP2 without --fsdp: the LoRA/QLoRA remedies keep that sharding (on
    transformers + PEFT with --fsdp full for torchtitan, on torchtune's own recipes for torchtune)."""
    job = {k: v for k, v in JOB.items() if k != "fsdp"}
    r = doctor("llama-3.1-8b", gpu="h100-sxm", framework=framework, **job)
    adapters = [x for x in r.remedies if x.options.get("finetune") in ("lora", "qlora")]
    assert adapters
    for x in adapters:
        options = {**job, "framework": framework, **x.options}
        checked = gpuwise.train("llama-3.1-8b", gpu=options.pop("gpu", "h100-sxm"), **options)
        assert checked.request.sharding == "fsdp-full"
        assert x.memory_bytes == pytest.approx(checked.memory.total)


def test_replication_asked_for_with_zero_0_is_offered_the_full_shard():
    """--zero 0 is how torchtitan is told to replicate: the doctor's FSDP remedy replaces it (not both set)."""
    job = {k: v for k, v in JOB.items() if k != "fsdp"}
    r = doctor("llama-3.1-8b", gpu="h100-sxm", framework="torchtitan", zero=0, **job)
    shard = [x for x in r.remedies if x.options.get("fsdp") == "full" and x.options.get("num_gpus") is None]
    assert shard and shard[0].memory_bytes < r.base.memory.total
    checked = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", **{**job, "framework": "torchtitan", **shard[0].options})
    assert checked.request.sharding == "fsdp-full" and shard[0].memory_bytes == pytest.approx(checked.memory.total)


def test_ranked_fitting_first_then_by_slowdown(oom):
    fits = [x.fits for x in oom.remedies]
    assert fits == sorted(fits, reverse=True)
    same_job_fitting = [x.slowdown for x in oom.remedies if x.fits and not x.changes_job]
    assert same_job_fitting == sorted(same_job_fitting)


def test_combination_fits_and_beats_every_single_same_job_change_that_fits(oom):
    c = oom.combination
    assert c is not None and c.fits and not c.changes_job
    job = {**JOB, "framework": oom.base.framework, **c.options}
    assert gpuwise.train("llama-3.1-8b", gpu=job.pop("gpu", "h100-sxm"), **job).memory.required <= oom.capacity_bytes
    knobs = {"micro-batch", "recompute", "optimizer", "sharding"}
    for x in oom.remedies:
        if x.name in knobs and x.fits:
            assert c.step_time_s <= x.step_time_s * (1 + SAME_TIME) + 1e-12


def test_a_tight_combination_comes_with_the_fastest_one_that_has_room(oom):
    """Issue 21, item 14: the 8 x H100 job's fastest mix is within the allocator's usual fragmentation; the one with
    room (micro-batch 2 and full recompute here, about 54 GiB) is named beside it, in the verdict and the JSON."""
    c, roomy = oom.combination, oom.roomy
    assert c.tight and roomy is not None and roomy.fits and not roomy.tight
    assert roomy.step_time_s >= c.step_time_s
    assert roomy.change in oom.verdict
    job = {**JOB, "framework": oom.base.framework, **roomy.options}
    r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", **job)
    assert r.memory.total * (1 + HEADROOM_NOTE) <= oom.capacity_bytes


def test_the_headline_is_never_slower_than_a_fitting_remedy_left_unsaid():
    """Issue 21, item 14: full fine-tuning of an 8B on one H100: the headline mix must not hide LoRA, which fits and
    is faster on the same GPU; every fitting same-hardware remedy faster than the headline appears in the verdict."""
    r = doctor("llama-3.1-8b", gpu="h100-sxm")
    assert not r.fits and r.combination is not None
    headline_s = r.combination.step_time_s
    faster = [x for x in r.remedies if x.fits and not {"gpu", "num_gpus"} & set(x.options)
              and x.step_time_s < headline_s * (1 - SAME_TIME)]
    assert faster
    assert any(x.change in r.verdict for x in faster)


def _remedy(options, seconds):
    return Remedy("combination", str(options), options, 1.0, seconds, 0.0, True, False, 10.0)


def test_a_tie_in_time_goes_to_the_more_common_knob():
    """Within SAME_TIME the more common knob wins (gradient accumulation before an 8-bit optimizer before offload);
    beyond it the faster one does."""
    offload = _remedy({"offload": ("optimizer",)}, 1.00)
    eight_bit = _remedy({"optimizer": "adamw-8bit"}, 1.01)
    accumulate = _remedy({"micro_batch": 1}, 1.015)
    assert _fastest([offload, eight_bit, accumulate]) is accumulate
    assert _fastest([offload, eight_bit]) is eight_bit
    slow = _remedy({"micro_batch": 1}, 1.10)
    assert _fastest([offload, slow]) is offload


def test_a_job_that_cannot_fit_on_its_gpu_gets_a_hardware_combination():
    r = doctor("llama-3.1-8b", gpu="rtx-4090", seq=4096, micro_batch=4, global_batch=8)
    assert not r.fits
    assert r.combination is not None and r.combination.changes_job and r.combination.fits
    assert "does not fit" in r.verdict


def test_fitting_job_says_so():
    r = doctor("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, fsdp="full", seq=2048, micro_batch=1, global_batch=8,
               recompute="full")
    assert r.fits and r.verdict.startswith("fits")


def test_observed_oom_above_the_prediction_is_carried_into_every_remedy(oom):
    extra = oom.predicted_bytes / 2**30 + 10
    r = doctor("llama-3.1-8b", gpu="h100-sxm", oom_at_gib=extra, **JOB)
    assert r.offset_bytes == pytest.approx(10 * 2**30)
    by_change = {x.change: x for x in oom.remedies}
    for x in r.remedies:
        if x.change in by_change:
            assert x.memory_bytes == pytest.approx(by_change[x.change].memory_bytes + r.offset_bytes)


def test_cli_json_and_text(capsys):
    assert main(["doctor", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--fsdp", "full", "--seq", "8192",
                 "--micro-batch", "4", "--global-batch", "64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "doctor" and doc["fits"] is False
    assert doc["remedies"] and doc["combination"]["fits"] is True
    assert main(["doctor", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8", "--fsdp", "full", "--seq", "8192",
                 "--micro-batch", "4", "--global-batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "Best combination on the same GPUs" in out and "GiB/GPU" in out


@pytest.mark.parametrize("argv", [
    ["doctor", "llama-3.1-8b", "--gpu", "h100-sxm", "--oom-at-gib", "-3"],
    ["doctor", "no-such-model", "--gpu", "h100-sxm"],
    ["doctor", "llama-3.1-8b", "--gpu", "h100-sxm", "--zero", "3", "--fsdp", "full"],
])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        code = main(argv)
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuwise: error:")


def test_inference_doctor_remedies_are_fit_and_infer_figures():
    r = doctor("llama-3.1-70b", gpu="h100-sxm", task="infer", batch=8, context=8192)
    assert not r.fits and r.remedies
    for x in r.remedies:
        options = {"batch": 8, "context": 8192, **x.options}
        gpu = options.pop("gpu", "h100-sxm")
        f = gpuwise.fit("llama-3.1-70b", gpu=gpu, **options)
        assert x.memory_bytes == pytest.approx(f.estimate.memory.total)
        assert x.fits == f.fits
        i = gpuwise.infer("llama-3.1-70b", gpu=gpu, batch=options["batch"], num_gpus=options.get("num_gpus", 1),
                          weights=options.get("weights"), kv_dtype=options.get("kv_dtype"),
                          prompt_tokens=options["context"] - 128, output_tokens=128)
        assert x.step_time_s == pytest.approx(i.tpot_s)
    c = r.combination
    assert c is not None and c.fits and not c.changes_job
    assert all(c.step_time_s <= x.step_time_s for x in r.remedies if x.fits and x.name in ("weights", "kv-cache"))


def test_cli_inference_doctor(capsys):
    assert main(["doctor", "llama-3.1-70b", "--gpu", "h100-sxm", "--task", "infer", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["task"] == "infer" and doc["fits"] is False and doc["remedies"]


def test_an_untimed_model_gets_remedies_by_memory_with_speed_unknown(capsys):
    """Gemma 4 (layers of different attention shapes) has no kernel model: the inference doctor still ranks what
    fits (the smallest change first) and says the speed is unknown, in text and JSON, instead of failing. A hybrid
    (Qwen3.5) is timed in inference now, so its remedies carry their time per token."""
    r = doctor("gemma-4-26b-a4b", gpu="rtx-4090", task="infer")
    assert not r.fits and r.tpot_s is None and "speed unknown" in r.verdict
    fitting = [x for x in r.remedies if x.fits and not x.changes_job]
    assert fitting and all(x.step_time_s is None and x.slowdown is None for x in r.remedies)
    saved = [r.needed_bytes - x.memory_bytes for x in fitting]
    assert saved == sorted(saved)
    assert main(["doctor", "gemma-4-26b-a4b", "--gpu", "rtx-4090", "--task", "infer", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tpot_s"] is None and doc["remedies"][0]["time_s"] is None
    assert main(["doctor", "gemma-4-26b-a4b", "--gpu", "rtx-4090", "--task", "infer"]) == 0
    assert "unknown" in capsys.readouterr().out
    hybrid = doctor("qwen3.5-27b", gpu="rtx-4090", task="infer")
    assert not hybrid.fits and hybrid.tpot_s is not None
    assert any(x.fits and x.step_time_s is not None for x in hybrid.remedies)


@pytest.mark.parametrize(("gpu", "flags"), [
    ("mi325x", {"no_fp8_weight_transpose_cache": True}),
    ("h100-sxm", {"fp8_param_gather": True, "disable_parameter_transpose_cache": True}),
])
def test_megatron_fp8_is_offered_its_transpose_cache_back(gpu, flags):
    """Transformer Engine's cached fp8 transposes are a remedy of their own (ROCm Megatron-LM's flag on AMD,
    fp8 parameters without the cache on NVIDIA), priced as `gpuwise train` prices the job with the flags."""
    job = dict(num_gpus=16, seq=4096, global_batch=640, micro_batch=10, fsdp="full", precision="fp8",
               framework="megatron", recompute="full")
    d = doctor("llama-2-70b", gpu=gpu, **job)
    x = next(r for r in d.remedies if r.name == "fp8-cache")
    assert x.options == flags
    r = gpuwise.train("llama-2-70b", gpu=gpu, **job, **flags)
    assert x.memory_bytes == pytest.approx(r.memory.total)
    assert r.memory.total < d.base.memory.total


def test_the_8bit_adamw_remedy_drops_a_torch_optim_implementation_it_has_no_use_for():
    """--optimizer-impl chooses torch.optim's AdamW/SGD kernels; bitsandbytes' 8-bit AdamW has none, so the remedy
    (alone and in the combined search) leaves the flag out instead of being refused, and its words do not name it."""
    r = gpuwise.doctor("llama-3.1-8b", gpu="h100-sxm", num_gpus=2, framework="fsdp", optimizer_impl="foreach")
    eight = [x for x in r.remedies if x.name == "optimizer"]
    assert eight and "8-bit" in eight[0].change
    assert r.combination is not None and "optimizer-impl" not in r.combination.change


def test_megatron_gets_bf16_moments_and_keeps_them_while_the_job_stays_megatron():
    """A Megatron job out of memory is offered Megatron's precision-aware optimizer (bf16 moments): what train predicts
    for it, 4 B per parameter less before sharding. A job already on bf16 moments keeps them through the remedies
    that stay on Megatron and drops them for the ones that leave it (LoRA runs on transformers + PEFT)."""
    job = dict(num_gpus=8, framework="megatron", tp=4, zero=1, seq=8192, global_batch=64)
    r = doctor("llama-3.1-70b", gpu="h100-sxm", **job)
    (moments,) = [x for x in r.remedies if x.options.get("exp_avg_dtype") == "bf16"]
    checked = gpuwise.train("llama-3.1-70b", gpu="h100-sxm", **job, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    assert moments.memory_bytes == pytest.approx(checked.memory.total)
    assert moments.memory_bytes < r.base.memory.total
    # a DDP job gets the distributed optimizer with it (Megatron's precision-aware optimizer asserts it)
    ddp = doctor("llama-3.1-70b", gpu="h100-sxm", **{**job, "zero": None})
    (with_dist,) = [x for x in ddp.remedies if x.options.get("exp_avg_dtype") == "bf16"]
    assert with_dist.options["zero"] == 1
    already = doctor("llama-3.1-70b", gpu="h100-sxm", **job, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    assert not any("moments in bf16" in x.change for x in already.remedies)
    for x in already.remedies:
        options = {**job, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16", **x.options}
        stays = (options.get("framework", "megatron") == "megatron" and options.get("finetune", "full") == "full"
                 and options.get("optimizer", "adamw") == "adamw")
        if not stays:
            options.update(exp_avg_dtype=None, exp_avg_sq_dtype=None)
        options = {k: v for k, v in options.items() if v is not None or k not in ("exp_avg_dtype", "exp_avg_sq_dtype")}
        got = gpuwise.train("llama-3.1-70b", gpu=options.pop("gpu", "h100-sxm"), **options)
        assert x.memory_bytes == pytest.approx(got.memory.total), x.change


def test_the_moment_change_is_said_even_when_one_moment_was_already_narrow():
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import load_model
    from gpuwise.plan.doctor import _describe
    from gpuwise.plan.train import TrainRequest

    req = TrainRequest(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), num_gpus=8, framework="megatron",
                       zero=1, exp_avg_dtype="bf16")
    assert _describe(req, {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}) == "exp-avg-sq-dtype None -> bf16"
    plain = replace(req, exp_avg_dtype=None)
    assert _describe(plain, {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}) == "AdamW moments in bf16"


def test_a_remedy_leaving_megatron_takes_the_new_frameworks_fp8_compiled():
    """Megatron fp8 moved to torchtitan (more GPUs, sharded states) is priced with torchao's compiled float8, not
    Transformer Engine's kernels nor eager casts, whether or not --fp8-backend te was named for Megatron."""
    job = dict(gpu="h100-sxm", num_gpus=8, seq=8192, global_batch=64, micro_batch=1, framework="megatron", tp=8,
               precision="fp8")
    plain, named = doctor("llama-3.1-70b", **job), doctor("llama-3.1-70b", **job, fp8_backend="te")
    moved = [x for x in plain.remedies if x.options.get("framework") == "torchtitan"]
    assert moved
    for x in moved:
        twin = next(y for y in named.remedies if y.change == x.change)
        assert (twin.step_time_s, twin.memory_bytes) == (x.step_time_s, x.memory_bytes)
        assert x.options["compile"] is True and twin.options["fp8_backend"] is None
        r = gpuwise.train("llama-3.1-70b", **{**job, **{k: v for k, v in twin.options.items() if k != "gpu"}})
        assert r.perf.step.step_time_s == pytest.approx(x.step_time_s) and r.request.job.fp8_kernels == "torchao"


def test_remedies_leaving_megatron_name_the_megatron_options_they_drop():
    """The original options plus a remedy's are a job `gpuwise train` takes and prices as the remedy: a remedy that
    leaves Megatron names the Megatron-only options it turns off (here --moe-permute-fusion)."""
    job = dict(num_gpus=8, global_batch=64, ep=8, framework="megatron", moe_permute_fusion=True, recompute="full",
               zero=1, seq=4096)
    r = doctor("mixtral-8x7b", gpu="h100-sxm", **job)
    moved = [x for x in r.remedies if x.options.get("framework") not in (None, "megatron")]
    assert moved
    for x in r.remedies:
        options = {**job, **x.options}
        gpu = options.pop("gpu", "h100-sxm")
        checked = gpuwise.train("mixtral-8x7b", gpu=gpu, **options)
        assert x.step_time_s == pytest.approx(checked.perf.step.step_time_s), x.change
    assert all(x.options.get("moe_permute_fusion") is False for x in moved)


def test_megatron_gradients_in_bf16_save_two_bytes_per_held_parameter():
    """Megatron keeps an fp32 gradient buffer for every parameter a rank holds (its distributed optimizer shards the
    optimizer states, not the buffer); bf16 gradients, as NeMo's performance recipes and MLPerf's NeMo runs set, save
    2 bytes of each. Offered under Megatron only, and not when the job already runs them."""
    job = dict(gpu="h100-sxm", num_gpus=8, tp=8, seq=8192, micro_batch=1, global_batch=8, zero=1,
               framework="megatron", recompute="none")
    r = doctor("llama-3.1-70b", **job)
    (g,) = [x for x in r.remedies if x.name == "gradients"]
    assert g.options == {"grad_reduce_in_fp32": False}
    fp32, bf16 = (gpuwise.train("llama-3.1-70b", **job, grad_reduce_in_fp32=f).memory.states for f in (True, False))
    assert fp32.grads - bf16.grads == pytest.approx(2 * fp32.params_on_rank, rel=1e-6)
    already = {x.name for x in doctor("llama-3.1-70b", **job, grad_reduce_in_fp32=False).remedies}
    assert "gradients" not in already
    # a job that already runs bf16 gradients keeps the remedies that leave Megatron (the setting is reset there)
    assert {"lora", "qlora", "more-gpus"} <= already
    titan = dict(job, framework="torchtitan", tp=1, zero=None, fsdp="full")
    assert not [x for x in doctor("llama-3.1-70b", **titan).remedies if x.name == "gradients"]
