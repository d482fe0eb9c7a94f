"""Where each worker's share of the timed window went: its trials' phases, and the rest idle.

A worker's share is the whole window (its segments' sum); its trials' phases (build, count, compile
and trace, train, evaluate, report: measured on the worker, aiperf.train.phases) take part of it, and
idle is what is left: start-up between trials, waiting for the next proposal, imports. Idle is
derived here, never stored. The workers are the ones that measured a peak before the window, and
any other that ran a trial.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiperf.store import RunRecord, window_seconds
from aiperf.store.records import TRIAL_PHASE_COLUMNS

# Phases in the order they are drawn, idle last.
PARTS = tuple(name.removesuffix("_s") for name in TRIAL_PHASE_COLUMNS) + ("idle",)


@dataclass(frozen=True)
class WorkerTime:
    worker: str
    trials: int  # trials that recorded their phases
    seconds: dict[str, float]  # per part of PARTS, idle included
    window_s: float

    @property
    def utilisation(self) -> float:
        """The share of its window this worker spent in training and evaluation steps."""
        return (
            (self.seconds["train"] + self.seconds["evaluate"]) / self.window_s
            if self.window_s > 0
            else 0.0
        )


def worker_times(run: RunRecord) -> list[WorkerTime]:
    """One entry per worker, by name; none before the window has ended or when no trial recorded phases."""
    try:
        window_s = window_seconds(run.windows)
    except ValueError:
        return []
    timed = [t for t in run.trials if t.phases is not None]
    if not timed:
        return []
    names = {str(p.get("worker")) for p in run.worker_peaks if p.get("worker")} | {
        t.worker or "?" for t in timed
    }
    result = []
    for name in sorted(names):
        mine = [t.phases for t in timed if (t.worker or "?") == name]
        seconds = {part: sum(getattr(p, f"{part}_s") for p in mine) for part in PARTS[:-1]}
        seconds["idle"] = max(0.0, window_s - sum(seconds.values()))
        result.append(WorkerTime(name, len(mine), seconds, window_s))
    return result


def percent(value: float | None) -> str:
    """A share as a percentage with three significant digits ("-" when there is none)."""
    return "-" if value is None else f"{100 * value:.3g}%"
