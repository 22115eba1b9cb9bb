"""The question commands (fit, train, infer, roofline, plan, pick, doctor): their options come from the request
dataclasses (cli/options.py), their answers from the Python API, their output from the presenters (report/).

Each command is a `Question`: its help line, the request classes whose fields are its options (with what is left
out of each), and the presenter options of its own (`--json`, `--plot`, `--emit`). The modules holding the
requests are imported only for the command that runs (the CLI answers in ~0.2 s).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Callable

from ..errors import GpuwiseError
from .command import Command
from .options import add_request_options, request_options

JSON_HELP = "machine-readable output (docs/json-schema.md)"


@dataclass(frozen=True)
class Part:
    """A request class (by module and name, imported when the command is built) whose fields are options."""

    module: str
    name: str
    skip: frozenset[str] = frozenset()
    help_prefix: str = ""

    def cls(self) -> type:
        return getattr(importlib.import_module(self.module, __package__), self.name)


@dataclass(frozen=True)
class Question:
    help: str
    parts: tuple[Part, ...]
    run: Callable[[argparse.Namespace], str]
    extra: Callable[[argparse.ArgumentParser], None] | None = None
    """Presenter options besides --json (a plot file, a recipe folder)."""

    def add_options(self, p: argparse.ArgumentParser) -> None:
        for part in self.parts:
            add_request_options(p, part.cls(), skip=part.skip, help_prefix=part.help_prefix)
        if self.extra is not None:
            self.extra(p)
        p.add_argument("--json", action="store_true", help=JSON_HELP)


def _options(args: argparse.Namespace, part: Part) -> dict:
    return request_options(args, part.cls(), skip=part.skip | {"model", "gpu"})


FIT = Part("..plan.fit", "FitRequest")
TRAIN = Part("..plan.train", "TrainRequest")
INFER = Part("..plan.infer", "InferRequest")
ROOFLINE = Part("..plan.roofline", "RooflineRequest")
PLAN = Part("..plan.planner", "PlanRequest")
PICK = Part("..plan.pick_request", "PickRequest")
DOCTOR = Part("..plan.doctor", "DoctorOptions")
DOCTOR_INFER = Part("..plan.fit", "FitRequest", skip=frozenset({"model", "gpu", "num_gpus"}), help_prefix="infer: ")


def _answer(api: str, part: Part, to_dict: str, render: str) -> Callable[[argparse.Namespace], str]:
    """A command that asks the Python API function `api` with the options of `part` and prints the result with
    report.json_out's `to_dict` (--json) or report.text's `render`."""

    def run(args: argparse.Namespace) -> str:
        from .. import api as api_module

        result = getattr(api_module, api)(args.model, gpu=args.gpu, **_options(args, part))
        fix = _fix(result)
        if args.json:
            from ..report import json_out

            return json_out.dumps(getattr(json_out, to_dict)(result, fix=fix))
        from ..report import text

        return getattr(text, render)(result, fix=fix)

    return run


def _fix(result):
    """For a job that does not fit, the one change `gpuwise doctor` heads its answer with (None when it fits, or
    when no remedy fits): `fit` and `train` name it under their verdict (issue 21, item 13)."""
    if result.fits:
        return None
    from ..errors import GpuwiseError

    try:
        if hasattr(result, "estimate"):  # fit: by memory alone, as fast as fit itself
            from ..plan.fit_fix import fit_fix

            return fit_fix(result)
        from ..plan.doctor import doctor

        return doctor(result.request).fix
    except GpuwiseError:
        return None


def _roofline(args: argparse.Namespace) -> str:
    from ..api import roofline

    result = roofline(args.model, gpu=args.gpu, plot=args.plot, **_options(args, ROOFLINE))
    if args.json:
        from ..report.json_out import dumps, roofline_to_dict

        return dumps(roofline_to_dict(result))
    from ..report.text import render_roofline

    return render_roofline(result)


def _plot_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="FILE", help="write a log-log roofline plot to FILE.png or FILE.svg")


def _rate_plot_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="FILE", help="write latency against request rate (TTFT p50/p90, TPOT p50 of "
                                                  "the simulated engine; the knee where queueing starts) to "
                                                  "FILE.png or FILE.svg")


def _infer(args: argparse.Namespace) -> str:
    from ..api import infer

    result = infer(args.model, gpu=args.gpu, plot=args.plot, **_options(args, INFER))
    if args.json:
        from ..report.json_out import dumps, infer_to_dict

        return dumps(infer_to_dict(result))
    from ..report.text import render_infer

    out = render_infer(result)
    return out + (f"\nlatency-vs-rate plot written to {result.plot}" if result.plot else "")


def _plan(args: argparse.Namespace) -> str:
    from ..api import plan

    result = plan(args.model, gpu=args.gpu, **_options(args, PLAN))
    written = []
    if args.emit:
        if not result.plans:
            raise GpuwiseError(f"--emit: no plan to write ({result.why})")
        from ..plan.recipe import write_recipes

        try:
            written = write_recipes(result, result.plans[0], args.emit)
        except OSError as exc:
            raise GpuwiseError(f"--emit: cannot write to '{args.emit}': {exc.strerror or exc}") from None
    if args.json:
        from ..report.json_out import dumps, plan_to_dict

        doc = plan_to_dict(result)
        if args.emit:
            doc["emitted"] = [str(p) for p in written]
        return dumps(doc)
    from ..report.text import render_plan

    out = render_plan(result)
    if written:
        out += f"\nLaunch recipe for #1 written to {args.emit}: " + ", ".join(p.name for p in written)
    return out


def _emit_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--emit", metavar="DIR", help="write the best plan's launch recipe to DIR (torchrun command, "
                                                 "torchtitan TOML, Megatron-LM flags, DeepSpeed JSON)")


def _pick(args: argparse.Namespace) -> str:
    from ..api import pick

    result = pick(args.model, **_options(args, PICK))
    if args.json:
        from ..report.json_out import dumps, pick_to_dict

        return dumps(pick_to_dict(result))
    from ..report.text import render_pick

    return render_pick(result)


def _doctor(args: argparse.Namespace) -> str:
    from ..api import doctor

    infer = args.task == "infer"
    job = _options(args, DOCTOR_INFER) if infer else _options(args, TRAIN)
    if infer:  # the infer job's GPUs are fit's --num-gpus, which doctor reads as train's option of that name
        job["num_gpus"] = args.num_gpus
        job = {k: v for k, v in job.items() if v is not None}
    result = doctor(args.model, gpu=args.gpu, **_options(args, DOCTOR), **job)
    if args.json:
        from ..report.json_out import doctor_to_dict, dumps

        return dumps(doctor_to_dict(result))
    from ..report.text import render_doctor, render_doctor_infer

    return (render_doctor_infer if infer else render_doctor)(result)


_QUESTIONS: dict[str, Question] = {
    "fit": Question("inference memory per GPU: will MODEL fit on GPU?", (FIT,),
                    _answer("fit", FIT, "fit_to_dict", "render_fit")),
    "train": Question("training memory per GPU and FLOPs per step: will this job fit?", (TRAIN,),
                      _answer("train", TRAIN, "train_to_dict", "render_train")),
    "doctor": Question("a job does not fit (or ran out of memory): remedies, ranked",
                       (TRAIN, DOCTOR, DOCTOR_INFER), _doctor),
    "infer": Question("inference speed: time to first token, time per token, throughput, cost; under load with "
                      "--request-rate", (INFER,), _infer, _rate_plot_option),
    "plan": Question("search the parallel layouts of a training job and rank those that fit", (PLAN,), _plan,
                     _emit_option),
    "pick": Question("which GPU kind and how many for a workload: ranked, with each rejection's rule", (PICK,),
                     _pick),
    "roofline": Question("the model's operations on the GPU's roofline (table and plot)", (ROOFLINE,), _roofline,
                         _plot_option),
}

QUESTIONS: dict[str, Command] = {name: Command(q.help, q.add_options, q.run) for name, q in _QUESTIONS.items()}
