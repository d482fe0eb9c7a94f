"""An event's values, checked as the rebuild reads them: each a clear ValueError when it is not what the
event log's format says (aiperf.results.mllog.keys), which the rebuild turns into the line's error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from aiperf.store.records import ScoreResult


def utc(seconds: Any) -> datetime:
    """The datetime the store makes of the same Unix time (aiperf.store.conversion.utc)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"time_s {seconds!r} is not a number")
    return datetime.fromtimestamp(seconds, tz=UTC)


def whole(value: Any, what: str) -> int:
    """A count or id: an int of at least 0 (not a bool, which Python counts as one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} {value!r} is not a whole number of at least 0")
    return value


def number(value: Any, what: str) -> float | None:
    """A figure that may be absent: None, or an int or float (not a bool)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} {value!r} is not a number")
    return value


def present(value: float | None, what: str) -> float:
    """A number an event must carry (a None would otherwise reach float())."""
    if value is None:
        raise ValueError(f"{what} None is not a number")
    return value


def checked_best_weights(value: Any) -> dict[str, Any] | None:
    """The best_weights event's value: none, or an object naming the trial, epoch, file and sha256."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("best_weights is not an object")
    missing = [k for k in ("trial", "epoch", "file", "sha256", "val_accuracy") if k not in value]
    if missing:
        raise ValueError(f"best_weights has no {', '.join(missing)}")
    if not isinstance(value["file"], str) or not isinstance(value["sha256"], str):
        raise ValueError("best_weights' file and sha256 must be text")
    return dict(value)


def checked_score(value: Any) -> ScoreResult:
    """The score event's value as a ScoreResult; a figure a later aiperf adds is left out."""
    if not isinstance(value, dict):
        raise ValueError("the score is not an object")
    names = {f.name for f in fields(ScoreResult)}
    known = {k: v for k, v in value.items() if k in names}
    try:
        return ScoreResult(**known)
    except TypeError as exc:
        raise ValueError(f"the score lacks a figure: {exc}") from None


def resource_fields(resources: Mapping[str, Any]) -> dict[str, Any]:
    """The run's resources (run_resources events, merged) as RunRecord's fields."""
    return {
        "precision": resources.get("precision"),
        "backend": resources.get("backend"),
        "jit_compile": resources.get("jit_compile"),
        "peak_flops": resources.get("peak_flops"),
        "worker_peaks": tuple(resources.get("worker_peaks") or ()),
        "data_feed": resources.get("data_feed"),
        "feed_rates": tuple(resources.get("feed_rates") or ()),
        "reference_rates": tuple(resources.get("reference_rates") or ()),
        "energy_windows": tuple(resources.get("energy_windows") or ()),
    }
