"""Options declared once: each question command's options are its request dataclass's fields, with the field's
docstring as help, its Literal as choices and its default as default; `to_argv` writes flags the CLI reads back."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Literal, get_args, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.cli import parser
from gpuwise.cli.options import request_options
from gpuwise.cli.questions import _QUESTIONS
from gpuwise.fields import field_docs, strip_optional, to_argv, type_hints
from gpuwise.plan.train import TrainRequest


def _subparser(command: str) -> argparse.ArgumentParser:
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise AssertionError("no subcommands")


def _actions(command: str) -> dict[str, argparse.Action]:
    return {a.dest: a for a in _subparser(command)._actions}


CASES = [(name, part) for name, q in _QUESTIONS.items() for part in q.parts]


@pytest.mark.parametrize(("command", "part"), CASES, ids=[f"{c}-{p.name}" for c, p in CASES])
def test_every_request_field_is_an_option_with_its_doc_choices_and_default(command, part):
    cls, actions = part.cls(), _actions(command)
    docs, hints = field_docs(cls), type_hints(cls)
    for f in fields(cls):
        if not f.init or f.name in part.skip:
            continue
        assert f.name in actions, f"{command}: no option for {cls.__name__}.{f.name}"
        a = actions[f.name]
        if f.name in ("model", "gpu"):
            continue
        assert f.name in docs and a.help, f"{cls.__name__}.{f.name} has no docstring (its --help)"
        tp = strip_optional(hints[f.name])
        if get_origin(tp) is Literal:
            assert tuple(a.choices) == get_args(tp)
        default = f.default
        if default is not MISSING and not isinstance(default, (bool, tuple)):
            assert a.default == default, f"{command} --{f.name}: {a.default!r} != {default!r}"
        assert a.required == (default is MISSING and f.default_factory is MISSING), f"{command} --{f.name}"


def test_a_missing_required_option_is_one_line(capsys):
    from gpuwise.cli import main

    assert main(["plan", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "8", "--seq", "4096"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--global-batch" in err


OPTIONAL = dict(tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 4]), micro_batch=st.integers(1, 8),
                seq=st.sampled_from([1024, 4096, 8192]), sp=st.booleans(), recompute=st.sampled_from(["none", "full"]),
                offload=st.sampled_from([(), ("optimizer",), ("optimizer", "params")]),
                framework=st.sampled_from([None, "megatron", "fsdp"]), inter_node_gbps=st.sampled_from([None, 200.0]),
                zero=st.sampled_from([None, 1, 3]))


@settings(max_examples=40, deadline=None)
@given(values=st.fixed_dictionaries({}, optional=OPTIONAL))
def test_to_argv_round_trips_through_the_parser(values):
    argv = ["train", "llama-3.1-8b", "--gpu", "h100-sxm", *to_argv(TrainRequest, values)]
    got = request_options(parser().parse_args(argv), TrainRequest, skip=frozenset({"model", "gpu"}))
    defaults = {f.name: f.default for f in fields(TrainRequest) if f.init}
    assert {k: v for k, v in got.items() if v != defaults[k]} == {k: v for k, v in values.items()
                                                                  if v is not None and v != defaults[k]}
