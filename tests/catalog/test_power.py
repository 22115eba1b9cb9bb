"""Board power limits (`--power-limit`, catalog/power.py): the SM clock falls with the power a board may draw, the
memory clock stays; checked against published power-cap measurements, then through the device profile and the CLI."""

from __future__ import annotations

import math

import pytest

import gpuwise
from gpuwise.catalog.devices import default_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.power import clock_factor, lowest_limit_w, with_power_limit
from gpuwise.cli import main
from gpuwise.errors import InvalidArgument


def test_gb300_capped_at_500_w_runs_gemms_at_the_published_rate() -> None:
    # facebookexperimental/triton#2023: cuBLAS GEMM ~617 TFLOP/s at 500 W against ~1,600-2,174 at the rated 1,400 W
    f = clock_factor(500, 1400)
    assert 1600 * f <= 617 * 1.15 and 2174 * f >= 617 * 0.85


def test_rtx_3090_power_cap_sweep_clock_step() -> None:
    # noonghunna/club-3090#103 (rated 420 W, loaded): 1,395 MHz at a 210 W cap, 1,470 MHz at 220 W
    predicted = 1395 * clock_factor(220, 420) / clock_factor(210, 420)
    assert predicted == pytest.approx(1470, rel=0.02)


@pytest.mark.parametrize("rated", [300.0, 700.0, 1000.0, 1400.0])
def test_clock_falls_with_the_limit_and_never_rises_above_rated(rated: float) -> None:
    limits = [lowest_limit_w(rated) + 1 + i * (rated - lowest_limit_w(rated)) / 20 for i in range(20)]
    factors = [clock_factor(w, rated) for w in limits]
    assert all(0 < a < b <= 1 for a, b in zip(factors, factors[1:]))
    assert clock_factor(rated, rated) == clock_factor(2 * rated, rated) == clock_factor(None, rated) == 1.0


@pytest.mark.parametrize("watts", [0, -5, math.nan, math.inf, "abc", "", True, 900, 100])
def test_impossible_limits_are_refused_with_one_line(watts) -> None:
    with pytest.raises(InvalidArgument) as err:
        with_power_limit(get_gpu("h100-sxm"), watts)
    assert "--power-limit" in str(err.value) and "\n" not in str(err.value)


def test_a_mig_slice_and_a_gpu_without_rated_power_are_refused() -> None:
    from gpuwise.catalog.gpus import with_memory
    from gpuwise.catalog.mig import resolve_gpu

    for gpu in (resolve_gpu("h100-sxm:3g.40gb"), with_memory(None, "24GiB")):
        with pytest.raises(InvalidArgument, match="--power-limit"):
            with_power_limit(gpu, 300)


def test_a_limit_slows_compute_but_not_bandwidth() -> None:
    full, capped = default_profile(get_gpu("h100-sxm")), default_profile(with_power_limit(get_gpu("h100-sxm"), "500W"))
    f = clock_factor(500, 700)
    assert capped.matmul_flops("bf16") == pytest.approx(full.matmul_flops("bf16") * f)
    assert capped.attention_forward_efficiency == pytest.approx(full.attention_forward_efficiency * f)
    assert capped.bandwidth == full.bandwidth and capped.kernel_overhead_s == full.kernel_overhead_s
    assert "500 W" in capped.sources["matmul_efficiency.bf16"]


def test_compute_bound_training_slows_more_than_weight_streaming_decode() -> None:
    job = dict(num_gpus=8, fsdp="full", seq=8192, micro_batch=2, framework="torchtitan", ac="op")
    t700 = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", **job).perf.tokens_per_s
    t500 = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", power_limit=500, **job).perf.tokens_per_s
    assert clock_factor(500, 700) * 0.95 < t500 / t700 < 0.95  # mostly matrix products
    d700 = gpuwise.infer("llama-3.1-70b", gpu="h100-sxm", batch=1).output_tokens_per_s
    d500 = gpuwise.infer("llama-3.1-70b", gpu="h100-sxm", batch=1, power_limit=500).output_tokens_per_s
    assert t500 / t700 + 0.1 < d500 / d700 <= 1.0  # weight streaming: the memory clock does not move


def test_lower_power_variant_shares_its_sibling_profile_at_its_own_bandwidth() -> None:
    variant, sxm = get_gpu("h100-sxm-hbm2e"), get_gpu("h100-sxm")
    p, q = default_profile(variant), default_profile(sxm)
    assert p.matmul_efficiency == q.matmul_efficiency and p.memory_efficiency == q.memory_efficiency
    assert p.bandwidth == pytest.approx(q.bandwidth * 2400 / 3350)


def test_energy_is_counted_at_the_limit() -> None:
    r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, fsdp="full", train_tokens=1e9, power_limit=350)
    assert r.perf.energy_kwh == pytest.approx(r.perf.gpu_hours * 0.350)


def test_cli_power_limit_and_its_refusals(capsys) -> None:
    assert main(["train", "llama-3.1-8b", "--gpu", "h100-sxm", "--power-limit", "500"]) == 0
    assert "at 500 W" in capsys.readouterr().out
    for argv in (["--power-limit", "5"], ["--power-limit", "500", "--profile", "x.json"]):
        assert main(["train", "llama-3.1-8b", "--gpu", "h100-sxm", *argv]) == 2
        err = capsys.readouterr().err
        assert "--power-limit" in err and err.count("\n") == 1


def test_a_power_limit_no_published_run_used_is_named_outside_what_was_validated() -> None:
    job = dict(num_gpus=8, fsdp="full", seq=8192, micro_batch=2, framework="torchtitan")
    from gpuwise.plan.train import train_confidence

    odd = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", power_limit=450, **job)
    assert any("450 W power limit" in o for o in train_confidence(odd).outside)
    meta = gpuwise.train("llama-3.1-8b", gpu="h100-sxm-hbm2e", power_limit=500, **job)
    assert not any("power limit" in o for o in train_confidence(meta).outside)
