"""Only for src/gpuwise/cli.py, which imports `cli_main` from here: `gpuwise calibrate` is `commands.calibrate`
(calibrate_run.py measures, calibrate_report.py reports). Delete this module once cli.py imports measure.commands.
"""

from .commands import calibrate as cli_main

__all__ = ["cli_main"]
