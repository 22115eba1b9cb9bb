"""Only for src/gpuwise/cli.py, which imports `cli_main` from here: `gpuwise watch` is `commands.watch`
(watch_view.py draws one refresh). Delete this module once cli.py imports measure.commands.
"""

from .commands import watch as cli_main

__all__ = ["cli_main"]
