"""Round tick values for the report's plots: 0, 25, 50, 75 GOPS, or 0, 30, 60, 90 s, never 3, 38, 74 s.

An axis gets about `count` ticks at a round step (1, 2, 2.5 or 5 times a power of ten; for time,
also the clock's 15 s, 30 s, 15 min, 30 min, 3 h, 6 h, 12 h), from the last round value at or
below its data to the first at or above it, so the plot's scale runs from tick to tick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from aiperf.units import si_prefix

STEPS = (1.0, 2.0, 2.5, 5.0)  # times a power of ten: 1-2-5, with 2.5 for quarters
# Round steps of a clock, in seconds: what people read as "every half minute", "every quarter hour".
TIME_STEPS_S = (
    1.0,
    2.0,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    10800.0,
    21600.0,
    43200.0,
    86400.0,
)


def _decimal_step(raw: float) -> float:
    """The smallest round step (STEPS times a power of ten) at least `raw`."""
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for step in STEPS:
        if step * magnitude >= raw * (1 - 1e-9):
            return step * magnitude
    return 10.0 * magnitude


def _time_step(raw: float) -> float:
    """The smallest clock step at least `raw` seconds; beyond a day, whole days at a decimal step."""
    if raw < 1.0:
        return _decimal_step(raw)
    for step in TIME_STEPS_S:
        if step >= raw * (1 - 1e-9):
            return step
    return 86400.0 * _decimal_step(raw / 86400.0)


def round_ticks(lo: float, hi: float, count: int = 5, *, time: bool = False) -> list[float]:
    """Ticks at a round step covering [lo, hi]: the first at or below lo, the last at or above hi,
    about `count` steps apart (at most count + 2 ticks). `time`: the values are seconds and the step
    is a clock's. An empty range (lo == hi) gets a range around it."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"an axis needs finite bounds, got {lo!r} and {hi!r}")
    lo, hi = min(lo, hi), max(lo, hi)
    if hi == lo:
        lo, hi = (lo - 1.0, hi + 1.0) if lo == 0 else (lo - abs(lo) * 0.1, hi + abs(hi) * 0.1)
    raw = (hi - lo) / max(1, count)
    step = _time_step(raw) if time else _decimal_step(raw)
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    # Printed at 12 significant digits so that 3 * 0.1 is 0.3, not 0.30000000000000004.
    return [float(f"{i * step:.12g}") for i in range(first, last + 1)]


def time_unit(ticks: Sequence[float]) -> tuple[str, float]:
    """The unit an axis of seconds reads best in, from its step: ("s", 1), ("min", 60) or ("h", 3600)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    if step >= 3600 and step % 3600 == 0:
        return "h", 3600.0
    if step >= 60 and step % 60 == 0:
        return "min", 60.0
    return "s", 1.0


def si_axis(ticks: Sequence[float], unit: str) -> tuple[str, Callable[[float], str]]:
    """An axis of `unit` (OPS, OPS/sample): the prefixed unit its ticks share, for its label ("GOPS"),
    and the tick labels' format (25, not 25000000000)."""
    prefix, scale = si_prefix(max((abs(t) for t in ticks), default=0.0))
    return f"{prefix}{unit}", lambda v: f"{v / scale:.12g}"
