"""The tracker against hand-computed numbers: a known FLOP count, a fake clock, a fake loader and a fake sampler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import gpuwise
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.errors import InvalidArgument, UnknownGPUError
from gpuwise.estimate.flops import step_flops
from gpuwise.measure import _deps
from gpuwise.measure.tracker import Tracker

TINY = str(Path(__file__).parents[1] / "fixtures" / "configs" / "tiny-llama.json")


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


class FakeLoader:
    """Each next() takes `wait_s` on the fake clock."""

    def __init__(self, clock: FakeClock, n: int, wait_s: float) -> None:
        self.clock, self.n, self.wait_s = clock, n, wait_s

    def __iter__(self):
        for i in range(self.n):
            self.clock.advance(self.wait_s)
            yield i


class FakeSampler:
    """The NvmlSampler protocol: start/stop/mark/summary(since)."""

    def __init__(self) -> None:
        self.started = self.stopped = False
        self.samples: list[float] = []
        self.since: list[int | None] = []

    def start(self):
        self.started = True
        return self

    def stop(self) -> None:
        self.stopped = True

    def mark(self) -> int:
        n = len(self.samples)
        self.samples.append(90.0)  # one sample arrives during each step: 90% busy
        return n

    def summary(self, since: int | None = None):
        self.since.append(since)
        window = self.samples[since or 0:]
        return SimpleNamespace(samples=len(window), duration_s=0.1 * len(window),
                               mean_utilization_gpu_pct=sum(window) / len(window) if window else None,
                               mean_power_w=500.0, max_power_w=650.0, energy_j=1234.0, max_temperature_c=70.0,
                               mean_sm_clock_mhz=1980.0, max_memory_used_bytes=None)


def run(tracker: Tracker, clock: FakeClock, step_times: list[float], tokens: int | None = None) -> None:
    for s in step_times:
        with tracker.step(tokens=tokens):
            clock.advance(s)


def test_mfu_from_a_known_flop_count_and_a_fake_clock() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, hardware_flops_per_step=1.5e15, peak_flops=1e15, clock=clock)
    run(t, clock, [2.0] * 4)
    rec = t.records[-1]
    assert rec.step_time_s == pytest.approx(2.0)
    assert rec.mfu == pytest.approx(0.5)  # 1e15 / (2.0 s x 1e15 FLOP/s x 1 GPU)
    assert rec.hfu == pytest.approx(0.75)  # 1.5e15 / (2.0 x 1e15)
    s = t.summary(skip_first=0)
    assert (s.steps, s.mfu, s.hfu) == (4, pytest.approx(0.5), pytest.approx(0.75))
    assert "MFU 50.0%, HFU 75.0% of 1 x 1000 TFLOP/s (peak as given)" in s.render()


def test_mfu_over_eight_gpus_counts_the_whole_job() -> None:
    clock = FakeClock()
    # 8 GPUs at 1e15 each; 4e15 FLOPs per step for the whole job in 2 s: 4e15 / (2 x 8e15) = 25%
    t = Tracker(flops_per_step=4e15, peak_flops=1e15, peak_label="h100-sxm bf16 dense", world_size=8, clock=clock,
                tokens_per_step=8 * 4096)
    run(t, clock, [2.0] * 3)
    s = t.summary(skip_first=0)
    assert s.mfu == pytest.approx(0.25)
    assert s.hfu is None  # no hardware FLOP count given: unknown, not assumed equal to MFU
    assert s.denominator == "8 x 1000 TFLOP/s (h100-sxm bf16 dense)"
    assert s.tokens_per_s == pytest.approx(8 * 4096 / 2.0)
    assert s.tokens_per_s_per_gpu == pytest.approx(4096 / 2.0)


def test_rates_are_totals_over_the_window_and_mfu_uses_the_mean_step() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, peak_flops=1e15, clock=clock)
    for s, n in ((1.0, 1000), (3.0, 3000), (2.0, 2000)):
        with t.step(tokens=n):
            clock.advance(s)
    s = t.summary(skip_first=0)
    assert s.tokens_per_s == pytest.approx(6000 / 6.0)
    assert s.tokens_per_step == pytest.approx(2000)
    assert (s.step_time_median_s, s.step_time_mean_s) == (pytest.approx(2.0), pytest.approx(2.0))
    assert s.mfu == pytest.approx(0.5)  # 1e15 / (mean 2.0 s x 1e15)
    assert [r.tokens_per_s for r in t.records] == [pytest.approx(1000)] * 3


def test_data_wait_share_from_wrap() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, peak_flops=1e15, clock=clock)
    for _ in t.wrap(FakeLoader(clock, 5, wait_s=0.5)):
        with t.step():
            clock.advance(1.5)
    rec = t.records[0]
    assert (rec.step_time_s, rec.data_wait_s) == (pytest.approx(2.0), pytest.approx(0.5))  # bracket + wait before it
    s = t.summary(skip_first=1)
    assert s.steps == 4
    assert s.data_wait_share == pytest.approx(0.25)
    assert s.data_wait_mean_s == pytest.approx(0.5)
    assert s.mfu == pytest.approx(0.5)  # the wait is part of the step time: 1e15 / (2.0 x 1e15)
    assert "input-bound" in {f.id for f in s.findings}


def test_data_wait_inside_a_step_is_counted_once() -> None:
    clock = FakeClock()
    t = Tracker(clock=clock)
    t.start_step()
    for _ in range(2):  # gradient accumulation: two micro-batches fetched inside the step
        with t.data_wait():
            clock.advance(0.25)
        clock.advance(0.75)
    rec = t.end_step()
    assert (rec.step_time_s, rec.data_wait_s) == (pytest.approx(2.0), pytest.approx(0.5))


def test_tick_measures_between_calls() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, peak_flops=1e15, clock=clock)
    assert t.tick() is None  # starts the clock
    loader = t.wrap(FakeLoader(clock, 3, wait_s=0.5))
    for _ in loader:
        clock.advance(1.5)
        rec = t.tick()
        assert (rec.step_time_s, rec.data_wait_s) == (pytest.approx(2.0), pytest.approx(0.5))
        assert rec.mfu == pytest.approx(0.5)
    with pytest.raises(RuntimeError):
        t.start_step()
        t.tick()


def test_skip_first_drops_warm_up() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, peak_flops=1e15, clock=clock, tokens_per_step=100)
    run(t, clock, [10.0, 2.0, 2.0, 2.0])
    s = t.summary()  # skip_first=1 by default
    assert (s.steps, s.skipped_steps, s.step_time_mean_s, s.mfu) == (3, 1, pytest.approx(2.0), pytest.approx(0.5))
    s0 = t.summary(skip_first=0)
    assert (s0.steps, s0.step_time_mean_s) == (4, pytest.approx(4.0))
    assert t.summary(skip_first=0, last=2).steps == 2
    empty = t.summary(skip_first=10)
    assert empty.steps == 0 and empty.mfu is None and any("no steps" in n for n in empty.notes)
    with pytest.raises(InvalidArgument):
        t.summary(skip_first=-1)


def test_history_keeps_the_last_steps() -> None:
    clock = FakeClock()
    t = Tracker(clock=clock, history=3)
    run(t, clock, [1.0] * 5 + [2.0] * 3)
    assert t.steps == 8 and len(t.records) == 3 and t.records[0].index == 5
    s = t.summary()
    assert (s.steps, s.step_time_mean_s) == (3, pytest.approx(2.0))
    assert any("fell out of the history" in n for n in s.notes)


def test_failed_step_is_dropped_and_misuse_raises() -> None:
    clock = FakeClock()
    t = Tracker(clock=clock)
    with pytest.raises(ZeroDivisionError):
        with t.step():
            clock.advance(1.0)
            1 / 0
    assert t.steps == 0 and not t.in_step
    with pytest.raises(RuntimeError):
        t.end_step()
    t.start_step()
    with pytest.raises(RuntimeError):
        t.start_step()


def test_unknown_peak_gives_no_mfu_and_says_why() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, clock=clock)
    run(t, clock, [2.0] * 3)
    s = t.summary(skip_first=0)
    assert s.mfu is None and s.hfu is None and s.denominator is None
    assert "no peak FLOP/s given" in s.mfu_note
    assert "MFU unknown" in s.render()
    t2 = Tracker(peak_flops=1e15, clock=clock)
    run(t2, clock, [2.0] * 3)
    assert "no FLOP count" in t2.summary().mfu_note


class FakeCuda:
    """torch.cuda as far as the tracker reads it."""

    def __init__(self, name: str, total: int = 80 * 2**30) -> None:
        self.name, self.total = name, total

    def current_device(self) -> int:
        return 0

    def get_device_name(self, index: int) -> str:
        return self.name

    def get_device_properties(self, index: int):
        return SimpleNamespace(total_memory=self.total)

    def max_memory_allocated(self) -> int:
        return 10 * 2**30

    def max_memory_reserved(self) -> int:
        return 12 * 2**30


def test_unknown_device_mfu_is_none_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(_deps, "cuda_if_imported", lambda: FakeCuda("NVIDIA Imaginary X1"))
    clock = FakeClock()
    t = Tracker.for_model(TINY, seq=128, batch=4, clock=clock, nvml=False)
    run(t, clock, [1.0] * 3)
    s = t.summary()
    assert s.mfu is None and s.peak_flops_per_gpu is None
    assert s.mfu_note == "MFU unknown: NVIDIA Imaginary X1 is not in the catalog; pass gpu=... (see `gpuwise gpus`)"
    assert s.memory_capacity_bytes == 80 * 2**30  # the device's own total memory
    assert (s.memory_allocated_peak_bytes, s.memory_reserved_peak_bytes) == (10 * 2**30, 12 * 2**30)
    assert s.tokens_per_s == pytest.approx(128 * 4)


def test_detected_device_in_the_catalog(monkeypatch) -> None:
    monkeypatch.setattr(_deps, "cuda_if_imported", lambda: FakeCuda("NVIDIA H100 80GB HBM3"))
    t = Tracker.for_model(TINY, seq=128, batch=4, nvml=False)
    assert t.peak_flops == get_gpu("h100-sxm").peak_flops["bf16"]
    assert t.peak_label.endswith("(h100-sxm) bf16 dense") and not t.notes
    other = Tracker.for_model(TINY, seq=128, batch=4, gpu="a100-80gb", nvml=False)
    assert any("the MFU peak is for gpu=a100" in n and "H100" in n for n in other.notes)
    with pytest.raises(InvalidArgument):
        Tracker.for_model(TINY, seq=128, batch=4, recompute="some", nvml=False)


def test_no_device_no_gpu_given(monkeypatch) -> None:
    monkeypatch.setattr(_deps, "cuda_if_imported", lambda: None)
    t = Tracker.for_model(TINY, seq=128, batch=4)
    assert t.peak_flops is None and "no gpu= given" in t.unknown_peak_reason
    assert any("NVML not sampled" in n for n in t.notes)
    with pytest.raises(UnknownGPUError):
        Tracker.for_model(TINY, seq=128, batch=4, gpu="h1000")


def test_for_model_uses_step_flops_and_the_catalog_peak(monkeypatch) -> None:
    monkeypatch.setattr(_deps, "cuda_if_imported", lambda: None)
    t = Tracker.for_model(TINY, seq=512, batch=4, world_size=8, gpu="h100-sxm", recompute="full")
    expected = step_flops(load_model(TINY).spec, seq=512, global_batch=4 * 8, recompute="full")
    assert t.flops_per_step == expected.model
    assert t.hardware_flops_per_step == expected.hardware > expected.model
    assert t.tokens_per_step == 512 * 4 * 8
    h100 = get_gpu("h100-sxm")
    assert t.peak_flops == h100.peak_flops["bf16"]
    assert t.peak_label == f"{h100.name} (h100-sxm) bf16 dense"
    assert t.memory_capacity_bytes == h100.memory_bytes
    assert t.context.tokens_per_microbatch_per_gpu == 512 * 4
    assert t.predicted_peak_memory_bytes is None  # no layout given: no prediction
    fp32 = Tracker.for_model("gpt2", seq=1024, batch=1, gpu="h100-sxm", precision="fp32")
    assert fp32.peak_flops == h100.peak_flops["tf32"] and "tf32 dense" in fp32.peak_label


def test_for_model_with_a_layout_predicts_memory_and_step(monkeypatch) -> None:
    monkeypatch.setattr(_deps, "cuda_if_imported", lambda: None)
    t = Tracker.for_model(TINY, seq=512, batch=4, world_size=8, gpu="h100-sxm", layout={"tp": 2})
    assert t.tokens_per_step == 512 * 4 * 4  # data parallel = 8 / tp 2
    assert t.predicted_peak_memory_bytes > 0
    assert t.context.predicted_step_time_s > 0 and t.context.predicted_comm_s >= 0
    with pytest.raises(InvalidArgument):
        Tracker.for_model(TINY, seq=512, batch=4, world_size=6, gpu="h100-sxm", layout={"tp": 4})
    with pytest.raises(InvalidArgument):
        Tracker.for_model(TINY, seq=512, batch=4, micro_batch=3, gpu="h100-sxm")


def test_sampler_window_and_lifecycle() -> None:
    clock = FakeClock()
    sampler = FakeSampler()
    with Tracker(clock=clock, sampler=sampler, nvml_per_step=True) as t:
        run(t, clock, [1.0] * 4)
        assert sampler.started and t.records[-1].gpu.samples == 1
        s = t.summary(skip_first=1)
    assert sampler.stopped
    assert sampler.since[-1] == 1  # the mark taken at the start of the second step
    assert (s.gpu_utilization_pct_mean, s.power_w_max, s.energy_j, s.nvml_samples) == (90.0, 650.0, 1234.0, 3)
    assert "utilization 90%" in s.render()
    d = s.to_dict()
    assert d["nvml"]["energy_j"] == 1234.0 and d["nvml"]["gpu_memory_used_bytes_max"] is None


def test_with_the_real_nvml_sampler_over_a_fake_nvml() -> None:
    from fake_nvml import FakeNvml

    from gpuwise.measure.sampler import NvmlSampler

    clock = FakeClock()
    sampler = NvmlSampler(cuda_index=0, interval_s=3600, nvml=FakeNvml(), env={}, clock=clock)
    with Tracker(clock=clock, sampler=sampler) as t:
        for _ in range(4):
            with t.step():
                clock.advance(1.0)
                sampler.sample()
        s = t.summary()
    assert s.nvml_samples >= 3 and s.gpu_utilization_pct_mean == 97 and s.power_w_max == 650.0
    assert "GPU (NVML) : utilization 97%" in s.render()


def test_nvml_auto_is_optional_and_says_why(monkeypatch) -> None:
    from gpuwise.measure._deps import MeasureUnavailable

    monkeypatch.setattr(_deps, "cuda_if_imported", lambda: FakeCuda("NVIDIA H100 80GB HBM3"))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    t = Tracker.for_model(TINY, seq=128, batch=4)
    assert t.sampler is None and any("NVML not sampled" in n and "nvidia-ml-py" in n for n in t.notes)
    with pytest.raises(MeasureUnavailable):
        Tracker.for_model(TINY, seq=128, batch=4, nvml=True)


def test_to_dict_is_json_with_units_and_nulls() -> None:
    clock = FakeClock()
    t = Tracker(flops_per_step=1e15, peak_flops=1e15, clock=clock, memory_probe=lambda: (1, 2),
                memory_capacity_bytes=100)
    run(t, clock, [2.0] * 4, tokens=10)
    d = json.loads(json.dumps(t.summary().to_dict()))
    assert d["schema_version"] == "1" and d["command"] == "track"
    assert d["mfu"] == pytest.approx(0.5) and d["hfu"] is None
    assert d["mfu_denominator"] == {"peak_flops_per_gpu": 1e15, "world_size": 1, "label": "peak as given",
                                    "text": "1 x 1000 TFLOP/s (peak as given)"}
    assert d["memory"] == {"allocated_peak_bytes": 1, "reserved_peak_bytes": 2, "predicted_peak_bytes": None,
                           "capacity_bytes": 100}
    assert d["nvml"] is None
    assert [f["id"] for f in d["findings"]] == ["memory-headroom"]


def test_memory_per_step_and_sync_on_cpu() -> None:
    clock = FakeClock()
    t = Tracker(clock=clock, memory_probe=lambda: (5, 6), memory_per_step=True, sync=True)  # sync: no-op on CPU
    run(t, clock, [1.0])
    assert (t.records[0].memory_allocated_peak_bytes, t.records[0].memory_reserved_peak_bytes) == (5, 6)
    assert t.summary(skip_first=0).synced


def test_measure_modules_import_without_torch() -> None:
    code = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers', 'lightning', 'pytorch_lightning', 'numpy'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
import gpuwise.measure.tracker, gpuwise.measure.rules, gpuwise.measure.callbacks
from gpuwise.measure.tracker import Tracker
t = Tracker.for_model('gpt2', seq=1024, batch=8, gpu='h100-sxm')
t.tick(); t.tick(tokens=1)
t.summary().to_dict()
assert not any(m.split('.')[0] in ('torch', 'transformers', 'lightning') for m in sys.modules)
print('OK')
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("OK")


def test_for_model_counts_the_jobs_flops_as_train_does():
    # LoRA's frozen base has no weight-gradient GEMMs: the MFU numerator is train's, not full training's.
    t = Tracker.for_model("llama-3-8b", seq=2048, batch=8, gpu="h100-sxm", layout={"finetune": "lora"}, nvml=False)
    r = gpuwise.train("llama-3-8b", gpu="h100-sxm", seq=2048, global_batch=8, finetune="lora")
    assert t.flops_per_step == r.flops.model
