"""The run recorder: every fact of one run written to the database as its owner and to its event
log, together, by one object.

A run's facts used to be written in two places by whoever learnt them: a Store write here, an
EventLog line there (or only at the end, from the records), and the right to write the run was a
process-wide table. Here each fact has one method, which writes its row(s) with the run's claim
(aiperf.store.ownership: RunTakenOver and nothing written when the run was taken over) and then
emits its event(s) (aiperf.results.mllog), so the log never holds what the database lacks and a
process that lost its run adds to neither. Lifecycle code calls these methods, never a Store
write or an EventLog method; a step that runs in another task or thread is handed the recorder,
or its claim to open one with (`RunRecorder.opened`).

The search's writes are batched: one `Turn` per turn of the orchestrator's loop, committed in one
transaction (`commit`), whose events follow the commit in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from aiperf import paths
from aiperf.config import BenchmarkConfig
from aiperf.results import mllog
from aiperf.results.mllog import EventLog
from aiperf.results.score import ScoreResult
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import CheckRecord, RunClaim, Store, WriteBatch
from aiperf.store.fact_records import EpochReport, RunStart, TrialBuilt, TrialEnd, TrialStart
from aiperf.store.records import TrialPhases


class Turn:
    """The writes of one turn of the orchestrator's loop (aiperf.store.WriteBatch) and the events
    that tell them, emitted once the batch is committed (RunRecorder.commit)."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.batch = WriteBatch()
        self._events: list[Callable[[EventLog, list[Any]], None]] = []
        self._created: list[int] = []  # where each new trial's id is in the batch's results

    def __bool__(self) -> bool:
        return bool(self.batch) or bool(self._events)

    def search_state(self, oracle: str, state: dict[str, Any]) -> None:
        """The oracle's state, replacing the stored one (no event: the log has the trials)."""
        self.batch.save_search_state(self.run_id, oracle, state)

    def trial_created(self, start: TrialStart) -> None:
        """A new trial; its id is among `commit`'s results, in the order trials were created."""
        where = len(self.batch)
        self._created.append(where)
        self.batch.create_trial(self.run_id, start)
        self._events.append(lambda events, results: events.trial_started(results[where], start))

    def trial_built(self, trial_id: int, built: TrialBuilt) -> None:
        """The worker built the trial's model: where it runs, its counted operations, and the
        parent's epoch whose weights it grew from (None: fresh weights)."""
        self.batch.record_trial_built(trial_id, built)
        self._events.append(lambda events, _: events.trial_built(built))

    def epoch(self, trial_id: int, report: EpochReport) -> None:
        """One epoch of the trial."""
        self.batch.record_epoch(trial_id, report)
        self._events.append(lambda events, _: events.epoch(report))

    def trial_phases(self, trial_id: int, trial_key: str, phases: TrialPhases) -> None:
        """Where the trial's seconds went on its worker."""
        self.batch.record_trial_phases(trial_id, phases)
        self._events.append(lambda events, _: events.trial_phases(trial_key, phases))

    def trial_stopped(self, trial_id: int, end: TrialEnd) -> None:
        self.batch.finish_trial(trial_id, end)
        self._events.append(lambda events, _: events.trial_stopped(end))


class RunRecorder:
    """One run's facts, written by the holder of its claim to its Store and its event log."""

    def __init__(self, store: Store, claim: RunClaim, events: EventLog) -> None:
        self.store, self.claim, self.events = store, claim, events

    @classmethod
    def of_run(cls, store: Store, claim: RunClaim, config: BenchmarkConfig) -> RunRecorder:
        """The recorder of the claimed run, its event log in the run's folder under config.out."""
        return cls(
            store, claim, EventLog(paths.event_log_path(config.out, config.db, claim.run_id))
        )

    @classmethod
    @contextmanager
    def opened(cls, config: BenchmarkConfig, claim: RunClaim) -> Iterator[RunRecorder]:
        """A recorder on a Store of its own at config.db, closed after the block: for a step that
        runs in another task or thread and was handed the claim."""
        with Store.open(config.db, migrate=False) as store:
            yield cls.of_run(store, claim, config)

    @property
    def run_id(self) -> int:
        return self.claim.run_id

    # --- the run ---------------------------------------------------------------------------------

    @classmethod
    def new_run(
        cls,
        store: Store,
        config: BenchmarkConfig,
        start: RunStart,
        *,
        system: Mapping[str, Any],
        owner: str,
    ) -> RunRecorder:
        """The system and a new run (`start`, a run of `config`), owned by `owner`, and its start
        in the event log. A log that cannot be written fails the run at once (`run_failed`): a
        running row without a search could not be recovered or resumed."""
        system_id = store.upsert_system(system)
        claim = store.create_run(start, system_id=system_id, owner=owner)
        recorder = cls.of_run(store, claim, config)
        with recorder.failed_on_error():
            row = store.get_run(claim.run_id)  # the row's own times: the log rebuilds them exactly
            recorder.events.run_started(
                claim.run_id,
                start,
                system_id=system_id,
                system=system,
                created_at=row.created_at.timestamp(),
                system_first_seen_at=row.system.first_seen_at.timestamp(),
            )
            # What the row starts with, nothing measured yet: a later write of a fact logs it again
            # (the latest stands), and a run that never measures one (simulated trials, a feed
            # that could not be measured) still logs what its row holds.
            recorder.events.resources(
                precision=row.precision,
                backend=row.backend,
                jit_compile=row.jit_compile,
                peak_flops=row.peak_flops,
                worker_peaks=list(row.worker_peaks),
                data_feed=row.data_feed,
                feed_rates=list(row.feed_rates),
                reference_rates=list(row.reference_rates),
                energy_windows=list(row.energy_windows),
            )
        return recorder

    @contextmanager
    def failed_on_error(self) -> Iterator[None]:
        """A run that fails before its search (its event log cannot be written, a stage cannot
        start) is closed as failed with the reason, never left running."""
        try:
            yield
        except BaseException as exc:
            self.run_failed(f"{type(exc).__name__}: {exc}")
            raise

    def run_failed(self, message: str) -> None:
        """The run failed before its search: its row only, for the event log may be what failed."""
        self.store.finish_run(self.claim, status=RunStatus.FAILED, message=message)

    @contextmanager
    def _trials_it_ends(self) -> Iterator[None]:
        """Trials the run itself ends (interrupted when it is resumed or recovered, stopped with it)
        get their trial_stop line, as the orchestrator's get theirs: which were running is read
        before the write and how they ended after it, so a retried write still logs them."""
        running = {
            t.trial_key
            for t in self.store.get_run(self.run_id).trials
            if t.status == TrialStatus.RUNNING
        }
        yield
        if not running:
            return
        for trial in self.store.get_run(self.run_id).trials:
            if trial.trial_key in running and trial.ended_at is not None:
                self.events.trial_stopped(
                    TrialEnd(
                        trial.trial_key, trial.status, trial.ended_at.timestamp(), trial.message
                    )
                )

    def run_resumed(self) -> None:
        """A lost or interrupted run this process took over runs again: its running trials are
        interrupted (trained again), its open segment ends at its last epoch, and it is running
        with no score until the resumed search ends."""
        with self._trials_it_ends():
            self.store.interrupt_trials(self.claim)
        self.store.close_window_at_last_epoch(self.claim)
        self.store.reopen_run(self.claim)
        self.events.run_resumed(
            run_id=self.run_id, windows=self.store.get_run(self.run_id).windows
        )

    def run_recovered(self, message: str) -> None:
        """A lost or interrupted run this process took over is closed to be scored: its running
        trials interrupted, its open segment ended at its last epoch, the run interrupted."""
        with self._trials_it_ends():
            self.store.interrupt_trials(self.claim)
        self.store.close_window_at_last_epoch(self.claim)
        self.store.finish_run(self.claim, status=RunStatus.INTERRUPTED, message=message)
        self.events.windows_closed(self.store.get_run(self.run_id).windows)
        self.events.run_stopped(RunStatus.INTERRUPTED, message)

    def run_stopped(self, status: RunStatus, message: str | None = None) -> None:
        """The run ended (completed, failed, interrupted); its running trials stop with it. An event
        log that cannot take the line (a full disk) raises OSError after the row is written."""
        with self._trials_it_ends():
            self.store.finish_run(self.claim, status=status, message=message)
        self.events.run_stopped(status, message)

    def heartbeat(self) -> None:
        """The run's process is alive (the row only: a heartbeat is no event)."""
        self.store.heartbeat(self.claim)

    # --- before the timed window -----------------------------------------------------------------

    def staging(self, started: float, ended: float, seconds: float) -> None:
        """The data was staged from `started` to `ended`, in `seconds` of wall time (a monotonic
        clock's): the row, then the staging's start and stop in the log, at their own times."""
        self.store.record_staging(self.claim, seconds)
        self.events.staging_started(started)
        self.events.staging_stopped(ended, seconds)

    def dataset(self, manifest: Mapping[str, Any]) -> None:
        """The run's staged dataset: recorded unless the run has one (a resumed run's, which its
        caller checked is the same data), and its manifest logged."""
        if self.store.run_dataset(self.run_id) is None:
            self.store.record_dataset(self.claim, manifest)
        self.events.dataset(manifest)

    def resolved_settings(
        self,
        *,
        config: dict[str, Any],
        precision: str,
        division: str,
        deviations: Sequence[str],
        config_hash: str,
    ) -> None:
        """The config once the devices resolved what the profile left to them, with its division
        and hash judged again (the log's latest config, division and precision stand)."""
        self.store.record_resolved_settings(
            self.claim,
            config=config,
            precision=precision,
            division=division,
            deviations=list(deviations),
            config_hash=config_hash,
        )
        self.events.emit(
            mllog.SUBMISSION_DIVISION,
            division,
            deviations=list(deviations),
            config_hash=config_hash,
        )
        self.events.emit(mllog.CONFIG, config)
        self.events.resources(precision=precision)

    def peaks(self, worker_peaks: list[dict[str, Any]]) -> None:
        """Each worker's peak and their sum, MFU's divisor (the latest measurement stands)."""
        self.store.record_peaks(self.claim, worker_peaks)
        total = float(sum(float(p["flops"]) for p in worker_peaks)) if worker_peaks else None
        self.events.resources(peak_flops=total, worker_peaks=[dict(p) for p in worker_peaks])

    def feed(self, data_feed: str | None, rates: list[dict[str, Any]]) -> None:
        """Which feed ran and each worker's feed and device rates."""
        self.store.record_feed(self.claim, data_feed, rates)
        self.events.resources(data_feed=data_feed, feed_rates=[dict(r) for r in rates])

    def reference(self, rates: list[dict[str, Any]]) -> None:
        """Each worker's bare Keras rate, or why it has none."""
        self.store.record_reference(self.claim, rates)
        self.events.resources(reference_rates=[dict(r) for r in rates])

    def energy(self, segment: dict[str, Any]) -> None:
        """A window segment's energy, node by node (aiperf.lifecycle.metering)."""
        recorded = self.store.record_energy(self.claim, segment)
        self.events.resources(energy_windows=recorded)

    def system_description(self, description: dict[str, Any]) -> None:
        self.store.save_system_description(self.claim, description)
        self.events.system_description(description)

    def provenance(self, recorded: dict[str, Any]) -> None:
        self.store.save_provenance(self.claim, recorded)
        self.events.provenance(recorded)

    # --- the timed window ------------------------------------------------------------------------

    def search_started(self, started: float, deadline: float) -> None:
        """The window opens, or a resumed run's next segment."""
        self.store.start_search(self.claim, started, deadline)
        self.events.search_started(started, deadline)

    def search_stopped(self, ended: float) -> None:
        """The window's open segment closes."""
        self.store.finish_search(self.claim, ended)
        self.events.search_stopped(ended)

    def turn(self) -> Turn:
        """An empty turn of the search's writes, for `commit`."""
        return Turn(self.run_id)

    def commit(self, turn: Turn) -> list[int]:
        """The turn's writes in one transaction as the run's owner, then their events in order;
        the ids of the trials it created, in order."""
        results = self.store.write(turn.batch, self.claim)
        for emit in turn._events:
            emit(self.events, results)
        return [results[where] for where in turn._created]

    # --- the result ------------------------------------------------------------------------------

    def score(self, score: ScoreResult, ruleset: str | None) -> None:
        """The run's score (replacing an older one); the log's last score stands."""
        self.store.save_score(self.claim, score, ruleset=ruleset)
        self.events.score(score, ruleset)

    def best_weights(self, kept: dict[str, Any] | None) -> None:
        self.store.save_best_weights(self.claim, kept)
        self.events.best_weights(kept)

    def verification(
        self,
        checks: Iterable[CheckRecord],
        *,
        rescored: ScoreResult | None = None,
        ruleset: str | None = None,
    ) -> None:
        """The run's verification; with `rescored`, the score its failed checks made invalid,
        stored before the checks (no reader sees a failed verification beside a valid verdict)
        and logged after them (the log's last score is the one that stands)."""
        checks = list(checks)
        if rescored is not None:
            self.store.save_score(self.claim, rescored, ruleset=ruleset)
        self.store.save_verification(self.claim, checks)
        self.events.verification(checks)
        if rescored is not None:
            self.events.score(rescored, ruleset)
