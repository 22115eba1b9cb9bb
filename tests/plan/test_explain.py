"""`gpuwise explain`: every term and alias resolves, every command it points to parses (and runs) with the real
CLI, its numbers are the catalog's and the estimators' (not typed), unknown terms fail in one line with a
suggestion, and the text output is wrapped."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys

import pytest

from gpuwise.catalog.gpus import get_gpu
from gpuwise.cli import main, parser
from gpuwise.errors import GpuwiseError, UnknownGPUError
from gpuwise.plan.explain import DEFAULT_GPU, NUMBERS, TERMS, WIDTH, explain, list_terms, render, resolve, to_dict
from gpuwise.plan.explain.glossary import entries, lookup_key

MODEL, GPU = "llama-3.1-8b", "h100-sxm"
MOE_MODEL = "mixtral-8x7b"  # the expert-parallelism commands need routed experts to run

REQUIRED = {"precision", "tensor-cores", "hbm", "nvlink", "mig", "mfu", "hfu", "zero", "fsdp", "hsdp",
            "tensor-parallelism", "sequence-parallelism", "pipeline-parallelism", "context-parallelism",
            "expert-parallelism", "data-parallelism", "bubble", "arithmetic-intensity", "roofline",
            "activation-checkpointing", "kv-cache", "quantization", "gradient-accumulation", "offload"}


def _model_for(term: str) -> str:
    return MOE_MODEL if term == "expert-parallelism" else MODEL


def _subcommands() -> set[str]:
    p = parser()
    for action in p._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            return set(action.choices)
    raise AssertionError("gpuwise parser has no subcommands")


def _templates() -> list[tuple[str, int, str]]:
    return [(t, i, c) for t in TERMS for i, c in enumerate(entries()[t].get("commands", []))]


# --------------------------------------------------------------------------------------------------------------
# The glossary and its lookups


def test_terms_are_sorted_and_cover_the_issue():
    assert list(TERMS) == sorted(TERMS)
    assert REQUIRED <= set(TERMS), REQUIRED - set(TERMS)


@pytest.mark.parametrize("term", TERMS)
def test_every_term_is_complete_and_concise(term):
    row = entries()[term]
    words = len(row["text"].split())
    assert 50 <= words <= 190, f"{term}: {words} words (aim for 4-8 plain sentences)"
    assert row["title"] and "\n" not in row["title"]
    assert row["commands"], f"{term} points to no command"
    assert row["sources"] and all("http" in s for s in row["sources"]), f"{term}: every source needs an address"
    for other in row["see_also"]:
        assert other in TERMS and other != term, f"{term}: see_also '{other}'"
    assert set(re.findall(r"{(\w*)}", " ".join(row["commands"]))) <= {"model", "gpu"}
    assert term in NUMBERS, f"{term} has no computed numbers"


def test_each_term_has_one_number_provider():
    from gpuwise.plan.explain import numbers_hardware, numbers_inference, numbers_parallelism, numbers_training

    topics = [numbers_hardware.NUMBERS, numbers_training.NUMBERS, numbers_parallelism.NUMBERS,
              numbers_inference.NUMBERS]
    assert sum(len(t) for t in topics) == len(NUMBERS), "a term has providers in two topic modules"
    assert set(NUMBERS) == set(TERMS)


@pytest.mark.parametrize("term", TERMS)
def test_every_term_and_alias_resolves_to_itself(term):
    assert resolve(term) == term
    assert resolve(term.upper().replace("-", " ")) == term
    for alias in entries()[term].get("aliases", []):
        assert resolve(alias) == term, alias
        assert explain(alias).term == term


def test_aliases_are_unique_and_never_shadow_a_term():
    seen: dict[str, str] = {lookup_key(t): t for t in TERMS}
    for term in TERMS:
        for alias in entries()[term].get("aliases", []):
            k = lookup_key(alias)
            assert k not in seen or seen[k] == term, f"'{alias}' of {term} clashes with {seen.get(k)}"
            seen[k] = term


@pytest.mark.parametrize("name, term", [
    ("pp", "pipeline-parallelism"), ("bf16", "precision"), ("FP8", "precision"), ("int8", "precision"),
    ("tp", "tensor-parallelism"), ("sp", "sequence-parallelism"), ("cp", "context-parallelism"),
    ("ep", "expert-parallelism"), ("dp", "data-parallelism"), ("DDP", "data-parallelism"),
    ("ridge", "roofline"), ("ridge point", "roofline"), ("recompute", "activation-checkpointing"),
    ("gradient_checkpointing", "activation-checkpointing"), ("micro-batch", "gradient-accumulation"),
    ("ZeRO-3", "zero"), ("zero1", "zero"), ("FSDP", "fsdp"), ("fsdp2", "fsdp"), ("hybrid shard", "hsdp"),
    ("KV cache", "kv-cache"), ("nvswitch", "nvlink"), ("pcie", "nvlink"), ("MFU", "mfu"), ("hfu", "hfu"),
    ("bubble", "bubble"), ("nf4", "quantization"), ("Q4_K_M", "quantization"), ("vram", "hbm"),
    ("zero-offload", "offload"), ("tensor core", "tensor-cores"), ("multi-instance GPU", "mig"),
])
def test_common_names(name, term):
    assert resolve(name) == term


def test_unknown_term_is_one_line_with_a_suggestion():
    with pytest.raises(GpuwiseError, match=r"unknown term 'fdsp'.*Did you mean: .*fsdp") as info:
        explain("fdsp")
    assert "\n" not in str(info.value)
    with pytest.raises(GpuwiseError, match="kv-cache"):
        explain("kv-cach")
    with pytest.raises(GpuwiseError, match="no term given"):
        explain("  ")


def test_unknown_gpu_and_model_are_the_catalogs_errors():
    with pytest.raises(UnknownGPUError, match="h100"):
        explain("roofline", gpu="h1000")
    with pytest.raises(GpuwiseError, match="unknown model"):
        explain("kv-cache", model="llama-9-1b")


# --------------------------------------------------------------------------------------------------------------
# Commands: every template parses with the real parser, and the existing subcommands run


@pytest.mark.parametrize("term, i, template", _templates(), ids=lambda x: str(x)[:40])
def test_command_templates_parse_with_the_real_cli(term, i, template):
    model = _model_for(term)
    cmd = explain(term, model=model, gpu=GPU).commands[i]
    assert cmd == template.format(model=model, gpu=GPU)
    argv = shlex.split(cmd)
    assert argv[0] == "gpuwise"
    if argv[1] in ("pick", "doctor") and argv[1] not in _subcommands():
        pytest.skip(f"`gpuwise {argv[1]}` is not in the CLI parser yet")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = parser().parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"`{cmd}` does not parse: {err.getvalue().strip()}")
    assert args.command == argv[1]
    assert getattr(args, "model", model) == model


@pytest.mark.parametrize("term, i, template", _templates(), ids=lambda x: str(x)[:40])
def test_command_templates_run(term, i, template):
    """The commands explain points to answer (exit 0) for a real catalog model, not only parse."""
    cmd = explain(term, model=_model_for(term), gpu=GPU).commands[i]
    argv = shlex.split(cmd)[1:]
    if argv[0] not in _subcommands():
        pytest.skip(f"`gpuwise {argv[0]}` is not in the CLI parser yet")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc == 0, f"`{cmd}` -> {rc}: {err.getvalue().strip()}"


def test_commands_without_a_model_use_a_placeholder_and_the_gpu():
    e = explain("zero", gpu="a100-sxm-80gb")
    assert all("MODEL" in c and "a100-sxm-80gb" in c for c in e.commands)
    assert all("{" not in c for t in TERMS for c in explain(t).commands)


# --------------------------------------------------------------------------------------------------------------
# Numbers come from the catalog and the estimators


def test_ridge_is_the_catalogs_peak_over_bandwidth():
    g = get_gpu(GPU)
    expected = g.peak("bf16") / g.memory_bandwidth_bytes_per_s
    assert 290 < expected < 300  # REFERENCE.md: H100 SXM bf16 ~989 TFLOP/s / 3.35 TB/s ~ 295 FLOP/byte
    for term in ("roofline", "arithmetic-intensity"):
        e = explain(term, gpu=GPU)
        assert e.numbers["ridge_bf16_flop_per_byte"] == pytest.approx(expected, rel=1e-12)
        assert f"{expected:,.0f}" in render(e)
    fp8 = explain("roofline", gpu=GPU).numbers["ridge_fp8_flop_per_byte"]
    assert fp8 == pytest.approx(g.peak("fp8") / g.memory_bandwidth_bytes_per_s)


def test_ridge_matches_what_gpuwise_roofline_uses():
    import gpuwise

    r = gpuwise.roofline(MODEL, gpu="a100-sxm-80gb", phase="decode")
    e = explain("roofline", model=MODEL, gpu="a100-sxm-80gb")
    assert e.numbers["ridge_bf16_flop_per_byte"] == pytest.approx(r.roofline.ridge)
    ops = r.roofline.ops
    ai = sum(o.flops for o in ops) / sum(o.bytes for o in ops)
    assert e.numbers["decode_intensity_batch1_flop_per_byte"] == pytest.approx(ai)
    assert 0.5 < ai < 2  # batch-1 decode: ~2 FLOPs per 2-byte weight


def test_default_gpu_is_said_and_a_given_gpu_is_used():
    e = explain("hbm")
    assert e.numbers["gpu"] == DEFAULT_GPU and e.gpu_is_default
    assert "default GPU" in render(e)
    e = explain("hbm", gpu="rtx-4090")
    g = get_gpu("rtx-4090")
    assert e.numbers["gpu"] == "rtx-4090" and not e.gpu_is_default and "default GPU" not in render(e)
    assert e.numbers["memory_bandwidth_bytes_per_s"] == g.memory_bandwidth_bytes_per_s
    assert e.numbers["memory_bytes"] == g.memory_bytes


def test_bubble_examples_follow_the_formula():
    n = explain("bubble").numbers
    assert n["bubble_fraction_p4_m4"] == pytest.approx(3 / 7)  # REFERENCE: 4 stages, 4 micro-batches: 4/7 busy
    assert n["bubble_fraction_p4_m1"] == pytest.approx(3 / 4)
    assert n["bubble_fraction_p8_m64"] == pytest.approx(7 / 71)
    assert n["bubble_fraction_p8_m64_v2"] == pytest.approx(3.5 / 67.5)  # (p-1)/v idle slots out of m + (p-1)/v
    assert "42.9%" in render(explain("bubble"))


def test_zero_bytes_per_parameter_are_the_papers():
    # Rajbhandari et al. 2020 with N_d = 8: DDP 16, ZeRO-1 4 + 12/8, ZeRO-2 2 + 14/8, ZeRO-3 16/8 bytes/param.
    n = explain("zero", model=MODEL).numbers
    assert [n[f"model_state_bytes_per_param_{s}"] for s in ("ddp", "zero1", "zero2", "zero3")] == \
        pytest.approx([16, 5.5, 3.75, 2])
    from gpuwise.catalog.models import load_model
    from gpuwise.model.params import param_counts

    p = param_counts(load_model(MODEL).spec).total
    assert n["model_state_bytes_zero3"] == pytest.approx(2 * p)


def test_optimizer_states_are_what_train_charges():
    """The per-optimizer state bytes are `gpuwise train`'s (one GPU, FP32 states: Megatron's, or DeepSpeed's for
    bitsandbytes' 8-bit AdamW, which Megatron does not run), and Muon's Newton-Schulz FLOPs are its five iterations'
    three products on every hidden matrix."""
    import gpuwise

    n = explain("muon", model=MODEL, gpu=GPU).numbers  # an alias of optimizer-states
    for name in ("adamw", "adamw-8bit", "muon"):
        framework = "deepspeed" if name == "adamw-8bit" else "megatron"
        r = gpuwise.train(MODEL, gpu="b200", num_gpus=1, framework=framework, optimizer=name)
        assert n[f"optimizer_state_bytes_{name.replace('-', '_')}"] == pytest.approx(r.memory.optimizer)
    assert n["optimizer_state_bytes_muon"] < n["optimizer_state_bytes_sgd"] * 1.2 < n["optimizer_state_bytes_adamw"]
    # 5 iterations of X X^T, A A and B X on each hidden matrix (m <= n): 5 (4 m^2 n + 2 m^3) FLOPs; Llama-3.1-8B's
    # 32 blocks hold q and o (4,096 x 4,096), k and v (1,024 x 4,096), gate, up and down (14,336 x 4,096)
    def ns(a: int, b: int) -> float:
        m, k = min(a, b), max(a, b)
        return 5 * (4 * m * m * k + 2 * m ** 3)

    assert MODEL == "llama-3.1-8b"
    by_hand = 32 * (2 * ns(4096, 4096) + 2 * ns(1024, 4096) + 3 * ns(14336, 4096))
    assert n["muon_newton_schulz_flops_per_step"] == pytest.approx(by_hand, rel=1e-9)


def test_model_numbers_use_the_estimators():
    e = explain("kv-cache", model="llama-3-8b")
    assert e.numbers["kv_bytes_per_token_bf16"] == 131072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert e.numbers["kv_bytes_per_sequence_4096_bf16"] == 131072 * 4096
    h = explain("hbm", model=MODEL, gpu=GPU).numbers
    assert h["decode_min_time_per_token_s"] == pytest.approx(
        h["weights_bf16_bytes"] / get_gpu(GPU).memory_bandwidth_bytes_per_s)
    moe = explain("expert-parallelism", model=MOE_MODEL).numbers
    assert moe["num_experts"] == 8 and moe["experts_per_token"] == 2
    assert explain("expert-parallelism", model=MODEL).numbers["num_experts"] == 0
    tp = explain("tensor-parallelism", model=MODEL).numbers
    assert tp["valid_tp_degrees"] == "1, 2, 4, 8"


def test_example_settings_are_the_other_commands_defaults():
    from gpuwise.plan.explain.examples import EXAMPLE_SEQ, decode_context
    from gpuwise.plan.roofline import RooflineRequest
    from gpuwise.plan.train import TrainRequest

    assert EXAMPLE_SEQ == TrainRequest.__dataclass_fields__["seq"].default
    assert decode_context() == RooflineRequest.__dataclass_fields__["seq"].default
    e = explain("arithmetic-intensity", model=MODEL, gpu=GPU)
    assert f"{decode_context():,} cached tokens" in render(e)
    assert f"at {EXAMPLE_SEQ:,}-token sequences" in render(explain("mfu", model=MODEL, gpu=GPU))


def test_tp_degrees_are_the_layout_rules():
    from gpuwise.catalog.models import load_model
    from gpuwise.estimate.parallel import valid_tp_degrees

    for name in (MODEL, MOE_MODEL, "gemma-2b"):
        n = explain("tensor-parallelism", model=name).numbers
        assert n["valid_tp_degrees"] == ", ".join(map(str, valid_tp_degrees(load_model(name).spec,
                                                                           n["gpus_per_node"])))
    assert explain("tensor-parallelism", model="gemma-2b").numbers["valid_tp_degrees"] == "1"  # one KV head


def test_mig_profiles_come_from_the_catalog():
    assert explain("mig", gpu="a100-sxm-80gb").numbers["mig_profiles"].startswith("1g.10gb")
    assert explain("mig", gpu="rtx-4090").numbers["mig_profiles"] == ""


@pytest.mark.parametrize("term", TERMS)
def test_every_term_shows_numbers_with_a_model(term):
    e = explain(term, model=_model_for(term), gpu=GPU)
    assert e.facts and e.numbers
    for key, value in e.numbers.items():
        assert isinstance(value, str) or value == value and abs(value) != float("inf"), (key, value)


# --------------------------------------------------------------------------------------------------------------
# Presenters


def _check_wrapped(text: str) -> None:
    for line in text.splitlines():
        # Only a single unbreakable token (a URL) may run past the width.
        assert len(line) <= WIDTH or len(line.split()) == 1, line


@pytest.mark.parametrize("term", TERMS)
def test_render_has_the_title_and_is_wrapped(term):
    e = explain(term, model=_model_for(term), gpu=GPU)
    text = render(e)
    assert text.splitlines()[0] == e.title
    assert len(text.splitlines()) > 6  # the explanation was wrapped, not printed as one long line
    _check_wrapped(text)
    for cmd in e.commands:  # long commands are broken with shell continuations that paste back whole
        joined = re.sub(r" \\\n\s+", " ", text)
        assert cmd in joined


def test_long_commands_wrap_with_continuations():
    e = explain("bubble", model="meta-llama/Llama-3.1-8B", gpu="NVIDIA H100 80GB HBM3")
    text = render(e)
    assert " \\\n" in text
    _check_wrapped(text)


def test_to_dict_is_json_with_schema_version():
    d = to_dict(explain("roofline", model=MODEL, gpu=GPU))
    back = json.loads(json.dumps(d))
    assert back["schema_version"] and back["command"] == "explain" and back["term"] == "roofline"
    assert back["numbers"]["ridge_bf16_flop_per_byte"] > 0 and back["commands"] and back["sources"]


def test_list_terms_lists_every_term():
    text = list_terms()
    for t in TERMS:
        assert re.search(rf"^  {re.escape(t)} ", text, re.M), t
    _check_wrapped(text)


def test_explain_imports_no_presenter_of_report():
    """plan/ does not import report/: the `--json` envelope comes from gpuwise.schema."""
    import ast
    from pathlib import Path

    from gpuwise.plan.explain import glossary

    for path in Path(glossary.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [getattr(node, "module", None) or ""] + [a.name for a in node.names]
                parts = [p for n in names for p in n.split(".")]
                assert "report" not in parts, (path.name, names)


def test_explain_imports_no_torch():
    code = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers', 'numpy', 'huggingface_hub'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from gpuwise.plan.explain import TERMS, explain, render
for t in TERMS:
    render(explain(t, model='llama-3.1-8b'))
print('OK')
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("OK")
