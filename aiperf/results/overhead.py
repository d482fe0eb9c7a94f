"""The benchmark's own cost, from a run's records: its seed trials' training rate against bare
Keras measured on the same nodes before the window (aiperf.train.bare_reference).

Both sides train the same model (the run's seed architecture) on the same feed, so their rates in
training operations per second (aiperf's convention: samples x the model's counted operations per
sample) compare directly:

- the seed trials' rate: every trial the search made as the seed ("seed" operator) that trained,
  its samples trained x its train_ops_per_sample, over its `train_s` phase seconds (in training
  steps; building, counting, compiling and tracing, evaluating are other phases and left out),
  summed over those trials: one trial's rate on one worker, weighted by the time it trained;
- bare Keras: the mean of the workers' rates (each worker one clean process, as a trial is one
  worker's).

The ratio carries its 95% interval, from both sides' own spread: the seed trials' rates (one per
trial, aiperf.results.uncertainty.ops_interval) and the reference's bursts (each worker's timed
steps rated in consecutive bursts, aiperf.train.bare_reference), their relative half-widths added
in quadrature. A ratio whose whole interval lies under BELOW (0.90) says the benchmark's
machinery, not the model or the node, costs its trials: the verdict names it. A ratio under 0.90
whose interval reaches above it gets no verdict, only its interval: two seed trials, or a reference
whose bursts differ widely, cannot tell a 15% cost from noise (issue 52 measured ratios of 0.77 to
1.82 from one build on one machine). Without seed trials that trained, or without a reference, it
says which and gives no ratio. The reference trains at the smallest of search.space.batch_size, and so
does every seed trial of the first round (aiperf.search.morphism); a seed trained again later has a
drawn batch. Only the seed trials at the reference's batch (per device, as a trial records it) are
compared when there are any; otherwise all of them are (a run recorded before the first round was
pinned), and the line says the batches differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiperf.results.uncertainty import Interval, ops_interval, series_interval
from aiperf.store import RunRecord
from aiperf.units import ops_rate

BELOW = 0.90  # under this, the benchmark's own cost is shown as a verdict
# The operator the search records for its seed trials: aiperf.search.space.SEED_OPERATOR, spelt here
# because importing the search (keras_tuner, Keras) would make every `aiperf show` slow.
SEED_OPERATOR = "seed"


@dataclass(frozen=True)
class Overhead:
    """A run's seed trials against bare Keras, or why they cannot be compared."""

    seed_ops_per_s: float | None  # None: no seed trial trained
    seed_trials: int
    reference_ops_per_s: float | None  # None: no worker measured bare Keras
    reference_workers: int
    reason: str | None = None  # why there is no ratio
    other_batch: bool = False  # no seed trial trained at the reference's batch: all were compared
    interval: Interval | None = None  # the ratio's 95% interval (None: a side has no spread)

    @property
    def ratio(self) -> float | None:
        if self.seed_ops_per_s is None or not self.reference_ops_per_s:
            return None
        return self.seed_ops_per_s / self.reference_ops_per_s

    @property
    def below(self) -> bool:
        """The verdict: the ratio's whole 95% interval under BELOW."""
        return self.interval is not None and self.interval.high < BELOW

    def line(self) -> str:
        """e.g. "seed trials trained at 52.1 GOPS, bare Keras 53.0 GOPS per worker on the same
        nodes: 0.98"."""
        if self.ratio is None or self.seed_ops_per_s is None or self.reference_ops_per_s is None:
            return f"no comparison: {self.reason}"
        said = (
            f"seed trials trained at {ops_rate(self.seed_ops_per_s)}, bare Keras "
            f"{ops_rate(self.reference_ops_per_s)} per worker on the same nodes: {self.ratio:.2f}"
        )
        if self.interval is not None:
            said += f" (95% interval {self.interval.low:.2f} to {self.interval.high:.2f})"
        elif self.ratio < BELOW:
            said += " (no interval: too few seed trials or reference bursts to tell it from noise)"
        if self.other_batch:
            said += " (no seed trial at bare Keras's batch: compared at other batches)"
        if self.below:
            said += (
                f" - BELOW {BELOW:.2f}: the benchmark's own cost slows its trials on these nodes, "
                "not the model or the hardware (docs/performance.md)"
            )
        return said

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed_ops_per_s": self.seed_ops_per_s,
            "seed_trials": self.seed_trials,
            "reference_ops_per_s": self.reference_ops_per_s,
            "reference_workers": self.reference_workers,
            "ratio": self.ratio,
            "interval": None if self.interval is None else [self.interval.low, self.interval.high],
            "below": self.below,
            "reason": self.reason,
            "other_batch": self.other_batch,
            "line": self.line(),
        }


def _per_device(rate: dict[str, Any]) -> int | None:
    """The reference's batch per device, as a trial records its batch_size: the reference trains
    its global batch (per-device x the worker's devices) data-parallel, as a trial does."""
    batch, devices = rate.get("batch"), rate.get("devices") or 1
    return None if batch is None else int(batch) // int(devices)


def overhead(run: RunRecord) -> Overhead:
    """The run's seed trials against its workers' bare Keras (see the module's docstring)."""
    measured = [r for r in run.reference_rates if _positive(r, "ops_per_s")]
    rates = [float(r["ops_per_s"]) for r in measured]
    reference = sum(rates) / len(rates) if rates else None
    batches = {_per_device(r) for r in measured}
    trained = [
        t
        for t in run.trials
        if t.operator == SEED_OPERATOR
        and t.train_ops_per_sample
        and t.phases is not None
        and t.phases.train_s > 0
        and sum(e.samples_trained for e in t.epochs) > 0
    ]
    same = [t for t in trained if t.hyperparameters.get("batch_size") in batches]
    compared = same or trained
    ops = sum(
        sum(e.samples_trained for e in t.epochs) * (t.train_ops_per_sample or 0) for t in compared
    )
    seconds = sum(t.phases.train_s for t in compared if t.phases is not None)
    trials = len(compared)
    seed = ops / seconds if trials else None
    reason = None
    if reference is None:
        reason = f"bare Keras not measured ({_why_not(run.reference_rates)})"
    elif seed is None:
        reason = "no seed trial trained (none recorded its samples and training seconds)"
    other_batch = bool(compared) and not same and reference is not None
    seed_rates = [
        (
            float(sum(e.samples_trained for e in t.epochs) * (t.train_ops_per_sample or 0)),
            t.phases.train_s,
        )
        for t in compared
        if t.phases is not None
    ]
    bursts = [float(b) for r in measured for b in r.get("burst_ops_per_s") or ()]
    interval = _ratio_interval(seed, seed_rates, bursts, reference)
    return Overhead(seed, trials, reference, len(rates), reason, other_batch, interval)


def _ratio_interval(
    seed: float | None,
    seed_rates: list[tuple[float, float]],
    bursts: list[float],
    reference: float | None,
) -> Interval | None:
    """The ratio's 95% interval: each side's relative half-width (the seed trials' by their rates,
    the reference's by its bursts), added in quadrature; None when either side has no spread."""
    if not seed or not reference:
        return None
    seed_side = ops_interval(seed, seed_rates)
    reference_side = series_interval(bursts)
    if seed_side is None or reference_side is None:
        return None
    mean_burst = sum(bursts) / len(bursts)
    half = (
        ((seed_side.high - seed) / seed) ** 2
        + ((reference_side.high - mean_burst) / mean_burst) ** 2
    ) ** 0.5
    ratio = seed / reference
    return Interval(max(0.0, ratio * (1 - half)), ratio * (1 + half))


def _why_not(rates: tuple[dict[str, Any], ...]) -> str:
    """The recorded reasons the reference was skipped, or that it was not recorded at all."""
    reasons = sorted(
        {str(r["skipped"]) for r in rates if isinstance(r, dict) and r.get("skipped")}
    )
    return "; ".join(reasons) if reasons else "not recorded"


def _positive(record: Any, key: str) -> bool:
    value = record.get(key) if isinstance(record, dict) else None
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
