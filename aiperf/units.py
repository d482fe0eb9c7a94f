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


# SI prefixes, largest first: a figure takes the largest whose value is at least 1 (after rounding).
_PREFIXES = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))


def si_prefix(value: float) -> tuple[str, float]:
    """The SI prefix and its scale for a figure of `value`'s size (("G", 1e9) for 18.3e9), so that
    the figure shows at three significant digits between 1 and 999; ("", 1.0) below 1000."""
    size = abs(value)
    for prefix, scale in _PREFIXES:
        # 999.96e6 rounds to 1000 M at three digits: it is shown as 1 G instead.
        if size >= scale or float(f"{size / scale:.3g}") >= 1.0 and scale > 1.0:
            return prefix, scale
    return "", 1.0


def _digits(scaled: float) -> str:
    """Three significant digits, never an exponent (beyond the largest prefix, the whole number)."""
    return f"{scaled:.3g}" if abs(scaled) < 1000 else f"{scaled:.0f}"


def si(value: float, unit: str) -> str:
    """A figure at three significant digits with an SI prefix on its unit: "18.3 GOPS"."""
    prefix, scale = si_prefix(value)
    return f"{_digits(value / scale)} {prefix}{unit}"


def format_ops(value: float) -> str:
    """The figure and its prefix, for a caller that appends its own unit: format_ops(v) + "OPS" is
    ops_rate(v). Prefer the function of the quantity (ops_rate, ops_per_sample, flop_rate)."""
    prefix, scale = si_prefix(value)
    return f"{_digits(value / scale)} {prefix}"


def ops_rate(value: float) -> str:
    """Operations per second, aiperf's OPS (and the regulated score): "18.3 GOPS", "1.83 TOPS"."""
    return si(value, "OPS")


def ops_span(low: float | None, high: float | None) -> str:
    """A range of OPS, a 95% interval's: "19.9 GOPS to 35.3 GOPS"; "-" without both ends."""
    if low is None or high is None:
        return "-"
    return f"{ops_rate(low)} to {ops_rate(high)}"


def ops_per_sample(value: float) -> str:
    """A model's operations per sample (trained or evaluated): "4.12 MOPS/sample"."""
    return si(value, "OPS/sample")


def flop_rate(value: float) -> str:
    """Floating-point operations per second (tensor FLOP/s, a measured peak): "1.23 GFLOP/s"."""
    return si(value, "FLOP/s")


def operations(value: float) -> str:
    """A count of operations (a run's total): "18.3 T operations"."""
    prefix, scale = si_prefix(value)
    return f"{_digits(value / scale)} {prefix + ' ' if prefix else ''}operations"


def exact(value: float) -> str:
    """A figure in full, for beside a rounded one where a reader needs it: 18333012345."""
    return f"{value:.0f}" if abs(value) >= 1 else f"{value:.6g}"
