"""What every reader of the records reads (`show`, `history`, `compare`, `verify`, the report, a
resume, the run's recorder checking its own row).

The contract: frozen records (aiperf.store.records) and the SQL views' rows, never ORM objects, so
nothing can lazy-load after its session closed or write by accident; committed data only; no claim
needed. Each read is one transaction, retried through transient faults. Safe from any thread: each
call opens its own session from the engine's pool.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar, get_type_hints

from sqlalchemy import Boolean, DateTime, bindparam, func, or_, select, text
from sqlalchemy.orm import selectinload

from aiperf.status import TrialStatus
from aiperf.store.base import StoreBase, retried
from aiperf.store.conversion import copied, plain, run_record, system_record, window_record
from aiperf.store.models import Dataset, Epoch, Run, SearchState, System, Trial
from aiperf.store.records import (
    TRIAL_PHASE_COLUMNS,
    DatasetRecord,
    EpochWork,
    RecordNotFound,
    RunRecord,
    RunScoreRow,
    SystemRecord,
    TrialSummaryRow,
    window_seconds,
)

Row = TypeVar("Row")


# An epoch's work as run_work reads it: epoch_work's row.
_EPOCH_WORK = select(
    Epoch.samples_trained,
    Epoch.samples_evaluated,
    Trial.train_ops_per_sample,
    Trial.eval_ops_per_sample,
    Trial.tensor_train_ops_per_sample,
    Trial.tensor_eval_ops_per_sample,
    Epoch.trial_id,
    Epoch.started_at,
    Epoch.ended_at,
).join(Trial, Epoch.trial_id == Trial.id)


def epoch_work(row: Any) -> EpochWork:
    """An epoch's work from run_work's row: its samples and its trial's four per-sample counts,
    then its trial's id, start and end."""
    trained, evaluated, train_ops, eval_ops, tensor_train, tensor_eval, trial, started, ended = row
    return EpochWork(
        int(trained or 0),
        int(evaluated or 0),
        int(train_ops or 0),
        int(eval_ops or 0),
        int(tensor_train or 0),
        int(tensor_eval or 0),
        trial=int(trial),
        seconds=(ended - started).total_seconds(),
    )


@dataclass(frozen=True)
class RunWork:
    """What a run's score is computed from, read back from the records."""

    epochs: list[EpochWork]
    elapsed_s: float
    best_val_accuracy: float | None
    val_samples: int
    best_val_loss: float | None  # the LM track's quality (nats/token), of its complete epochs
    vocab_size: int  # the dataset's classes: a token dataset's vocabulary
    trials_completed: int
    budget_s: float
    workers: int = 1
    peak_flops: float | None = None  # the workers' summed peak: MFU's divisor (None: not measured)
    stepping_s: tuple[float, ...] | None = None  # per trial with phases: train + evaluate seconds


class RunReads(StoreBase):
    """Every read of the records (this module's contract)."""

    @retried
    def search_state(self, run_id: int) -> dict[str, Any] | None:
        with self.session() as s:
            row = s.scalar(select(SearchState).where(SearchState.run_id == run_id))
            return None if row is None else row.state

    @retried
    def run_dataset(self, run_id: int) -> DatasetRecord | None:
        """The dataset the run trained on (None before it was staged)."""
        with self.session() as s:
            row = s.scalar(select(Dataset).where(Dataset.run_id == run_id))
            if row is None:
                return None
            return copied(DatasetRecord, row, manifest=dict(row.manifest or {}))

    @retried
    def run_work(self, run_id: int) -> RunWork:
        """Everything the score needs, from the records alone."""
        with self.session() as s:
            run = self._get(s, Run, run_id, "run")
            rows = s.execute(_EPOCH_WORK.where(Trial.run_id == run_id)).all()
            best = s.scalar(
                select(func.max(Trial.best_val_accuracy)).where(Trial.run_id == run_id)
            )
            lowest_loss = s.scalar(
                select(func.min(Trial.best_val_loss)).where(Trial.run_id == run_id)
            )
            completed = s.scalar(
                select(func.count())
                .select_from(Trial)
                .where(Trial.run_id == run_id, Trial.status == TrialStatus.COMPLETED)
            )
            dataset = s.scalar(select(Dataset).where(Dataset.run_id == run_id))
            try:
                elapsed = window_seconds([window_record(w) for w in run.windows])
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
                epochs=[epoch_work(row) for row in rows],
                elapsed_s=elapsed,
                best_val_accuracy=best,
                val_samples=dataset.val_samples if dataset else 0,
                best_val_loss=lowest_loss,
                vocab_size=dataset.classes if dataset else 0,
                trials_completed=int(completed or 0),
                budget_s=run.budget_s,
            )

    @retried
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
            return [run_record(run, at=at) for run in s.scalars(query)]

    @retried
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
            return [run_record(run, at=at) for run in s.scalars(query)]

    @retried
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
            return run_record(run, with_trials=True, at=self._database_now(s))

    @retried
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

    @retried
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
        return [record(**{name: plain(hints[name], row[name]) for name in names}) for row in rows]

    @retried
    def find_systems(self, term: str | None = None) -> list[SystemRecord]:
        """Systems whose id, hostname or fingerprint prefix is `term` (every system when None)."""
        with self.session() as s:
            query = select(System)
            if term is not None:
                conditions = [System.hostname == term, System.fingerprint.startswith(term.lower())]
                if term.isdigit():
                    conditions.append(System.id == int(term))
                query = query.where(or_(*conditions))
            return [system_record(system) for system in s.scalars(query.order_by(System.id))]
