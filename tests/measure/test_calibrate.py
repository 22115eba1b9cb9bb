"""`gpuwise calibrate` on CPU produces a valid profile, and the GEMM-curve fit recovers a known efficiency."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from gpuwise.catalog.devices import default_profile, load_profile
from gpuwise.catalog.gpus import get_gpu
from gpuwise.cli import main
from gpuwise.estimate.kernels import matmul_s
from gpuwise.measure.calibrate_fit import fit_gemm
from gpuwise.measure.calibrate_gemm import parse_dtypes
from gpuwise.measure.calibrate_profile import profile_doc
from gpuwise.measure.calibrate_result import GemmLine, GemmPoint
from gpuwise.measure.calibrate_run import calibrate
from gpuwise.measure.timing import Stats, buffers_to_rotate, summarize


@pytest.fixture(scope="module")
def cpu_run():
    return calibrate(device="cpu", quick=True, dtypes=("fp32", "bf16", "tf32", "fp8"))


def test_cpu_quick_measures_and_explains_what_it_skips(cpu_run) -> None:
    c = cpu_run
    assert c.gpu is None and c.device == "cpu"
    assert {d.dtype for d in c.dtypes} == {"fp32", "bf16"}
    assert set(c.skipped) == {"tf32", "fp8"} and all(c.skipped.values())
    for d in c.dtypes:
        assert d.peak_tflops is None and d.best_fraction is None and d.fitted_efficiency is None  # unknown, not 0
        for p in d.points:  # each point: 2mnk FLOPs over the median time
            assert math.isclose(p.tflops, 2 * p.m * p.n * p.k / p.stats.median_s / 1e12)
            assert p.stats.p10_s <= p.stats.median_s <= p.stats.p90_s and p.stats.reps >= 5
    kinds = {t.kind for t in c.transfers}
    assert kinds == {"copy", "read"}  # no host-to-device link on a CPU device
    copy = c.transfer("copy")
    assert copy.moved_bytes == 2 * copy.size_bytes and copy.gb_s > 0
    assert 0 < c.kernel_overhead_us < 1e4
    assert c.state_before is None and "CPU" in c.state_note


def test_profile_is_accepted_by_load_profile(cpu_run, tmp_path) -> None:
    doc = profile_doc(cpu_run)
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    h100 = get_gpu("h100-sxm")
    prof = load_profile(path, h100)
    # A CPU profile has no catalog GPU: absolute TFLOP/s, divided by the --gpu's peak when applied.
    assert doc["gpu"] is None and "matmul_efficiency" not in doc
    assert math.isclose(prof.matmul_efficiency["bf16"], doc["matmul_tflops"]["bf16"] * 1e12 / h100.peak_flops["bf16"])
    assert math.isclose(prof.bandwidth, doc["memory_bandwidth_gb_s"] * 1e9)
    assert math.isclose(prof.kernel_overhead_s, doc["kernel_overhead_us"] * 1e-6)
    assert prof.sources["memory_efficiency"] == "profile cpu.json"
    # the one-row GEMM line it measured prices the --gpu's memory-bound GEMMs
    line = cpu_run.gemm_line
    assert line is not None and line.dtype == "bf16" and len(line.points) >= 3
    if "gemm_overhead_us" not in doc:  # a busy host's sweep fitted an intercept no profile accepts: said, not written
        assert any("one-row GEMM line" in n for n in doc["measured"]["notes"]) and not 0 <= line.intercept_s < 1e-2
        assert prof.gemm_overhead_s is None
    else:
        assert math.isclose(prof.gemm_fixed_s, doc["gemm_overhead_us"] * 1e-6)
        assert math.isclose(prof.gemm_bandwidth, doc["gemm_bandwidth_gb_s"] * 1e9, rel_tol=1e-6)
    t = matmul_s(prof, 1, 4096, 4096, "bf16", 2.0)  # no faster than the line (a CPU's GEMM rate may bound it)
    assert t >= prof.gemm_fixed_s + (4096 * 4096 + 2 * 4096) * 2 / prof.gemm_bandwidth * (1 - 1e-9)


def test_a_gemm_line_no_profile_accepts_is_left_out_and_said(cpu_run, tmp_path) -> None:
    """A busy host can fit the one-row GEMM sweep a fixed time of milliseconds: calibrate then writes the rest of
    the profile, which loads, and says why the line is missing."""
    from dataclasses import replace

    noisy = replace(cpu_run, gemm_line=replace(cpu_run.gemm_line, intercept_s=0.0113))
    doc = profile_doc(noisy)
    assert "gemm_overhead_us" not in doc and "gemm_bandwidth_gb_s" not in doc
    assert any("11300.0 us" in n for n in doc["measured"]["notes"])
    path = tmp_path / "noisy.json"
    path.write_text(json.dumps(doc))
    assert load_profile(path, get_gpu("h100-sxm")).gemm_overhead_s is None


def test_cli_saves_a_profile_that_train_uses(tmp_path, capsys) -> None:
    path = tmp_path / "p.json"
    assert main(["calibrate", "--device", "cpu", "--quick", "--dtypes", "fp32", "--save", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["command"] == "calibrate" and out["saved"] == str(path)
    assert out["matmul"][0]["dtype"] == "fp32" and out["matmul"][0]["peak_tflops"] is None
    saved = json.loads(path.read_text())
    assert saved["kind"] == "gpuwise-device-profile" and saved["measured"]["environment"]["torch"]
    # The profile changes a prediction: a CPU's bandwidth on an H100 makes decoding far slower.
    assert main(["infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(["infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--profile", str(path), "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["tpot_s"] > 5 * base["tpot_s"]


def test_a_profile_for_one_gpu_refuses_another(tmp_path, capsys) -> None:
    path = tmp_path / "h100.json"
    path.write_text(json.dumps({"kind": "gpuwise-device-profile", "gpu": "h100-sxm", "memory_bandwidth_gb_s": 3000}))
    assert main(["infer", "llama-3.1-8b", "--gpu", "a100-80gb", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "measured on h100-sxm" in err
    assert main(["infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--profile", str(path)]) == 0


def test_host_copy_figure_feeds_the_offload_model(tmp_path) -> None:
    import gpuwise

    opts = dict(gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=8, zero=3, offload=("optimizer",))
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({"gpu": "h100-sxm", "host_to_device_gb_s": 5.0}))
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps({"gpu": "h100-sxm", "host_to_device_gb_s": 50.0}))
    t_slow = gpuwise.train("llama-3.1-8b", profile=str(slow), **opts).perf.step.step_time_s
    t_fast = gpuwise.train("llama-3.1-8b", profile=str(fast), **opts).perf.step.step_time_s
    assert t_slow > t_fast


def _synthetic(gpu, dtype: str, eff: float, noise: list[float]) -> list[GemmPoint]:
    """Times the GEMM model itself gives at a known efficiency, perturbed by a few percent."""
    prof = replace(default_profile(gpu), matmul_efficiency={"default": eff, dtype: eff})
    shapes = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 4096), (8192, 4096, 14336),
              (2048, 2048, 2048)]
    out = []
    for (m, n, k), e in zip(shapes, noise):
        t = matmul_s(prof, m, n, k, dtype, 2) * (1 + e)
        out.append(GemmPoint(dtype, m, n, k, Stats(t, t, t, t, 10)))
    return out


def test_fit_recovers_the_efficiency_the_times_were_made_with() -> None:
    h100 = get_gpu("h100-sxm")
    prof = default_profile(h100)
    points = _synthetic(h100, "bf16", 0.71, [0.02, -0.01, 0.015, -0.02, 0.01, 0.0])
    line = GemmLine("bf16", ((1, 1.0), (2, 2.0)), prof.gemm_fixed_s, prof.gemm_bandwidth)  # the catalog's, measured
    r = fit_gemm(h100, "bf16", points, prof.bandwidth, prof.kernel_overhead_s, line)
    assert r.peak_tflops == pytest.approx(989.5)
    assert r.fitted_efficiency == pytest.approx(0.71, abs=0.01)
    assert r.fit_median_error < 0.03
    assert all(p.predicted_s is not None for p in r.points)


def test_the_fit_uses_the_runs_own_fixed_times_not_the_catalogs() -> None:
    """Times made on an H100 whose GEMMs cost 2 us fixed (the catalog says 4.5) and stream at the copy rate: without a
    measured line the fit takes the launch overhead for the GEMMs' fixed time; with a line, the line's figures."""
    h100 = get_gpu("h100-sxm")
    made = replace(default_profile(h100), gemm_overhead_s=None, matmul_memory_efficiency=None, kernel_overhead_s=2e-6)
    assert default_profile(h100).gemm_fixed_s != made.gemm_fixed_s  # the catalog's figure differs from the run's
    shapes = [(1, 4096, 4096), (16, 8192, 8192), (64, 4096, 14336), (1024, 1024, 1024), (4096, 4096, 4096),
              (8192, 8192, 8192)]

    def points(prof, eff):
        prof = replace(prof, matmul_efficiency={"default": eff, "bf16": eff})
        return [GemmPoint("bf16", m, n, k, Stats(t, t, t, t, 10))
                for m, n, k in shapes for t in [matmul_s(prof, m, n, k, "bf16", 2)]]

    r = fit_gemm(h100, "bf16", points(made, 0.70), made.bandwidth, 2e-6)
    assert r.fitted_efficiency == pytest.approx(0.70, abs=0.005) and r.fit_median_error < 1e-3
    lined = replace(made, gemm_overhead_s=6e-6, matmul_memory_efficiency=0.8)
    line = GemmLine("bf16", ((1, 1.0), (2, 2.0)), 6e-6, 0.8 * h100.memory_bandwidth_bytes_per_s)
    r = fit_gemm(h100, "bf16", points(lined, 0.65), made.bandwidth, 2e-6, line)
    assert r.fitted_efficiency == pytest.approx(0.65, abs=0.005) and r.fit_median_error < 1e-3


def test_the_gemm_line_fit_recovers_a_made_up_line() -> None:
    from gpuwise.measure.calibrate_result import fit_line

    pts = [(b, 4.5e-6 + b / 4.5e12) for b in (2e6, 8e6, 34e6, 134e6, 470e6)]
    icpt, bw = fit_line(pts)
    assert icpt == pytest.approx(4.5e-6, rel=1e-6) and bw == pytest.approx(4.5e12, rel=1e-6)
    assert fit_line([(1e6, 5e-6), (2e6, 5e-6)])[0] == 0.0  # a flat sweep: no slope to fit, the largest point's rate
    icpt, bw = fit_line([(1e6, 1e-6), (2e6, 4e-6), (3e6, 5e-6)])  # a negative intercept: through the origin
    assert icpt == 0.0 and bw > 0


def test_statistics_and_rotation() -> None:
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median_s, s.min_s, s.reps) == (3.0, 1.0, 5)
    assert s.p10_s <= s.median_s <= s.p90_s
    # 50 MiB L2, 16 MiB per input set: 7 sets exceed twice the cache.
    assert buffers_to_rotate(16 << 20, 50 << 20) == 7
    assert buffers_to_rotate(1 << 30, 50 << 20) == 2


def test_bad_dtype_and_device_are_one_line(capsys) -> None:
    assert parse_dtypes("bf16, fp8") == ("bf16", "fp8")
    assert main(["calibrate", "--device", "cpu", "--dtypes", "fp4"]) == 2
    assert main(["calibrate", "--device", "tpu"]) == 2
    import torch

    if not torch.cuda.is_available():  # no silent fallback to the CPU
        assert main(["calibrate", "--device", "cuda"]) == 2
        assert main(["calibrate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) in (2, 4) and all(line.startswith("gpuwise: error:") for line in err)
