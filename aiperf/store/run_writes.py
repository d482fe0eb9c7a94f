"""What a run writes: its row and its life (created, taken over, beating, ended, interrupted,
resumed), its search (the window's segments, each turn's WriteBatch) and its facts before and
after the search (peaks, feed, reference, resolved settings, staging, description, provenance,
score, verification, kept weights), and the system and staged dataset it names. The run's
recorder (aiperf.lifecycle.recorder) is the one caller in the product.

The contract (every write here): a write that touches a run takes the run's claim
(aiperf.store.ownership.RunClaim, which `create_run` and `take_over` return) and, in its
transaction and before anything else, checks that the run's row still carries the claim's token,
locking the row until the commit; a run taken over raises RunTakenOver and writes nothing. Writes
that touch no run (`upsert_system`, `record_dataset(None, ...)` for `aiperf stage`) take none. Each
is one transaction retried through transient faults, and idempotent: updates set values, inserts
look first for the row an earlier attempt may have committed (`_insert_once`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from aiperf.status import RunStatus, TrialStatus
from aiperf.store import ownership
from aiperf.store.base import StoreBase, retried
from aiperf.store.batch import WriteBatch
from aiperf.store.conversion import now, score_columns, utc
from aiperf.store.fact_records import RunStart
from aiperf.store.models import Dataset, Epoch, Run, Score, SearchWindow, System, Trial
from aiperf.store.ownership import RunClaim
from aiperf.store.records import CheckRecord, RecordNotFound, ScoreResult


class RunWrites(StoreBase):
    """A run's writes, by the holder of its claim (this module's contract)."""

    @retried
    def take_over(
        self, run_id: int, *, owner: str, seen_owner: str | None, timeout_s: float
    ) -> RunClaim | None:
        """Make run `run_id` `owner`'s by compare-and-set on the token its taker read
        (aiperf.store.ownership.take_over): the new claim, or None when its process still beats
        or another took it first."""
        with self.session() as s:
            return ownership.take_over(
                s, run_id, owner=owner, seen_owner=seen_owner, timeout_s=timeout_s
            )

    @retried
    def upsert_system(self, facts: Mapping[str, Any]) -> int:
        """The system's id, its row inserted unless its fingerprint is there: ON CONFLICT DO NOTHING,
        so two runs starting at once on a new machine both succeed with one row."""
        dialect = {"sqlite": sqlite, "postgresql": postgresql}[self.engine.dialect.name]
        insert = (
            dialect.insert(System)
            .values(**facts, first_seen_at=now())
            .on_conflict_do_nothing(index_elements=[System.fingerprint])
        )
        known = select(System.id).where(System.fingerprint == facts["fingerprint"])
        with self.session() as s:
            # Look first: PostgreSQL spends a sequence number on every INSERT, even one that
            # conflicts, and system ids should not depend on the engine or on how often a machine ran.
            system_id = s.scalar(known)
            if system_id is None:
                s.execute(insert)
                system_id = s.scalar(known)
                # The row is there now: this INSERT added it, or a concurrent one it conflicted with.
                assert system_id is not None
            return system_id

    def create_run(self, start: RunStart, *, system_id: int, owner: str | None = None) -> RunClaim:
        """A new run, and the claim to write it with. Its creation time, taken once, identifies it
        if a retry must find it. `owner`: the creating process's token
        (aiperf.lifecycle.liveness.new_owner); the claim writes the run only while the row still
        carries it (see `take_over`)."""
        created_at = now()

        def create_run(s: Session, maybe_committed: bool) -> int:
            if maybe_committed:
                done = s.scalar(
                    select(Run.id).where(
                        Run.system_id == system_id,
                        Run.created_at == created_at,
                        Run.seed == start.seed,
                        Run.profile == start.profile,
                    )
                )
                if done is not None:
                    return done
            run = Run(
                **{**asdict(start), "deviations": list(start.deviations)},
                system_id=system_id,
                status=RunStatus.RUNNING,
                created_at=created_at,
                heartbeat_at=self._clock(),
                owner=owner,
            )
            s.add(run)
            s.flush()
            return run.id

        return RunClaim(self._insert_once(create_run), owner)

    def record_dataset(self, claim: RunClaim | None, manifest: Mapping[str, Any]) -> int:
        """A staged dataset's manifest, for a run (or for `aiperf stage` alone: claim None). Its
        staging time, taken once, identifies the row if a retry must find it."""
        staged_at = now()
        run_id = None if claim is None else claim.run_id

        def record_dataset(s: Session, maybe_committed: bool) -> int:
            if claim is not None:
                ownership.guard(s, claim)
            if maybe_committed:
                done = s.scalar(
                    select(Dataset.id).where(
                        Dataset.run_id.is_(None) if run_id is None else Dataset.run_id == run_id,
                        Dataset.staged_at == staged_at,
                        Dataset.sha256 == manifest["sha256"],
                    )
                )
                if done is not None:
                    return done
            row = Dataset(
                run_id=run_id,
                staged_at=staged_at,
                name=manifest["name"],
                kind=manifest["kind"],
                sha256=manifest["sha256"],
                train_samples=manifest["train_samples"],
                val_samples=manifest["val_samples"],
                classes=manifest["classes"],
                manifest=dict(manifest),
            )
            s.add(row)
            s.flush()
            return row.id

        return self._insert_once(record_dataset)

    @retried
    def start_search(self, claim: RunClaim, started_at: float, deadline: float) -> None:
        """Open the timed window, or, for a resumed run, its next segment (search_windows)."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.search_started_at = run.search_started_at or utc(started_at)
            run.deadline = utc(deadline)
            windows = list(s.scalars(select(SearchWindow).where(SearchWindow.run_id == run_id)))
            if any(utc(w.started_at) == utc(started_at) for w in windows):
                return  # a retry of a start that was committed: the segment is there (idempotent)
            s.add(
                SearchWindow(
                    run_id=run_id,
                    segment=len(windows),
                    started_at=utc(started_at),
                    deadline=utc(deadline),
                )
            )

    def write(self, batch: WriteBatch, claim: RunClaim) -> list[Any]:
        """Every write of `batch`, in its order, in one transaction retried through transient faults;
        each write's result (a new trial's id, whether an epoch was new), in the same order.

        One commit instead of one per write is what lets one orchestrator keep a thousand workers
        busy (a commit waits for the disk: milliseconds each). All or nothing: a crash before the
        commit loses the batch whole, never a part of it, and every write in it is idempotent, so a
        retry after a commit whose acknowledgement was lost records nothing twice. `claim`: the
        run the batch writes (its trials are that run's); a run taken over gets none of its old
        process's reports (RunTakenOver, nothing of the batch written)."""
        if not batch:
            return []

        def write_batch(s: Session, maybe_committed: bool) -> list[Any]:
            ownership.guard(s, claim)
            return [work(s, maybe_committed) for work in batch]

        return self._insert_once(write_batch)

    @retried
    def finish_search(self, claim: RunClaim, ended_at: float) -> None:
        """Close the window's open segment (and the run's window) at `ended_at`."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").search_ended_at = utc(ended_at)
            for window in s.scalars(
                select(SearchWindow).where(
                    SearchWindow.run_id == run_id, SearchWindow.ended_at.is_(None)
                )
            ):
                window.ended_at = utc(ended_at)

    @retried
    def finish_run(
        self, claim: RunClaim, *, status: RunStatus, message: str | None = None
    ) -> None:
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.status, run.message = status, message
            # An interrupted run's running trials are retrained when it is resumed; others just stopped.
            ended = (
                TrialStatus.INTERRUPTED if status == RunStatus.INTERRUPTED else TrialStatus.STOPPED
            )
            running = select(Trial).where(
                Trial.run_id == run_id, Trial.status == TrialStatus.RUNNING
            )
            for trial in s.scalars(running):
                trial.status, trial.ended_at = ended, trial.ended_at or now()

    @retried
    def heartbeat(self, claim: RunClaim) -> None:
        """The run's process is alive. A running run whose heartbeat is older than the timeout is
        shown lost (aiperf.status.derived_status): no one needs to write that its process died.
        Stamped with the database's clock, the one its readers and takers compare it with; only
        while the run carries the claim's token (RunTakenOver once another took it over)."""
        with self.session() as s:
            ownership.beat(s, claim)

    @retried
    def interrupt_trials(self, claim: RunClaim) -> int:
        """End the run's running trials as interrupted, each at its last recorded epoch (or its
        start): their finished epochs count, and a resumed run trains them again. How many ended."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            trials = list(
                s.scalars(
                    select(Trial).where(
                        Trial.run_id == run_id, Trial.status == TrialStatus.RUNNING
                    )
                )
            )
            for trial in trials:
                last = s.scalar(select(func.max(Epoch.ended_at)).where(Epoch.trial_id == trial.id))
                trial.status, trial.ended_at = (
                    TrialStatus.INTERRUPTED,
                    utc(last) or utc(trial.started_at),
                )
            return len(trials)

    @retried
    def close_window_at_last_epoch(self, claim: RunClaim) -> None:
        """Close a segment a crash left open at the last epoch recorded in it (at its start when
        none was): the window covers the work the records prove, and no more."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            ends = [
                utc(t)
                for t in s.scalars(
                    select(Epoch.ended_at)
                    .join(Trial, Epoch.trial_id == Trial.id)
                    .where(Trial.run_id == run_id)
                )
            ]
            for window in s.scalars(
                select(SearchWindow).where(
                    SearchWindow.run_id == run_id, SearchWindow.ended_at.is_(None)
                )
            ):
                start = utc(window.started_at)
                window.ended_at = max([start, *(end for end in ends if end >= start)])
                run.search_ended_at = window.ended_at

    @retried
    def reopen_run(self, claim: RunClaim) -> None:
        """A lost or interrupted run runs again (aiperf run --resume): status running, a fresh
        heartbeat, and no score until the resumed search ends (a recovered score is out of date).
        Only by the process that took it over (`take_over`)."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.status, run.message, run.heartbeat_at, run.search_ended_at = (
                RunStatus.RUNNING,
                None,
                self._clock(),
                None,
            )
            score = s.scalar(select(Score).where(Score.run_id == run_id))
            if score is not None:
                s.delete(score)

    @retried
    def record_peaks(self, claim: RunClaim, worker_peaks: list[dict[str, Any]]) -> None:
        """Each worker's measured peak (aiperf.train.peak), measured before the timed window, and
        their sum, MFU's divisor. A resumed run measures again: the latest measurement stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.worker_peaks = [dict(peak) for peak in worker_peaks]
            run.peak_flops = (
                float(sum(float(peak["flops"]) for peak in worker_peaks)) if worker_peaks else None
            )

    @retried
    def record_feed(self, claim: RunClaim, feed: str | None, rates: list[dict[str, Any]]) -> None:
        """Which feed ran and each worker's feed and device rates (aiperf.train.feedrate),
        measured before the timed window. A resumed run measures again: the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.data_feed = feed
            run.feed_rates = [dict(rate) for rate in rates]

    @retried
    def record_reference(self, claim: RunClaim, rates: list[dict[str, Any]]) -> None:
        """Each worker's bare Keras rate, or why it was skipped (aiperf.lifecycle.reference),
        measured before the timed window. A resumed run measures again: the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").reference_rates = [dict(r) for r in rates]

    @retried
    def record_energy(self, claim: RunClaim, segment: dict[str, Any]) -> list[dict[str, Any]]:
        """A window segment's energy (aiperf.lifecycle.metering), after the run's earlier
        segments'; the run's segments as now recorded."""
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, claim.run_id, "run")
            run.energy_windows = [*(run.energy_windows or ()), dict(segment)]
            return list(run.energy_windows)

    @retried
    def record_resolved_settings(
        self,
        claim: RunClaim,
        *,
        config: dict[str, Any],
        precision: str,
        division: str,
        deviations: list[str] | tuple[str, ...],
        config_hash: str,
    ) -> None:
        """The run's config once the settings its profile left to the devices are resolved
        (aiperf.train.auto: train.precision auto, search.space.batch_per_gib), before its first
        trial, with the precision, division and workload hash judged from it."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.config, run.precision = dict(config), precision
            run.division, run.deviations = division, list(deviations)
            run.config_hash = config_hash

    @retried
    def record_staging(self, claim: RunClaim, seconds: float) -> None:
        """Wall seconds the run's data took to stage (validate, convert or generate, copy to the
        nodes), before and outside its timed window, as MLPerf HPC times staging. A resumed run
        stages again, and the latest staging stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").staging_s = float(seconds)

    @retried
    def save_best_weights(self, claim: RunClaim, weights: dict[str, Any] | None) -> None:
        """The best trial's kept weights file (aiperf.results.remeasure.keep_best_weights): which
        trial and epoch, where, its sha256 and recorded accuracy; the latest scoring stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").best_weights = weights

    @retried
    def save_provenance(self, claim: RunClaim, provenance: dict[str, Any]) -> None:
        """What ran on the workers (aiperf.system.provenance); a resumed run records it again, and
        the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").provenance = dict(provenance)

    @retried
    def save_system_description(self, claim: RunClaim, description: dict[str, Any]) -> None:
        """The compute nodes as they described themselves (aiperf.system.description); a resumed run
        describes them again, and the latest description stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").system_description = dict(description)

    @retried
    def save_score(
        self, claim: RunClaim, score: ScoreResult, *, ruleset: str | None = None
    ) -> None:
        """The run's score (replacing an older one), judged by `ruleset`; not yet verified."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            existing = s.scalar(select(Score).where(Score.run_id == run_id))
            if existing is not None:
                s.delete(existing)
                s.flush()
            s.add(Score(**score_columns(score), run_id=run_id, computed_at=now(), ruleset=ruleset))

    @retried
    def save_verification(self, claim: RunClaim, checks: list[CheckRecord]) -> None:
        """The result of recomputing the run's score from its records, with its stored score."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            score = s.scalar(select(Score).where(Score.run_id == run_id))
            if score is None:
                raise RecordNotFound(f"run {run_id} has no score to verify")
            score.verification = [
                {"check": c.check, "passed": c.passed, "detail": c.detail} for c in checks
            ]
            score.verified = all(c.passed for c in checks)
