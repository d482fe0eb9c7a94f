"""The one module that reads and writes aiperf's records.

Each method is one short transaction, and the orchestrator commits what one turn of its loop
learnt (epochs, ends, new trials) as one WriteBatch: if a run dies, everything it reported up to
its last turn is already committed, and nothing a failed command did touches earlier runs. Reads
hand out frozen records (aiperf.store.records), never ORM objects. Who may write a run, and what
a write does when it may not, is the Store's contract (see `Store`).

Store is one class made of parts, each a module of its own: its core (aiperf.store.base: engine,
sessions, retry), its reads (aiperf.store.reads), a run's facts (aiperf.store.facts), and here the
run's life and its search. A turn's writes are a WriteBatch (aiperf.store.batch); rows become
records in aiperf.store.conversion.

    with Store.open(url) as store:           # create the database if needed, apply migrations
        claim = store.create_run(...)        # the right to write the new run
        store.start_search(claim, ...)
    with Store.open_existing(url) as store:  # read-only commands: never create, never migrate
        run = store.get_run(run_id)          # RecordNotFound when there is no such run
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
from aiperf.store.base import retried
from aiperf.store.batch import WriteBatch
from aiperf.store.conversion import now, utc
from aiperf.store.fact_records import RunStart
from aiperf.store.facts import RunFacts
from aiperf.store.models import Dataset, Epoch, Run, Score, SearchWindow, System, Trial
from aiperf.store.ownership import RunClaim
from aiperf.store.reads import StoreReads


class Store(StoreReads, RunFacts):
    """aiperf's records, read and written through one interface.

    Who may write a run: only the holder of its claim (aiperf.store.ownership.RunClaim), which
    `create_run` and `take_over` return. Every write that touches a run takes the claim (a
    WriteBatch's too: `write(batch, claim)`) and, in the same transaction and before anything
    else, checks that the run's row still carries the claim's token, locking the row until the
    commit. Writes that touch no run (`upsert_system`, `record_dataset(None, ...)` for `aiperf
    stage`) take none. Reads take no claim and see committed data only.

    A run taken over: after `aiperf recover` or `aiperf run --resume` took a run (compare-and-set
    on its token, on the database's clock, once its heartbeat is older than the timeout), every
    write with the old claim raises RunTakenOver and writes nothing: the check and the write are
    one transaction, and the take-over waits for a write in progress to commit.

    Retries: every transaction is retried through transient database faults (aiperf.store.retry)
    for up to `retry_s`. That is safe because every write is idempotent: updates set values,
    inserts look first for the row an earlier attempt may have committed before its
    acknowledgement was lost (`_insert_once`), and the ownership check is repeated by each attempt.

    Threads: a Store may be shared by threads (the run's main thread and its heartbeat): each
    method opens its own session from the engine's pool. A claim is a frozen value, safe to pass
    to any thread or task that writes for the run."""

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
