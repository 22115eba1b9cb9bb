"""Only for src/gpuwise/cli.py, which imports `cli_main` from here: `gpuwise bench train` is `commands.bench_train`
(train_run.py measures, train_report.py reports). Delete this module once cli.py imports measure.commands.
"""

from .commands import bench_train as cli_main

__all__ = ["cli_main"]
