"""The search loop: the orchestrator that owns the oracle and keeps every worker busy.

It is the keras-tuner "chief": it asks the oracle for a trial whenever a worker slot is free,
hands the trial to a launcher (in the flow, a Prefect task on a Dask worker), records each epoch
the moment the worker reports it, tells the oracle, and starts the next trial as soon as one
ends. At the deadline it stops proposing and waits for the running trials to stop themselves.
It is the only writer of the run's records.

Every report is checked when it arrives: samples within the dataset and in whole batches, epochs
in order, and a live event only from the worker the trial runs on (the Dask scheduler stamps each
event with its sender, `sent_from`). A report that fails is refused with a warning and its trial is
failed with the reason. What is expensive to check here (the operations per sample a worker counted)
is checked by the verification every run ends with (aiperf.verify).

Nothing here knows Prefect or Dask: a launcher is any callable returning a handle with done(),
result() and cancel(), and reports arrive on a plain queue (as message objects from launchers in
this process, as event dicts from Dask workers). Tests drive it with threads.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import keras_tuner as kt

from aiperf import liveness
from aiperf.config import BenchmarkConfig
from aiperf.errors import UserError
from aiperf.mllog import EventLog
from aiperf.search import space
from aiperf.status import TrialStatus
from aiperf.search.schedule import epochs_for
from aiperf.store import Store, TrialRecord
from aiperf.store.records import TrialPhases
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest, TrialResult, from_event

log = logging.getLogger("aiperf.orchestrator")


def trial_seed(run_seed: int, number: int) -> int:
    """Each trial's weight seed, distinct per trial and within what numpy and the frameworks take."""
    return (run_seed * 100_003 + number) % 2**32


class TrialHandle(Protocol):
    def done(self) -> bool: ...
    def result(self) -> TrialResult: ...
    def cancel(self) -> None: ...
    # Optional: `add_done_callback(fn)`, as distributed.Future has it. A handle that offers it wakes
    # the loop the moment its trial ends, so its worker gets the next trial without waiting a poll.


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
    batch_size: int
    train_ops: int | None = None
    eval_ops: int | None = None
    epochs_seen: set[int] = field(default_factory=set)
    sender: str | None = None  # the Dask worker whose live events this trial accepts


# Where a report came from: a Dask worker's address, the trial's own result (trusted: it is the
# return value of the task that ran the trial), or an event that no scheduler stamped.
FROM_RESULT = "result"
UNSTAMPED = "unstamped"


MAX_FAILURES_ENV = "AIPERF_MAX_CONSECUTIVE_FAILURES"
# The coordinator shares the machine with the workers: its loop polls every poll_s, but redraws the
# live figures only this often (their rendering cost cores the trials want).
FIGURES_EVERY_S = 1.0


def max_consecutive_failures(workers: int) -> int:
    """Failed trials in a row, with none completed, after which the run stops as failed:
    $AIPERF_MAX_CONSECUTIVE_FAILURES, else 3 x workers (every worker failed three times: nothing
    will train, and idling out the budget would only hide the error)."""
    text = os.environ.get(MAX_FAILURES_ENV, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else 3 * workers


class NothingTrains(UserError):
    """Every trial fails: the run stops as failed, naming the first failure (usually a setting)."""


class RefusedReport(Exception):
    """A worker's report that breaks a rule: the trial fails with this reason."""


@dataclass(frozen=True)
class SearchSummary:
    trials: int
    completed: int
    stopped: int
    failed: int
    diverged: int
    ended_at: float


class Orchestrator:
    def __init__(self, *, config: BenchmarkConfig, store: Store, run_id: int, oracle: kt.Oracle,
                 data_path: str, image_shape: tuple[int, int, int], num_classes: int,
                 launch: Launcher, events: queue.Queue, events_topic: str | None = None,
                 on_figures: Callable[[LiveFigures], None] | None = None, poll_s: float = 0.2,
                 grace_s: float | None = None, dataset_samples: tuple[int, int] | None = None,
                 event_log: EventLog | None = None) -> None:
        self.config, self.store, self.run_id, self.oracle = config, store, run_id, oracle
        self.data_path, self.image_shape, self.num_classes = data_path, image_shape, num_classes
        self.launch, self.events, self.events_topic = launch, events, events_topic
        self.on_figures = on_figures or (lambda _figures: None)
        self.dataset_samples = dataset_samples  # (train, val): the most one epoch can use
        self.event_log = event_log or EventLog(None)  # what it records, as MLLOG lines (aiperf.mllog)
        self.poll_s = poll_s
        self._ended = threading.Event()  # set when a trial's handle reports it is done
        # How long past the deadline a trial may take to notice it (one batch, one evaluation step).
        self.grace_s = grace_s if grace_s is not None else max(30.0, 0.25 * config.budget_s)
        self.running: dict[str, _Running] = {}
        self.trial_ids: dict[str, int] = {}  # oracle trial id -> trials.id, for parent links
        self.counts = {status: 0 for status in TrialStatus if status != TrialStatus.RUNNING}
        self.created = 0
        self.total_ops = 0
        self.best_val_accuracy: float | None = None
        self.retrain: list[TrialRecord] = []  # a resumed run's interrupted trials, trained again first
        self.failures_in_a_row = 0
        self.first_failure: str | None = None  # its first line: what `aiperf run` prints when nothing trains
        self.max_failures = max_consecutive_failures(config.workers)

    def resume_from(self, trials: list[TrialRecord]) -> None:
        """Continue a resumed run: number new trials after the recorded ones, link children to
        recorded parents, and train each interrupted trial again, from scratch, before anything new
        (its finished epochs stay recorded and counted)."""
        self.created = max((t.number for t in trials), default=-1) + 1
        self.trial_ids.update({t.trial_key: t.id for t in trials})
        self.retrain = sorted((t for t in trials if t.status == TrialStatus.INTERRUPTED), key=lambda t: t.number)

    # --- the loop --------------------------------------------------------------------------------

    def run(self, started_at: float, deadline: float) -> SearchSummary:
        """Keep the workers busy until the deadline. A stop signal (aiperf.liveness) is taken
        between two turns of the loop: every report already received is recorded, then
        Interrupted goes on up (the run ends interrupted)."""
        with liveness.deferred_signals():
            try:
                return self._run(started_at, deadline)
            except liveness.Interrupted:
                self._record_what_arrived()
                raise

    def _record_what_arrived(self) -> None:
        """Record every report already queued and every trial already finished, nothing more."""
        self._drain_events()
        for key in [k for k, r in self.running.items() if r.handle.done()]:
            self._finish(key)

    def _run(self, started_at: float, deadline: float) -> SearchSummary:
        slots = self.config.workers
        shown = 0.0
        while True:
            liveness.raise_if_stopped()
            now = time.time()
            if now < deadline:
                while len(self.running) < slots and self._start_next(deadline):
                    pass
            self._ended.clear()  # before looking: a trial that ends after this look wakes the wait below
            self._drain_events()
            finished = [k for k, r in self.running.items() if r.handle.done()]
            for key in finished:
                self._finish(key)
            now = time.time()
            if now >= deadline and not self.running:
                break
            if now >= deadline + self.grace_s:
                self._abandon_stragglers()
                break
            if now >= shown + FIGURES_EVERY_S:  # the live view: a second's news, not every turn's
                self.on_figures(self._figures(started_at, now))
                shown = now
            if finished and now < deadline:
                continue  # a worker is free: its next trial now, not after a poll
            self._ended.wait(self.poll_s)  # a poll's time, or less when a trial ends
        self._drain_events()
        ended = time.time()
        self.on_figures(self._figures(started_at, ended))
        return SearchSummary(trials=self.created, ended_at=ended, completed=self.counts[TrialStatus.COMPLETED],
                             stopped=self.counts[TrialStatus.STOPPED], failed=self.counts[TrialStatus.FAILED],
                             diverged=self.counts[TrialStatus.DIVERGED])

    def _wake_when_done(self, handle: TrialHandle) -> None:
        add = getattr(handle, "add_done_callback", None)
        if callable(add):
            add(lambda *_: self._ended.set())

    def _start_next(self, deadline: float) -> bool:
        tuner_id = f"slot-{self.created}"
        if self.retrain:
            return self._start_again(self.retrain.pop(0), tuner_id, deadline)
        trial = self.oracle.create_trial(tuner_id)
        if trial.status != kt.engine.trial.TrialStatus.RUNNING:
            return False  # the oracle has nothing to propose right now
        # The oracle's state after every proposal, not only after every end: a run resumed from it
        # knows every architecture proposed and its random state, so it proposes what comes next.
        self.store.save_search_state(self.run_id, self.config.search.oracle, self.oracle.get_state())
        return self._launch(trial, deadline)

    def _start_again(self, record: TrialRecord, tuner_id: str, deadline: float) -> bool:
        """An interrupted trial of a resumed run, trained again from scratch under a new trial key
        with the same values and weight seed; the oracle counts it as its own, not as a proposal."""
        from aiperf.search.resume import trial_values

        oracle = self.oracle
        trial_id = f"{{:0{len(str(oracle.max_trials))}d}}".format(len(oracle.trials))
        hp = oracle.hyperparameters.copy()
        hp.values = trial_values(record)
        trial = kt.engine.trial.Trial(hyperparameters=hp, trial_id=trial_id,
                                      status=kt.engine.trial.TrialStatus.RUNNING)
        oracle.trials[trial_id], oracle.ongoing_trials[tuner_id] = trial, trial
        oracle.start_order.append(trial_id)
        log.info("trial %s trains interrupted trial %s again", trial_id, record.trial_key)
        return self._launch(trial, deadline, seed_number=record.number)

    def _launch(self, trial: kt.engine.trial.Trial, deadline: float, seed_number: int | None = None) -> bool:
        """Record the trial and hand it to a worker."""
        values = dict(trial.hyperparameters.values)
        proposal = space.decode(values, self.image_shape, self.num_classes)
        number = self.created
        self.created += 1
        epochs = proposal.epochs or epochs_for(number, self.config.workers, self.config.train.epochs)
        started_at = time.time()
        architecture = proposal.network.to_dict()
        hyperparameters = {k: v for k, v in values.items() if k != space.ARCHITECTURE}
        parent_trial_id = self.trial_ids.get(proposal.parent_key or "")
        seed = trial_seed(self.config.seed, number if seed_number is None else seed_number)
        trial_id = self.store.create_trial(
            run_id=self.run_id, trial_key=trial.trial_id, number=number, architecture=architecture,
            hyperparameters=hyperparameters, started_at=started_at, parent_trial_id=parent_trial_id,
            operator=proposal.operator)
        self.trial_ids[trial.trial_id] = trial_id
        self.event_log.trial_started(
            trial_id=trial_id, trial_key=trial.trial_id, number=number, started_at=started_at,
            parent_trial_id=parent_trial_id, operator=proposal.operator, architecture=architecture,
            hyperparameters=hyperparameters, epochs=epochs, seed=seed)
        request = TrialRequest(
            run_id=self.run_id, trial_key=trial.trial_id, architecture=architecture,
            learning_rate=proposal.learning_rate, batch_size=proposal.batch_size, epochs=epochs,
            deadline=deadline, data_path=self.data_path, seed=seed,
            optimizer=self.config.train.optimizer, momentum=self.config.train.momentum,
            dropout=proposal.dropout, early_stopping_patience=self.config.train.early_stopping_patience,
            events_topic=self.events_topic, precision=self.config.train.precision,
            jit_compile=self.config.train.jit_compile)
        handle = self.launch(request)
        self._wake_when_done(handle)
        self.running[trial.trial_id] = _Running(trial_id, trial, handle, request.batch_size)
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
            # A message object was put here by a launcher in this process: it speaks for its trial.
            sender = (event.get("sent_from") or UNSTAMPED) if isinstance(event, dict) else FROM_RESULT
            self._receive(message, sender)

    def _receive(self, message: TrialBuilt | EpochReport, sender: str) -> None:
        """Check a report, then apply it; a refused one fails its trial with the reason."""
        running = self.running.get(message.trial_key)
        if running is None:
            return  # a late repeat for a trial already finished: its result carried it too
        try:
            if not self._admissible(running, message, sender):
                return
        except RefusedReport as exc:
            log.warning("refused a report for trial %s from %s: %s", message.trial_key, sender, exc)
            running.handle.cancel()
            self._end(message.trial_key, TrialStatus.FAILED, f"refused a worker's report: {exc}")
            return
        self._apply(running, message)

    def _admissible(self, running: _Running, message: TrialBuilt | EpochReport, sender: str) -> bool:
        """True to apply the report, False to skip it for now; RefusedReport when it breaks a rule."""
        if sender == UNSTAMPED:
            raise RefusedReport("the event was not sent by a worker")
        if sender != FROM_RESULT:
            if running.sender is None:
                running.sender = sender  # the trial's first live event names its worker
            elif sender != running.sender:
                raise RefusedReport(f"it came from {sender}, but the trial runs on {running.sender}")
        if isinstance(message, TrialBuilt):
            return True
        expected = len(running.epochs_seen)
        if message.epoch in running.epochs_seen:
            return False  # a repeat: the live event and the result both carry every epoch
        if message.epoch != expected:
            if sender != FROM_RESULT:
                return False  # an earlier live event was lost: the trial's result brings them in order
            raise RefusedReport(f"epoch {message.epoch} arrived after epoch {expected - 1}")
        if message.samples_trained % running.batch_size:
            raise RefusedReport(f"epoch {message.epoch} trained {message.samples_trained} samples, not whole "
                                f"batches of {running.batch_size}")
        if self.dataset_samples is not None:
            train, val = self.dataset_samples
            if message.samples_trained > train or message.samples_evaluated > val:
                raise RefusedReport(f"epoch {message.epoch} reports {message.samples_trained} trained and "
                                    f"{message.samples_evaluated} evaluated samples; the dataset has {train} and {val}")
        return True

    def _apply(self, running: _Running, message: TrialBuilt | EpochReport) -> None:
        if isinstance(message, TrialBuilt):
            if running.train_ops is not None:
                return  # the live event recorded it; the result repeats it
            self.store.record_trial_built(running.trial_id, worker=message.worker, parameters=message.parameters,
                                    train_ops=message.train_ops, eval_ops=message.eval_ops,
                                    tensor_train_ops=message.tensor_train_ops,
                                    tensor_eval_ops=message.tensor_eval_ops)
            running.train_ops, running.eval_ops = message.train_ops, message.eval_ops
            self.event_log.trial_built(trial_key=message.trial_key, worker=message.worker,
                                       parameters=message.parameters, train_ops=message.train_ops,
                                       eval_ops=message.eval_ops, tensor_train_ops=message.tensor_train_ops,
                                       tensor_eval_ops=message.tensor_eval_ops)
            return
        if not self.store.record_epoch(running.trial_id, **message.fields()):
            return
        running.epochs_seen.add(message.epoch)
        self.event_log.epoch(message.trial_key, **message.fields())
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
        for message in ([result.built] if result.built is not None else []) + list(result.epochs):
            self._receive(message, FROM_RESULT)
            if key not in self.running:
                return  # the result broke a rule: the trial is already failed
        if result.phases is not None:  # where its seconds went, measured on its worker
            try:
                self.store.record_trial_phases(running.trial_id, TrialPhases.from_seconds(result.phases))
            except ValueError as exc:  # recorded without them: its seconds count as idle
                log.warning("ignored the phases of trial %s: %s", key, exc)
        self._end(key, result.status, result.message)

    def _end(self, key: str, status: TrialStatus, message: str | None) -> None:
        running = self.running.pop(key)
        ended_at = time.time()
        self.store.finish_trial(running.trial_id, status=status, ended_at=ended_at, message=message)
        self.event_log.trial_stopped(key, status, ended_at, message)
        self.counts[status] += 1
        trial = running.kt_trial
        measured = trial.metrics.exists(self.config.search.objective)
        trial.status = kt.engine.trial.TrialStatus.COMPLETED if measured else kt.engine.trial.TrialStatus.FAILED
        trial.message = message
        self.oracle.end_trial(trial)
        self.store.save_search_state(self.run_id, self.config.search.oracle, self.oracle.get_state())
        if status in (TrialStatus.FAILED, TrialStatus.DIVERGED):
            log.warning("trial %s %s: %s", key, status, (message or "").splitlines()[0] if message else "")
        self._count_failure(status, message)

    def _count_failure(self, status: TrialStatus, message: str | None) -> None:
        """Fail fast: after max_failures failed trials in a row with none completed, nothing will
        train, so the run stops (NothingTrains) instead of idling out its budget."""
        if status != TrialStatus.FAILED:
            self.failures_in_a_row = 0
            return
        self.failures_in_a_row += 1
        if self.first_failure is None:
            self.first_failure = ((message or "").strip().splitlines() or ["no message"])[0]
        if self.failures_in_a_row >= self.max_failures and not self.counts[TrialStatus.COMPLETED]:
            raise NothingTrains(f"{self.failures_in_a_row} trials failed in a row and none completed; the first "
                                f"failed with: {self.first_failure}. Fix that (or set {MAX_FAILURES_ENV})")

    def _abandon_stragglers(self) -> None:
        for key in list(self.running):
            self.running[key].handle.cancel()
            self._end(key, TrialStatus.STOPPED, f"did not stop within {self.grace_s:g} s of the deadline")

    def _figures(self, started_at: float, now: float) -> LiveFigures:
        return LiveFigures(elapsed_s=max(0.0, now - started_at), budget_s=self.config.budget_s,
                        trials_done=sum(self.counts.values()), trials_running=len(self.running),
                        total_ops=self.total_ops, best_val_accuracy=self.best_val_accuracy)

