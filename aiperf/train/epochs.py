"""A trial's epochs inside its one `fit`: what happens at each epoch's end.

A trial calls `fit` once for all its epochs (aiperf.train.trial), so the training iterator (the
tf.data pipeline's threads, shuffle buffer and prefetched batches) lives across epochs instead of
being built again for each (aiperf.data.feed.Feed.epochs). What the trial did between two `fit`
calls it now does in `EpochEnd.on_epoch_end`, in the same order: count the epoch's samples, judge
divergence from the epoch's loss, evaluate (a complete epoch only; the deadline cuts an evaluation
as it cuts training), keep the weights of a new best epoch, report the epoch, and stop the `fit`
when the epoch diverged, was cut by the deadline, or early stopping says so. Each of these is
timed as its own phase (aiperf.train.phases), not as training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiperf.train.messages import EpochReport
from aiperf.train.phases import PhaseClock
from aiperf.train.watch import deadline_watch


def finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def diverged(loss: Any) -> bool:
    """A loss that is NaN or infinite: training cannot recover from it."""
    return loss is not None and finite(loss) is None


def stalled(epochs: list[EpochReport], patience: int | None) -> bool:
    """Early stopping on validation loss: no improvement in the last `patience` epochs."""
    losses = [e.val_loss for e in epochs if e.val_loss is not None]
    if patience is None or len(losses) <= patience:
        return False
    return min(losses[-patience:]) >= min(losses[:-patience])


def one_model(model: Any) -> None:
    """Make a MirroredStrategy's replicas one model again before an evaluation. Each replica
    updates its own copy of the batch normalisation statistics from its share of a batch, so the
    replicas drift apart, an evaluation then mixes their copies, and no one set of weights (what
    `get_weights()` reads, and what verify evaluates again) gives its accuracy. Writing back what
    `get_weights()` reads sets every replica to it: the model evaluated is the model kept."""
    model.set_weights(model.get_weights())


@dataclass(frozen=True)
class EpochPlan:
    """What each epoch's end needs to know of its trial: the trial, its deadline, its global batch,
    the training and validation samples of a pass, the validation feed's `evaluate` arguments, the
    early stopping patience, and whether MirroredStrategy replicas are made one model again before
    each evaluation (`one_model`)."""

    trial_key: str
    deadline: float
    batch: int
    samples: tuple[int, int]
    val: dict[str, Any]
    patience: int | None
    gather_replicas: bool


def epoch_end(
    plan: EpochPlan,
    *,
    watch: Any,
    clock: PhaseClock,
    keep: Callable[[EpochReport], Any],
    report: Callable[[EpochReport], None],
) -> Any:
    """The Keras callback that ends each epoch of a trial's `fit` (see the module's docstring).
    `watch` is the fit's deadline watch (aiperf.train.watch), `keep` the best weights' offer.
    After `fit`, its `epochs` are the reports and `diverged_message` says why a diverged trial
    stopped (None when it did not)."""
    import keras

    class EpochEnd(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[EpochReport] = []
            self.diverged_message: str | None = None
            self._started = 0.0
            self._batches_before = 0

        def on_epoch_begin(self, epoch, logs=None):
            self._started = time.time()
            self._batches_before = watch.train_batches

        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            trained = min(
                (watch.train_batches - self._batches_before) * plan.batch, plan.samples[0]
            )
            lost = diverged(logs.get("loss"))
            evaluation: dict = {}
            evaluated, cut = 0, watch.hit_deadline
            if not cut and not lost:
                evaluation, evaluated, cut = _evaluate(self.model, plan, clock)
            epoch_report = _report(
                plan,
                epoch,
                started=self._started,
                samples=(trained, evaluated),
                metrics=(logs, evaluation),
                complete=not cut and not lost,
            )
            self.epochs.append(epoch_report)
            with clock.outside():  # the weights' file: the worker's time, not training
                keep(epoch_report)  # before it is reported: a recorded best has its file
            report(epoch_report)
            if lost:
                self.diverged_message = f"loss became {logs.get('loss')} in epoch {epoch}: stopped"
            if lost or not epoch_report.complete or stalled(self.epochs, plan.patience):
                self.model.stop_training = True

    return EpochEnd()


def _evaluate(model: Any, plan: EpochPlan, clock: PhaseClock) -> tuple[dict, int, bool]:
    """Evaluate an epoch that trained whole and did not diverge, under its own deadline watch:
    the evaluation's metrics, the validation samples it got through, and whether the deadline cut
    it (a cut evaluation measured only part of the validation set)."""
    if plan.gather_replicas:
        one_model(model)
    evaluation_watch = deadline_watch(plan.deadline)
    with clock.steps("evaluate"):
        evaluation = model.evaluate(
            **plan.val,
            verbose=0,
            callbacks=[evaluation_watch, clock.callback()],
            return_dict=True,
        )
    evaluated = min(evaluation_watch.test_batches * plan.batch, plan.samples[1])
    return evaluation, evaluated, evaluation_watch.hit_deadline


def _report(
    plan: EpochPlan,
    epoch: int,
    *,
    started: float,
    samples: tuple[int, int],
    metrics: tuple[dict, dict],
    complete: bool,
) -> EpochReport:
    """The epoch's report: `samples` are those it trained and evaluated, `metrics` its training
    logs and its evaluation's (empty when it was not evaluated)."""
    trained, evaluated = samples
    logs, evaluation = metrics
    return EpochReport(
        trial_key=plan.trial_key,
        epoch=epoch,
        started_at=started,
        ended_at=time.time(),
        samples_trained=trained,
        samples_evaluated=evaluated,
        loss=finite(logs.get("loss")),
        accuracy=finite(logs.get("accuracy")),
        # An evaluation the deadline cut short measured only part of the validation set.
        val_loss=finite(evaluation.get("loss")) if complete else None,
        val_accuracy=finite(evaluation.get("accuracy")) if complete else None,
        complete=complete,
    )
