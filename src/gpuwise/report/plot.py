"""Plots (matplotlib, optional: `pip install gpuwise[plot]`), imported only when a plot is asked for."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgument
from ..plan.roofline import RooflineResult

FORMATS = (".png", ".svg")


def _pyplot(path: str):
    """(the output path, matplotlib.pyplot on the Agg backend); one clear error for a bad name or no matplotlib."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise InvalidArgument(f"--plot: use a .png or .svg file name, got '{path}'")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidArgument("--plot needs matplotlib: pip install 'gpuwise[plot]'") from None
    return out, plt


def _save(fig, out: Path) -> None:
    """Write the figure, its folder made if missing; a path that cannot be written is one line, not a traceback."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out)
    except OSError as exc:
        import matplotlib.pyplot as plt

        plt.close(fig)
        raise InvalidArgument(f"--plot: cannot write '{out}' ({exc.strerror or exc.__class__.__name__})") from None


def save_roofline(result: RooflineResult, path: str) -> Path:
    """A log-log roofline (datasheet and achievable) with the model's operations placed on it, written to `path`
    (.png or .svg): `gpuwise roofline --plot`."""
    rf, title = result.roofline, result.title
    out, plt = _pyplot(path)
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
        y = min(rf.achievable_flops, x * rf.bandwidth(op)) / 1e12  # a streaming kernel sits on the copy rate
        color = "tab:red" if rf.bound(op) == "memory" else "tab:green"
        ax.scatter([x], [y], color=color, zorder=3, s=28)
        ax.annotate(op.name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def save_rate_sweep(result, saturation: float, points, path: str) -> Path:
    """Latency against request rate for `gpuwise infer --plot`: TTFT p50/p90 and TPOT p50 of the simulated engine
    from 5% to 125% of its saturation rate, the requested rate marked: the knee is where queueing starts."""
    out, plt = _pyplot(path)
    req = result.request
    rates = [p.request_rate for p in points]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    ax.semilogy(rates, [p.result.ttft_s.p50 * 1e3 for p in points], marker="o", label="TTFT p50")
    ax.semilogy(rates, [p.result.ttft_s.p90 * 1e3 for p in points], marker="o", linestyle="--", label="TTFT p90")
    ax.semilogy(rates, [p.result.tpot_s.p50 * 1e3 for p in points], marker="s", label="TPOT p50")
    ax.axvline(saturation, color="0.5", linestyle=":", linewidth=1)
    ax.annotate(f"saturation {saturation:.3g} requests/s", (saturation, ax.get_ylim()[1]), textcoords="offset points",
                xytext=(4, -14), fontsize=8, color="0.35")
    if req.request_rate and req.request_rate != float("inf"):
        ax.axvline(req.request_rate, color="tab:red", linewidth=1, label=f"requested {req.request_rate:g}/s")
    ax.set_xlabel("request rate (requests/s, Poisson)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"{req.model.id} on {req.num_gpus} x {req.gpu.name}, {req.engine}: "
                 f"{req.prompt_tokens} + {req.output_tokens} tokens", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out
