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


def parse_walltime(text: str | int | float) -> float:
    """Seconds from a queue's walltime ([D-]HH:MM[:SS]) or an aiperf duration (90m, 2h)."""
    value = str(text).strip()
    days = 0
    if "-" in value:
        day_part, value = value.split("-", 1)
        days = int(day_part)
    if ":" in value:
        parts = [float(p) for p in value.split(":")]
        if len(parts) not in (2, 3):
            raise ValueError(f"not a walltime: {text!r} (use HH:MM:SS)")
        hours, minutes, seconds = (parts + [0.0])[:3]
        total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    else:
        total = days * 86400 + parse_duration(value)
    if total <= 0:
        raise ValueError(f"walltime must be positive, got {text!r}")
    return total


def format_ops(value: float) -> str:
    """1.23 GOPS-style figures for tables."""
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.1f} "
