"""The `gpuwise` command line: a thin layer over the Python API.

argparse (stdlib) rather than a CLI framework keeps `gpuwise fit` far under the 0.3 s budget and lets every input
error come out as exactly one line on stderr with exit status 2. Each subcommand builds one result object and hands
it to a presenter (text or `--json`). The question commands' options are built from their request dataclasses
(options.py), so that the CLI, the Python API and the HTTP API share one declaration of each option.

- main.py: parsing, dispatch, errors; args.py: argparse with one-line errors and the option value types;
- questions.py: fit, train, doctor, infer, plan, pick, roofline; measure.py: calibrate, bench, watch;
- tools.py: explain, models, gpus, serve.
"""

from .args import UsageError
from .main import COMMANDS, EXIT_USAGE, main, parser, run

__all__ = ["COMMANDS", "EXIT_USAGE", "UsageError", "main", "parser", "run"]
