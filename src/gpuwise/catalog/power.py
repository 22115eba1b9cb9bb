"""Board power limits: how much slower compute runs when a GPU may draw less than the power its speed was measured at.

A GPU under a power limit (`nvidia-smi -pl W`, or a card sold at a lower TDP than its sibling on the same die) keeps
its memory clock and lowers its SM clock until the board draws no more than the limit (ashalliants/ninfer-3090#72
logged an RTX 3090 at its 315 W cap: the SM clock pays, the memory clock stays at 9,501 MHz in every sample). So
compute-bound kernels (matrix products, attention) slow with the clock, and streaming kernels keep their bandwidth.

Board power at full compute load is a part that does not follow the SM clock (memory, board, leakage) plus a part
that grows with it: P(f) = P0 + (P_rated - P0) (f / f_rated)^ALPHA, so under a limit P the clock falls to
f / f_rated = ((P - P0) / (P_rated - P0))^(1 / ALPHA). Two published measurements fix the constants:

- facebookexperimental/triton#2023: a GB300 (rated 1,400 W) capped at 500 W runs cuBLAS GEMMs at ~617 TFLOP/s
  against ~1,600-2,174 at 1,400 W, a ratio of 0.28-0.39; the formula gives (500 - 280) / (1400 - 280) = 0.196,
  to the power 1 / 1.5 = 0.34.
- noonghunna/club-3090#103: an RTX 3090 (rated 420 W) power-cap sweep under load, 1,395 MHz at a 210 W cap and
  1,470 MHz at 220 W; the formula gives 1,395 x ((220 - 84) / (210 - 84))^(1 / 1.5) = 1,467 MHz.

Above its rated power a board gains nothing here: the device profiles are measured at the rated limit, where a
training load keeps the clock power-bound (devices.toml, ml-engineering's sustained MSMF).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import InvalidArgument

CLOCK_POWER_EXPONENT = 1.5
"""ALPHA: board power above the static part grows as the SM clock to this power (dynamic power C V^2 f, with the
voltage rising with the clock over part of the range); fits both anchors in the module docstring."""

STATIC_POWER_SHARE = 0.2
"""P0 / P_rated: the share of the rated board power that does not follow the SM clock under a compute load (HBM or
GDDR, board, leakage); fits both anchors in the module docstring."""

MAX_POWER_LIMIT_W = 10_000.0


def clock_factor(limit_w: float | None, rated_w: float | None) -> float:
    """SM clock (and compute throughput) at `limit_w` as a share of the one at `rated_w` (1 when either is unknown
    or the limit is not below the rated power)."""
    if not limit_w or not rated_w or limit_w >= rated_w:
        return 1.0
    static = STATIC_POWER_SHARE * rated_w
    return ((limit_w - static) / (rated_w - static)) ** (1 / CLOCK_POWER_EXPONENT)


def lowest_limit_w(rated_w: float) -> float:
    """The lowest limit the model can answer for: above the power that does not follow the clock, with the clock at
    a tenth of its rated value or more (real boards refuse limits far below their rated power anyway)."""
    static = STATIC_POWER_SHARE * rated_w
    return static + (rated_w - static) * 0.1 ** CLOCK_POWER_EXPONENT


def with_power_limit(gpu, watts: object):
    """`gpu` run under a board power limit of `watts` (`--power-limit`, as `nvidia-smi -pl` sets it)."""
    if isinstance(watts, str):
        text = watts.strip().lower().removesuffix("w").strip()
        try:
            watts = float(text)
        except ValueError:
            raise InvalidArgument(f"--power-limit: '{watts}' is not a power in watts (e.g. 500 or 500W)") from None
    if isinstance(watts, bool) or not isinstance(watts, (int, float)) or not math.isfinite(watts) \
            or not 0 < watts <= MAX_POWER_LIMIT_W:
        raise InvalidArgument(f"--power-limit must be a power in watts in (0, {MAX_POWER_LIMIT_W:g}], got {watts!r}")
    if gpu.extra.get("mig_parent"):
        raise InvalidArgument(f"--power-limit: a power limit applies to the whole card, not to the MIG slice {gpu.name}")
    if not gpu.tdp_w:
        raise InvalidArgument(f"--power-limit: {gpu.name} has no rated power in the catalog to compare {watts:g} W "
                              "with")
    if watts > gpu.tdp_w:
        raise InvalidArgument(f"--power-limit: {watts:g} W is above the rated {gpu.tdp_w:g} W of {gpu.name}; its speed "
                              "figures are measured at the rated power and a higher limit adds nothing here")
    low = lowest_limit_w(gpu.tdp_w)
    if watts < low:
        raise InvalidArgument(f"--power-limit: {watts:g} W is below what {gpu.name} (rated {gpu.tdp_w:g} W) can run "
                              f"at in this model (from {math.ceil(low):g} W)")
    return replace(gpu, power_limit_w=float(watts), name=f"{gpu.name} at {watts:g} W")
