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

A ratio under BELOW (0.90) says the benchmark's machinery, not the model or the node, costs its
trials: the verdict names it. Without seed trials that trained, or without a reference, it says
which and gives no ratio. The seed trials' batch is the one the search drew (any of
search.space.batch_size); the reference's is the smallest, and on a CPU a larger batch seldom
trains fewer samples a second, so a ratio under 1 is not the batch's doing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

    @property
    def ratio(self) -> float | None:
        if self.seed_ops_per_s is None or not self.reference_ops_per_s:
            return None
        return self.seed_ops_per_s / self.reference_ops_per_s

    @property
    def below(self) -> bool:
        return self.ratio is not None and self.ratio < BELOW

    def line(self) -> str:
        """e.g. "seed trials trained at 52.1 GOPS, bare Keras 53.0 GOPS per worker on the same
        nodes: 0.98"."""
        if self.ratio is None or self.seed_ops_per_s is None or self.reference_ops_per_s is None:
            return f"no comparison: {self.reason}"
        said = (
            f"seed trials trained at {ops_rate(self.seed_ops_per_s)}, bare Keras "
            f"{ops_rate(self.reference_ops_per_s)} per worker on the same nodes: {self.ratio:.2f}"
        )
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
            "below": self.below,
            "reason": self.reason,
            "line": self.line(),
        }


def overhead(run: RunRecord) -> Overhead:
    """The run's seed trials against its workers' bare Keras (see the module's docstring)."""
    ops = seconds = 0.0
    trials = 0
    for trial in run.trials:
        if trial.operator != SEED_OPERATOR or not trial.train_ops_per_sample:
            continue
        samples = sum(e.samples_trained for e in trial.epochs)
        if trial.phases is None or trial.phases.train_s <= 0 or samples <= 0:
            continue
        ops += samples * trial.train_ops_per_sample
        seconds += trial.phases.train_s
        trials += 1
    seed = ops / seconds if trials else None
    measured = [float(r["ops_per_s"]) for r in run.reference_rates if _positive(r, "ops_per_s")]
    reference = sum(measured) / len(measured) if measured else None
    reason = None
    if reference is None:
        reason = f"bare Keras not measured ({_why_not(run.reference_rates)})"
    elif seed is None:
        reason = "no seed trial trained (none recorded its samples and training seconds)"
    return Overhead(seed, trials, reference, len(measured), reason)


def _why_not(rates: tuple[dict[str, Any], ...]) -> str:
    """The recorded reasons the reference was skipped, or that it was not recorded at all."""
    reasons = sorted(
        {str(r["skipped"]) for r in rates if isinstance(r, dict) and r.get("skipped")}
    )
    return "; ".join(reasons) if reasons else "not recorded"


def _positive(record: Any, key: str) -> bool:
    value = record.get(key) if isinstance(record, dict) else None
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
