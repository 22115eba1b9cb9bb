"""measure/nvml.py against a fake NVML: units, None for what NVML cannot say, CUDA_VISIBLE_DEVICES, the sampler."""

from __future__ import annotations

import os
import sys
import time

import pytest
from fake_nvml import GIB, FakeGpu, FakeNvml, NVMLError_NoPermission, NVMLLibraryMismatchError, proc

from gpuwise.measure._deps import EXTRA_HINT, MeasureUnavailable
from gpuwise.measure.nvml import load_nvml, snapshot, visible_indices
from gpuwise.measure.sampler import NvmlSampler

NO_ENV: dict[str, str] = {}


# --- load_nvml ----------------------------------------------------------------------------------------------------

def test_init_is_called_once_per_module():
    fake = FakeNvml()
    assert load_nvml(fake) is fake
    snapshot(fake, NO_ENV)
    NvmlSampler(nvml=fake, env=NO_ENV)
    assert fake.init_calls == 1


def test_init_failure_is_one_line_with_nvml_text():
    from fake_nvml import NVMLError_LibraryNotFound

    with pytest.raises(MeasureUnavailable) as e:
        load_nvml(FakeNvml(init_error=NVMLError_LibraryNotFound()))
    assert "no NVIDIA driver" in str(e.value) and "NVML Shared Library Not Found" in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_bindings(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    with pytest.raises(MeasureUnavailable) as e:
        load_nvml()
    assert "nvidia-ml-py" in str(e.value) and EXTRA_HINT in str(e.value)


def test_real_pynvml_without_driver_is_one_line():
    pynvml = pytest.importorskip("pynvml")
    try:
        load_nvml(pynvml)
    except MeasureUnavailable as e:
        assert "no NVIDIA driver / NVML on this machine" in str(e) and "\n" not in str(e)
    else:
        pytest.skip("NVML works on this machine")


# --- snapshot -----------------------------------------------------------------------------------------------------

def test_snapshot_values_in_units():
    (s,) = snapshot(FakeNvml(), NO_ENV)
    assert (s.index, s.cuda_index, s.name) == (0, 0, "NVIDIA H100 80GB HBM3")
    assert s.uuid.startswith("GPU-")
    assert (s.utilization_gpu_pct, s.utilization_memory_pct) == (97, 41)
    assert s.memory_used_bytes == 70 * GIB  # the v2 figure: reserved memory is not "used"
    assert s.memory_total_bytes == 80 * GIB
    assert s.power_w == pytest.approx(650.0) and s.power_limit_w == pytest.approx(700.0)  # mW -> W
    assert s.temperature_c == 67
    assert (s.sm_clock_mhz, s.sm_clock_max_mhz, s.memory_clock_mhz) == (1980, 1980, 2619)
    assert s.energy_j == pytest.approx(123_456.789)  # mJ -> J
    assert s.processes == ()


def test_memory_falls_back_to_v1_on_old_drivers():
    (s,) = snapshot(FakeNvml([FakeGpu(unsupported={"nvmlDeviceGetMemoryInfo_v2"})]), NO_ENV)
    assert s.memory_used_bytes == 70 * GIB + GIB // 2


def test_unsupported_metrics_are_none_not_zero():
    gone = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetTemperature", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetUtilizationRates"}
    gpu = FakeGpu(unsupported=gone, raises={"nvmlDeviceGetClockInfo": NVMLError_NoPermission()})
    (s,) = snapshot(FakeNvml([gpu]), NO_ENV)
    for field in ("power_w", "power_limit_w", "energy_j", "temperature_c", "sm_clock_max_mhz", "sm_clock_mhz",
                  "memory_clock_mhz", "utilization_gpu_pct", "utilization_memory_pct"):
        assert getattr(s, field) is None, field
    assert s.memory_used_bytes == 70 * GIB


def test_gpu_without_handle_is_listed_with_nothing_known():
    s0, s1 = snapshot(FakeNvml([FakeGpu(), FakeGpu(no_handle=True)]), NO_ENV)
    assert s0.name is not None
    assert (s1.index, s1.cuda_index, s1.name, s1.power_w, s1.processes) == (1, 1, None, None, ())


def test_bytes_from_old_bindings_are_decoded():
    (s,) = snapshot(FakeNvml([FakeGpu(name=b"Tesla V100")]), NO_ENV)  # type: ignore[arg-type]
    assert s.name == "Tesla V100"


def test_processes_deduplicated_named_and_memory_may_be_unknown():
    me, nobody = os.getpid(), 4_000_000  # above Linux's pid_max: no such process
    gpu = FakeGpu(compute=[proc(me, 3 * GIB), proc(nobody, None)], graphics=[proc(me, 3 * GIB)])
    (s,) = snapshot(FakeNvml([gpu]), NO_ENV)
    assert [p.pid for p in s.processes] == [me, nobody]
    mine, other = s.processes
    if os.path.exists(f"/proc/{me}/comm"):
        assert mine.name == open(f"/proc/{me}/comm").read().strip()
    assert mine.used_memory_bytes == 3 * GIB
    assert (other.name, other.used_memory_bytes) == (None, None)


def test_processes_fall_back_to_v2_calls_on_old_drivers():
    gpu = FakeGpu(compute=[proc(12, GIB)],
                  raises={"nvmlDeviceGetComputeRunningProcesses": NVMLLibraryMismatchError("no _v3")})
    (s,) = snapshot(FakeNvml([gpu]), NO_ENV)
    assert [(p.pid, p.used_memory_bytes) for p in s.processes] == [(12, GIB)]


# --- CUDA_VISIBLE_DEVICES -----------------------------------------------------------------------------------------

UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-bbbb3333-0000", "GPU-cccc4444-0000"]


@pytest.mark.parametrize("value, expected", [
    (None, [0, 1, 2, 3]),
    ("", []),
    ("2,0", [2, 0]),
    (" 1 , 3", [1, 3]),
    ("0,7,1", [0]),  # 7 does not exist: the list stops there
    ("1,-1,2", [1]),  # a negative entry stops it too
    ("1gpu,2", [1, 2]),  # strtoul reads the leading digits
    ("gpu0", []),
    ("1,2,1", []),  # a repeated GPU hides all
    ("GPU-cccc4444-0000,GPU-aaaa1111-0000", [3, 0]),
    ("GPU-cccc,GPU-bbbb2", [3, 1]),  # unique prefixes
    ("GPU-aaaa,GPU-bbbb,GPU-cccc", [0]),  # GPU-bbbb is ambiguous: stops
    ("GPU-aaaa,GPU-ffff,GPU-cccc", [0]),  # unknown UUID: stops
    ("GPU-aaaa,2", [0]),  # a UUID list takes only UUIDs
    ("GPU-aaaa,GPU-aaaa1111", []),
    ("MIG-5c1d3a8e-0000", []),  # MIG instances are not resolved
])
def test_visible_indices(value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_indices(4, env, UUIDS) == expected


def test_uuid_entries_without_uuids_match_nothing():
    assert visible_indices(4, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}) == []


def test_snapshot_numbers_gpus_as_cuda_does():
    gpus = [FakeGpu(uuid=u, name=f"gpu{i}") for i, u in enumerate(UUIDS)]
    for env in ({"CUDA_VISIBLE_DEVICES": "3,1"}, {"CUDA_VISIBLE_DEVICES": "GPU-cccc,GPU-bbbb2"}):
        snaps = snapshot(FakeNvml(gpus), env)
        assert [(s.cuda_index, s.index, s.name) for s in snaps] == [(0, 3, "gpu3"), (1, 1, "gpu1")]
    assert snapshot(FakeNvml(gpus), {"CUDA_VISIBLE_DEVICES": ""}) == []


# --- the sampler --------------------------------------------------------------------------------------------------

def sampler(fake: FakeNvml, **kw) -> NvmlSampler:
    return NvmlSampler(nvml=fake, env=kw.pop("env", NO_ENV), clock=fake.clock, **kw)


def test_sampler_picks_the_gpu_by_cuda_index():
    fake = FakeNvml([FakeGpu(name="a"), FakeGpu(name="b")])
    assert sampler(fake, cuda_index=0, env={"CUDA_VISIBLE_DEVICES": "1"}).index == 1
    with pytest.raises(MeasureUnavailable, match="cuda:1"):
        sampler(fake, cuda_index=1, env={"CUDA_VISIBLE_DEVICES": "1"})


def test_energy_from_the_counter_and_from_power():
    """100 W for 1 s, then 300 W for 1 s: the counter knows it was 400 J; samples at 0, 1, 2 s read 100, 300, 300 W
    and their trapezoid says 500 J (the power reading at a sample stands for the interval around it)."""
    for unsupported, energy_j, source in ((set(), 400.0, "counter"),
                                          ({"nvmlDeviceGetTotalEnergyConsumption"}, 500.0, "power integral")):
        gpu = FakeGpu(power_mw=100_000, unsupported=unsupported)
        fake = FakeNvml([gpu])
        s = sampler(fake)
        s.sample()
        fake.advance(1.0)
        gpu.power_mw = 300_000
        s.sample()
        fake.advance(1.0)
        s.sample()
        r = s.summary()
        assert (r.samples, r.duration_s) == (3, 2.0)
        assert r.energy_j == pytest.approx(energy_j) and r.energy_source == source
        assert r.mean_power_w == pytest.approx(700 / 3) and r.max_power_w == pytest.approx(300.0)


def test_summary_fields():
    gpu = FakeGpu(util_gpu=50, sm_clock_mhz=1500, temperature_c=60, used_v2_bytes=10 * GIB)
    fake = FakeNvml([gpu])
    s = sampler(fake)
    s.sample()
    fake.advance(0.5)
    gpu.util_gpu, gpu.sm_clock_mhz, gpu.temperature_c, gpu.used_v2_bytes = 100, 1900, 70, 20 * GIB
    s.sample()
    r = s.summary()
    assert r.mean_utilization_gpu_pct == pytest.approx(75.0)
    assert r.mean_sm_clock_mhz == pytest.approx(1700.0)
    assert r.max_temperature_c == 70 and r.max_memory_used_bytes == 20 * GIB
    assert r.energy_j == pytest.approx(325.0)  # 650 W x 0.5 s, by the counter
    assert r.to_dict()["energy_source"] == "counter"


def test_no_samples_one_sample_and_nothing_supported():
    fake = FakeNvml()
    s = sampler(fake)
    r = s.summary()
    assert r.samples == 0 and r.duration_s is None and r.mean_power_w is None and r.energy_j is None
    s.sample()
    r = s.summary()
    assert (r.samples, r.duration_s, r.energy_j) == (1, 0.0, None)  # no interval, no energy
    assert r.mean_power_w == pytest.approx(650.0)

    everything = {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo",
                  "nvmlDeviceGetTemperature", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTotalEnergyConsumption"}
    fake = FakeNvml([FakeGpu(unsupported=everything)])
    s = sampler(fake)
    for _ in range(3):
        s.sample()
        fake.advance(1.0)
    r = s.summary()
    assert r.samples == 3 and r.duration_s == 2.0
    assert all(getattr(r, k) is None for k in ("mean_utilization_gpu_pct", "mean_power_w", "max_power_w", "energy_j",
                                                "max_temperature_c", "mean_sm_clock_mhz", "max_memory_used_bytes"))


def test_counter_reset_falls_back_to_power():
    gpu = FakeGpu(power_mw=200_000)
    fake = FakeNvml([gpu])
    s = sampler(fake)
    s.sample()
    fake.advance(1.0)
    gpu.energy_mj = 5  # driver reloaded
    s.sample()
    r = s.summary()
    assert r.energy_source == "power integral" and r.energy_j == pytest.approx(200.0)


def test_missing_power_readings_are_bridged():
    gpu = FakeGpu(power_mw=100_000, unsupported={"nvmlDeviceGetTotalEnergyConsumption"})
    fake = FakeNvml([gpu])
    s = sampler(fake)
    s.sample()
    fake.advance(1.0)
    gpu.unsupported.add("nvmlDeviceGetPowerUsage")
    s.sample()
    fake.advance(1.0)
    gpu.unsupported.discard("nvmlDeviceGetPowerUsage")
    gpu.power_mw = 300_000
    s.sample()
    r = s.summary()
    assert r.energy_j == pytest.approx(400.0)  # (100 + 300) / 2 x 2 s
    assert r.mean_power_w == pytest.approx(200.0)


def test_mark_and_windows():
    fake = FakeNvml()
    s = sampler(fake)
    assert s.mark() == 0
    for _ in range(3):
        s.sample()
        fake.advance(1.0)
    m = s.mark()
    assert s.summary(since=m).samples == 0
    for _ in range(2):
        s.sample()
        fake.advance(1.0)
    w = s.summary(since=m)
    assert (w.samples, w.duration_s) == (2, 1.0)
    assert w.energy_j == pytest.approx(650.0)
    assert s.summary().samples == 5 and s.summary(since=0).samples == 5


def test_bounded_buffer_keeps_marks_and_the_whole_run_exact():
    fake = FakeNvml()
    s = sampler(fake, max_samples=3)
    for _ in range(5):
        s.sample()
        fake.advance(1.0)
    m = s.mark()  # 5
    for _ in range(5):
        s.sample()
        fake.advance(1.0)
    assert len(s._buffer) == 3
    assert s.summary(since=8).samples == 2  # positions are absolute: eviction does not shift them
    partial = s.summary(since=m)  # began before the buffer: covers its last 3 samples, and says so
    assert (partial.samples, partial.duration_s) == (3, 2.0)
    whole = s.summary()
    assert (whole.samples, whole.duration_s) == (10, 9.0)
    assert whole.energy_j == pytest.approx(650.0 * 9)


def test_a_failing_reading_is_recorded_as_none_and_never_raises():
    gpu = FakeGpu(raises={"nvmlDeviceGetUtilizationRates": RuntimeError("driver fell over")})
    fake = FakeNvml([gpu])
    s = sampler(fake)
    sample = s.sample()
    assert sample.utilization_gpu_pct is None and sample.power_w is None
    assert s.summary().samples == 1


def test_thread_samples_and_stops():
    fake = FakeNvml()
    with NvmlSampler(nvml=fake, env=NO_ENV, interval_s=0.01) as s:
        time.sleep(0.15)
    assert s._thread is None
    n = s.summary().samples
    assert n >= 2
    time.sleep(0.05)
    assert s.summary().samples == n  # stopped
    assert s.summary().mean_power_w == pytest.approx(650.0)
