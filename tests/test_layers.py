"""The package's layers point one way (README, "Layout"): every import in src/gpuwise, lazy ones included, goes down.

Leaf modules (units, errors, ...; dtypes) -> the model description (model/) -> catalogs (catalog/) and weight
formats (quant/) -> estimators (estimate/) -> planners and advisers (plan/) -> measurement (measure/: torch, NVML;
it may call the planners, never a presenter or the facade) -> presenters: report/ (text, JSON, plots), the Python
API, the CLI, then the HTTP server built on the CLI's commands.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "gpuwise"
LEAVES = ("units", "errors", "memo", "version", "schema", "fields")
RANK = {**dict.fromkeys(LEAVES, 0), "dtypes": 1, "jsonfile": 1, "model": 2, "catalog": 3, "quant": 3, "estimate": 4,
        "plan": 5, "measure": 6, "report": 7, "api": 8, "cli": 9, "serve": 10, "__init__": 11, "__main__": 11}
"""Each top-level module's or package's layer: an import may reach a lower layer or its own package only."""
EXCEPTIONS = {("cli", "serve")}
"""`gpuwise serve` starts the server (serve/), which is built on the CLI's commands: the one upward call."""


def _top(module: str) -> str:
    """'gpuwise.plan.train' -> 'plan'; 'gpuwise' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of a gpuwise module in `path` (function-level ones too)."""
    package = list(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                if not node.module:  # `from .. import x`: each name may be a module
                    out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
                    continue
            if mod.split(".")[0] == "gpuwise":
                out.append((node.lineno, mod))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "gpuwise"]
    return out


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    own = _top(".".join(("gpuwise", *path.relative_to(SRC).with_suffix("").parts)))
    bad = [f"line {line}: {own} imports {mod}" for line, mod in _imports(path)
           if _top(mod) != own and RANK[_top(mod)] >= RANK[own] and (own, _top(mod)) not in EXCEPTIONS]
    assert not bad, "; ".join(bad)


def test_every_top_level_module_has_a_layer() -> None:
    names = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.suffix == ".py" or
             (p.is_dir() and (p / "__init__.py").exists())}
    assert names <= set(RANK), sorted(names - set(RANK))
