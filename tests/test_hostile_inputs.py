"""Hostile files and closed outputs (issue 21, items 2, 3 and 6): one line on stderr and exit status 2 (or 1 for an
output that cannot be written), never a traceback or a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuwise.cli import main
from gpuwise.errors import ConfigError, InvalidArgument
from gpuwise.jsonfile import loads_bounded, read_text_bounded


def _one_line(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuwise: error: ") and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("content", "words"), [
    ("[" * 100_000, "nested too deeply"),
    ('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", "number too long"),
    ("{not json", "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
])
def test_a_hostile_config_file_is_one_line(tmp_path, capsys, content, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert words in _one_line(capsys, "fit", str(path), "--gpu", "h100")
    profile = tmp_path / "profile.json"
    profile.write_bytes(path.read_bytes())
    assert words in _one_line(capsys, "infer", "gpt2", "--gpu", "h100", "--profile", str(profile))


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/kmsg", "/dev/zero", "/dev/stdin", "/sys/kernel/mm"])
def test_kernel_interfaces_are_never_read(capsys, path: str) -> None:
    """/proc/kmsg blocks forever when read and /dev/zero never ends: refused before any read, whatever they look
    like to stat()."""
    err = _one_line(capsys, "fit", path, "--gpu", "h100")
    assert "kernel interface" in err or "not a regular file" in err or "no such file" in err or "no config.json" in err


def test_a_fifo_is_never_read(tmp_path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_text_bounded(fifo, 1 << 20, error=ConfigError)  # opened non-blocking: no writer, no hang


def test_a_file_over_its_limit_is_refused_without_reading_it(tmp_path) -> None:
    big = tmp_path / "big.json"
    big.write_text(" " * 2048)
    with pytest.raises(InvalidArgument, match="over the 1,024"):
        read_text_bounded(big, 1024)


def test_loads_bounded_maps_every_crash_of_json_loads() -> None:
    for text in ("[" * 50_000, "1" * 5000, "{"):
        with pytest.raises(InvalidArgument):
            loads_bounded(text, "x")
    assert loads_bounded('{"a": 1}', "x") == {"a": 1}


@pytest.mark.parametrize(("redirect", "words"), [(">/dev/full", "cannot write the answer"),
                                                 (">&-", "standard output is closed")])
def test_an_output_that_cannot_be_written_is_one_line(redirect: str, words: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = f"{sys.executable} -m gpuwise fit gpt2 --gpu t4 {redirect}"
    proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1 and words in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_broken_torch_install_is_one_line(monkeypatch) -> None:
    """A torch wheel that raises OSError on import (a missing CUDA library) is MeasureUnavailable, not a traceback."""
    import importlib

    from gpuwise.measure._deps import MeasureUnavailable, require_torch

    real = importlib.import_module

    def broken(name, *a, **k):
        if name == "torch":
            raise OSError("libcudart.so.12: cannot open shared object file")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(MeasureUnavailable, match="fails to import here .OSError: libcudart"):
        require_torch("gpuwise calibrate")


def test_a_hostile_posted_config_is_a_400_line() -> None:
    from gpuwise.serve import api

    for body in (b'{"config": ' + b"[" * 100_000 + b"}", b'{"config": {"hidden_size": ' + b"9" * 5000 + b"}}",
                 b"\xff\xff"):
        with pytest.raises(InvalidArgument):
            api._config_file(body, "/tmp")
    json.dumps({})  # the module under test imports json; keep the import used


@pytest.mark.parametrize(("key", "value"), [("num_hidden_layers", 10**6), ("hidden_size", 10**7),
                                            ("vocab_size", 10**9), ("num_attention_heads", 10**5)])
def test_dimensions_beyond_any_real_model_are_refused_at_once(tmp_path, capsys, key: str, value: int) -> None:
    """A config with 10^6 layers took 30 s and 2 GB (issue 21, item 1): bounded per key, far above real models."""
    import time

    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 64,
              "num_attention_heads": 4, "vocab_size": 100, key: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    start = time.perf_counter()
    assert "beyond any real model" in _one_line(capsys, "fit", str(path), "--gpu", "h100")
    assert time.perf_counter() - start < 2


def test_the_largest_accepted_model_still_answers_fast(tmp_path) -> None:
    import time

    import gpuwise

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1024, "hidden_size": 1 << 17,
                                "intermediate_size": 1 << 19, "num_attention_heads": 4096, "vocab_size": 1 << 24}))
    start = time.perf_counter()
    assert not gpuwise.fit(str(path), gpu="h100").fits
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(("profile", "words"), [
    ({"matmul_efficiency": [1, 2]}, "must be an object"),
    ({"matmul_tflops": {"bf16": "fast"}}, "must be a number"),
    ({"memory_bandwidth_gb_s": None}, "must be a number"),
    ({"matmul_efficiency": {"bf16": 5e-324}}, "fraction in [1e-06, 1]"),
    ({"memory_efficiency": 1e-300}, "fraction in [1e-06, 1]"),
    ({"kernel_overhead_us": "x"}, "kernel_overhead_us"),
    ({"network": {"intra_node_busbw_gb_s": 1e-300}}, "no GPU interconnect"),
    ({"network": [1]}, "must be an object"),
])
@pytest.mark.parametrize("command", ["train", "infer", "roofline"])
def test_a_profile_with_wrong_types_or_impossible_numbers_is_one_line(tmp_path, capsys, profile, words, command):
    """Issue 21, item 4: wrong types gave tracebacks; an efficiency of 5e-324 gave NaN and Infinity in --json."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"kind": "gpuwise-device-profile", "gpu": "h100-sxm", **profile}))
    err = _one_line(capsys, command, "llama-3.2-1b", "--gpu", "h100-sxm", "--profile", str(path), "--json")
    assert words in err


def test_json_output_never_holds_nan_or_infinity() -> None:
    from gpuwise.schema import dumps

    text = dumps({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    assert "NaN" not in text and "Infinity" not in text


@pytest.mark.parametrize("argv, words", [
    (["doctor", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer", "--engine", "sglang"], None),
    (["pick", "llama-3.1-8b", "--task", "finetune", "--global-batch", "9" * 40, "--gpus", "h100-sxm"],
     "absurdly large"),
    (["roofline", "llama-3.1-8b", "--gpu", "h100-sxm", "--plot", "/proc/self/x.png"], "--plot: cannot write"),
    (["gpus"], "not a readable path"),
    (["train", "llama-3.1-8b", "--gpu", "h100-sxm", "--train-tokens", "1e-300"], "at least one token"),
    (["doctor", "llama-3.1-8b", "--gpu", "h100-sxm", "--oom-at-gib", "1e-300"], "at least a CUDA context"),
    (["infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "5", "--dataset-path", ""], "is empty"),
])
def test_inputs_a_fuzz_run_crashed_on_are_answered_or_one_line(capsys, monkeypatch, argv, words) -> None:
    """Found by a fuzz run of the CLI (2026-11-27): SGLang's inference doctor (no weight list of its own), a global
    batch of 40 digits (its layout search never ended), an unwritable --plot path, a GPUWISE_GPUS longer than a
    file name may be. Each is an answer or one line with exit 2, never a traceback or a hang."""
    from gpuwise.catalog import gpus

    if argv == ["gpus"]:
        monkeypatch.setenv("GPUWISE_GPUS", "x" * 300)
        gpus._catalog.cache_clear()
    try:
        code = main(argv)
    finally:
        gpus._catalog.cache_clear()
    out, err = capsys.readouterr()
    if words is None:
        assert code == 0 and out and not err
    else:
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1
