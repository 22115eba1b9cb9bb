"""Your own GPU (issue 20): `--gpu-memory` for a GPU the catalog lacks or a card's free memory, and GPUs whose speed
figures are unknown answering "unknown" (never a free phase)."""

from __future__ import annotations

import json

import pytest

import gpuwise
from gpuwise.catalog.gpus import get_gpu, with_memory
from gpuwise.cli import main
from gpuwise.errors import InvalidArgument
from gpuwise.estimate.flops import forward_flops
from gpuwise.units import GiB


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_gpu_known_by_its_memory_alone_fits_like_a_catalog_card_of_that_size(capsys) -> None:
    size = f"{get_gpu('rtx-4090').memory_bytes // 2**20}MiB"  # what nvidia-smi shows for an RTX 4090: 24,564 MiB
    code, out, _ = _run(capsys, "fit", "llama-3.1-8b", "--gpu-memory", size, "--engine", "hf", "--json")
    own = json.loads(out)
    code4090, out, _ = _run(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "hf", "--json")
    card = json.loads(out)
    assert code == code4090 == 0
    assert own["gpu"]["memory_bytes"] == get_gpu("rtx-4090").memory_bytes
    assert own["memory"] == card["memory"] and own["fits"] == card["fits"] and own["max_context"] == card["max_context"]


def test_gpu_memory_with_gpu_is_that_card_with_less_free() -> None:
    free = with_memory(get_gpu("rtx-4090"), "10GiB")
    assert free.memory_bytes == 10 * GiB and free.peak_flops == get_gpu("rtx-4090").peak_flops
    r = gpuwise.fit("llama-3.1-8b", gpu=free, engine="hf")
    assert not r.fits  # 15 GiB of bf16 weights


@pytest.mark.parametrize("size", ["0GiB", "24", "-3GB", "1e9GiB", "twelve", "17TiB", "nanGB", "1KiB"])
def test_bad_memory_sizes_are_one_line(capsys, size: str) -> None:
    code, _, err = _run(capsys, "fit", "llama-3.1-8b", "--gpu-memory", size)
    assert code == 2 and "--gpu-memory" in err and len(err.strip().splitlines()) == 1


def test_more_free_memory_than_the_card_has_is_one_line(capsys) -> None:
    code, _, err = _run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpu-memory", "100GiB")
    assert code == 2 and "more than the 79.65 GiB" in err and len(err.strip().splitlines()) == 1


def test_neither_gpu_nor_gpu_memory_is_one_line(capsys) -> None:
    code, _, err = _run(capsys, "fit", "llama-3.1-8b")
    assert code == 2 and "--gpu is required" in err


@pytest.mark.parametrize("argv", [["infer", "llama-3.1-8b", "--gpu-memory", "24GiB"],
                                  ["train", "llama-3.2-1b", "--gpu-memory", "80GiB"],
                                  ["roofline", "llama-3.1-8b", "--gpu-memory", "24GiB"]])
def test_speed_without_the_figures_it_needs_is_refused(capsys, argv: list[str]) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("not known" in err and "gpuwise fit" in err) or "no memory bandwidth" in err  # roofline's own words


def test_pick_says_which_gpus_it_cannot_rank() -> None:
    r = gpuwise.pick("llama-3.1-8b", task="infer", engine="llamacpp", gpus=(with_memory(None, "24GiB"), "rtx-4090"))
    unknown = [c for c in r.rejected if c.rule == "unknown"]
    assert [c.gpu.id for c in unknown] == ["custom-24gib"] and "not in the catalog" in unknown[0].reason
    assert [c.gpu.id for c in r.ranked] == ["rtx-4090"]


def test_a_gpu_with_only_an_fp32_peak_does_not_prefill_for_free() -> None:
    """Apple M2 Ultra: the catalog's one compute figure is fp32; the prompt's matrix products take at least their
    FLOPs at that peak."""
    gpu = get_gpu("m2-ultra")
    r = gpuwise.infer("llama-3.1-8b", gpu=gpu, engine="llamacpp", weights="Q4_K_M", prompt_tokens=512,
                      output_tokens=16)
    fb = forward_flops(gpuwise.load_model("llama-3.1-8b").spec, 512, lm_head_tokens=1)
    assert r.ttft_s >= (fb.qkv + fb.attention_output + fb.mlp) / gpu.peak("fp32")


def test_with_memory_rejects_sizes_past_any_gpu() -> None:
    with pytest.raises(InvalidArgument):
        with_memory(None, "20TiB")
