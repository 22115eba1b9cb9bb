"""The reference commands: the catalogs (models, gpus), the glossary (explain) and the local page (serve)."""

from __future__ import annotations

import argparse

from ..errors import GpuwiseError
from .args import port, positive_int
from .command import Command


def _catalog_options(what: str):
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("query", nargs="?", help=f"filter by {what}")
        p.add_argument("--json", action="store_true")

    return add


def _listing(args: argparse.Namespace, command: str, what: str, found: list, to_dict, render) -> str:
    """A catalog listing: JSON (even when empty), or the table; nothing found is an error in text."""
    if args.json:
        from ..schema import dumps, envelope

        return dumps(envelope(command, **{command: [to_dict(x) for x in found]}))
    if not found:
        raise GpuwiseError(f"no catalog {what} matches '{args.query}'")
    return render(found)


def _models_options(p: argparse.ArgumentParser) -> None:
    _catalog_options("id, Hugging Face id or family")(p)
    from ..plan.runnable import DEFAULT_CONTEXT, FORMATS

    p.add_argument("--fits", metavar="GPUS", help="what runs on these GPUs: e.g. '2x rtx-3090', 'rtx-4090', '24GiB' "
                                                   "(each model in its best format that fits, with its speed)")
    p.add_argument("--engine", choices=tuple(FORMATS), default="llamacpp",
                   help="with --fits: the engine (default llamacpp)")
    p.add_argument("--context", type=positive_int, help=f"with --fits: usable context in tokens (default "
                                                        f"{DEFAULT_CONTEXT:,}, or the model's maximum if smaller)")
    p.add_argument("--top", type=positive_int, default=20, help="with --fits: rows shown with their speed (default 20)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="with --fits: the memory each GPU has free, e.g. 20GiB")


def _models(args: argparse.Namespace) -> str:
    from ..catalog.models import search_models
    from ..report.json_out import model_entry_to_dict
    from ..report.text import render_models

    if args.fits is None:
        if args.context is not None or args.engine != "llamacpp" or args.gpu_memory is not None:
            raise GpuwiseError("--engine, --context and --gpu-memory apply with --fits GPUS")
        return _listing(args, "models", "model", search_models(args.query), model_entry_to_dict, render_models)
    from ..plan.runnable import runnable
    from ..report.json_out import runnable_to_dict
    from ..report.text import render_runnable
    from ..schema import dumps

    r = runnable(args.fits, engine=args.engine, context=args.context, top=args.top, query=args.query,
                 gpu_memory=args.gpu_memory)
    return dumps(runnable_to_dict(r)) if args.json else render_runnable(r, args.top)


def _gpus(args: argparse.Namespace) -> str:
    from ..catalog.gpus import search_gpus
    from ..report.json_out import gpu_to_dict
    from ..report.text import render_gpus

    return _listing(args, "gpus", "GPU", search_gpus(args.query), gpu_to_dict, render_gpus)


def _explain_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("term", nargs="?", help="e.g. mfu, zero, bubble, ridge, nvlink, mig, fp8 (none: list the terms)")
    p.add_argument("--model", help="show the numbers for this model too (catalog name, HF id or config.json)")
    from ..plan.explain.examples import DEFAULT_GPU

    p.add_argument("--gpu", help=f"GPU for the numbers (default {DEFAULT_GPU})")
    p.add_argument("--list", action="store_true", help="list the terms")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _explain(args: argparse.Namespace) -> str:
    from ..plan import explain as ex
    from ..schema import dumps, envelope

    if args.list or not args.term:
        if args.json:
            return dumps(envelope("explain", terms=list(ex.TERMS)))
        return ex.list_terms()
    e = ex.explain(args.term, model=args.model, gpu=args.gpu)
    if args.json:
        return dumps(ex.to_dict(e))
    return ex.render(e)


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--quiet", action="store_true", help="do not log each request on stderr")
    p.add_argument("--data-dir", metavar="DIR", help="the only directory whose files the API may read by path "
                                                      "(config.json files, profiles); default: none")


def _serve(args: argparse.Namespace) -> None:
    from ..serve.server import cli_main

    return cli_main(args)


TOOLS: dict[str, Command] = {
    "explain": Command("a concept in plain words, with its numbers for your GPU and model", _explain_options, _explain),
    "serve": Command("a local web page and HTTP API over the same answers (http://127.0.0.1:8000)", _serve_options,
                     _serve),
    "models": Command("list the embedded model catalog, or with --fits what runs on your GPUs", _models_options,
                      _models),
    "gpus": Command("list the embedded GPU catalog", _catalog_options("id, name, vendor, segment or architecture"),
                    _gpus),
}
