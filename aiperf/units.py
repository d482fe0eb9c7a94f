"""The units aiperf reads and prints: durations as people write them, operations as tables show them."""

from __future__ import annotations

import re

_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$"
)


def parse_duration(value: str | int | float) -> float:
    """Seconds from '3m', '90s', '1h30m', '45' or a number; raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    match = _DURATION.match(str(value))
    if not match or not any(match.groups()):
        raise ValueError(f"not a duration: {value!r} (use e.g. 90s, 3m, 1h30m)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def format_ops(value: float) -> str:
    """1.23 GOPS-style figures for tables."""
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.1f} "
