"""`gpuwise infer` under load: the options, the JSON contract, bad input, and the MoE decode property."""

from __future__ import annotations

import json
import math

import pytest

import gpuwise
from gpuwise.catalog.gpus import get_gpu
from gpuwise.catalog.models import load_model
from gpuwise.cli import main
from gpuwise.plan.infer import InferRequest, infer
from gpuwise.plan.serve import read_lengths


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_json_under_load_carries_every_latency_and_throughput(capsys) -> None:
    code, out, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "4",
                         "--num-prompts", "200", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--json")
    assert code == 0, err
    sv = json.loads(out)["serving"]
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(sv[key]) == {"mean", "p50", "p90", "p99"}
        assert 0 < sv[key]["p50"] <= sv[key]["p90"] <= sv[key]["p99"]
    assert sv["completed"] == 200 and sv["request_rate"] == 4.0
    assert 0 < sv["goodput_requests_per_s"] <= sv["request_throughput_per_s"]
    assert sv["output_tokens_per_s"] > 0 and sv["kv_capacity_tokens"] > 0
    code, out, _ = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--json")
    assert code == 0 and json.loads(out)["serving"] is None


def test_inf_rate_and_closed_loop(capsys) -> None:
    code, out, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "inf",
                         "--num-prompts", "100", "--json")
    assert code == 0, err
    assert json.loads(out)["serving"]["request_rate_is_inf"] is True
    code, out, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-concurrency", "8",
                         "--num-prompts", "64")
    assert code == 0, err
    assert "at most 8 in flight" in out and "time to first token (TTFT)" in out


@pytest.mark.parametrize(("extra", "needle"), [
    (["--request-rate", "0"], "must be a positive number or inf"),
    (["--request-rate", "nan"], "must be a positive number or inf"),
    (["--request-rate", "1e-20"], "beyond the 1e+08 s"),
    (["--max-concurrency", "0"], "at least 1"),
    (["--slo-ttft-ms", "100"], "add --request-rate or --max-concurrency"),
    (["--request-rate", "2", "--engine", "hf"], "continuous batching"),
    (["--request-rate", "2", "--dataset-path", "/no/such/file.jsonl"],
     "lengths file '/no/such/file.jsonl': no such file"),
    (["--request-rate", "2", "--prompt-tokens", "900000"], "does not fit in the KV pool"),
    (["--request-rate", "2", "--num-speculative-tokens", "3"], "--acceptance-rate"),
    (["--request-rate", "2", "--num-speculative-tokens", "3", "--acceptance-rate", "1"], "[0, 1)"),
    (["--request-rate", "2", "--prefix-cache-hit-rate", "1.5"], "[0, 1)"),
    (["--prefix-cache-hit-rate", "0.5"], "--prefix-cache-hit-rate describes serving under load: add --request-rate"),
    (["--prefix-cache-hit-rate", "0.5", "--offline"], "--offline describe serving under load"),
    (["--offline"], "add --request-rate or --max-concurrency"),
    (["--request-rate", "2", "--enable-mixed-chunk"], "SGLang's option"),
    (["--engine", "sglang", "--enable-mixed-chunk"], "add --request-rate or --max-concurrency"),
])
def test_bad_load_options_are_one_line_and_exit_2(capsys, extra: list[str], needle: str) -> None:
    code, out, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_lengths_files(tmp_path) -> None:
    j = tmp_path / "l.jsonl"
    j.write_text('{"prompt_tokens": 10, "output_tokens": 3}\n\n{"prompt_tokens": 7, "output_tokens": 1}\n')
    assert read_lengths(str(j)) == ((10, 7), (3, 1))
    c = tmp_path / "l.csv"
    c.write_text("prompt_tokens,output_tokens\n5,6\n")
    assert read_lengths(str(c)) == ((5,), (6,))
    from gpuwise.errors import InvalidArgument

    for text, name in (("[1, 2]\n", "a.jsonl"), ('{"prompt_tokens": "x", "output_tokens": 1}\n', "b.jsonl"),
                       ('{"prompt_tokens": 0, "output_tokens": 1}\n', "c.jsonl"), ("a,b\n1,2\n", "d.csv"),
                       ("not json\n", "e.jsonl"), ("", "f.jsonl"), ("[" * 100_000 + "\n", "g.jsonl")):
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(InvalidArgument):
            read_lengths(str(p))
    import os

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):  # never read: a device, a FIFO, a directory
        with pytest.raises(InvalidArgument):
            read_lengths(path)


def test_a_moe_never_decodes_slower_than_a_dense_model_of_its_total_size() -> None:
    """Qwen3-30B-A3B (30.5B total, 3.3B active) against dense Qwen3-32B: at every batch the MoE reads at most the
    bytes the dense model reads, so its decode step is never slower (its experts run as one grouped kernel)."""
    gpu = get_gpu("h100-sxm")
    moe, dense = load_model("qwen3-30b-a3b"), load_model("qwen3-32b")
    for batch in (1, 8, 64, 256):
        t_moe = infer(InferRequest(model=moe, gpu=gpu, batch=batch)).tpot_s
        t_dense = infer(InferRequest(model=dense, gpu=gpu, batch=batch)).tpot_s
        assert t_moe <= t_dense, (batch, t_moe, t_dense)
    # and at batch 1 it reads only the active experts: several times faster
    assert infer(InferRequest(model=moe, gpu=gpu)).tpot_s < 0.5 * infer(InferRequest(model=dense, gpu=gpu)).tpot_s


def test_plot_of_latency_against_rate(capsys, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "knee.svg"
    code, text, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "5",
                          "--plot", str(out))
    assert code == 0, err
    assert out.stat().st_size > 5_000 and "latency-vs-rate plot written" in text
    code, _, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--plot", str(tmp_path / "x.gif"))
    assert code == 2 and ".png or .svg" in err


def test_the_sweep_latency_never_falls_as_the_rate_rises() -> None:
    from gpuwise.plan.infer import kernel_setup, serving_model
    from gpuwise.plan.serve import rate_sweep

    req = InferRequest(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), request_rate=1.0,
                       prompt_tokens=1000, output_tokens=200)
    cost, load, _, _ = serving_model(req, kernel_setup(req))
    saturation, points = rate_sweep(cost, load, num_prompts=300)
    assert saturation > 0
    for a, b in zip(points, points[1:]):
        assert b.result.e2e_s.mean >= a.result.e2e_s.mean * 0.99
        assert b.result.tpot_s.p50 >= a.result.tpot_s.p50 * 0.99


def test_chat_lengths_keep_their_means_and_vllm_benchs_filter() -> None:
    from gpuwise.plan.serve import chat_lengths

    prompts, outputs = chat_lengths(2000, 230, 200, seed=3)
    assert abs(sum(prompts) / 2000 - 230) < 1 and abs(sum(outputs) / 2000 - 200) < 1
    assert all(4 <= p <= 1024 and o >= 4 and p + o <= 2048 for p, o in zip(prompts, outputs))
    assert sorted(prompts)[1000] < 230  # skewed: the median prompt is shorter than the mean
    assert chat_lengths(50, 100, 100) == chat_lengths(50, 100, 100)  # seeded


def test_the_shipped_chat_sample_is_what_its_script_makes(tmp_path) -> None:
    import json
    from pathlib import Path

    from gpuwise.plan.serve import chat_lengths

    sample = Path(__file__).parents[2] / "examples" / "lengths" / "chat_sample.jsonl"
    rows = [json.loads(line) for line in sample.read_text().splitlines()]
    prompts, outputs = chat_lengths(1000, 220, 195)
    assert [r["prompt_tokens"] for r in rows] == list(prompts)
    assert [r["output_tokens"] for r in rows] == list(outputs)


def test_expert_parallel_spreads_whole_experts(capsys) -> None:
    """--enable-expert-parallel: the same weight bytes per GPU, read as fewer, whole experts; refused for dense models
    and layer-split engines."""
    gpu = get_gpu("h100-sxm")
    moe = load_model("qwen3-30b-a3b")
    tp = infer(InferRequest(model=moe, gpu=gpu, num_gpus=4, batch=64))
    ep = infer(InferRequest(model=moe, gpu=gpu, num_gpus=4, batch=64, enable_expert_parallel=True))
    assert ep.decode_first.bytes == pytest.approx(tp.decode_first.bytes, rel=0.05)
    assert ep.tpot_s == pytest.approx(tp.tpot_s, rel=0.2)
    code, _, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--enable-expert-parallel")
    assert code == 2 and "mixture-of-experts" in err
    code, _, err = run(capsys, "infer", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--engine", "llamacpp",
                       "--enable-expert-parallel")
    assert code == 2 and "splits layers" in err


def test_dp_attention_trades_weight_memory_for_kv_capacity(capsys) -> None:
    """DeepSeek-R1 on 8 H200: with TP 8 every GPU holds the whole MLA latent of every request; with data-parallel
    attention each GPU holds its own requests' latent (more sequences fit) but the attention weights whole (more
    weight bytes per GPU)."""
    from gpuwise.plan.fit import FitRequest, fit

    model, gpu = load_model("deepseek-r1"), get_gpu("h200-sxm")
    tp = fit(FitRequest(model=model, gpu=gpu, num_gpus=8, context=4096))
    dp = fit(FitRequest(model=model, gpu=gpu, num_gpus=8, context=4096, enable_dp_attention=True))
    assert dp.estimate.memory.weights > tp.estimate.memory.weights
    assert dp.estimate.details["max_concurrent_sequences"] > 3 * tp.estimate.details["max_concurrent_sequences"]
    r = infer(InferRequest(model=model, gpu=gpu, num_gpus=8, prompt_tokens=500, output_tokens=100,
                           max_concurrency=64, num_prompts=128, enable_dp_attention=True))
    assert r.serving.result.completed == 128 and r.serving.result.output_throughput > 0
    code, _, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "2", "--enable-dp-attention")
    assert code == 2 and "mixture-of-experts" in err


def test_an_sglang_decode_instance_pays_no_eager_prefill(monkeypatch) -> None:
    """SGLang's decode instance receives each request's KV and runs its last prompt row inside a graphed decode step:
    the eager prefill's launch time (StepCost.prefill_host_s) belongs to the prefill instance only, so the decode
    side's time per output token is the same with or without it."""
    from dataclasses import replace

    from gpuwise.plan import serve

    base = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), engine="sglang", prompt_tokens=1000,
                output_tokens=200, request_rate=20.0, num_prompts=300, pd_disaggregation="1P1D")
    with_host = infer(InferRequest(**base)).serving.result
    real = serve.step_cost
    monkeypatch.setattr(serve, "step_cost", lambda *a, **k: replace(real(*a, **k), prefill_host_s=0.0))
    without = infer(InferRequest(**base)).serving.result
    assert with_host.tpot_s.p50 == pytest.approx(without.tpot_s.p50, rel=1e-6)


def test_disaggregated_decode_has_no_prefill_interference(capsys) -> None:
    """1P1D: decode steps carry no prompt chunks, so the inter-token latency tail collapses, and more decode
    instances never slow decoding; the transfer of the KV sits inside TTFT."""
    base = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), prompt_tokens=3000, output_tokens=200,
                request_rate=6.0, num_prompts=300)
    agg = infer(InferRequest(**base)).serving.result
    pd = infer(InferRequest(**base, pd_disaggregation="1P1D")).serving.result
    more = infer(InferRequest(**base, pd_disaggregation="1P3D")).serving.result
    assert pd.itl_s.p99 < 0.5 * agg.itl_s.p99
    assert more.tpot_s.mean <= pd.tpot_s.mean * 1.01
    assert pd.completed == agg.completed == 300
    for extra, needle in ((["--pd-disaggregation", "1X1D"], "xPyD"),
                          (["--pd-disaggregation", "1P1D", "--max-concurrency", "4"], "--request-rate")):
        code, _, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "2", *extra)
        assert code == 2 and needle in err, err


def test_offline_drops_the_server_in_front_of_the_engine() -> None:
    """A lone request behind vLLM's server pays its intake, its tokens' streaming and the fixed latency on top of the
    kernels; --offline (vLLM's LLM class, trtllm-bench) pays the kernels alone, step for step the same."""
    from gpuwise.plan.serve import frontend_of

    common = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), max_concurrency=1, num_prompts=3,
                  prompt_tokens=200, output_tokens=20)
    served = infer(InferRequest(**common)).serving
    offline = infer(InferRequest(**common, offline=True)).serving
    fe = frontend_of("vllm")
    assert served.load.frontend == fe and offline.load.frontend is None
    assert fe.latency_s > 0 and fe.request_s > 0 and fe.token_s > 0
    assert served.result.steps == offline.result.steps
    # the first token: taken in, its step streamed, the latency (the next request's intake shares the CPU with the
    # previous one's last chunk: at most one more chunk's time)
    extra = fe.latency_s + fe.request_s + fe.token_s
    assert served.result.ttft_s.mean == pytest.approx(offline.result.ttft_s.mean + extra, abs=fe.token_s)
    assert any("frontend: the vllm server" in a for a in served.assumptions)
    assert any("frontend: none (--offline" in a for a in offline.assumptions)


def test_vllm_frontend_figures_follow_the_release() -> None:
    """vLLM 0.19 and later take their own HTTP-server figures (catalog/data/engine_perf.toml frontend_from); older
    releases and other engines keep theirs. Checked against a published run: kvcached's vLLM 0.19.0 server streamed
    64,000 tokens of 500 requests in 5.40 s (Qwen3-0.6B, one H100, validation/serving_sources/published.toml): at
    the 0.10-0.11 figures that is over twice the server's CPU time, at 0.19's within 10% of it."""
    from gpuwise.plan.serve import frontend_of

    old, new = frontend_of("vllm", version="0.11.0"), frontend_of("vllm", version="0.19.0")
    assert frontend_of("vllm") == new == frontend_of("vllm", version="0.24.1")
    assert frontend_of("vllm", version="0.18.0") == old != new
    # releases compare as numbers, not text ("0.9.2" sorts after "0.19" as a string), whatever their spelling
    assert frontend_of("vllm", version="0.9.2") == old
    assert frontend_of("vllm", version="v0.19.0") == frontend_of("vllm", version="0.19.0rc1") == new
    assert frontend_of("vllm", version="vv0.19") == new  # what --vllm-version's own check lets through
    assert new.latency_s < old.latency_s and new.token_s < old.token_s
    assert frontend_of("sglang", version="0.5.3") == frontend_of("sglang")
    cpu = lambda fe: 500 * fe.request_s + 64_000 * fe.token_s  # noqa: E731
    assert cpu(old) > 2 * 5.40 and cpu(new) == pytest.approx(5.40, rel=0.1)
    # one request on an idle server: the first token comes sooner by the difference in fixed latency and intake
    # (0.18: the older server, the same asynchronous scheduler and memory rule as the newest)
    common = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), max_concurrency=1, num_prompts=3,
                  prompt_tokens=200, output_tokens=20)
    r_old = infer(InferRequest(**common, vllm_version="0.18.0")).serving.result
    r_new = infer(InferRequest(**common)).serving.result
    saved = old.latency_s + old.request_s + old.token_s - (new.latency_s + new.request_s + new.token_s)
    assert r_old.ttft_s.mean - r_new.ttft_s.mean == pytest.approx(saved, abs=old.token_s)


def test_trtllm_reserves_whole_requests() -> None:
    r = infer(InferRequest(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), engine="trtllm",
                           request_rate=float("inf"), num_prompts=200, prompt_tokens=1000, output_tokens=1000,
                           offline=True)).serving
    assert r.load.limits.reserve_full_length and r.result.preemptions == 0
    assert any("no preemption" in a for a in r.assumptions)


def test_sglang_runs_prompt_chunks_alone_unless_mixed_chunk_is_on() -> None:
    """SGLang's scheduler: prompt steps of their own ahead of the decodes by default (the decoding requests wait
    through them: a longer worst gap between tokens), mixed into the decode steps with --enable-mixed-chunk; both
    reserve each request's output at admission."""
    common = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), engine="sglang", request_rate=4.0,
                  num_prompts=200, prompt_tokens=6000, output_tokens=300)
    alone = infer(InferRequest(**common)).serving
    mixed = infer(InferRequest(**common, enable_mixed_chunk=True)).serving
    assert alone.load.limits.prefill_first and not mixed.load.limits.prefill_first
    assert alone.load.limits.output_reservation is not None and mixed.load.limits.output_reservation is not None
    assert "--enable-mixed-chunk" in mixed.load.limits_reason and "steps of their own" in alone.load.limits_reason
    assert alone.result.itl_s.p99 > 1.5 * mixed.result.itl_s.p99


def test_sglangs_piecewise_cuda_graph_removes_the_prefill_launches(capsys) -> None:
    """SGLang graphs its prefill by default since 0.5.10 (--enable-piecewise-cuda-graph before, --disable-... after):
    a short prompt's pass no longer waits for its launches, so the static TTFT falls to the kernels' time; decode is
    unchanged; other engines refuse SGLang's options."""
    base = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), num_gpus=8, engine="sglang",
                prompt_tokens=1024, output_tokens=16)
    eager = infer(InferRequest(**base, sglang_version="0.5.9"))
    graphed = infer(InferRequest(**base))
    assert eager.prefill.bound == "host" and eager.prefill.host_s > 0 and graphed.prefill.host_s == 0.0
    assert graphed.ttft_s < eager.ttft_s and graphed.tpot_s == pytest.approx(eager.tpot_s)
    assert infer(InferRequest(**base, sglang_version="0.5.9", enable_piecewise_cuda_graph=True)).ttft_s \
        == pytest.approx(graphed.ttft_s)
    assert infer(InferRequest(**base, sglang_version="v0.5.10.post1")).ttft_s == pytest.approx(graphed.ttft_s)
    assert infer(InferRequest(**base, disable_piecewise_cuda_graph=True)).ttft_s == pytest.approx(eager.ttft_s)
    assert any("piecewise CUDA graphs" in a and "0.5.10" in a for a in graphed.assumptions)
    assert any("eagerly" in a and "0.5.9" in a for a in eager.assumptions)
    for argv in (["--enable-piecewise-cuda-graph"], ["--disable-piecewise-cuda-graph"], ["--sglang-version", "0.5.9"],
                 ["--engine", "sglang", "--sglang-version", "latest"],
                 ["--engine", "sglang", "--enable-piecewise-cuda-graph", "--disable-piecewise-cuda-graph"]):
        code, _, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", *argv)
        assert code == 2 and ("SGLang" in err or "contradict" in err), (argv, err)


def test_vllm_schedules_asynchronously_from_0_14(capsys) -> None:
    """vLLM 0.14 turned async scheduling on by default (release notes; --no-async-scheduling turns it off,
    --async-scheduling turned it on before): the host's time per running request then overlaps the GPU, so a loaded
    engine's TPOT is shorter than with synchronous scheduling by about that time per step. (Offline: the HTTP
    server's figures change by release too, at 0.19.)"""
    base = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), engine="vllm", request_rate=20.0,
                num_prompts=200, prompt_tokens=500, output_tokens=200, offline=True)
    newest = infer(InferRequest(**base)).serving.result
    old = infer(InferRequest(**base, vllm_version="0.11.0")).serving.result
    assert newest.tpot_s.p50 < old.tpot_s.p50
    assert infer(InferRequest(**base, vllm_version="0.14.0")).serving.result.tpot_s.p50 \
        == pytest.approx(newest.tpot_s.p50)
    synced = infer(InferRequest(**base, no_async_scheduling=True))
    assert synced.serving.result.tpot_s.p50 > newest.tpot_s.p50
    assert any("synchronous scheduling" in a for a in synced.assumptions)
    assert infer(InferRequest(**base, vllm_version="0.11.0", async_scheduling=True)).serving.result.tpot_s.p50 \
        < old.tpot_s.p50
    for argv in (["--engine", "sglang", "--async-scheduling"], ["--async-scheduling", "--no-async-scheduling"],
                 ["--vllm-version", "0.9.2"], ["--engine", "trtllm", "--vllm-version", "0.11.0"]):
        code, _, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", *argv)
        assert code == 2 and ("vLLM" in err or "contradict" in err), (argv, err)


def test_stream_interval_delays_sglangs_first_token_not_vllms(capsys) -> None:
    """--stream-interval N: SGLang streams when a request's output length is a multiple of N, so its TTFT grows by
    about N - 1 decode steps and its end-to-end latency does not; vLLM sends the first token at once (its
    output processor streams 'the first token' and then every N), so nothing it reports moves."""
    base = dict(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), max_concurrency=1, num_prompts=5,
                prompt_tokens=500, output_tokens=200)
    sg = infer(InferRequest(**base, engine="sglang"))
    sg10 = infer(InferRequest(**base, engine="sglang", stream_interval=10))
    a, b = sg.serving.result, sg10.serving.result
    assert b.ttft_s.p50 - a.ttft_s.p50 == pytest.approx(9 * a.tpot_s.p50, rel=0.05)
    assert b.e2e_s.p50 == pytest.approx(a.e2e_s.p50)
    assert any("--stream-interval 10" in x and "output token 10" in x for x in sg10.serving.assumptions)
    v, v10 = (infer(InferRequest(**base, engine="vllm", stream_interval=k)).serving.result for k in (1, 10))
    assert v10.ttft_s.p50 == pytest.approx(v.ttft_s.p50) and v10.tpot_s.p50 == pytest.approx(v.tpot_s.p50)
    for argv in (["--engine", "trtllm", "--request-rate", "2", "--stream-interval", "4"],
                 ["--stream-interval", "4"], ["--request-rate", "2", "--offline", "--stream-interval", "4"],
                 ["--request-rate", "2", "--stream-interval", "0"]):
        code, _, err = run(capsys, "infer", "llama-3.1-8b", "--gpu", "h100-sxm", *argv)
        assert code == 2 and "--stream-interval" in err, (argv, err)


def test_sglang_keeps_prefill_eager_where_its_rules_say() -> None:
    """ServerArgs turns the piecewise graphs off on GPUs without CUDA, for multimodal checkpoints, blacklisted
    architectures, DP attention and PD disaggregation; an MLA model graphs passes of at most 2,048 tokens."""
    from gpuwise.estimate.infer_time import engine_perf
    from gpuwise.plan.infer import sglang_prefill_graph_rows

    eng = engine_perf("sglang")

    def rows(model="llama-3.1-8b", gpu="h100-sxm", **kw):
        return sglang_prefill_graph_rows(InferRequest(model=load_model(model), gpu=get_gpu(gpu), engine="sglang",
                                                      **kw), eng)[0]

    assert rows() == math.inf and rows(model="deepseek-r1", num_gpus=8) == 2048
    assert rows(gpu="mi300x") == 0 and rows(model="llama-4-scout", num_gpus=4) == 0
    assert rows(model="qwen3-next-80b-a3b-thinking", num_gpus=4) == 0 and rows(model="deepseek-v3.2", num_gpus=8) == 0
    assert rows(model="deepseek-r1", num_gpus=8, enable_dp_attention=True) == 0
    assert rows(request_rate=5.0, pd_disaggregation="1P1D") == 0
    assert rows(sglang_version="0.5.9") == 0
    r1 = dict(model=load_model("deepseek-r1"), gpu=get_gpu("h200"), num_gpus=8, engine="sglang", output_tokens=4)
    short, long = infer(InferRequest(**r1, prompt_tokens=1024)), infer(InferRequest(**r1, prompt_tokens=4096))
    assert short.prefill.host_s == 0.0 and long.prefill.host_s > 0


def test_a_request_beyond_the_models_context_is_said() -> None:
    r = gpuwise.infer("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=200_000)
    assert any("beyond the model's maximum context (131,072" in a for a in r.assumptions)
    assert not any("beyond the model's" in a for a in gpuwise.infer("llama-3.1-8b", gpu="h100-sxm").assumptions)


def test_a_training_sequence_beyond_the_models_context_is_said() -> None:
    r = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=262144, micro_batch=1, global_batch=8, cp=8,
                      framework="megatron", recompute="full")
    assert any("beyond the model's maximum context (131,072" in a for a in r.assumptions)
