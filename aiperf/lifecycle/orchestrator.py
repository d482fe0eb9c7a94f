"""The search loop: the orchestrator that owns the oracle and keeps every worker busy.

It is the keras-tuner "chief": it asks the oracle for a trial whenever a worker slot is free,
hands the trial to a launcher (in the flow, a Prefect task on a Dask worker), records each epoch
the moment the worker reports it, tells the oracle, and starts the next trial as soon as one
ends. At the deadline it stops proposing and waits for the running trials to stop themselves.
It writes the search's records through the run's recorder (aiperf.lifecycle.recorder), as the
run's owner, each record with its event-log lines.

Its parts live beside it, one job each: which trial runs on which worker slot, and when
(aiperf.lifecycle.admission); the oracle and its proposals (aiperf.lifecycle.proposals); the rules
a worker's report is checked against (aiperf.lifecycle.worker_reports); the live figures it publishes
(aiperf.lifecycle.live).

Two things keep a thousand workers busy from one process. The oracle lives on its own thread
(aiperf.lifecycle.proposals.OracleThread), which proposes the next trials ahead of need, so a
freed worker takes a proposal that is already made; every oracle call goes through that thread,
so only one thread ever touches the oracle. And what one turn of the loop learns (epochs, ends, new
trials) is committed in one transaction (a recorder's Turn: an aiperf.store.WriteBatch), not one
per report: a commit waits for the disk.

Every report is checked when it arrives (aiperf.lifecycle.worker_reports): samples within the dataset
and in whole batches, epochs in order, and a live event only from the worker the trial runs on
(the Dask scheduler stamps each event with its sender, `sent_from`). A report that fails is refused
with a warning and its trial is failed with the reason. What is expensive to check here (the
operations per sample a worker counted) is checked by the verification every run ends with
(aiperf.results.verify).

Nothing here knows Prefect or Dask: a launcher is any callable returning a handle with done(),
result() and cancel(), and reports arrive on a plain queue (as message objects from launchers in
this process, as event dicts from Dask workers). Tests drive it with threads.
"""

from __future__ import annotations

import logging
import math
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import keras_tuner as kt

from aiperf import quality, settings
from aiperf.errors import UserError
from aiperf.lifecycle import liveness
from aiperf.lifecycle.admission import Admission, Running
from aiperf.lifecycle.live import LiveFigures
from aiperf.lifecycle.proposals import OracleThread, end_trial, proposals_ahead, score
from aiperf.lifecycle.worker_reports import FROM_RESULT, UNSTAMPED, RefusedReport, admissible
from aiperf.status import TrialStatus
from aiperf.store import TrialEnd, TrialRecord
from aiperf.store.records import TrialPhases
from aiperf.train.messages import EpochReport, TrialBuilt, TrialResult, from_event

log = logging.getLogger("aiperf.lifecycle.orchestrator")


# The coordinator shares the machine with the workers: its loop polls every poll_s, but redraws the
# live figures only this often (their rendering cost cores the trials want).
FIGURES_EVERY_S = 1.0


def max_consecutive_failures(workers: int) -> int:
    """Failed trials in a row, with none completed, after which the run stops as failed:
    $AIPERF_MAX_CONSECUTIVE_FAILURES, else 3 x workers (every worker failed three times: nothing
    will train, and idling out the budget would only hide the error)."""
    return settings.count(settings.MAX_CONSECUTIVE_FAILURES) or 3 * workers


class NothingTrains(UserError):
    """Every trial fails: the run stops as failed, naming the first failure (usually a setting)."""


@dataclass(frozen=True)
class SearchSummary:
    trials: int
    completed: int
    stopped: int
    failed: int
    diverged: int
    ended_at: float


@dataclass(frozen=True)
class Pacing:
    """How the search's loop paces itself: `poll_s`, the longest it waits for a report;
    `grace_s`, how long past the deadline a trial may take to notice it (one batch, one evaluation
    step; default: max(30 s, a quarter of the budget)); `ahead`, proposals kept ready beyond the
    next (default: proposals_ahead(workers))."""

    poll_s: float = 0.2
    grace_s: float | None = None
    ahead: int | None = None


class Orchestrator:
    def __init__(
        self,
        admission: Admission,
        oracle: kt.Oracle,
        reports: queue.Queue,
        *,
        pacing: Pacing | None = None,
        on_figures: Callable[[LiveFigures], None] | None = None,
        on_progress: Callable[[LiveFigures], None] | None = None,
        logger: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        """The search of `admission`'s run (its config, recorder, data and worker slots), proposed
        by `oracle`; `reports`: the queue the workers' live reports arrive on. `logger`: where
        each trial's end is told in one line (the flow's run logger, so the Prefect UI shows the
        search's progress; this module's logger otherwise). `on_progress`: the figures as the
        search starts, as each trial ends, at each PROGRESS_STEP of the budget, and as it ends (a
        failure there is logged: a display never stops a run)."""
        config, pacing = admission.config, pacing or Pacing()
        self.config, self.recorder, self.oracle = config, admission.recorder, oracle
        self.run_id = admission.run_id
        self.reports = reports
        self.on_figures = on_figures or (lambda _figures: None)
        self.on_progress = on_progress
        self._progress_step = -1  # the last PROGRESS_STEP published (-1: none yet)
        self.logger = logger or log
        self.deadline: float | None = None  # set by run(): the budget left, in each trial's line
        self.dataset_samples = admission.data.samples  # (train, val): the most one epoch can use
        self.poll_s = pacing.poll_s
        self.grace_s = (
            pacing.grace_s if pacing.grace_s is not None else max(30.0, 0.25 * config.budget_s)
        )
        self.admission = admission  # the worker slots and the trials on them
        self._ended = admission.ended  # set when a trial's handle reports it is done
        self.running = admission.running  # the same dict: the loop reads, admission fills
        self.counts: dict[TrialStatus, int] = {
            status: 0 for status in TrialStatus if status != TrialStatus.RUNNING
        }
        self.total_ops = 0
        self.best_quality: float | None = None  # the run's best val accuracy, or LM val loss
        self.best_trial: str | None = None
        self.failures_in_a_row = 0
        self.first_failure: str | None = (
            None  # its first line: what `aiperf run` prints when nothing trains
        )
        self.max_failures = max_consecutive_failures(config.workers)
        self.ahead = proposals_ahead(config.workers) if pacing.ahead is None else pacing.ahead
        self.proposals: OracleThread | None = None  # the oracle's thread, while run() runs
        # This turn's writes and their events, committed by _recording.
        self._turn = self.recorder.turn()

    def resume_from(self, trials: list[TrialRecord]) -> None:
        """Continue a resumed run (Admission.resume_from): new trials numbered after the recorded
        ones, interrupted ones trained again first."""
        self.admission.resume_from(trials)

    # --- the loop --------------------------------------------------------------------------------

    def run(self, started_at: float, deadline: float) -> SearchSummary:
        """Keep the workers busy until the deadline. A stop signal (aiperf.lifecycle.liveness) is taken
        between two turns of the loop: every report already received is recorded, then
        Interrupted goes on up (the run ends interrupted)."""
        self.proposals = OracleThread(self.oracle, self.ahead)
        with liveness.deferred_signals():
            try:
                return self._run(started_at, deadline)
            except liveness.Interrupted:
                self._record_what_arrived()
                raise
            finally:
                self.proposals.close()

    def _record_what_arrived(self) -> None:
        """Record every report already queued and every trial already finished, nothing more."""
        with self._recording():
            self._drain_events()
            for key in [k for k, r in self.running.items() if r.handle.done()]:
                self._finish(key)

    @contextmanager
    def _recording(self) -> Iterator[None]:
        """Commit the writes made inside, in one transaction, even when what is inside raises
        (a run that stops as failed keeps what it learnt); then log them (aiperf.results.mllog), so the
        event log never holds what the database lacks."""
        try:
            yield
        finally:
            turn, self._turn = self._turn, self.recorder.turn()
            self.recorder.commit(turn)

    def end_early(self) -> None:
        """Bring the deadline forward to now: no trial starts after this, and those running are
        waited for as at the deadline. (What a test calls once it has the trials it needs, so that
        it waits for work, not for a window of wall-clock time on a machine of unknown speed.)"""
        self.deadline = time.time()

    def _run(self, started_at: float, deadline: float) -> SearchSummary:
        self.deadline = deadline
        slots = self.config.workers
        proposals = self.proposals
        assert proposals is not None  # run() set it before calling _run
        shown = 0.0
        # The figures as the search starts, before the first proposal is waited for: a person
        # following the run sees it under way even while a slow oracle makes its first trial.
        self._progress(started_at, time.time(), ended=False)
        while True:
            liveness.raise_if_stopped()
            now = time.time()
            if now < self.deadline:
                while (
                    len(self.running) < slots
                    and time.time() < self.deadline
                    and self.admission.fill(proposals, slots, self.deadline)
                ):
                    pass
            deadline = self.deadline  # this turn's: end_early() may have brought it forward
            self._ended.clear()  # before looking: a trial that ends after this look wakes the wait below
            with self._recording():
                self._drain_events()
                finished = [k for k, r in self.running.items() if r.handle.done()]
                for key in finished:
                    self._finish(key)
            assert self.proposals is not None  # run() set it before calling _run
            self.proposals.check()
            now = time.time()
            self._progress(started_at, now, ended=bool(finished))
            if now >= deadline and not self.running:
                break
            if now >= deadline + self.grace_s:
                with self._recording():
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
        self._progress(started_at, ended, ended=True)
        return SearchSummary(
            trials=self.admission.created,
            ended_at=ended,
            completed=self.counts[TrialStatus.COMPLETED],
            stopped=self.counts[TrialStatus.STOPPED],
            failed=self.counts[TrialStatus.FAILED],
            diverged=self.counts[TrialStatus.DIVERGED],
        )

    # --- what workers report ---------------------------------------------------------------------

    def _drain_events(self) -> None:
        while True:
            try:
                event = self.reports.get_nowait()
            except queue.Empty:
                return
            try:
                message = from_event(event) if isinstance(event, dict) else event
            except (TypeError, ValueError):
                log.warning("ignored a malformed trial event: %r", event)
                continue
            # A message object was put here by a launcher in this process: it speaks for its trial.
            sender = (
                (event.get("sent_from") or UNSTAMPED) if isinstance(event, dict) else FROM_RESULT
            )
            self._receive(message, sender)

    def _receive(self, message: TrialBuilt | EpochReport, sender: str) -> None:
        """Check a report, then apply it; a refused one fails its trial with the reason."""
        running = self.running.get(message.trial_key)
        if running is None:
            return  # a late repeat for a trial already finished: its result carried it too
        try:
            if not admissible(running, message, sender, self.dataset_samples):
                return
        except RefusedReport as exc:
            log.warning(
                "refused a report for trial %s from %s: %s", message.trial_key, sender, exc
            )
            running.handle.cancel()
            self._end(message.trial_key, TrialStatus.FAILED, f"refused a worker's report: {exc}")
            return
        self._apply(running, message)

    def _apply(self, running: Running, message: TrialBuilt | EpochReport) -> None:
        if isinstance(message, TrialBuilt):
            if running.train_ops is not None:
                return  # the live event recorded it; the result repeats it
            self._turn.trial_built(running.trial_id, message)
            running.train_ops, running.eval_ops = message.train_ops, message.eval_ops
            return
        # Recorded once: admissible let through only the next epoch, and the write skips a row
        # that a retried commit already wrote.
        self._turn.epoch(running.trial_id, message)
        running.epochs_seen.add(message.epoch)
        if running.train_ops is not None and running.eval_ops is not None:
            self.total_ops += (
                message.samples_trained * running.train_ops
                + message.samples_evaluated * running.eval_ops
            )
        objective = self.config.search.objective  # the run's quality (aiperf.quality)
        measured = quality.of(message, objective)
        if message.complete and measured is not None and math.isfinite(measured):
            assert self.proposals is not None
            self.proposals.tell(
                score, running.kt_trial.trial_id, objective, measured, message.epoch
            )
            if quality.better(objective, measured, self.best_quality):
                self.best_quality = measured
                self.best_trial = message.trial_key
            if quality.better(objective, measured, running.best_quality):
                running.best_quality = measured

    def _finish(self, key: str) -> None:
        running = self.running[key]
        try:
            result = running.handle.result()
        except Exception as exc:  # the worker was lost: keep what it reported, record the failure
            result = TrialResult(
                key,
                TrialStatus.FAILED,
                None,
                [],
                message=f"worker lost: {type(exc).__name__}: {exc}",
            )
        for message in ([result.built] if result.built is not None else []) + list(result.epochs):
            self._receive(message, FROM_RESULT)
            if key not in self.running:
                return  # the result broke a rule: the trial is already failed
        if result.phases is not None:  # where its seconds went, measured on its worker
            try:
                self._turn.trial_phases(
                    running.trial_id, key, TrialPhases.from_seconds(result.phases)
                )
            except ValueError as exc:  # recorded without them: its seconds count as idle
                log.warning("ignored the phases of trial %s: %s", key, exc)
        self._end(key, result.status, result.message)

    def _end(self, key: str, status: TrialStatus, message: str | None) -> None:
        running = self.running.pop(key)
        ended_at = time.time()
        self._turn.trial_stopped(running.trial_id, TrialEnd(key, status, ended_at, message))
        self.counts[status] += 1
        self.logger.info("%s", self._ended_line(key, running, status, ended_at))
        # The oracle learns of the end on its thread; the state stored with the next proposal has it
        # (a resumed run rebuilds the trials themselves from the records: aiperf.search.resume).
        assert self.proposals is not None
        self.proposals.tell(end_trial, running.kt_trial, self.config.search.objective, message)
        if status in (
            TrialStatus.FAILED,
            TrialStatus.DIVERGED,
            TrialStatus.OUT_OF_MEMORY,
            TrialStatus.TOO_LARGE,
        ):
            log.warning(
                "trial %s %s: %s", key, status, (message or "").splitlines()[0] if message else ""
            )
        self._count_failure(status, message)

    def _ended_line(self, key: str, running: Running, status: TrialStatus, ended_at: float) -> str:
        """One line per trial as it ends, for a person following the run: how it was made, its
        epochs, its accuracy beside the run's best, and the budget left."""
        own = "-" if running.best_quality is None else f"{running.best_quality:.4f}"
        best = "-" if self.best_quality is None else f"{self.best_quality:.4f}"
        measure = (
            "val loss" if quality.lower_is_better(self.config.search.objective) else "val acc"
        )
        left = (
            "" if self.deadline is None else f"; {max(0.0, self.deadline - ended_at):.0f} s left"
        )
        return (
            f"trial {key} {status}: {running.operator or 'seed'}, "
            f"{len(running.epochs_seen)} epoch(s), {measure} {own} (run best {best}){left}"
        )

    def _count_failure(self, status: TrialStatus, message: str | None) -> None:
        """Fail fast: after max_failures failed trials in a row with none completed, nothing will
        train, so the run stops (NothingTrains) instead of idling out its budget."""
        # nothing trained
        if status not in (TrialStatus.FAILED, TrialStatus.OUT_OF_MEMORY, TrialStatus.TOO_LARGE):
            self.failures_in_a_row = 0
            return
        self.failures_in_a_row += 1
        if self.first_failure is None:
            self.first_failure = ((message or "").strip().splitlines() or ["no message"])[0]
        if self.failures_in_a_row >= self.max_failures and not self.counts[TrialStatus.COMPLETED]:
            raise NothingTrains(
                f"{self.failures_in_a_row} trials failed in a row and none completed; the first "
                f"failed with: {self.first_failure}. Fix that (or set {settings.MAX_CONSECUTIVE_FAILURES.name})"
            )

    def _abandon_stragglers(self) -> None:
        for key in list(self.running):
            self.running[key].handle.cancel()
            self._end(
                key, TrialStatus.STOPPED, f"did not stop within {self.grace_s:g} s of the deadline"
            )

    def _progress(self, started_at: float, now: float, ended: bool) -> None:
        """Publish the figures when a trial ended or another PROGRESS_STEP of the budget is used."""
        if self.on_progress is None:
            return
        figures = self._figures(started_at, now)
        step = figures.milestone()[1]
        if not ended and step <= self._progress_step:
            return
        self._progress_step = step
        try:
            self.on_progress(figures)
        except Exception as exc:  # the run goes on; its records are what counts
            log.warning("progress not published: %s: %s", type(exc).__name__, exc)

    def _figures(self, started_at: float, now: float) -> LiveFigures:
        budget_s = self.config.budget_s if self.deadline is None else self.deadline - started_at
        return LiveFigures(
            elapsed_s=max(0.0, now - started_at),
            budget_s=budget_s,  # a resumed run's: what its segment has (resume_search)
            trials_done=sum(self.counts.values()),
            trials_running=len(self.running),
            total_ops=self.total_ops,
            best_quality=self.best_quality,
            best_trial=self.best_trial,
            quality=self.config.search.objective,
        )
