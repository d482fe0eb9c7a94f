"""The score over time: OPS and the regulated score at checkpoints of a run, from its epochs.

AIPerf prints the score every 0.1 h of a run; the same figures here come from the records alone:
at a checkpoint t seconds into the timed window, the operations of every epoch that had ended by
then, divided by t, and the best validation accuracy of the complete epochs that had ended by then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from aiperf.results.score import regulated_score
from aiperf.store import RunRecord

CHECKPOINT_INTERVAL_S = 360.0  # 0.1 h


@dataclass(frozen=True)
class Checkpoint:
    t_s: float
    total_ops: float
    ops: float
    best_val_accuracy: float | None
    regulated_score: float


@dataclass(frozen=True)
class _Done:
    ended_s: float
    ops: float
    val_accuracy: float | None


def _epochs(run: RunRecord, start: datetime) -> list[_Done]:
    done = []
    for trial in run.trials:
        if trial.train_ops_per_sample is None:
            continue
        for e in trial.epochs:
            ops = e.samples_trained * trial.train_ops_per_sample + e.samples_evaluated * (
                trial.eval_ops_per_sample or 0
            )
            done.append(
                _Done(
                    (e.ended_at - start).total_seconds(),
                    float(ops),
                    e.val_accuracy if e.complete else None,
                )
            )
    return sorted(done, key=lambda d: d.ended_s)


def window(run: RunRecord) -> tuple[datetime, float] | None:
    """Start of the timed window and its length in seconds; None before the search has ended."""
    if run.search_started_at is None or run.search_ended_at is None:
        return None
    return run.search_started_at, (run.search_ended_at - run.search_started_at).total_seconds()


def score_over_time(
    run: RunRecord, checkpoints: list[float], val_samples: int
) -> list[Checkpoint]:
    """The score at each checkpoint (seconds into the timed window)."""
    span = window(run)
    if span is None:
        return []
    done = _epochs(run, span[0])
    result = []
    for t in checkpoints:
        if t <= 0:
            continue
        counted = [d for d in done if d.ended_s <= t + 1e-9]
        total = sum(d.ops for d in counted)
        accuracies = [d.val_accuracy for d in counted if d.val_accuracy is not None]
        best = max(accuracies) if accuracies else None
        ops = total / t
        result.append(Checkpoint(t, total, ops, best, regulated_score(ops, best, val_samples)))
    return result


def aiperf_checkpoints(elapsed_s: float, interval_s: float = CHECKPOINT_INTERVAL_S) -> list[float]:
    """Every 0.1 h of the window, and its end (so a run shorter than 0.1 h still has a row)."""
    points = []
    t = interval_s
    while t < elapsed_s - 1e-9:
        points.append(t)
        t += interval_s
    return points + [elapsed_s]


def even_checkpoints(elapsed_s: float, count: int = 60) -> list[float]:
    """`count` evenly spaced checkpoints for the plot."""
    return [elapsed_s * (i + 1) / count for i in range(count)]
