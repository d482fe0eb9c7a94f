"""The search loop: the orchestrator that owns the oracle and keeps every worker busy.

It is the keras-tuner "chief": it asks the oracle for a trial whenever a worker slot is free,
hands the trial to a launcher (in the flow, a Prefect task on a Dask worker), records each epoch
the moment the worker reports it, tells the oracle, and starts the next trial as soon as one
ends. At the deadline it stops proposing and waits for the running trials to stop themselves.
It is the only writer of the run's records.

Nothing here knows Prefect or Dask: a launcher is any callable returning a handle with done(),
result() and cancel(), and reports arrive on a plain queue. Tests drive it with threads.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import keras_tuner as kt

from aiperf.config import BenchmarkConfig
from aiperf.search import space
from aiperf.status import TrialStatus
from aiperf.search.schedule import epochs_for
from aiperf.store import Store
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest, TrialResult, from_event

log = logging.getLogger("aiperf.orchestrator")


def trial_seed(run_seed: int, number: int) -> int:
    """Each trial's weight seed, distinct per trial and within what numpy and the frameworks take."""
    return (run_seed * 100_003 + number) % 2**32


class TrialHandle(Protocol):
    def done(self) -> bool: ...
    def result(self) -> TrialResult: ...
    def cancel(self) -> None: ...


Launcher = Callable[[TrialRequest], TrialHandle]


@dataclass(frozen=True)
class LiveFigures:
    """A snapshot for live displays: what the run has done so far."""

    elapsed_s: float
    budget_s: float
    trials_done: int
    trials_running: int
    total_ops: int
    best_val_accuracy: float | None

    @property
    def ops_per_s(self) -> float:
        return self.total_ops / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class _Running:
    trial_id: int
    kt_trial: kt.engine.trial.Trial
    handle: TrialHandle
    train_ops: int | None = None
    eval_ops: int | None = None
    epochs_seen: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class SearchSummary:
    trials: int
    completed: int
    stopped: int
    failed: int
    ended_at: float


class Orchestrator:
    def __init__(self, *, config: BenchmarkConfig, store: Store, run_id: int, oracle: kt.Oracle,
                 data_path: str, image_shape: tuple[int, int, int], num_classes: int,
                 launch: Launcher, events: queue.Queue, events_topic: str | None = None,
                 on_figures: Callable[[LiveFigures], None] | None = None, poll_s: float = 0.2,
                 grace_s: float | None = None) -> None:
        self.config, self.store, self.run_id, self.oracle = config, store, run_id, oracle
        self.data_path, self.image_shape, self.num_classes = data_path, image_shape, num_classes
        self.launch, self.events, self.events_topic = launch, events, events_topic
        self.on_figures = on_figures or (lambda _figures: None)
        self.poll_s = poll_s
        # How long past the deadline a trial may take to notice it (one batch, one evaluation step).
        self.grace_s = grace_s if grace_s is not None else max(30.0, 0.25 * config.budget_s)
        self.running: dict[str, _Running] = {}
        self.trial_ids: dict[str, int] = {}  # oracle trial id -> trials.id, for parent links
        self.counts = {TrialStatus.COMPLETED: 0, TrialStatus.STOPPED: 0, TrialStatus.FAILED: 0}
        self.created = 0
        self.total_ops = 0
        self.best_val_accuracy: float | None = None

    # --- the loop --------------------------------------------------------------------------------

    def run(self, started_at: float, deadline: float) -> SearchSummary:
        slots = self.config.workers
        while True:
            now = time.time()
            if now < deadline:
                while len(self.running) < slots and self._start_next(deadline):
                    pass
            self._drain_events()
            for key in [k for k, r in self.running.items() if r.handle.done()]:
                self._finish(key)
            now = time.time()
            if now >= deadline and not self.running:
                break
            if now >= deadline + self.grace_s:
                self._abandon_stragglers()
                break
            self.on_figures(self._figures(started_at, now))
            time.sleep(self.poll_s)
        self._drain_events()
        ended = time.time()
        self.on_figures(self._figures(started_at, ended))
        return SearchSummary(trials=self.created, ended_at=ended, completed=self.counts[TrialStatus.COMPLETED],
                             stopped=self.counts[TrialStatus.STOPPED], failed=self.counts[TrialStatus.FAILED])

    def _start_next(self, deadline: float) -> bool:
        tuner_id = f"slot-{self.created}"
        trial = self.oracle.create_trial(tuner_id)
        if trial.status != kt.engine.trial.TrialStatus.RUNNING:
            return False  # the oracle has nothing to propose right now
        values = dict(trial.hyperparameters.values)
        proposal = space.decode(values, self.image_shape, self.num_classes)
        number = self.created
        self.created += 1
        epochs = proposal.epochs or epochs_for(number, self.config.workers, self.config.train.epochs)
        trial_id = self.store.create_trial(
            run_id=self.run_id, trial_key=trial.trial_id, number=number,
            architecture=proposal.network.to_dict(),
            hyperparameters={k: v for k, v in values.items() if k != space.ARCHITECTURE},
            started_at=time.time(), parent_trial_id=self.trial_ids.get(proposal.parent_key or ""),
            operator=proposal.operator)
        self.trial_ids[trial.trial_id] = trial_id
        request = TrialRequest(
            run_id=self.run_id, trial_key=trial.trial_id, architecture=proposal.network.to_dict(),
            learning_rate=proposal.learning_rate, batch_size=proposal.batch_size, epochs=epochs,
            deadline=deadline, data_path=self.data_path, seed=trial_seed(self.config.seed, number),
            optimizer=self.config.train.optimizer, momentum=self.config.train.momentum,
            dropout=proposal.dropout, early_stopping_patience=self.config.train.early_stopping_patience,
            events_topic=self.events_topic)
        self.running[trial.trial_id] = _Running(trial_id, trial, self.launch(request))
        log.info("trial %s started: %s", trial.trial_id, proposal.operator or values)
        return True

    # --- what workers report ---------------------------------------------------------------------

    def _drain_events(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            try:
                message = from_event(event) if isinstance(event, dict) else event
            except (TypeError, ValueError):
                log.warning("ignored a malformed trial event: %r", event)
                continue
            self._apply(message)

    def _apply(self, message: TrialBuilt | EpochReport) -> None:
        running = self.running.get(message.trial_key)
        if running is None:
            return  # a late repeat for a trial already finished: its result carried it too
        if isinstance(message, TrialBuilt):
            if running.train_ops is not None:
                return  # the live event recorded it; the result repeats it
            self.store.record_trial_built(running.trial_id, worker=message.worker, parameters=message.parameters,
                                    train_ops=message.train_ops, eval_ops=message.eval_ops,
                                    tensor_train_ops=message.tensor_train_ops,
                                    tensor_eval_ops=message.tensor_eval_ops)
            running.train_ops, running.eval_ops = message.train_ops, message.eval_ops
            return
        if message.epoch in running.epochs_seen:
            return
        if not self.store.record_epoch(running.trial_id, **message.fields()):
            return
        running.epochs_seen.add(message.epoch)
        if running.train_ops is not None and running.eval_ops is not None:
            self.total_ops += (message.samples_trained * running.train_ops
                               + message.samples_evaluated * running.eval_ops)
        if message.complete and message.val_accuracy is not None:
            self.oracle.update_trial(running.kt_trial.trial_id,
                                     {self.config.search.objective: message.val_accuracy},
                                     step=message.epoch)
            if self.best_val_accuracy is None or message.val_accuracy > self.best_val_accuracy:
                self.best_val_accuracy = message.val_accuracy

    def _finish(self, key: str) -> None:
        running = self.running[key]
        try:
            result = running.handle.result()
        except Exception as exc:  # the worker was lost: keep what it reported, record the failure
            result = TrialResult(key, TrialStatus.FAILED, None, [], message=f"worker lost: {type(exc).__name__}: {exc}")
        if result.built is not None:
            self._apply(result.built)
        for epoch in result.epochs:
            self._apply(epoch)
        self._end(key, result.status, result.message)

    def _end(self, key: str, status: TrialStatus, message: str | None) -> None:
        running = self.running.pop(key)
        self.store.finish_trial(running.trial_id, status=status, ended_at=time.time(), message=message)
        self.counts[status] += 1
        trial = running.kt_trial
        measured = trial.metrics.exists(self.config.search.objective)
        trial.status = kt.engine.trial.TrialStatus.COMPLETED if measured else kt.engine.trial.TrialStatus.FAILED
        trial.message = message
        self.oracle.end_trial(trial)
        self.store.save_search_state(self.run_id, self.config.search.oracle, self.oracle.get_state())
        if status == TrialStatus.FAILED:
            log.warning("trial %s failed: %s", key, (message or "").splitlines()[0] if message else "")

    def _abandon_stragglers(self) -> None:
        for key in list(self.running):
            self.running[key].handle.cancel()
            self._end(key, TrialStatus.STOPPED, f"did not stop within {self.grace_s:g} s of the deadline")

    def _figures(self, started_at: float, now: float) -> LiveFigures:
        return LiveFigures(elapsed_s=max(0.0, now - started_at), budget_s=self.config.budget_s,
                        trials_done=sum(self.counts.values()), trials_running=len(self.running),
                        total_ops=self.total_ops, best_val_accuracy=self.best_val_accuracy)

