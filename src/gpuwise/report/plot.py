"""Plots (matplotlib, optional: `pip install gpuwise[plot]`), imported only when a plot is asked for."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgument
from ..plan.roofline import RooflineResult

FORMATS = (".png", ".svg")


def save_roofline(result: RooflineResult, path: str) -> Path:
    """A log-log roofline (datasheet and achievable) with the model's operations placed on it, written to `path`
    (.png or .svg): `gpuwise roofline --plot`."""
    rf, title = result.roofline, result.title
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise InvalidArgument(f"--plot: use a .png or .svg file name, got '{path}'")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidArgument("--plot needs matplotlib: pip install 'gpuwise[plot]'") from None
    ops = [op for op in rf.ops if op.flops > 0]
    xs = [op.intensity for op in ops]
    lo = min([1.0, *xs]) / 4
    hi = max([rf.ridge * 8, *xs]) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    ax.loglog(grid, [min(rf.peak_flops, x * rf.bandwidth_bytes_per_s) / 1e12 for x in grid], color="0.35",
              label=f"datasheet: {rf.peak_flops / 1e12:.0f} TFLOP/s {rf.dtype}, "
                    f"{rf.bandwidth_bytes_per_s / 1e12:.2f} TB/s")
    ax.loglog(grid, [min(rf.achievable_flops, x * rf.achievable_bandwidth_bytes_per_s) / 1e12 for x in grid],
              color="tab:blue", linestyle="--", label="achievable (device profile)")
    ax.axvline(rf.ridge, color="0.6", linestyle=":", linewidth=1)
    ax.annotate(f"ridge {rf.ridge:.0f} FLOP/B", (rf.ridge, rf.peak_flops / 1e12), textcoords="offset points",
                xytext=(4, -14), fontsize=8, color="0.35")
    for op, x in zip(ops, xs):
        y = min(rf.achievable_flops, x * rf.achievable_bandwidth_bytes_per_s) / 1e12
        color = "tab:red" if rf.bound(op) == "memory" else "tab:green"
        ax.scatter([x], [y], color=color, zorder=3, s=28)
        ax.annotate(op.name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
