""""What can I run?" (`gpuwise models --fits`, issue 20): every row is what `gpuwise fit` says fits, in the most
faithful format that does, ranked as documented; more memory never removes a model."""

from __future__ import annotations

import json

import pytest

import gpuwise
from gpuwise.cli import main
from gpuwise.errors import GpuwiseError
from gpuwise.plan.runnable import FORMATS, LOW_BITS, parse_gpus, runnable


@pytest.fixture(scope="module")
def two_3090():
    return runnable("2x rtx-3090", engine="llamacpp", top=5)


def test_every_row_fits_in_its_format_and_the_next_better_format_does_not(two_3090) -> None:
    ladder = [f"gguf:{n}" for n in FORMATS["llamacpp"]]
    for row in two_3090.runnable[:12]:
        kw = dict(gpu="rtx-3090", num_gpus=row.num_gpus, engine="llamacpp",
                  context=min(8192, row.model.spec.max_position_embeddings or 8192))
        assert gpuwise.fit(row.model, weights=row.weights.name, **kw).fits
        i = ladder.index(row.weights.name)
        if i > 0:
            assert not gpuwise.fit(row.model, weights=ladder[i - 1], **kw).fits


def test_the_largest_models_come_first_then_the_low_bit_fits(two_3090) -> None:
    rows = two_3090.runnable
    low = [r.bits_per_weight < LOW_BITS for r in rows]
    assert low == sorted(low)  # all 4+ bit rows before the low-bit ones
    for part in (False, True):
        params = [r.params for r, lo in zip(rows, low) if lo is part]
        assert params == sorted(params, reverse=True)
    assert all((r.decode_tokens_per_s or "speed not modelled" in r.note) and r.max_context >= r.context
               for r in rows[:5])
    assert all(r.decode_tokens_per_s is None and r.max_context is None for r in rows[5:])


def test_models_that_fit_nowhere_do_not_fit_in_the_smallest_format(two_3090) -> None:
    assert two_3090.not_fitting
    for model_id in two_3090.not_fitting[:3]:
        assert not gpuwise.fit(model_id, gpu="rtx-3090", num_gpus=2, engine="llamacpp", weights="IQ2_M",
                               context=8192).fits


@pytest.mark.parametrize(("small", "big"), [("rtx-3090", "2x rtx-3090"), ("16GiB", "24GiB"), ("l4", "h100")])
def test_more_memory_never_removes_a_model(small: str, big: str) -> None:
    a = {r.model.id for r in runnable(small, top=1).runnable}
    b = {r.model.id for r in runnable(big, top=1).runnable}
    assert a <= b and len(b) > len(a)


def test_a_gpu_known_by_its_memory_has_unknown_speed() -> None:
    r = runnable("24GiB", top=3)
    assert r.speed_unknown and all(x.decode_tokens_per_s is None for x in r.runnable)


def test_checkpoint_formats_come_first_for_vllm() -> None:
    r = runnable("h100", engine="vllm", query="gpt-oss")
    assert {x.model.id: x.weights.name for x in r.runnable} == {"gpt-oss-20b": "mxfp4-experts",
                                                                 "gpt-oss-120b": "mxfp4-experts"}


@pytest.mark.parametrize(("text", "gid", "n"), [("2x rtx-3090", "rtx-3090", 2), ("2 x RTX 3090", "rtx-3090", 2),
                                                 ("4*h100", "h100-sxm", 4), ("rtx-4090", "rtx-4090", 1)])
def test_gpu_sets(text: str, gid: str, n: int) -> None:
    gpu, count = parse_gpus(text)
    assert (gpu.id, count) == (gid, n)


@pytest.mark.parametrize("text", ["", "0x h100", "2x nope", "2x 0GiB", "3x"])
def test_bad_gpu_sets_are_errors(text: str) -> None:
    with pytest.raises(GpuwiseError):
        parse_gpus(text)


def test_cli_text_json_and_refusals(capsys) -> None:
    assert main(["models", "--fits", "rtx-4090", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "What runs on NVIDIA GeForce RTX 4090" in out and "decode tok/s" in out
    assert main(["models", "--fits", "rtx-4090", "--engine", "vllm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "models" and doc["engine"] == "vllm" and doc["runnable"] and doc["detailed_rows"] == 20
    assert main(["models", "--fits", "m3-max", "--engine", "vllm"]) == 2  # vLLM does not run on Apple GPUs
    assert main(["models", "--engine", "vllm"]) == 2  # --engine without --fits
    err = capsys.readouterr().err
    assert err.count("gpuwise: error:") == 2


def test_a_model_tensor_parallelism_cannot_split_four_ways_runs_on_fewer_gpus() -> None:
    """vLLM needs the TP degree to divide the attention heads: Phi-4 (40 heads, 10 KV heads) runs on 2 of 4 GPUs."""
    rows = {r.model.id: r for r in runnable("4x h100", engine="vllm", query="phi-4", top=5).runnable}
    assert rows["phi-4"].num_gpus == 2 and rows["phi-4-mini"].num_gpus == 4


def test_the_context_search_in_llamacpp_steps_finds_what_a_token_by_token_search_finds():
    """models --fits searches the largest context in llama.cpp's 256-token steps (its n_ctx padding): the same
    answer as fit's token-exact search, for every catalog model that runs on two 24 GB cards."""
    from gpuwise.estimate.inference_memory import inference_memory
    from gpuwise.plan.fit import _largest, _resolve_formats
    from gpuwise.plan.runnable import _largest_context

    result = runnable("2x rtx-3090", top=1000)
    for row in result.runnable:
        spec = row.model.spec
        from gpuwise.plan.fit import FitRequest

        req = FitRequest(model=row.model, gpu=result.gpu, num_gpus=row.num_gpus, weights=row.weights.name,
                         engine="llamacpp", context=row.context)
        w, _, kv, _ = _resolve_formats(req)

        def fits(c):
            return inference_memory(spec, gpu_memory=result.gpu.memory_bytes, gpu_id=result.gpu.id,
                                    num_gpus=row.num_gpus, weights=w, kv_dtype=kv, context=c, batch=1,
                                    engine="llamacpp").fits

        cap = spec.max_position_embeddings or (1 << 20)
        assert _largest_context(fits, row.context, cap, "llamacpp") == _largest(fits, row.context, cap), row.model.id
