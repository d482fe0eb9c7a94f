"""A series of repeated runs summarised: what `aiperf run --repeat`, a series package and the results
list show of N runs of one config.

One run's OPS on a shared machine moves by a few percent from the next, so a single figure says
little about where a machine ranks; N runs say it with their spread. The summary gives the median,
extremes and coefficient of variation (what a reader judges the noise by) and the `ranked` figure,
the one a ranking orders by, and the 95% interval of the runs' mean (aiperf.results.uncertainty):
by the ruleset's series rule (aiperf.rules.SeriesRule: drop the
highest and lowest, mean of the rest, in MLPerf HPC's manner) or, without a rule, the median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from aiperf.errors import UserError
from aiperf.results.uncertainty import series_interval
from aiperf.rules import SeriesRule, available_rulesets, load_ruleset
from aiperf.store.records import RunRecord

__all__ = [
    "MEASURES",
    "SeriesRule",
    "SeriesSummary",
    "enough_runs",
    "ranked_value",
    "series_rule",
    "summarise",
    "summarise_runs",
]

# What a series is summarised by: the score's field, and its name in tables.
MEASURES = {"ops": "OPS", "regulated_score": "regulated score"}


@dataclass(frozen=True)
class SeriesSummary:
    """The figures of one measure (OPS, or the regulated score) over a series' runs."""

    runs: int  # how many figures were summarised
    median: float
    minimum: float
    maximum: float
    # Sample standard deviation over the mean (0.0 for one run, which measures no spread; 0.0 when
    # every figure is 0). A fraction: 0.03 is 3%.
    cv: float
    ranked: float  # the figure a ranking orders by (see ranked_value)
    # The 95% interval of the runs' mean (aiperf.results.uncertainty.series_interval; None for
    # one run, which measures no spread).
    low: float | None = None
    high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ranked_value(values: Sequence[float], rule: SeriesRule | None = None) -> float:
    """The figure a ranking orders a series by.

    With a rule: the rule's `drop` highest and `drop` lowest figures set aside (only when more
    figures than the rule drops are there; a shorter series keeps them all and is not a ranked
    closed result anyway, see `enough_runs`), then the rule's statistic of the rest. Without a
    rule: the median, which one bad run cannot move far."""
    ordered = sorted(_checked(values))
    if rule is None:
        return float(statistics.median(ordered))
    if len(ordered) > 2 * rule.drop and rule.drop:
        ordered = ordered[rule.drop : len(ordered) - rule.drop]
    if rule.statistic == "median":
        return float(statistics.median(ordered))
    return float(statistics.fmean(ordered))


def summarise(values: Sequence[float], rule: SeriesRule | None = None) -> SeriesSummary:
    """The summary of one measure over a series' runs (at least one figure, every one finite)."""
    checked = _checked(values)
    mean = statistics.fmean(checked)
    if len(checked) < 2 or mean == 0:
        cv = 0.0
    else:
        cv = statistics.stdev(checked) / abs(mean)
    interval = series_interval(checked)
    return SeriesSummary(
        low=None if interval is None else interval.low,
        high=None if interval is None else interval.high,
        runs=len(checked),
        median=float(statistics.median(checked)),
        minimum=float(min(checked)),
        maximum=float(max(checked)),
        cv=cv,
        ranked=ranked_value(checked, rule),
    )


def enough_runs(runs: int, rule: SeriesRule | None) -> bool:
    """Whether a series of `runs` valid runs is enough for a ranked closed result under the rule
    (without a rule, as under rulesets before 1.3, one run is)."""
    return runs >= (1 if rule is None else rule.runs)


def series_rule(ruleset: str | None) -> SeriesRule | None:
    """The series rule of the ruleset a series was judged by (None: it has none, as 1.0-1.2, or the
    ruleset is not one this aiperf knows)."""
    if ruleset is None or ruleset not in available_rulesets():
        return None
    try:
        return load_ruleset(ruleset).series
    except UserError:  # pragma: no cover - a known name always loads
        return None


def summarise_runs(
    records: Sequence[RunRecord], rule: SeriesRule | None = None
) -> dict[str, SeriesSummary]:
    """Each measure (MEASURES) summarised over the series' scored runs; ValueError when none is."""
    scores = [r.score for r in records if r.score is not None]
    if not scores:
        raise ValueError("no run of the series has a score")
    return {
        measure: summarise([float(getattr(s, measure)) for s in scores], rule)
        for measure in MEASURES
    }


def _checked(values: Sequence[float]) -> list[float]:
    figures = [float(v) for v in values]
    if not figures:
        raise ValueError("a series summary needs at least one run's figure")
    bad = [v for v in figures if not math.isfinite(v)]
    if bad:
        raise ValueError(f"a series summary needs finite figures; got {bad}")
    return figures
