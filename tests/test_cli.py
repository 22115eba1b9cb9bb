"""The CLI contract: answers on stdout, and any bad input gives one line on stderr and exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpuwise.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_fit_json_has_the_documented_keys(capsys) -> None:
    code, out, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    for key in ("schema_version", "params", "active_params", "kv_cache_bytes_per_token", "memory", "gpu_memory",
                "fits", "max_context", "max_batch", "min_gpus"):
        assert key in doc
    assert set(doc["memory"]) == {"weights", "kv_cache", "activations", "overhead", "total"}
    assert doc["params"] == 8030261248
    assert doc["kv_cache_bytes_per_token"] == 131072
    m = doc["memory"]
    assert m["total"] == pytest.approx(m["weights"] + m["kv_cache"] + m["activations"] + m["overhead"], abs=4)
    assert all(isinstance(v, int) for v in m.values())


def test_fit_text_states_units_and_verdict(capsys) -> None:
    code, out, _ = run(capsys, "fit", "qwen3-30b-a3b", "--gpu", "NVIDIA GeForce RTX 4090", "--engine", "llamacpp",
                       "--weights", "q4_k_m", "--context", "8192")
    assert code == 0
    assert "GiB" in out and ("FITS" in out or "DOES NOT FIT" in out)
    assert "active" in out  # MoE shows active parameters


def test_fit_from_local_config_file_and_folder(capsys, tmp_path) -> None:
    code, out, _ = run(capsys, "fit", str(FIXTURES / "tiny-llama.json"), "--gpu", "t4", "--json")
    assert code == 0 and json.loads(out)["model"]["source"] == "file"
    (tmp_path / "config.json").write_text((FIXTURES / "tiny-llama.json").read_text())
    code, out, _ = run(capsys, "fit", str(tmp_path), "--gpu", "t4", "--json")
    assert code == 0 and json.loads(out)["params"] > 0


def test_models_and_gpus_lists(capsys) -> None:
    code, out, _ = run(capsys, "models", "qwen3")
    assert code == 0 and "qwen3-8b" in out
    code, out, _ = run(capsys, "gpus", "h100", "--json")
    assert code == 0
    ids = [g["id"] for g in json.loads(out)["gpus"]]
    assert "h100-sxm" in ids and "h100-pcie" in ids


BAD_INPUTS = [
    (["fit", "llama-9-8b", "--gpu", "h100"], "unknown model"),
    (["fit", "llama-3.1-8b", "--gpu", "h1000"], "unknown GPU"),
    (["fit", str(FIXTURES / "malformed.json"), "--gpu", "h100"], "not valid JSON"),
    (["fit", str(FIXTURES / "unsupported.json"), "--gpu", "h100"], "unsupported model_type 'mamba'"),
    (["fit", str(FIXTURES / "impossible.json"), "--gpu", "h100"], "hidden_size"),
    (["fit", str(FIXTURES / "bad_heads.json"), "--gpu", "h100"], "num_key_value_heads"),
    (["fit", "missing/dir/config.json", "--gpu", "h100"], "no such file"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--context", "0"], "at least 1"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--batch", "-3"], "at least 1"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--context", "4k"], "not a whole number"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--batch", "2.5"], "not a whole number"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--context", "999999999999"], "absurdly large"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "100000"], "absurdly large"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--weights", "q4_k_x"], "unknown weight format"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-dtype", "int3"], "unknown dtype"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "--weights", "nf4"], "GGUF"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "hf", "--weights", "Q4_K_M"], "GGUF"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-dtype", "q8_0"], "llama.cpp"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "--kv-dtype", "fp8"], "fp8"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "3"], "tensor parallelism"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "tgi"], "invalid choice"),
    (["fit", "llama-3.1-8b"], "--gpu"),
    (["nosuchcommand"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD_INPUTS, ids=[" ".join(a[:1] + a[2:])[:60] for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_on_stderr_and_exit_2(capsys, argv: list[str], needle: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpuwise: error:")
    assert needle.lower() in lines[0].lower()
    assert "Traceback" not in err


def test_unknown_names_suggest_close_ones(capsys) -> None:
    _, _, err = run(capsys, "fit", "llama-3.1-8", "--gpu", "h100")
    assert "llama-3.1-8b" in err
    _, _, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4909")
    assert "rtx-4090" in err


def test_hub_id_offline_explains_how_to_pass_a_local_config() -> None:
    # A subprocess: huggingface_hub reads HF_HUB_OFFLINE when first imported.
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "some-org/some-model-not-in-catalog", "--gpu",
                           "h100"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "config.json" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_python_dash_m_runs_the_cli() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "gpt2", "--gpu", "t4", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["params"] == 124439808
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "gpt2", "--gpu", "nope"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_unreachable_hub_fails_at_once_in_one_line() -> None:
    """No network (here: nothing listens on the endpoint's port): one line, in well under 2 s of waiting, not
    huggingface_hub's five retries."""
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0",
           "HF_HUB_CACHE": tempfile.mkdtemp()}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "some-org/some-model-not-in-catalog", "--gpu",
                           "h100"], capture_output=True, text=True, env=env, timeout=60)
    assert time.perf_counter() - start < 10  # the interpreter's start included; the Hub part is one refused connect
    assert proc.returncode == 2 and "unreachable" in proc.stderr and "not in the local Hub cache" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_unreachable_hub_answers_from_the_local_cache(monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    import huggingface_hub

    from gpuwise.catalog import models

    calls = []

    def cached(repo_id, filename, local_files_only=False, **kw):
        calls.append(local_files_only)
        return "tests/fixtures/configs/tiny-llama.json"

    monkeypatch.setattr(models, "_hub_reachable", lambda endpoint: "huggingface.co unreachable: test")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached)
    loaded = models.load_model("some-org/cached-model")
    assert calls == [True] and loaded.source == "hub" and loaded.spec.num_layers > 0


def test_every_command_names_its_gpu_with_the_same_object(capsys) -> None:
    """Issue 21, item 15: `gpu` was an object in fit's JSON and a string in plan's."""
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.report.json_out import gpu_ref

    want = gpu_ref(get_gpu("h100-sxm"))
    common = ["llama-3.2-1b", "--gpu", "h100-sxm", "--json"]
    for argv in (["fit"], ["infer"], ["roofline"], ["train", "--seq", "1024"],
                 ["plan", "--num-gpus", "8", "--seq", "1024", "--global-batch", "8", "--top", "1"],
                 ["doctor", "--task", "infer"]):
        assert main([argv[0], *common, *argv[1:]]) == 0, argv
        doc = json.loads(capsys.readouterr().out)
        assert doc["gpu"] == want, argv


def test_engine_fractions_are_not_rounded_to_integers(capsys) -> None:
    """fit --json said gpu_memory_utilization 1 where the text said 0.9 (issue 21, item 15)."""
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--json"]) == 0
    details = json.loads(capsys.readouterr().out)["engine_details"]
    assert details["gpu_memory_utilization"] == 0.9 and isinstance(details["kv_pool_bytes"], int)
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm:3g.40gb", "--json"]) == 0  # MIG slices, as pick takes
    assert json.loads(capsys.readouterr().out)["gpu"]["name"].endswith("MIG 3g.40gb")


def test_fit_that_does_not_fit_names_the_cheapest_change_that_does(capsys) -> None:
    """Issue 21, item 13: 70B in bf16 on one RTX 4090 names a change that fits, and `fit` with it says FITS."""
    assert main(["fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fix = doc["cheapest_fix"]
    assert doc["fits"] is False and fix is not None and fix["fits"] is True
    argv = ["fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--json"]
    for k, v in fix["options"].items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    assert main(["fit", "llama-3.1-70b", "--gpu", "rtx-4090"]) == 0
    assert f"cheapest change that fits: {fix['change']}" in capsys.readouterr().out


def test_fit_takes_every_engine_infer_takes_and_the_defaults_say_they_differ(capsys) -> None:
    """Issue 21, item 15: `fit --engine trtllm` was refused while `infer` took it; infer's and roofline's default
    lengths differ from fit's 4,096-token context, and each says so."""
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "trtllm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "trtllm" and any("TensorRT-LLM" in a for a in doc["assumptions"])
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"] == doc["memory"]  # the paged pool modelled as vLLM's
    assert main(["infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "trtllm", "--json"]) == 0
    inferred = json.loads(capsys.readouterr().out)
    assert any("infer's default request" in a for a in inferred["assumptions"])
    assert main(["roofline", "llama-3.1-8b", "--gpu", "h100-sxm"]) == 0
    assert "roofline's default" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "trtllm", "--weights",
                               "q4_k_m"]))
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def _hub_cache(root: Path, repo: str, revisions: dict[str, dict]) -> None:
    """A huggingface_hub cache holding `repo`'s config.json at each revision (refs/NAME -> snapshots/COMMIT)."""
    base = root / f"models--{repo.replace('/', '--')}"
    for i, (ref, config) in enumerate(revisions.items()):
        commit = f"{i + 1:040x}"
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / ref).write_text(commit)
        snap = base / "snapshots" / commit
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(json.dumps(config))


def test_revision_reads_that_revisions_config_from_the_hub_cache(tmp_path) -> None:
    """Issue 20, item 5: --revision (or MODEL@REV) reads the config.json of that branch, tag or commit."""
    pytest.importorskip("huggingface_hub")
    tiny = json.loads(Path("tests/fixtures/configs/tiny-llama.json").read_text())
    _hub_cache(tmp_path, "some-org/some-model", {"main": {**tiny, "num_hidden_layers": 3},
                                                 "v2": {**tiny, "num_hidden_layers": 5}})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}

    def layers(*argv: str) -> int:
        proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", *argv, "--gpu", "h100", "--json"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["model"]["layers"]

    assert layers("some-org/some-model") == 3
    assert layers("some-org/some-model", "--revision", "v2") == layers("some-org/some-model@v2") == 5
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "some-org/some-model", "--revision", "v9", "--gpu",
                           "h100"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "some-org/some-model@v9" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "fit", "./config.json", "--revision", "v2", "--gpu",
                           "h100"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "Hugging Face Hub id" in proc.stderr


def test_a_gated_repository_says_what_to_do(monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    import huggingface_hub

    from gpuwise.catalog import models
    from gpuwise.errors import UnknownModelError

    class GatedRepoError(Exception):
        pass

    def gated(*_, **__):
        raise GatedRepoError("401")

    # validation's scoring sets HF_HUB_OFFLINE for the process, which huggingface_hub reads once, at import
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(models, "_hub_reachable", lambda endpoint: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    with pytest.raises(UnknownModelError, match="accept its license on huggingface.co and set HF_TOKEN"):
        models.load_model("some-org/gated-model")
