"""How sure a figure is: the 95% interval of a run's OPS and regulated score, and of a series'.

One run's OPS on a shared machine moves by several percent from the next, so a bare figure ranks
machines 5% apart that the same machine's next run could reorder. Each figure therefore carries an
interval computed from what its own run measured (docs/rules.md, "How sure a figure is"):

- **A run's OPS.** The run's operations come from its trials, each an architecture the search drew
  and trained for some seconds. Each trial's rate (its operations over its epochs' seconds) is one
  draw of what this machine does on this workload; the run's OPS is their seconds-weighted mean
  scaled to the window. Its relative standard error is that of a weighted mean, with Kish's
  effective number of draws, and the interval is Student's t at 95% on it: few trials, or trials
  whose rates differ widely, give a wide interval. Fewer than two trials measure no spread: None.
- **A run's regulated score.** The OPS interval times the quality factor's interval: on the CNN
  track the best accuracy's Wilson interval over its validation samples (a binomial proportion);
  on the LM track the loss is an average over many tokens whose spread the records do not keep, so
  the factor is taken as exact and only the OPS interval carries over.
- **A series.** The runs' mean, plus or minus Student's t at 95% times their standard error: the
  spread between runs includes everything that moves from run to run.

What the interval is not: a bound on systematic error (a slower disk every run, a different search
seed). It says whether two results can be told apart by what they measured, as MLPerf's olympic
mean (drop the extremes of N runs) and HPL's run rules (the best of repeated runs, each run's
residual checked) address the same noise by repetition.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

_Z = 1.959963984540054  # the standard normal's 97.5th percentile (Wilson's interval)
# Student's t at 97.5% for 1 to 30 degrees of freedom (any statistics table): a list, not SciPy,
# so that `aiperf results list` starts no scientific stack.
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A 95% interval, low <= high."""

    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def scaled(self, low_factor: float, high_factor: float) -> Interval:
        return Interval(self.low * low_factor, self.high * high_factor)


def t_quantile(draws: float) -> float:
    """Student's t at 97.5% for `draws` draws: draws - 1 degrees of freedom, a fraction rounded
    down (the wider interval); beyond 30, Cornish and Fisher's
    expansion (within 0.02% there)."""
    freedom = max(int(draws - 1.0), 1)
    if freedom <= len(_T_975):
        return _T_975[freedom - 1]
    z, n = _Z, freedom
    return z + (z**3 + z) / (4 * n) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n * n)


def trial_rates(epochs: Iterable[tuple[int, int, float]]) -> list[tuple[float, float]]:
    """Per trial: (operations, seconds), from each epoch's (trial, operations, seconds); trials whose
    epochs took no time are left out (nothing to rate them by)."""
    ops: dict[int, float] = defaultdict(float)
    seconds: dict[int, float] = defaultdict(float)
    for trial, operations, spent in epochs:
        ops[trial] += operations
        seconds[trial] += max(spent, 0.0)
    return [(ops[t], seconds[t]) for t in ops if seconds[t] > 0]


def ops_interval(ops: float, trials: Sequence[tuple[float, float]]) -> Interval | None:
    """The run's OPS's 95% interval from its trials' (operations, seconds): its relative standard
    error is the seconds-weighted mean rate's. None with fewer than two trials, or no operations."""
    if len(trials) < 2 or ops <= 0:
        return None
    weights = [seconds for _, seconds in trials]
    rates = [operations / seconds for operations, seconds in trials]
    total = sum(weights)
    mean = sum(w * r for w, r in zip(weights, rates, strict=True)) / total
    if mean <= 0:
        return None
    draws = total**2 / sum(w * w for w in weights)  # Kish's effective number of trials
    if draws <= 1.0:
        return None
    spread = sum(w * (r - mean) ** 2 for w, r in zip(weights, rates, strict=True)) / total
    # The weighted variance is biased by draws / (draws - 1), as the plain one by n / (n - 1).
    relative = math.sqrt(spread * draws / (draws - 1.0) / draws) / mean
    half = t_quantile(draws) * relative
    return Interval(ops * max(0.0, 1.0 - half), ops * (1.0 + half))


def wilson(accuracy: float, samples: int) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion measured on `samples` draws."""
    if samples <= 0:
        return accuracy, accuracy
    z2 = _Z * _Z
    centre = (accuracy + z2 / (2 * samples)) / (1 + z2 / samples)
    half = (_Z / (1 + z2 / samples)) * math.sqrt(
        accuracy * (1 - accuracy) / samples + z2 / (4 * samples * samples)
    )
    return max(0.0, centre - half), min(1.0, centre + half)


def regulated_interval(
    ops: Interval | None,
    regulated: float,
    point_ops: float,
    factor_of: Callable[[float], float] | None,
    best_val_accuracy: float | None,
    val_samples: int,
) -> Interval | None:
    """The regulated score's 95% interval: the OPS interval times the quality factor's. With
    `factor_of` (the CNN track: accuracy -> factor) the factor's interval is the factor at the ends
    of the best accuracy's Wilson interval; without (the LM track), the factor is the point one."""
    if ops is None or point_ops <= 0:
        return None
    factor = regulated / point_ops
    if factor_of is None or best_val_accuracy is None:
        return ops.scaled(factor, factor)
    low, high = wilson(best_val_accuracy, val_samples)
    return Interval(ops.low * factor_of(low), ops.high * factor_of(high))


def series_interval(values: Sequence[float]) -> Interval | None:
    """A series' 95% interval: the mean of its runs' figures, plus or minus Student's t times their
    standard error. None for fewer than two runs."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile(len(values)) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(max(0.0, mean - half), mean + half)


def ranks(intervals: Sequence[Interval]) -> list[int]:
    """Each figure's rank where one ranks above another only when its whole interval lies above the
    other's: 1 + how many lie wholly above it. Overlapping intervals share a rank (a figure without
    an interval is the interval of its one point, so equal figures share one too)."""
    return [1 + sum(other.low > mine.high for other in intervals) for mine in intervals]
