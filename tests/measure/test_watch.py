"""`gpuwise watch` against a fake NVML: the table, the JSON lines, the refresh loop, and no NVML at all."""

from __future__ import annotations

import io
import json
import sys
from datetime import datetime
from types import SimpleNamespace

import pytest
from fake_nvml import GIB, FakeGpu, FakeNvml, proc

from gpuwise.cli import main
from gpuwise.measure._deps import MeasureUnavailable
from gpuwise.measure.commands import watch
from gpuwise.measure.nvml import snapshot
from gpuwise.measure.watch_view import CLEAR, NOTE, render, to_dict

NOW = datetime(2025, 1, 2, 3, 4, 5)
NO_ENV: dict[str, str] = {}


def args(**kw):
    return SimpleNamespace(**{"interval": 1.0, "count": None, "once": False, "json": False, **kw})


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def two_gpus() -> FakeNvml:
    busy = FakeGpu(compute=[proc(4242, 12 * GIB)])
    bare = FakeGpu(name="Old GPU", uuid="GPU-1111", unsupported={
        "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetTemperature", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMaxClockInfo"})
    return FakeNvml([busy, bare])


def test_render_table_processes_and_note():
    text = render(snapshot(two_gpus(), NO_ENV), now=NOW)
    assert "2025-01-02 03:04:05" in text
    lines = text.splitlines()
    row0 = next(line for line in lines if line.startswith("0/0"))
    for part in ("NVIDIA H100 80GB HBM3", "97%", "70.0 / 80.0 GiB (88%)", "650 / 700 W", "67 °C",
                 "1980 / 1980 MHz", "2619 MHz"):
        assert part in row0
    row1 = next(line for line in lines if line.startswith("1/1"))
    assert "Old GPU" in row1 and row1.count("n/a") == 4  # util, power, temp, max SM clock
    assert "1980 / n/a MHz" in row1
    assert " 0%" not in row1 and " 0 W" not in row1
    assert any("4242" in line and "12.00 GiB" in line for line in lines)
    assert text.endswith(NOTE)
    assert "not how busy the SMs are" in NOTE and "gpuwise explain mfu" in NOTE


def test_render_without_processes():
    text = render(snapshot(FakeNvml(), NO_ENV), now=NOW)
    assert "Processes: none reported" in text


def test_to_dict_keys_units_and_nulls():
    d = to_dict(snapshot(two_gpus(), NO_ENV), now=NOW)
    from gpuwise.report.json_out import SCHEMA_VERSION

    assert d["schema_version"] == SCHEMA_VERSION and d["command"] == "watch"
    g0, g1 = d["gpus"]
    assert g0["memory_used_bytes"] == 70 * GIB and g0["power_w"] == pytest.approx(650.0)
    assert g0["energy_j"] == pytest.approx(123_456.789)
    (p,) = g0["processes"]
    assert (p["pid"], p["used_memory_bytes"]) == (4242, 12 * GIB) and "name" in p
    for key in ("index", "cuda_index", "name", "uuid", "utilization_gpu_pct", "utilization_memory_pct",
                "memory_used_bytes", "memory_total_bytes", "power_w", "power_limit_w", "temperature_c",
                "sm_clock_mhz", "sm_clock_max_mhz", "memory_clock_mhz", "energy_j", "processes"):
        assert key in g1
    assert g1["power_w"] is None and g1["utilization_gpu_pct"] is None and g1["temperature_c"] is None
    json.dumps(d)


def test_once_prints_one_frame():
    out = io.StringIO()
    assert watch(args(once=True), nvml=FakeNvml(), out=out, env=NO_ENV) is None
    text = out.getvalue()
    assert text.count(NOTE) == 1 and CLEAR not in text


def test_count_frames_blank_line_apart_when_not_a_tty():
    out, slept = io.StringIO(), []
    watch(args(count=3, interval=0.5), nvml=FakeNvml(), out=out, sleep=slept.append, env=NO_ENV)
    text = out.getvalue()
    assert text.count(NOTE) == 3 and CLEAR not in text
    assert text.count(NOTE + "\n\ngpuwise watch") == 2
    assert slept == [0.5, 0.5]


def test_tty_redraws_in_place():
    out = Tty()
    watch(args(count=2), nvml=FakeNvml(), out=out, sleep=lambda s: None, env=NO_ENV)
    assert out.getvalue().count(CLEAR) == 2


def test_json_lines():
    out = io.StringIO()
    watch(args(count=2, json=True), nvml=two_gpus(), out=out, sleep=lambda s: None, env=NO_ENV)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    docs = [json.loads(line) for line in lines]
    assert all(d["command"] == "watch" and len(d["gpus"]) == 2 for d in docs)


def test_ctrl_c_ends_cleanly():
    def interrupt(_):
        raise KeyboardInterrupt

    out = io.StringIO()
    assert watch(args(), nvml=FakeNvml(), out=out, sleep=interrupt, env=NO_ENV) is None
    assert out.getvalue().count(NOTE) == 1


def test_no_gpu_visible():
    with pytest.raises(MeasureUnavailable, match="CUDA_VISIBLE_DEVICES='' hides all"):
        watch(args(once=True), nvml=FakeNvml(), out=io.StringIO(), env={"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(MeasureUnavailable, match="MIG instances"):
        watch(args(once=True), nvml=FakeNvml(), out=io.StringIO(), env={"CUDA_VISIBLE_DEVICES": "MIG-abc"})
    with pytest.raises(MeasureUnavailable, match="sees no NVIDIA GPU"):
        watch(args(once=True), nvml=FakeNvml([]), out=io.StringIO(), env=NO_ENV)


# --- through the CLI ----------------------------------------------------------------------------------------------

def run_cli(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_without_bindings_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code, out, err = run_cli(capsys, ["watch", "--once"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "nvidia-ml-py" in err and "watch" in err


def test_cli_with_real_pynvml_and_no_driver_exits_2(capsys):
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pytest.skip("NVML works on this machine")
    code, out, err = run_cli(capsys, ["watch", "--once"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no NVIDIA driver / NVML on this machine" in err


def test_cli_with_fake_bindings(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # `import pynvml` returns the fake
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    code, out, err = run_cli(capsys, ["watch", "--once", "--json"])
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["gpus"][0]["power_w"] == pytest.approx(650.0)
