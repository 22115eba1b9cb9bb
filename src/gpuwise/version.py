"""gpuwise's version, in one place (pyproject.toml reads it from here). A leaf: imports nothing."""

__version__ = "0.1.0"
