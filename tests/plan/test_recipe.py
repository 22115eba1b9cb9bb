"""Launch recipes (`gpuwise plan --emit`): every file parses, its degrees and batch sizes are the plan's, the GPUs
multiply out, and a trainer that cannot run the layout gets a note instead of a wrong file. No network, no trainer
installed: the option names themselves were checked against the trainers' source (docs/launch-recipes.md)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

import gpuwise
from gpuwise.estimate.layout import Layout
from gpuwise.estimate.pipeline import stage_layers
from gpuwise.plan.planner import describe
from gpuwise.plan.recipe import (
    DEEPSPEED_VERSION,
    MEGATRON_VERSION,
    TORCHTITAN_VERSION,
    megatron_layout,
    recipes,
    torchtitan_split,
    virtual_stage_layers,
    write_recipes,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def _plan(model, **kw):
    r = gpuwise.plan(model, gpu="h100-sxm", **kw)
    assert r.plans, r.why
    return r


@pytest.fixture(scope="module")
def titan_8b():
    return _plan("llama-3.1-8b", num_gpus=16, seq=4096, global_batch=64, framework="torchtitan")


@pytest.fixture(scope="module")
def megatron_70b():
    return _plan("llama-3.1-70b", num_gpus=64, seq=8192, global_batch=128, framework="megatron")


@pytest.fixture(scope="module")
def megatron_405b():
    # Llama 3's own layout class: PP 16 over 126 layers (7 + 14 x 8 + 7), interleaved when the search says so.
    return _plan("llama-3.1-405b", num_gpus=1024, seq=8192, global_batch=512, framework="megatron", pp=16)


@pytest.fixture(scope="module")
def deepspeed_8b():
    # DeepSpeed ZeRO alone: no TP, PP or CP (the search would otherwise offer them under --framework deepspeed too)
    return _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=64, framework="deepspeed", tp=1, cp=1, no_pp=True)


def _megatron_flags(text: str) -> dict[str, str | bool]:
    """'--flag value' -> {'flag': 'value'}; '--switch' -> {'switch': True}, as argparse reads them."""
    tokens = shlex.split(text, comments=True)
    flags: dict[str, str | bool] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            flags[tok[2:]] = nxt if nxt is not None and not nxt.startswith("--") else True
    return flags


def _unroll(layout: str) -> list[str]:
    """Megatron's PipelineParallelLayerLayout.parse_str_to_list, as text: '(x)*n' and 'c*n' unrolled, stages split by
    '|'."""
    s = layout.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


def _check_titan(result, plan, toml_text):
    req, lay = result.request, plan.layout
    cfg = tomllib.loads(toml_text)
    par, tr = cfg["parallelism"], cfg["training"]
    rep, shard = par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]
    assert rep * shard * par["context_parallel_degree"] * par["tensor_parallel_degree"] \
        * par["pipeline_parallel_degree"] == req.num_gpus
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"],
            par["expert_parallel_degree"], rep * shard) == (lay.tp, lay.pp, lay.cp, lay.ep, lay.dp)
    # torchtitan: gradient accumulation = global / (local x dp); with PP the local batch is cut into micro-batches.
    accum, rest = divmod(tr["global_batch_size"], tr["local_batch_size"] * lay.dp)
    assert rest == 0 and tr["global_batch_size"] == req.global_batch and tr["seq_len"] == req.seq
    if lay.pp > 1:
        assert accum == 1 and par["pipeline_parallel_microbatch_size"] == plan.micro_batch
        assert tr["local_batch_size"] // plan.micro_batch == plan.step.num_microbatches
    else:
        assert tr["local_batch_size"] == plan.micro_batch and accum == plan.step.num_microbatches
    assert cfg["activation_checkpoint"]["mode"] == plan.recompute
    return cfg


def _check_megatron(result, plan, args_text):
    req, lay = result.request, plan.layout
    f = _megatron_flags(args_text)
    tp, pp, cp = (int(f[k]) for k in ("tensor-model-parallel-size", "pipeline-model-parallel-size",
                                      "context-parallel-size"))
    assert (tp, pp, cp) == (lay.tp, lay.pp, lay.cp)
    assert req.num_gpus % (tp * pp * cp) == 0 and req.num_gpus // (tp * pp * cp) == lay.dp
    mbs, gbs = int(f["micro-batch-size"]), int(f["global-batch-size"])
    assert (mbs, gbs) == (plan.micro_batch, req.global_batch)
    assert gbs == mbs * plan.step.num_microbatches * lay.dp  # Megatron's number of micro-batches
    assert int(f["seq-length"]) == req.seq and int(f["num-layers"]) == req.model.spec.num_layers
    assert ("sequence-parallel" in f) == (lay.sp and lay.tp > 1)
    assert int(f.get("expert-model-parallel-size", 1)) == lay.ep
    recompute = f.get("recompute-granularity", "none")
    assert recompute == plan.recompute
    return f


def test_torchtitan_plan_round_trips(titan_8b):
    for p in titan_8b.plans:
        files = recipes(titan_8b, p)
        _check_titan(titan_8b, p, files["torchtitan.toml"])
        _check_megatron(titan_8b, p, files["megatron.args"])
        assert "-m torchtitan.train --job.config_file torchtitan.toml" in files["launch.sh"]
        assert "--nnodes 2 --nproc-per-node 8 --rdzv-backend c10d" in files["launch.sh"]


def test_megatron_plan_with_pp_round_trips(megatron_70b):
    assert any(p.layout.pp > 1 for p in megatron_70b.plans)
    for p in megatron_70b.plans:
        files = recipes(megatron_70b, p)
        f = _check_megatron(megatron_70b, p, files["megatron.args"])
        if p.layout.vpp > 1:
            assert int(f["num-virtual-stages-per-pipeline-rank"]) == p.layout.vpp
        assert "use-distributed-optimizer" in f  # zero1 = Megatron's distributed optimizer
        _check_titan(megatron_70b, p, files["torchtitan.toml"])
        assert "pretrain_gpt.py" in files["launch.sh"] and "megatron.args" in files["launch.sh"]


def test_uneven_pipeline_stages_are_the_plans_in_both_trainers(megatron_405b):
    spec = megatron_405b.request.model.spec
    for p in megatron_405b.plans:
        lay = p.layout
        assert (lay.pp_first_layers, lay.pp_last_layers) == (7, 7)
        files = recipes(megatron_405b, p)
        f = _check_megatron(megatron_405b, p, files["megatron.args"])
        per_rank = stage_layers(lay, spec.num_layers)
        if "pipeline-model-parallel-layout" in f:
            stages = _unroll(f["pipeline-model-parallel-layout"])
            assert len(stages) == lay.pp * lay.vpp and stages[0].startswith("E") and stages[-1].endswith("L")
            got = [sum(stages[c * lay.pp + r].count("t") for c in range(lay.vpp)) for r in range(lay.pp)]
            assert tuple(got) == per_rank
        else:
            assert (int(f["decoder-first-pipeline-num-layers"]), int(f["decoder-last-pipeline-num-layers"])) == (7, 7)
        par = _check_titan(megatron_405b, p, files["torchtitan.toml"])["parallelism"]
        if "module_fqns_per_model_part" in par:
            chunks = [sum(m.startswith("layers.") for m in part) for part in par["module_fqns_per_model_part"]]
        else:  # torchtitan derives the split from these three keys (and its default less_layers is 1, not 0)
            size = par["pipeline_parallel_layers_per_stage"]
            first = par["pipeline_parallel_first_stage_less_layers"]
            last = par["pipeline_parallel_last_stage_less_layers"]
            stages = -(-(spec.num_layers + first + last) // size)
            chunks = list(torchtitan_split(stages, spec.num_layers, first, last))
        assert tuple(chunks) == virtual_stage_layers(lay, spec.num_layers)
        assert par["pipeline_parallel_schedule"] == ("Interleaved1F1B" if lay.vpp > 1 else "1F1B")


def test_fixed_pp_and_vpp_round_trip():
    r = _plan("llama-3.1-70b", num_gpus=32, seq=4096, global_batch=64, framework="megatron", pp=4)
    p = next((p for p in r.plans if p.layout.vpp > 1), None)
    if p is None:
        pytest.skip("the search picked no interleaved layout here")
    files = recipes(r, p)
    f = _check_megatron(r, p, files["megatron.args"])
    assert int(f["num-virtual-stages-per-pipeline-rank"]) == p.layout.vpp
    par = _check_titan(r, p, files["torchtitan.toml"])["parallelism"]
    assert par["pipeline_parallel_layers_per_stage"] == 80 // (4 * p.layout.vpp)
    assert par["pipeline_parallel_first_stage_less_layers"] == par["pipeline_parallel_last_stage_less_layers"] == 0


def test_deepspeed_plan_round_trips(deepspeed_8b):
    stage = {"zero1": 1, "zero2": 2, "zero3": 3}
    for p in deepspeed_8b.plans:
        files = recipes(deepspeed_8b, p)
        cfg = json.loads(files["ds_config.json"])
        lay = p.layout
        assert cfg["train_batch_size"] == deepspeed_8b.request.global_batch
        assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"]
                                           * lay.dp)
        assert cfg["train_micro_batch_size_per_gpu"] == p.micro_batch
        assert cfg["zero_optimization"]["stage"] == stage[lay.sharding]
        assert cfg["bf16"] == {"enabled": True}
        assert describe(p) in cfg["_gpuwise"][2] and DEEPSPEED_VERSION in cfg["_gpuwise"][4]
        assert "--deepspeed --deepspeed_config ds_config.json" in files["launch.sh"]
        assert "--standalone --nnodes 1 --nproc-per-node 8" in files["launch.sh"]


def test_a_layout_deepspeed_cannot_run_gets_a_note(titan_8b):
    p = next(p for p in titan_8b.plans if p.layout.cp * p.layout.tp * p.layout.pp > 1)
    files = recipes(titan_8b, p)
    assert "ds_config.json" not in files
    assert "plain DeepSpeed ZeRO shards over data parallelism only" in files["deepspeed.note.md"]
    assert "`deepspeed.note.md`: not expressible" in files["README.md"]


def test_launch_fails_loudly_when_its_own_trainer_cannot_run_the_plan():
    r = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=64, framework="deepspeed", cp=2)
    files = recipes(r, r.plans[0])
    assert "ds_config.json" not in files
    assert "exit 1" in files["launch.sh"] and "deepspeed.note.md" in files["launch.sh"]
    assert "--framework deepspeed" in files["deepspeed.note.md"]


def test_moe_flags():
    r = _plan("mixtral-8x7b", num_gpus=32, seq=4096, global_batch=128, framework="megatron")
    p = r.plans[0]
    files = recipes(r, p)
    f = _check_megatron(r, p, files["megatron.args"])
    assert (int(f["num-experts"]), int(f["moe-router-topk"])) == (8, 2)
    if p.layout.ep > 1:
        assert int(f["expert-tensor-parallel-size"]) == p.layout.expert_tp
    assert "SET-ME" in files.get("torchtitan.toml", "SET-ME")  # torchtitan 0.2.2 ships no Mixtral: fail loudly


def test_offload_reaches_every_trainer(deepspeed_8b):
    p = deepspeed_8b.plans[0]
    p = replace(p, layout=replace(p.layout, sharding="zero3"), offload=("optimizer", "params"))
    files = recipes(deepspeed_8b, p)
    zero = json.loads(files["ds_config.json"])["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == zero["offload_param"]["device"] == "cpu"
    assert "optimizer-cpu-offload" in _megatron_flags(files["megatron.args"])
    assert tomllib.loads(files["torchtitan.toml"])["training"]["enable_cpu_offload"] is True


def test_headers_name_the_plan_prediction_and_versions(megatron_70b):
    p = megatron_70b.plans[0]
    files = recipes(megatron_70b, p)
    for name, version in (("torchtitan.toml", TORCHTITAN_VERSION), ("megatron.args", MEGATRON_VERSION),
                          ("launch.sh", MEGATRON_VERSION)):
        head = files[name].split("\n\n")[0]
        assert f"plan: {describe(p)}" in head and f"step {p.step_time_s:.3f} s" in head and version in head
    assert f"MFU {100 * p.mfu:.1f}%" in files["README.md"]


def test_write_recipes(tmp_path, titan_8b):
    paths = write_recipes(titan_8b, titan_8b.plans[0], tmp_path / "out")
    names = {p.name for p in paths}
    assert {"launch.sh", "torchtitan.toml", "megatron.args", "README.md"} <= names
    assert names & {"ds_config.json", "deepspeed.note.md"}
    for p in paths:
        assert p.parent == tmp_path / "out" and p.read_text() == recipes(titan_8b, titan_8b.plans[0])[p.name]
    assert os.access(tmp_path / "out" / "launch.sh", os.X_OK)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_launch_sh_runs_torchrun_with_the_args_file(tmp_path, megatron_405b):
    """launch.sh with a stand-in torchrun on PATH: the flags arrive intact (the layout string unglobbed), and the
    torchrun part parses with PyTorch's own torchrun parser when torch is installed."""
    p = next((p for p in megatron_405b.plans if p.layout.vpp > 1), megatron_405b.plans[0])
    write_recipes(megatron_405b, p, tmp_path / "r")
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}", MASTER_ADDR="10.0.0.1",
               MEGATRON_LM="/opt/Megatron-LM", DATA_PATH="/data/x", TRAIN_ITERS="10", LR="1e-4")
    out = subprocess.run(["bash", str(tmp_path / "r" / "launch.sh")], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    argv = json.loads(out)
    script = argv.index("/opt/Megatron-LM/pretrain_gpt.py")
    sent = argv[script + 1:]
    expected = shlex.split((tmp_path / "r" / "megatron.args").read_text(), comments=True)
    assert sent[:len(expected)] == expected
    torchrun_args = argv[:script]
    assert torchrun_args[:4] == ["--nnodes", "128", "--nproc-per-node", "8"]
    run = pytest.importorskip("torch.distributed.run")
    ns = run.get_args_parser().parse_args(torchrun_args + ["train.py"])
    assert (ns.nnodes, ns.nproc_per_node, ns.rdzv_backend, ns.rdzv_endpoint) == ("128", "8", "c10d", "10.0.0.1:29500")


def test_virtual_stage_layers():
    lay = Layout(num_gpus=16, pp=16, vpp=4, schedule="interleaved", pp_first_layers=7, pp_last_layers=7)
    chunks = virtual_stage_layers(lay, 126)
    assert chunks[0] == 1 and chunks[-1] == 1 and set(chunks[1:-1]) == {2}
    assert tuple(sum(chunks[c * 16 + r] for c in range(4)) for r in range(16)) == stage_layers(lay, 126)
    even = Layout(num_gpus=8, pp=4, vpp=2, schedule="interleaved")
    assert virtual_stage_layers(even, 32) == (4,) * 8


def test_torchtitan_split_port():
    """Values from torchtitan 0.2.2's generate_llm_fqn_per_model_part (the port agreed with it on 20,000 random
    inputs when it was written)."""
    assert torchtitan_split(2, 3, 2, 2) == (2, 1)  # its docstring's example
    assert torchtitan_split(4, 32, 1, 1) == (8, 9, 8, 7)  # the default: embedding and head count as a layer each
    assert torchtitan_split(4, 32, 0, 0) == (8, 8, 8, 8)
    assert torchtitan_split(128, 126, 1, 1) == (0,) + (1,) * 126 + (0,)
    assert torchtitan_split(4, 8, 3, 0) is None  # input weight above the layers per stage: torchtitan raises


def test_megatron_layout_folding():
    segs = ["Et", "t*2", "t*2", "t*2", "t*3", "tL"]
    folded = megatron_layout(segs)
    assert folded == "Et|(t*2|)*3,t*3|tL"
    assert _unroll(folded) == [_unroll(s)[0] for s in segs]


def test_cli_emit_writes_the_best_plans_recipe(tmp_path, capsys):
    import json as _json

    from gpuwise.cli import main as cli_main

    out = tmp_path / "recipe"
    assert cli_main(["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "16", "--seq", "4096",
                     "--global-batch", "64", "--framework", "torchtitan", "--emit", str(out), "--json"]) == 0
    doc = _json.loads(capsys.readouterr().out)
    names = {p.rsplit("/", 1)[-1] for p in doc["emitted"]}
    assert {"launch.sh", "README.md"} <= names and (out / "launch.sh").exists()
    best = doc["plans"][0]
    toml = (out / "torchtitan.toml").read_text()
    assert f"tensor_parallel_degree = {best['tp']}" in toml


def test_a_flash_priced_torchtitan_plan_says_torchtitan_runs_cudnn():
    """torchtitan asks SDPA for cuDNN first and has no key to change it: a plan priced with --sdpa-backend flash
    says so in the recipe; the default (cuDNN) plan needs no such line."""
    flash = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="torchtitan", sdpa_backend="flash")
    text = recipes(flash, flash.plans[0])["torchtitan.toml"]
    assert "asks SDPA for cuDNN attention first" in text
    default = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="torchtitan")
    assert "asks SDPA for cuDNN" not in recipes(default, default.plans[0])["torchtitan.toml"]


def test_a_compiled_torchtitan_plan_asks_torchtitan_to_compile():
    """`plan --compile` prices torch.compile (blocks and loss, torchtitan's default components); the job file's
    [compile] section asks for the same, the Megatron file says it cannot, and an eager plan writes no section."""
    compiled = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="torchtitan", compile=True)
    files = recipes(compiled, compiled.plans[0])
    assert tomllib.loads(files["torchtitan.toml"])["compile"] == {"enable": True, "components": ["model", "loss"]}
    assert "torch.compile: not a Megatron-LM option" in files["megatron.args"]
    eager = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="torchtitan")
    assert "compile" not in tomllib.loads(recipes(eager, eager.plans[0])["torchtitan.toml"])
    # compiled blocks save less and fuse their pointwise ops: the same best layout is never slower compiled
    assert compiled.plans[0].step_time_s <= eager.plans[0].step_time_s


def test_plan_compile_is_for_pytorch_native_trainers():
    from gpuwise.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="--compile is torch.compile"):
        gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, framework="megatron",
                     compile=True)


def test_a_compiled_fsdp_plan_compiles_the_blocks_only():
    """An FSDP plan prices torch.compile on the blocks with the loss eager (only torchtitan compiles its loss): the
    torchtitan file it also writes asks for the model alone, and launch.sh's FSDP2 notes say to compile the blocks."""
    r = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="fsdp", compile=True)
    files = recipes(r, r.plans[0])
    assert tomllib.loads(files["torchtitan.toml"])["compile"]["components"] == ["model"]
    assert "torch.compile each transformer block" in files["launch.sh"]


def test_a_plan_with_bf16_moments_writes_megatron_s_precision_aware_optimizer():
    """--exp-avg-dtype / --exp-avg-sq-dtype (Megatron only): the plan is priced with 16-bit moments, Megatron's flags
    say so, the other trainers' files say they keep fp32 moments, and the plan's train command reproduces it."""
    from gpuwise.errors import InvalidArgument

    kw = dict(num_gpus=16, seq=4096, global_batch=64, framework="megatron")
    r = _plan("llama-3.1-8b", **kw, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    plain = _plan("llama-3.1-8b", **kw)
    assert r.plans[0].memory_bytes < plain.plans[0].memory_bytes
    files = recipes(r, r.plans[0])
    args = files["megatron.args"]
    assert "--use-precision-aware-optimizer" in args
    assert "--exp-avg-dtype bf16" in args and "--exp-avg-sq-dtype bf16" in args
    assert "precision-aware optimizer" in files["torchtitan.toml"]
    opts = r.plans[0].train_options(r.request)
    assert (opts["exp_avg_dtype"], opts["exp_avg_sq_dtype"]) == ("bf16", "bf16")
    checked = gpuwise.train("llama-3.1-8b", gpu="h100-sxm", **opts)
    assert checked.memory.total == pytest.approx(r.plans[0].memory_bytes)
    with pytest.raises(InvalidArgument, match="precision-aware optimizer option"):
        gpuwise.plan("llama-3.1-8b", gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16, framework="torchtitan",
                     exp_avg_dtype="bf16")


def test_bf16_moments_at_one_data_parallel_rank_still_ask_for_the_distributed_optimizer():
    """Megatron asserts the distributed optimizer under the precision-aware optimizer, even where a single
    data-parallel rank would otherwise leave the flag out."""
    r = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="megatron", tp=8,
              exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    args = recipes(r, r.plans[0])["megatron.args"]
    assert r.plans[0].layout.dp == 1 and "--use-distributed-optimizer" in args


def test_a_moe_plan_prices_and_writes_its_dispatcher_overlap_and_cuda_graphs():
    """--moe-token-dispatcher / --moe-a2a-overlap / --cuda-graph-scope (Megatron): the plan is priced with them (no
    eager host wait under EP overlap), Megatron's flags carry them, and the plan's train command reproduces it."""
    from gpuwise.errors import InvalidArgument

    kw = dict(num_gpus=16, seq=4096, global_batch=256, framework="megatron", ep=16)
    r = _plan("qwen3-30b-a3b", **kw, moe_token_dispatcher="flex", moe_a2a_overlap=True,
              cuda_graph_scope="moe_router,moe_preprocess")
    best = r.plans[0]
    assert "host_sync" not in best.step.breakdown
    assert "host_sync" in _plan("qwen3-30b-a3b", **kw).plans[0].step.breakdown
    args = recipes(r, best)["megatron.args"]
    for flag in ("--moe-token-dispatcher-type flex", "--overlap-moe-expert-parallel-comm",
                 "--cuda-graph-impl transformer_engine", "--cuda-graph-modules moe_preprocess moe_router"):
        assert flag in args
    assert args.count("--moe-token-dispatcher-type") == 1
    opts = best.train_options(r.request)
    checked = gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", **opts)
    assert checked.perf.step.step_time_s == pytest.approx(best.step_time_s)
    assert "--delay-wgrad-compute" not in args
    delayed = _plan("qwen3-30b-a3b", **kw, moe_token_dispatcher="flex", moe_a2a_overlap=True, delay_wgrad_compute=True)
    assert "--delay-wgrad-compute" in recipes(delayed, delayed.plans[0])["megatron.args"]
    assert delayed.plans[0].train_options(delayed.request)["delay_wgrad_compute"] is True
    padded = _plan("qwen3-30b-a3b", **kw, moe_pad_expert_input_to_capacity=True, cuda_graph_scope="full_iteration")
    args = recipes(padded, padded.plans[0])["megatron.args"]
    assert "--moe-pad-expert-input-to-capacity" in args
    assert "--cuda-graph-impl full_iteration" in args and "--no-check-for-nan-in-loss-and-grad" in args
    one = _plan("qwen3-30b-a3b", num_gpus=4, seq=4096, global_batch=16, framework="megatron", ep=1,
                moe_pad_expert_input_to_capacity=True)
    assert "--moe-token-dispatcher-type alltoall" in recipes(one, one.plans[0])["megatron.args"]
    with pytest.raises(InvalidArgument, match="needs --framework megatron"):
        gpuwise.plan("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, seq=4096, global_batch=256, framework="torchtitan",
                     cuda_graph_scope="full_iteration")


def test_a_moe_plan_writes_the_permute_fusion_it_was_priced_with():
    """--moe-permute-fusion, and the flex dispatcher (priced fused: HybridEP permutes in its dispatch, DeepEP's
    permute follows the flag), put --moe-permute-fusion in Megatron's flags; plain alltoall without it does not, and
    is priced slower. The plan's --json says what was priced."""
    from gpuwise.report.json_out import plan_to_dict

    kw = dict(num_gpus=16, seq=4096, global_batch=256, framework="megatron", ep=16)
    plain, fused, flex = (_plan("qwen3-30b-a3b", **kw, **extra) for extra in (
        {}, dict(moe_permute_fusion=True), dict(moe_token_dispatcher="flex")))
    for r, written in ((plain, False), (fused, True), (flex, True)):
        assert ("--moe-permute-fusion" in recipes(r, r.plans[0])["megatron.args"]) is written
        assert plan_to_dict(r)["moe"]["permute_fused"] is written
    assert fused.plans[0].step_time_s < plain.plans[0].step_time_s
    opts = fused.plans[0].train_options(fused.request)
    assert opts["moe_permute_fusion"] is True
    assert gpuwise.train("qwen3-30b-a3b", gpu="h100-sxm", **opts).perf.step.step_time_s == pytest.approx(
        fused.plans[0].step_time_s)


def test_tp_overlap_fp8_gathers_and_bf16_grad_buffers_are_priced_and_written():
    """--tp-comm-overlap, --fp8-param-gather and --no-grad-reduce-in-fp32 (as the published Megatron recipes run):
    the plan is priced with them (each plan's train command reproduces it, and the same layout is no slower / no
    larger), Megatron's flags and torchtitan's keys say so, and without them neither file asks for them."""
    kw = dict(num_gpus=64, seq=8192, global_batch=128, framework="megatron", precision="fp8", tp=4, pp=4, cp=1)
    plain = _plan("llama-3.1-70b", **kw)
    tuned = _plan("llama-3.1-70b", **kw, tp_comm_overlap=True, fp8_param_gather=True, grad_reduce_in_fp32=False)
    best = tuned.plans[0]
    opts = best.train_options(tuned.request)
    assert (opts["tp_comm_overlap"], opts["fp8_param_gather"], opts["grad_reduce_in_fp32"]) == (True, True, False)
    checked = gpuwise.train("llama-3.1-70b", gpu="h100-sxm", **opts)
    assert checked.perf.step.step_time_s == best.step_time_s and checked.memory.total == best.memory_bytes
    untuned = gpuwise.train("llama-3.1-70b", gpu="h100-sxm", **{**opts, "tp_comm_overlap": False,
                                                                   "fp8_param_gather": False,
                                                                   "grad_reduce_in_fp32": True})
    assert best.step.breakdown["tp_comm"] < untuned.perf.step.breakdown["tp_comm"]
    assert best.memory_bytes < untuned.memory.total
    f = _check_megatron(tuned, best, recipes(tuned, best)["megatron.args"])
    assert f.get("tp-comm-overlap") is True and f.get("fp8-param-gather") is True
    assert f.get("grad-reduce-in-bf16") is True
    f0 = _megatron_flags(recipes(plain, plain.plans[0])["megatron.args"])
    assert not {"tp-comm-overlap", "fp8-param-gather", "grad-reduce-in-bf16"} & set(f0)
    # torchtitan: async TP and fp8 all-gathers follow the plan (bf16 gathers unless --fp8-param-gather)
    tkw = dict(num_gpus=16, seq=4096, global_batch=64, framework="torchtitan", precision="fp8", tp=2, compile=True)
    t_plain = _plan("llama-3.1-8b", **tkw)
    t_tuned = _plan("llama-3.1-8b", **tkw, tp_comm_overlap=True, fp8_param_gather=True,
                    float8_recipe="tensorwise")  # fp8 weight gathers: torchao's tensorwise recipe only
    for res, on in ((t_plain, False), (t_tuned, True)):
        cfg = _check_titan(res, res.plans[0], recipes(res, res.plans[0])["torchtitan.toml"])
        assert cfg["parallelism"]["enable_async_tensor_parallel"] is on
        fsdp = cfg["parallelism"]["data_parallel_shard_degree"] > 1
        assert cfg["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"] is (on and fsdp)
        assert cfg["quantize"]["linear"]["float8"]["recipe_name"] == ("tensorwise" if on else "rowwise")


def test_expert_tp_1_plans_write_it_and_torchtitan_gets_only_layouts_it_accepts():
    """Expert TP 1 in the search: Megatron's flag carries it, and every torchtitan MoE plan satisfies torchtitan's
    ParallelDims (EP spans whole CP groups, with expert TP 1 whole TP x CP groups) and writes its file."""
    r = _plan("deepseek-v3", num_gpus=1024, seq=4096, global_batch=8192, framework="megatron", tp=2, pp=16, ep=64)
    p = r.plans[0]
    assert p.layout.expert_tp == 1
    f = _check_megatron(r, p, recipes(r, p)["megatron.args"])
    assert (int(f["expert-model-parallel-size"]), int(f["expert-tensor-parallel-size"])) == (64, 1)
    t = _plan("qwen3-30b-a3b", num_gpus=16, seq=4096, global_batch=64, framework="torchtitan", tp=2, cp=2, top=200)
    for q in t.plans:
        lay = q.layout
        assert lay.ep % (lay.cp * (lay.tp if lay.expert_tp == 1 else 1)) == 0
    assert any(q.layout.expert_tp == 1 and q.layout.ep > 1 for q in t.plans)
    for q in t.plans[:5]:
        cfg = _check_titan(t, q, recipes(t, q)["torchtitan.toml"])
        assert cfg["parallelism"]["expert_tensor_parallel_degree"] == q.layout.expert_tp


def test_plan_options_a_trainer_cannot_run_are_refused():
    from gpuwise.errors import InvalidArgument

    kw = dict(gpu="h100-sxm", num_gpus=8, seq=4096, global_batch=16)
    for framework, opts, match in (("fsdp", dict(tp_comm_overlap=True), "neither"),
                                   ("torchtitan", dict(tp_comm_overlap=True), "torch.compile"),
                                   ("megatron", dict(fp8_param_gather=True), "--precision fp8"),
                                   ("torchtitan", dict(grad_reduce_in_fp32=False), "--framework megatron")):
        with pytest.raises(InvalidArgument, match=match):
            gpuwise.plan("llama-3.1-8b", framework=framework, **kw, **opts)


def test_fp8_weight_gathers_at_one_data_parallel_rank_still_ask_for_the_distributed_optimizer():
    """Megatron asserts --fp8-param-gather only under the distributed optimizer (or Megatron-FSDP)."""
    r = _plan("llama-3.1-8b", num_gpus=8, seq=4096, global_batch=16, framework="megatron", tp=8, precision="fp8",
              fp8_param_gather=True)
    args = recipes(r, r.plans[0])["megatron.args"]
    assert r.plans[0].layout.dp == 1 and "--use-distributed-optimizer" in args and "--fp8-param-gather" in args
