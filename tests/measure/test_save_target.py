"""Issue 21, item 5: `calibrate --save` and `bench comm --save` check their target before measuring (a device, a
FIFO or a folder is refused in one line, without reading it or blocking), and write atomically (temporary file +
rename: a failed write leaves the old file whole and no temporary behind)."""

from __future__ import annotations

import json
import os

import pytest

from gpuwise.cli import main
from gpuwise.errors import GpuwiseError
from gpuwise.jsonfile import check_save_target, write_atomic
from gpuwise.measure import comm_profile


@pytest.fixture
def no_measuring(monkeypatch):
    """The measurement must not start: the target is refused first."""
    import gpuwise.measure.calibrate_run as run

    def refuse(**_):
        raise AssertionError("measured before checking --save")

    monkeypatch.setattr(run, "calibrate", refuse)


def _targets(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    return {"/dev/full": "kernel interface or device", str(fifo): "not a regular file",
            str(tmp_path): "is a folder", str(tmp_path / "no-such-dir" / "p.json"): "does not exist"}


def test_calibrate_refuses_a_bad_target_before_measuring(tmp_path, no_measuring, capsys):
    for target, said in _targets(tmp_path).items():
        with pytest.raises(SystemExit) as e:
            raise SystemExit(main(["calibrate", "--device", "cpu", "--quick", "--dtypes", "fp32", "--save", target]))
        assert e.value.code == 2, target
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, (target, err)


def test_bench_comm_target_check_refuses_the_same_without_blocking(tmp_path):
    for target, said in _targets(tmp_path).items():
        with pytest.raises(GpuwiseError, match=said):
            comm_profile.check_save_target(target)


def test_an_existing_profile_is_merged_not_refused(tmp_path):
    p = tmp_path / "prof.json"
    p.write_text(json.dumps({"kind": "gpuwise-device-profile", "gpu": "h100-sxm"}))
    assert check_save_target(p) == {"kind": "gpuwise-device-profile", "gpu": "h100-sxm"}


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "prof.json"
    p.write_text('{"old": true}\n')

    def full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(GpuwiseError, match="No space left on device"):
        write_atomic(p, '{"new": true}\n')
    assert p.read_text() == '{"old": true}\n'
    assert [f.name for f in tmp_path.iterdir()] == ["prof.json"]
    monkeypatch.undo()
    write_atomic(p, '{"new": true}\n')
    assert json.loads(p.read_text()) == {"new": True}
    assert [f.name for f in tmp_path.iterdir()] == ["prof.json"]
