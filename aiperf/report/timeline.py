"""The score over time: OPS and the regulated score at checkpoints of a run, from its epochs.

AIPerf prints the score every 0.1 h of a run; the same figures here come from the records alone:
at a checkpoint t seconds into the timed window, the operations of every epoch that had ended by
then, divided by t, and the best quality of the complete epochs that had ended by then. A resumed
run's window is its segments end to end: its clock stops between one segment's end and the next
one's start (the gap is not counted, as the headline's seconds do not count it: window_seconds). The quality
is the run's own (aiperf.quality): its validation loss on the LM track, its validation accuracy on
the CNN track; the regulated score is aiperf.results.score.regulated's, the headline's one rule, so
the last checkpoint (the window's end) is the headline's regulated score.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from aiperf import quality
from aiperf.config import ValidityConfig
from aiperf.results.division import recorded_rules
from aiperf.results.score import judged_by_loss, regulated
from aiperf.store import RunReads, RunRecord
from aiperf.store.records import WindowRecord

CHECKPOINT_INTERVAL_S = 360.0  # 0.1 h


@dataclass(frozen=True)
class Judge:
    """What a run's quality is and how it regulates the score: the rules it is judged by, its
    validation samples (the accuracy cap's) and its vocabulary's size (the loss gain's)."""

    rules: ValidityConfig
    val_samples: int
    vocab_size: int = 0

    @property
    def metric(self) -> str:
        return quality.LOSS if judged_by_loss(self.rules) else quality.ACCURACY

    def regulated(self, ops: float, best: float | None) -> float:
        """`ops` regulated by `best`, the run's quality (a loss or an accuracy, by its metric)."""
        loss = best if self.metric == quality.LOSS else None
        accuracy = best if self.metric == quality.ACCURACY else None
        return regulated(
            ops,
            self.rules,
            best_val_accuracy=accuracy,
            val_samples=self.val_samples,
            best_val_loss=loss,
            vocab_size=self.vocab_size,
        )


def judge_of(store: RunReads, run: RunRecord) -> Judge:
    """The run's judge from its records: its stored config's rules (recorded_rules), the validation
    samples its score counted, its dataset's classes (a token dataset's vocabulary)."""
    dataset = store.run_dataset(run.id)
    if run.score is not None:
        val_samples = run.score.val_samples
    else:
        val_samples = dataset.val_samples if dataset else 0
    return Judge(recorded_rules(run.config), val_samples, dataset.classes if dataset else 0)


@dataclass(frozen=True)
class Checkpoint:
    t_s: float
    total_ops: float
    ops: float
    metric: str  # the quality it was judged by: aiperf.quality.LOSS or ACCURACY
    best_quality: float | None  # the best of it among the complete epochs ended by t_s
    regulated_score: float


@dataclass(frozen=True)
class _Done:
    ended_s: float
    ops: float
    quality: float | None  # None for an incomplete epoch


def window_time(at: datetime, segments: list[WindowRecord]) -> float:
    """Seconds of the timed window elapsed at `at`: the whole segments that ended before it and the
    part of the one it falls in (a time in a gap counts as its earlier segment's end)."""
    elapsed = 0.0
    for segment in segments:
        if at <= segment.started_at:
            break
        end = segment.ended_at if segment.ended_at is not None else at
        elapsed += (min(at, end) - segment.started_at).total_seconds()
    return elapsed


def _segments(run: RunRecord, start: datetime) -> list[WindowRecord]:
    """The run's window segments in order; one spanning the window where none is recorded."""
    if run.windows:
        return sorted(run.windows, key=lambda w: w.segment)
    return [WindowRecord(0, start, start, run.search_ended_at)]


def _epochs(run: RunRecord, start: datetime, metric: str) -> list[_Done]:
    segments = _segments(run, start)
    done = []
    for trial in run.trials:
        if trial.train_ops_per_sample is None:
            continue
        for e in trial.epochs:
            ops = e.samples_trained * trial.train_ops_per_sample + e.samples_evaluated * (
                trial.eval_ops_per_sample or 0
            )
            measured = quality.of(e, metric) if e.complete else None
            done.append(_Done(window_time(e.ended_at, segments), float(ops), measured))
    return sorted(done, key=lambda d: d.ended_s)


def window(run: RunRecord) -> tuple[datetime, float] | None:
    """Start of the timed window and its wall-clock span in seconds (a resumed run's gaps
    included); None before the search has ended."""
    if run.search_started_at is None or run.search_ended_at is None:
        return None
    return run.search_started_at, (run.search_ended_at - run.search_started_at).total_seconds()


def counted_seconds(run: RunRecord) -> float | None:
    """The seconds of the timed window the score divides by (a resumed run's segments, end to
    end): the last checkpoint of the score over time; None before the search has ended."""
    if run.search_started_at is None or run.search_ended_at is None:
        return None
    return window_time(run.search_ended_at, _segments(run, run.search_started_at))


def score_over_time(run: RunRecord, checkpoints: list[float], judge: Judge) -> list[Checkpoint]:
    """The score at each checkpoint (seconds into the timed window), judged by `judge`."""
    span = window(run)
    if span is None:
        return []
    metric = judge.metric
    done = _epochs(run, span[0], metric)
    result = []
    for t in checkpoints:
        if t <= 0:
            continue
        counted = [d for d in done if d.ended_s <= t + 1e-9]
        total = sum(d.ops for d in counted)
        best = quality.best(metric, (d.quality for d in counted))
        ops = total / t
        result.append(Checkpoint(t, total, ops, metric, best, judge.regulated(ops, best)))
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
