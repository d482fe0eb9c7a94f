"""The one module that reads and writes aiperf's records.

Each method is one short transaction, and the orchestrator commits what one turn of its loop
learnt (epochs, ends, new trials) as one WriteBatch: if a run dies, everything it reported up to
its last turn is already committed, and nothing a failed command did touches earlier runs. Reads
hand out frozen records (aiperf.store.records), never ORM objects. Who may write a run, and what
a write does when it may not, is the Store's contract (see `Store`).

    with Store.open(url) as store:           # create the database if needed, apply migrations
        claim = store.create_run(...)        # the right to write the new run
        store.start_search(claim, ...)
    with Store.open_existing(url) as store:  # read-only commands: never create, never migrate
        run = store.get_run(run_id)          # RecordNotFound when there is no such run
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal
from functools import wraps
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, get_type_hints, overload

from sqlalchemy import (
    Boolean,
    DateTime,
    Engine,
    bindparam,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, selectinload, sessionmaker

from aiperf.status import RunStatus, TrialStatus, derived_status
from aiperf.store import database, ownership
from aiperf.store.models import (
    Dataset,
    Epoch,
    Run,
    Score,
    SearchState,
    SearchWindow,
    System,
    Trial,
)
from aiperf.store.ownership import RunClaim
from aiperf.store.records import (
    TRIAL_PHASE_COLUMNS,
    CheckRecord,
    DatasetRecord,
    EpochRecord,
    EpochWork,
    RecordNotFound,
    RunRecord,
    RunScoreRow,
    ScoreResult,
    SystemRecord,
    TrialPhases,
    TrialRecord,
    TrialSummaryRow,
    WindowRecord,
    window_seconds,
)
from aiperf.store.retry import retry_budget_s, retrying

Row = TypeVar("Row")
T = TypeVar("T")
P = ParamSpec("P")


@overload
def utc(moment: datetime | float) -> datetime: ...
@overload
def utc(moment: None) -> None: ...
@overload
def utc(moment: datetime | float | None) -> datetime | None: ...


def utc(moment: datetime | float | None) -> datetime | None:
    """UTC-aware datetime from a datetime (naive ones are UTC, as SQLite returns them) or a Unix time."""
    if moment is None:
        return None
    if isinstance(moment, (int, float)):
        return datetime.fromtimestamp(moment, tz=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def now() -> datetime:
    return datetime.now(tz=UTC)


@dataclass(frozen=True)
class RunWork:
    """What a run's score is computed from, read back from the records."""

    epochs: list[EpochWork]
    elapsed_s: float
    best_val_accuracy: float | None
    val_samples: int
    trials_completed: int
    budget_s: float
    workers: int = 1
    peak_flops: float | None = None  # the workers' summed peak: MFU's divisor (None: not measured)
    stepping_s: tuple[float, ...] | None = None  # per trial with phases: train + evaluate seconds


def _retried(method: Callable[Concatenate[Store, P], T]) -> Callable[Concatenate[Store, P], T]:
    """A Store method whose one transaction runs again after a transient database fault
    (aiperf.store.retry). Only for methods that are idempotent as they stand: a second run of
    them changes nothing the first one committed."""

    @wraps(method)
    def run_retried(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return retrying(lambda: method(self, *args, **kwargs), self.retry_s, method.__name__)

    return run_retried


class Store:
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

    def __init__(self, engine: Engine, *, retry_s: float | None = None) -> None:
        """`retry_s`: how long a transaction is retried through transient faults (default
        AIPERF_DB_RETRY_S, else 120 s; 0 never retries)."""
        self.engine = engine
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> Store:
        """For commands that write: connect (creating an SQLite file; a bad URL is a UserError) and
        apply pending migrations."""
        engine = database.open_engine(url)
        if migrate:
            database.upgrade(engine)
        return cls(engine)

    @classmethod
    def open_existing(cls, url: str) -> Store:
        """For commands that only read: the database must exist at the current schema; nothing is
        created or migrated (a missing file, a non-database or an old schema is a UserError)."""
        return cls(database.open_existing_engine(url))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def _insert_once(self, work: Callable[[Session, bool], T]) -> T:
        """Run an inserting transaction, retried through transient faults, so that it inserts once.

        A fault while committing may come after the commit took effect (its acknowledgement lost),
        so `work(session, maybe_committed)` is told whether an earlier attempt reached the commit:
        then it looks for the row that attempt wrote before inserting again."""
        maybe_committed = False

        def attempt() -> T:
            nonlocal maybe_committed
            with self._sessions.begin() as session:
                result = work(session, maybe_committed)
                maybe_committed = True  # the commit happens as the block exits
            return result

        return retrying(attempt, self.retry_s, getattr(work, "__name__", "insert"))

    @staticmethod
    def _get(session: Session, model: type, key: int, what: str) -> Any:
        row = session.get(model, key)
        if row is None:
            raise RecordNotFound(f"{what} {key} is not in the database")
        return row

    # --- one writer per run: the owner token, on the database's clock ----------------------------

    def _clock(self, minus_s: float = 0.0) -> Any:
        """The database's time now (less `minus_s`), as SQL (aiperf.store.database.clock)."""
        return database.clock(self.engine.dialect.name, minus_s)

    def _database_now(self, s: Session) -> datetime:
        """The database's time now, which a reader judges a heartbeat's age by (not its own)."""
        moment = s.scalar(select(self._clock()))
        assert moment is not None  # a clock always answers
        return utc(moment)

    @_retried
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

    # --- writes, in the order a run makes them -------------------------------------------------

    @_retried
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

    def create_run(
        self,
        *,
        system_id: int,
        profile: str,
        config: dict[str, Any],
        seed: int,
        budget_s: float,
        workers: int,
        flow_run_id: str | None = None,
        ruleset: str | None = None,
        division: str | None = None,
        deviations: list[str] | tuple[str, ...] = (),
        config_hash: str | None = None,
        precision: str | None = None,
        backend: str | None = None,
        jit_compile: bool | None = None,
        owner: str | None = None,
        series: str | None = None,
        series_index: int | None = None,
    ) -> RunClaim:
        """A new run, and the claim to write it with. Its creation time, taken once, identifies it
        if a retry must find it.
        `series`, `series_index`: the series of repeated runs it is run `series_index` (1..N) of.
        `precision`, `backend`, `jit_compile`: how its trials train (the config's train section).
        `owner`: the creating process's token (aiperf.lifecycle.liveness.new_owner); the claim
        writes the run only while the row still carries it (see `take_over`)."""
        if (series is None) != (series_index is None) or (
            series_index is not None and series_index < 1
        ):
            raise ValueError(
                f"a run in a series needs its id and an index from 1; got {series!r}, {series_index!r}"
            )
        created_at = now()

        def create_run(s: Session, maybe_committed: bool) -> int:
            if maybe_committed:
                done = s.scalar(
                    select(Run.id).where(
                        Run.system_id == system_id,
                        Run.created_at == created_at,
                        Run.seed == seed,
                        Run.profile == profile,
                    )
                )
                if done is not None:
                    return done
            run = Run(
                system_id=system_id,
                profile=profile,
                config=config,
                seed=seed,
                budget_s=budget_s,
                workers=workers,
                status=RunStatus.RUNNING,
                created_at=created_at,
                heartbeat_at=self._clock(),
                owner=owner,
                flow_run_id=flow_run_id,
                ruleset=ruleset,
                division=division,
                deviations=list(deviations),
                config_hash=config_hash,
                precision=precision,
                backend=backend,
                jit_compile=jit_compile,
                series=series,
                series_index=series_index,
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

    @_retried
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

    def create_trial(
        self,
        claim: RunClaim,
        *,
        trial_key: str,
        number: int,
        architecture: dict[str, Any],
        hyperparameters: dict[str, Any],
        started_at: float,
        parent_trial_id: int | None = None,
        operator: str | None = None,
    ) -> int:
        """A new trial, unique by (run, trial_key): a retry finds the one an earlier attempt committed."""
        batch = WriteBatch()
        batch.create_trial(
            run_id=claim.run_id,
            trial_key=trial_key,
            number=number,
            architecture=architecture,
            hyperparameters=hyperparameters,
            started_at=started_at,
            parent_trial_id=parent_trial_id,
            operator=operator,
        )
        return self.write(batch, claim)[0]

    def record_trial_built(
        self,
        claim: RunClaim,
        trial_id: int,
        *,
        worker: str,
        parameters: int,
        train_ops: int,
        eval_ops: int,
        tensor_train_ops: int,
        tensor_eval_ops: int,
        devices: int = 1,
        placement: Sequence[str] = (),
    ) -> None:
        """The worker built the model: record which worker runs it, on which of its devices, and its
        counted operations."""
        batch = WriteBatch()
        batch.record_trial_built(
            trial_id,
            worker=worker,
            parameters=parameters,
            train_ops=train_ops,
            eval_ops=eval_ops,
            tensor_train_ops=tensor_train_ops,
            tensor_eval_ops=tensor_eval_ops,
            devices=devices,
            placement=placement,
        )
        self.write(batch, claim)

    def record_epoch(
        self,
        claim: RunClaim,
        trial_id: int,
        *,
        epoch: int,
        started_at: float,
        ended_at: float,
        samples_trained: int,
        samples_evaluated: int,
        loss: float | None,
        accuracy: float | None,
        val_loss: float | None,
        val_accuracy: float | None,
        complete: bool,
    ) -> bool:
        """Store one epoch once; a repeat of a recorded epoch (an event seen twice) is ignored (False).
        Unique by (trial, epoch): a retry after a commit whose acknowledgement was lost finds the
        row and reports it recorded (True), once."""
        batch = WriteBatch()
        batch.record_epoch(
            trial_id,
            epoch=epoch,
            started_at=started_at,
            ended_at=ended_at,
            samples_trained=samples_trained,
            samples_evaluated=samples_evaluated,
            loss=loss,
            accuracy=accuracy,
            val_loss=val_loss,
            val_accuracy=val_accuracy,
            complete=complete,
        )
        return self.write(batch, claim)[0]

    def finish_trial(
        self,
        claim: RunClaim,
        trial_id: int,
        *,
        status: TrialStatus,
        ended_at: float,
        message: str | None = None,
    ) -> None:
        batch = WriteBatch()
        batch.finish_trial(trial_id, status=status, ended_at=ended_at, message=message)
        self.write(batch, claim)

    def record_trial_phases(self, claim: RunClaim, trial_id: int, phases: TrialPhases) -> None:
        """Where the trial's seconds went on its worker, from its result (the trials' *_s columns)."""
        batch = WriteBatch()
        batch.record_trial_phases(trial_id, phases)
        self.write(batch, claim)

    def save_search_state(self, claim: RunClaim, oracle: str, state: dict[str, Any]) -> None:
        """Replace the run's oracle state with the latest one."""
        batch = WriteBatch()
        batch.save_search_state(claim.run_id, oracle, state)
        self.write(batch, claim)

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

    @_retried
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

    @_retried
    def record_feed(self, claim: RunClaim, feed: str | None, rates: list[dict[str, Any]]) -> None:
        """Which feed ran and each worker's feed and device rates (aiperf.train.feedrate),
        measured before the timed window. A resumed run measures again: the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.data_feed = feed
            run.feed_rates = [dict(rate) for rate in rates]

    @_retried
    def record_reference(self, claim: RunClaim, rates: list[dict[str, Any]]) -> None:
        """Each worker's bare Keras rate, or why it was skipped (aiperf.lifecycle.reference),
        measured before the timed window. A resumed run measures again: the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").reference_rates = [dict(r) for r in rates]

    @_retried
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

    @_retried
    def search_state(self, run_id: int) -> dict[str, Any] | None:
        with self.session() as s:
            row = s.scalar(select(SearchState).where(SearchState.run_id == run_id))
            return None if row is None else row.state

    @_retried
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

    @_retried
    def record_staging(self, claim: RunClaim, seconds: float) -> None:
        """Wall seconds the run's data took to stage (validate, convert or generate, copy to the
        nodes), before and outside its timed window, as MLPerf HPC times staging. A resumed run
        stages again, and the latest staging stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").staging_s = float(seconds)

    @_retried
    def save_best_weights(self, claim: RunClaim, weights: dict[str, Any] | None) -> None:
        """The best trial's kept weights file (aiperf.results.remeasure.keep_best_weights): which
        trial and epoch, where, its sha256 and recorded accuracy; the latest scoring stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").best_weights = weights

    @_retried
    def save_provenance(self, claim: RunClaim, provenance: dict[str, Any]) -> None:
        """What ran on the workers (aiperf.system.provenance); a resumed run records it again, and
        the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").provenance = dict(provenance)

    @_retried
    def save_system_description(self, claim: RunClaim, description: dict[str, Any]) -> None:
        """The compute nodes as they described themselves (aiperf.system.description); a resumed run
        describes them again, and the latest description stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").system_description = dict(description)

    @_retried
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

    @_retried
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
            s.add(
                Score(
                    run_id=run_id,
                    elapsed_s=score.elapsed_s,
                    total_ops=float(score.total_ops),
                    ops=score.ops,
                    tensor_ops=score.tensor_ops,
                    best_val_accuracy=score.best_val_accuracy,
                    val_samples=score.val_samples,
                    regulated_score=score.regulated_score,
                    trials_completed=score.trials_completed,
                    samples_trained=score.samples_trained,
                    samples_evaluated=score.samples_evaluated,
                    valid=score.valid,
                    reasons={"invalid": list(score.reasons)},
                    computed_at=now(),
                    ruleset=ruleset,
                    mfu=score.mfu,
                    utilisation=score.utilisation,
                )
            )

    @_retried
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

    @_retried
    def run_dataset(self, run_id: int) -> DatasetRecord | None:
        """The dataset the run trained on (None before it was staged)."""
        with self.session() as s:
            row = s.scalar(select(Dataset).where(Dataset.run_id == run_id))
            return (
                None
                if row is None
                else DatasetRecord(
                    name=row.name,
                    kind=row.kind,
                    sha256=row.sha256,
                    train_samples=row.train_samples,
                    val_samples=row.val_samples,
                    classes=row.classes,
                    manifest=dict(row.manifest or {}),
                )
            )

    # --- liveness and recovery (aiperf.lifecycle.recovery) ------------------------------------------------

    @_retried
    def heartbeat(self, claim: RunClaim) -> None:
        """The run's process is alive. A running run whose heartbeat is older than the timeout is
        shown lost (aiperf.status.derived_status): no one needs to write that its process died.
        Stamped with the database's clock, the one its readers and takers compare it with; only
        while the run carries the claim's token (RunTakenOver once another took it over)."""
        with self.session() as s:
            ownership.beat(s, claim)

    @_retried
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

    @_retried
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

    @_retried
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

    # --- reads ---------------------------------------------------------------------------------

    @_retried
    def run_work(self, run_id: int) -> RunWork:
        """Everything the score needs, from the records alone."""
        with self.session() as s:
            run = self._get(s, Run, run_id, "run")
            rows = s.execute(
                select(
                    Epoch.samples_trained,
                    Epoch.samples_evaluated,
                    Trial.train_ops_per_sample,
                    Trial.eval_ops_per_sample,
                    Trial.tensor_train_ops_per_sample,
                    Trial.tensor_eval_ops_per_sample,
                )
                .join(Trial, Epoch.trial_id == Trial.id)
                .where(Trial.run_id == run_id)
            ).all()
            best = s.scalar(
                select(func.max(Trial.best_val_accuracy)).where(Trial.run_id == run_id)
            )
            completed = s.scalar(
                select(func.count())
                .select_from(Trial)
                .where(Trial.run_id == run_id, Trial.status == TrialStatus.COMPLETED)
            )
            dataset = s.scalar(select(Dataset).where(Dataset.run_id == run_id))
            try:
                elapsed = window_seconds([_window_record(w) for w in run.windows])
            except ValueError:
                raise ValueError(f"run {run_id} has no finished search window to score") from None
            missing = [r for r in rows if r[2] is None and (r[0] or r[1])]
            if missing:
                raise ValueError(
                    f"run {run_id} has counted samples on a trial without operation counts"
                )
            stepping = [
                float(train or 0.0) + float(evaluate or 0.0)
                for train, evaluate in s.execute(
                    select(Trial.train_s, Trial.evaluate_s)
                    .where(Trial.run_id == run_id)
                    .where(
                        or_(*(getattr(Trial, name).is_not(None) for name in TRIAL_PHASE_COLUMNS))
                    )
                )
            ]
            return RunWork(
                workers=run.workers,
                peak_flops=run.peak_flops,
                stepping_s=tuple(stepping) if stepping else None,
                epochs=[EpochWork(*(int(v or 0) for v in row)) for row in rows],
                elapsed_s=elapsed,
                best_val_accuracy=best,
                val_samples=dataset.val_samples if dataset else 0,
                trials_completed=int(completed or 0),
                budget_s=run.budget_s,
            )

    @_retried
    def list_runs(self, limit: int = 50) -> list[RunRecord]:
        """The newest runs first, each with its system and score (without trials)."""
        with self.session() as s:
            query = (
                select(Run)
                .options(
                    selectinload(Run.score), selectinload(Run.system), selectinload(Run.windows)
                )
                .order_by(Run.id.desc())
                .limit(limit)
            )
            at = self._database_now(s)
            return [_run_record(run, at=at) for run in s.scalars(query)]

    @_retried
    def series_runs(self, series: str) -> list[RunRecord]:
        """The runs of one series (aiperf run --repeat), by their index, each with its system and
        score (without trials); empty when no run carries that series id."""
        with self.session() as s:
            query = (
                select(Run)
                .where(Run.series == series)
                .options(
                    selectinload(Run.score), selectinload(Run.system), selectinload(Run.windows)
                )
                .order_by(Run.series_index, Run.id)
            )
            at = self._database_now(s)
            return [_run_record(run, at=at) for run in s.scalars(query)]

    @_retried
    def get_run(self, run_id: int) -> RunRecord:
        """One run with its system, score, trials and their epochs."""
        with self.session() as s:
            run = s.scalar(
                select(Run)
                .where(Run.id == run_id)
                .options(
                    selectinload(Run.score),
                    selectinload(Run.system),
                    selectinload(Run.windows),
                    selectinload(Run.trials).selectinload(Trial.epochs),
                )
            )
            if run is None:
                raise RecordNotFound(f"run {run_id} is not in the database")
            return _run_record(run, with_trials=True, at=self._database_now(s))

    @_retried
    def trial_counts(self, run_id: int) -> dict[TrialStatus, int]:
        """How many of the run's trials are in each state."""
        with self.session() as s:
            counts = s.execute(
                select(Trial.status, func.count())
                .where(Trial.run_id == run_id)
                .group_by(Trial.status)
            ).all()
            return {TrialStatus(status): int(count) for status, count in counts}

    # --- history: read through the SQL views of migration 0002 (run_scores, trial_summary) ----------

    @_retried
    def run_scores(
        self,
        *,
        system_id: int | None = None,
        profile: str | None = None,
        run_ids: list[int] | None = None,
    ) -> list[RunScoreRow]:
        """Rows of the run_scores view, oldest first: the same figures a user gets from SQL."""
        where: list[str] = []
        params: dict[str, Any] = {}
        if system_id is not None:
            where.append("system_id = :system_id")
            params["system_id"] = system_id
        if profile is not None:
            where.append("profile = :profile")
            params["profile"] = profile
        if run_ids is not None:
            where.append("run_id IN :run_ids")
            params["run_ids"] = list(run_ids)
        sql = text(
            "SELECT * FROM run_scores"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY created_at, run_id"
        ).columns(created_at=DateTime(timezone=True), valid=Boolean())
        if run_ids is not None:
            sql = sql.bindparams(bindparam("run_ids", expanding=True))
        return self._view_rows(RunScoreRow, sql, params)

    @_retried
    def trial_summary(self, run_id: int) -> list[TrialSummaryRow]:
        """Rows of the trial_summary view for one run, in trial order."""
        sql = text("SELECT * FROM trial_summary WHERE run_id = :run_id ORDER BY number").columns(
            started_at=DateTime(timezone=True), ended_at=DateTime(timezone=True)
        )
        return self._view_rows(TrialSummaryRow, sql, {"run_id": run_id})

    def _view_rows(self, record: type[Row], sql: Any, params: dict[str, Any]) -> list[Row]:
        """A view's rows as records, every column by name, each value as its field declares it."""
        hints = get_type_hints(record)
        names = [f.name for f in fields(record)]  # type: ignore[arg-type]
        with self.engine.connect() as connection:
            rows = [row._mapping for row in connection.execute(sql, params)]
        return [record(**{name: _plain(hints[name], row[name]) for name in names}) for row in rows]

    @_retried
    def find_systems(self, term: str | None = None) -> list[SystemRecord]:
        """Systems whose id, hostname or fingerprint prefix is `term` (every system when None)."""
        with self.session() as s:
            query = select(System)
            if term is not None:
                conditions = [System.hostname == term, System.fingerprint.startswith(term.lower())]
                if term.isdigit():
                    conditions.append(System.id == int(term))
                query = query.where(or_(*conditions))
            return [_system_record(system) for system in s.scalars(query.order_by(System.id))]


class WriteBatch:
    """The orchestrator's writes of one turn of its loop (new trials, the oracle's state, built
    models, epochs, ends), committed together by Store.write in one transaction.

    Each write is kept as a function of (session, maybe_committed) that is idempotent on its own:
    inserts look for the row an earlier attempt committed, updates set values. They are single
    SQL statements, not ORM loads and flushes: at a thousand workers the loop writes thousands of
    rows a minute, and the ORM's SELECT before each UPDATE doubled what each one cost. The batch
    itself neither touches the database nor knows which one it will be written to."""

    def __init__(self) -> None:
        self._work: list[Callable[[Session, bool], Any]] = []
        self._updates: dict[
            int, dict[str, Any]
        ] = {}  # per trial, the columns its pending UPDATE sets

    def __bool__(self) -> bool:
        return bool(self._work)

    def __len__(self) -> int:
        return len(self._work)

    def __iter__(self) -> Iterator[Callable[[Session, bool], Any]]:
        return iter(self._work)

    def create_trial(
        self,
        *,
        run_id: int,
        trial_key: str,
        number: int,
        architecture: dict[str, Any],
        hyperparameters: dict[str, Any],
        started_at: float,
        parent_trial_id: int | None = None,
        operator: str | None = None,
    ) -> None:
        """A new trial (its id is the write's result), unique by (run, trial_key)."""

        def create_trial(s: Session, maybe_committed: bool) -> int:
            if maybe_committed:
                done = s.scalar(
                    select(Trial.id).where(Trial.run_id == run_id, Trial.trial_key == trial_key)
                )
                if done is not None:
                    return done
            return (
                s.connection()
                .execute(
                    insert(Trial)
                    .values(
                        run_id=run_id,
                        trial_key=trial_key,
                        number=number,
                        architecture=architecture,
                        hyperparameters=hyperparameters,
                        status=TrialStatus.RUNNING,
                        started_at=utc(started_at),
                        parent_trial_id=parent_trial_id,
                        operator=operator,
                    )
                    .returning(Trial.id)
                )
                .scalar_one()
            )

        self._work.append(create_trial)

    def record_trial_built(
        self,
        trial_id: int,
        *,
        worker: str,
        parameters: int,
        train_ops: int,
        eval_ops: int,
        tensor_train_ops: int,
        tensor_eval_ops: int,
        devices: int = 1,
        placement: Sequence[str] = (),
    ) -> None:
        self._update_trial(
            trial_id,
            worker=worker,
            parameters=parameters,
            train_ops_per_sample=train_ops,
            eval_ops_per_sample=eval_ops,
            tensor_train_ops_per_sample=tensor_train_ops,
            tensor_eval_ops_per_sample=tensor_eval_ops,
            devices=devices,
            placement=list(placement),
        )

    def record_epoch(
        self,
        trial_id: int,
        *,
        epoch: int,
        started_at: float,
        ended_at: float,
        samples_trained: int,
        samples_evaluated: int,
        loss: float | None,
        accuracy: float | None,
        val_loss: float | None,
        val_accuracy: float | None,
        complete: bool,
    ) -> None:
        """One epoch, unique by (trial, epoch): a repeat is ignored (the write's result is False,
        or True after a retry whose first attempt may have committed it)."""

        def record_epoch(s: Session, maybe_committed: bool) -> bool:
            dialect = {"sqlite": sqlite, "postgresql": postgresql}[s.get_bind().dialect.name]
            sql = (
                s.connection()
            )  # plain SQL: the ORM's bulk paths report no row counts on PostgreSQL
            added = sql.execute(
                dialect.insert(Epoch)
                .values(
                    trial_id=trial_id,
                    epoch=epoch,
                    started_at=utc(started_at),
                    ended_at=utc(ended_at),
                    samples_trained=samples_trained,
                    samples_evaluated=samples_evaluated,
                    loss=loss,
                    accuracy=accuracy,
                    val_loss=val_loss,
                    val_accuracy=val_accuracy,
                    complete=complete,
                )
                .on_conflict_do_nothing(index_elements=[Epoch.trial_id, Epoch.epoch])
                .returning(Epoch.id)
            ).first()
            if added is None:
                return maybe_committed
            if val_accuracy is not None and complete:
                sql.execute(
                    update(Trial)
                    .where(
                        Trial.id == trial_id,
                        or_(
                            Trial.best_val_accuracy.is_(None),
                            Trial.best_val_accuracy < val_accuracy,
                        ),
                    )
                    .values(best_val_accuracy=val_accuracy)
                )
            return True

        self._work.append(record_epoch)

    def finish_trial(
        self, trial_id: int, *, status: TrialStatus, ended_at: float, message: str | None = None
    ) -> None:
        self._update_trial(trial_id, status=status, ended_at=utc(ended_at), message=message)

    def record_trial_phases(self, trial_id: int, phases: TrialPhases) -> None:
        self._update_trial(
            trial_id, **{name: getattr(phases, name) for name in TRIAL_PHASE_COLUMNS}
        )

    def _update_trial(self, trial_id: int, **values: Any) -> None:
        """Set columns of one trial (setting them again changes nothing: idempotent). Updates of
        one trial in a batch are one statement: a trial that ends reports its phases and its end
        at once, and at the deadline every trial does."""
        pending = self._updates.get(trial_id)
        if pending is not None:
            pending.update(values)
            return
        pending = self._updates[trial_id] = dict(values)

        def update_trial(s: Session, _maybe_committed: bool) -> None:
            if (
                not s.connection()
                .execute(update(Trial).where(Trial.id == trial_id).values(**pending))
                .rowcount
            ):
                raise RecordNotFound(f"trial {trial_id} is not in the database")

        self._work.append(update_trial)

    def save_search_state(self, run_id: int, oracle: str, state: dict[str, Any]) -> None:
        """Replace the run's oracle state with `state`."""

        def save_search_state(s: Session, _maybe_committed: bool) -> None:
            row = s.scalar(select(SearchState).where(SearchState.run_id == run_id))
            if row is None:
                s.add(SearchState(run_id=run_id, oracle=oracle, state=state, updated_at=now()))
            else:
                row.oracle, row.state, row.updated_at = oracle, state, now()

        self._work.append(save_search_state)


# --- ORM rows to records, inside the session ---------------------------------------------------------


def _plain(hint: Any, value: Any) -> Any:
    """A view's value as its record field holds it: UTC times, enum statuses, floats not Decimals
    (PostgreSQL's numeric arithmetic), booleans not SQLite's 0 and 1."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return utc(value)
    if hint in (RunStatus, TrialStatus, bool):
        return hint(value)
    if isinstance(value, Decimal):
        return float(value)
    return value


def _system_record(system: System) -> SystemRecord:
    return SystemRecord(
        id=system.id,
        fingerprint=system.fingerprint,
        hostname=system.hostname,
        cpu_model=system.cpu_model,
        cpu_cores=system.cpu_cores,
        memory_bytes=system.memory_bytes,
        gpus=dict(system.gpus),
        platform=system.platform,
        python_version=system.python_version,
        tensorflow_version=system.tensorflow_version,
        keras_version=system.keras_version,
        keras_backend=system.keras_backend,
        first_seen_at=utc(system.first_seen_at),
    )


def _score_result(score: Score) -> ScoreResult:
    return ScoreResult(
        elapsed_s=score.elapsed_s,
        total_ops=int(score.total_ops),
        ops=score.ops,
        tensor_ops=score.tensor_ops,
        best_val_accuracy=score.best_val_accuracy,
        val_samples=score.val_samples,
        regulated_score=score.regulated_score,
        trials_completed=score.trials_completed,
        samples_trained=score.samples_trained,
        samples_evaluated=score.samples_evaluated,
        valid=score.valid,
        reasons=list(score.reasons.get("invalid", [])),
        mfu=score.mfu,
        utilisation=score.utilisation,
    )


def _verification(score: Score | None) -> tuple[CheckRecord, ...] | None:
    if score is None or score.verification is None:
        return None
    return tuple(CheckRecord(**check) for check in score.verification)


def _epoch_record(epoch: Epoch) -> EpochRecord:
    return EpochRecord(
        epoch=epoch.epoch,
        started_at=utc(epoch.started_at),
        ended_at=utc(epoch.ended_at),
        samples_trained=epoch.samples_trained,
        samples_evaluated=epoch.samples_evaluated,
        loss=epoch.loss,
        accuracy=epoch.accuracy,
        val_loss=epoch.val_loss,
        val_accuracy=epoch.val_accuracy,
        complete=bool(epoch.complete),
    )


def _trial_record(trial: Trial) -> TrialRecord:
    return TrialRecord(
        id=trial.id,
        run_id=trial.run_id,
        trial_key=trial.trial_key,
        number=trial.number,
        parent_trial_id=trial.parent_trial_id,
        operator=trial.operator,
        architecture=dict(trial.architecture),
        hyperparameters=dict(trial.hyperparameters),
        status=TrialStatus(trial.status),
        worker=trial.worker,
        started_at=utc(trial.started_at),
        ended_at=utc(trial.ended_at),
        parameters=trial.parameters,
        train_ops_per_sample=trial.train_ops_per_sample,
        eval_ops_per_sample=trial.eval_ops_per_sample,
        tensor_train_ops_per_sample=trial.tensor_train_ops_per_sample,
        tensor_eval_ops_per_sample=trial.tensor_eval_ops_per_sample,
        best_val_accuracy=trial.best_val_accuracy,
        message=trial.message,
        epochs=tuple(_epoch_record(e) for e in trial.epochs),
        phases=_phases(trial),
        devices=trial.devices,
        placement=tuple(trial.placement or ()),
    )


def _phases(trial: Trial) -> TrialPhases | None:
    """The trial's time breakdown; None when it was recorded without one (before migration 0007)."""
    seconds = {name: getattr(trial, name) for name in TRIAL_PHASE_COLUMNS}
    if all(value is None for value in seconds.values()):
        return None
    return TrialPhases(**{name: value or 0.0 for name, value in seconds.items()})


def _window_record(window: SearchWindow) -> WindowRecord:
    return WindowRecord(
        segment=window.segment,
        started_at=utc(window.started_at),
        deadline=utc(window.deadline),
        ended_at=utc(window.ended_at),
    )


def _run_record(run: Run, *, with_trials: bool = False, at: datetime | None = None) -> RunRecord:
    """`at`: the database's time now, which the heartbeat's age is judged by (the reader's without)."""
    return RunRecord(
        id=run.id,
        system=_system_record(run.system),
        profile=run.profile,
        config=dict(run.config),
        seed=run.seed,
        budget_s=run.budget_s,
        workers=run.workers,
        status=derived_status(run.status, utc(run.heartbeat_at), at or now()),
        stored_status=RunStatus(run.status),
        heartbeat_at=utc(run.heartbeat_at),
        owner=run.owner,
        windows=tuple(_window_record(w) for w in run.windows),
        created_at=utc(run.created_at),
        search_started_at=utc(run.search_started_at),
        deadline=utc(run.deadline),
        search_ended_at=utc(run.search_ended_at),
        flow_run_id=run.flow_run_id,
        message=run.message,
        ruleset=run.ruleset,
        division=run.division,
        deviations=tuple(run.deviations or ()),
        config_hash=run.config_hash,
        score=None if run.score is None else _score_result(run.score),
        verification=_verification(run.score),
        trials=tuple(_trial_record(t) for t in run.trials) if with_trials else (),
        precision=run.precision,
        backend=run.backend,
        jit_compile=run.jit_compile,
        peak_flops=run.peak_flops,
        worker_peaks=tuple(run.worker_peaks or ()),
        data_feed=run.data_feed,
        feed_rates=tuple(run.feed_rates or ()),
        reference_rates=tuple(run.reference_rates or ()),
        system_description=run.system_description,
        staging_s=run.staging_s,
        best_weights=run.best_weights,
        provenance=run.provenance,
        series=run.series,
        series_index=run.series_index,
    )
