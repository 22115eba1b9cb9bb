"""Every command the README and docs/ show runs, as written (issue 21, item 11: the README's `bench train gpt2` example
failed on a default that did not fit the model).

The commands are read from the files themselves, not copied here: each fenced code block's lines that start with
`gpuwise`, `python -m gpuwise` or `torchrun` (line continuations joined, `$ ` prompts and `# comments` dropped), and
each inline `gpuwise COMMAND arg...` whose first argument is concrete (no MODEL-style placeholder, `...` or `[`).
They run in a temporary folder (files they write land there), offline. Those that need an NVIDIA GPU (calibrate
and bench on CUDA, watch, and a train reading the profile calibrate writes) are marked `gpu` and skipped without
one; `gpuwise serve` is started on a free port, asked for its page, and stopped.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gpuwise.cli import main

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SUBCOMMANDS = {"fit", "train", "infer", "roofline", "plan", "pick", "doctor", "explain", "models", "gpus", "calibrate",
               "bench", "watch", "serve", "track"}
HAS_GPU = shutil.which("nvidia-smi") is not None


def _argv(line: str) -> list[str] | None:
    """The command on one logical line, as argv starting at 'gpuwise' or 'torchrun'; None if the line is output."""
    line = line.strip().removeprefix("$ ")
    for part in line.split("&&"):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            return None
        if words[:3] in (["python", "-m", "gpuwise"], ["python3", "-m", "gpuwise"]):
            words = ["gpuwise", *words[3:]]
        if words[:1] == ["torchrun"] or (words[:1] == ["gpuwise"] and len(words) > 1 and words[1] in SUBCOMMANDS):
            return words
    return None


def _synopsis(cmd: str) -> bool:
    """A usage line (`gpuwise pick MODEL [--task infer|train]`), not a command."""
    return bool(re.search(r"\.\.\.|\[|<|\||\b(MODEL|GPUS?|DIR|FILE|TERM)\b", cmd))


def _commands() -> dict[str, tuple[str, list[str]]]:
    """{command as written: (where, argv)}, each command once."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in FILES:
        text = path.read_text()
        for m in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S):
            first = text[: m.start()].count("\n") + 2
            logical, start = "", None
            for k, raw in enumerate(m.group(1).split("\n")):
                start = first + k if start is None else start
                if raw.rstrip().endswith("\\"):
                    logical += raw.rstrip()[:-1] + " "
                    continue
                logical += raw
                argv = _argv(logical)
                if argv is not None and not _synopsis(" ".join(argv)):
                    found.setdefault(" ".join(argv), (f"{path.name}:{start}", argv))
                logical, start = "", None
        prose = re.sub(r"```.*?```", lambda b: "\n" * b.group(0).count("\n"), text, flags=re.S)
        for m in re.finditer(r"`(gpuwise [a-z]+ [^`]+)`", prose):
            cmd = m.group(1)
            if _synopsis(cmd) or not re.match(r'[a-z0-9."]', cmd.split()[2]):
                continue  # a synopsis or a fragment, not a command to run
            argv = _argv(cmd)
            if argv is not None:
                found.setdefault(" ".join(argv), (f"{path.name}:{text[: m.start()].count(chr(10)) + 1}", argv))
    return found


COMMANDS = _commands()


def _needs_gpu(argv: list[str]) -> str | None:
    if argv[0] == "torchrun":
        return None if "--device" in argv and argv[argv.index("--device") + 1] == "cpu" else "runs on CUDA GPUs"
    sub = argv[1]
    if sub == "watch":
        return "reads NVIDIA GPUs through NVML"
    if sub in ("calibrate", "bench") and not ("--device" in argv and argv[argv.index("--device") + 1] == "cpu"):
        return "measures a CUDA GPU"
    if "--profile" in argv:
        return "reads the profile `gpuwise calibrate --save` writes on a GPU"
    return None


def _params():
    for cmd, (where, argv) in COMMANDS.items():
        marks = []
        why = _needs_gpu(argv)
        if why is not None:
            marks = [pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason=f"needs a GPU: {why}")]
        yield pytest.param(argv, id=f"{where} {cmd}"[:120], marks=marks)


def test_the_docs_show_commands_to_run():
    """The collector finds the examples (a regression here would empty the test below)."""
    assert len(COMMANDS) >= 40
    assert any(argv[0] == "torchrun" for _, argv in COMMANDS.values())
    assert "gpuwise gpus nvidia" in COMMANDS


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the README's own-config example: a folder with a config.json
    (tmp_path / "my-model").mkdir()
    shutil.copy(ROOT / "tests" / "fixtures" / "configs" / "tiny-llama.json", tmp_path / "my-model" / "config.json")
    return tmp_path


@pytest.mark.parametrize("argv", list(_params()))
def test_command_runs(argv, workdir, capsys):
    if argv[0] == "torchrun":
        pytest.importorskip("torch")
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", *argv[1:]], cwd=workdir,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return
    if argv[1] == "serve":
        _serve(argv, workdir)
        return
    redirect = None
    if ">" in argv:
        redirect = workdir / argv[argv.index(">") + 1]
        argv = argv[: argv.index(">")]
    code = main(argv[1:])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "gpuwise: error" not in captured.err
    assert captured.out.strip()
    if redirect is not None:
        redirect.write_text(captured.out)


def _serve(argv: list[str], workdir: Path) -> None:
    """Start it (on a free port where the docs show the default 8000), load the page, stop it."""
    args = argv[2:]
    if "--port" in args:
        args[args.index("--port") + 1] = "0"
    else:
        args += ["--port", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "gpuwise", "serve", *args], cwd=workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url, deadline = None, time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline() or proc.stdout.readline()
            m = re.search(r"http://[^\s]+/", line or "")
            url = m.group(0) if m else None
            if proc.poll() is not None and url is None:
                break
        assert url is not None, "gpuwise serve did not say where it listens"
        page = urllib.request.urlopen(url, timeout=30).read()
        assert b"<html" in page.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
