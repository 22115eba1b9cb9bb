"""Only for src/gpuwise/cli.py, which imports `cli_main` from here: `gpuwise bench comm` is `commands.bench_comm`
(comm_run.py measures, comm_report.py reports). Delete this module once cli.py imports measure.commands.
"""

from .commands import bench_comm as cli_main

__all__ = ["cli_main"]
