"""The orchestrator's writes of one turn of its loop, kept to be committed in one transaction
(Store.write, which checks the run's claim first)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from aiperf.status import TrialStatus
from aiperf.store.conversion import now, utc
from aiperf.store.fact_records import (
    TRIAL_START_COLUMNS,
    EpochReport,
    TrialBuilt,
    TrialEnd,
    TrialStart,
)
from aiperf.store.models import Epoch, SearchState, Trial
from aiperf.store.records import TRIAL_PHASE_COLUMNS, RecordNotFound, TrialPhases


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

    def create_trial(self, run_id: int, start: TrialStart) -> None:
        """A new trial (its id is the write's result), unique by (run, trial_key)."""
        trial_key = start.trial_key
        columns = {name: getattr(start, name) for name in TRIAL_START_COLUMNS}

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
                        {
                            **columns,
                            "run_id": run_id,
                            "status": TrialStatus.RUNNING,
                            "started_at": utc(start.started_at),
                        }
                    )
                    .returning(Trial.id)
                )
                .scalar_one()
            )

        self._work.append(create_trial)

    def record_trial_built(self, trial_id: int, built: TrialBuilt) -> None:
        """Which worker runs the trial, on which devices, and its counted operations per sample."""
        self._update_trial(
            trial_id,
            worker=built.worker,
            parameters=built.parameters,
            train_ops_per_sample=built.train_ops,
            eval_ops_per_sample=built.eval_ops,
            tensor_train_ops_per_sample=built.tensor_train_ops,
            tensor_eval_ops_per_sample=built.tensor_eval_ops,
            devices=built.devices,
            placement=list(built.placement),
            inherited_epoch=built.inherited_epoch,
        )

    def record_epoch(self, trial_id: int, report: EpochReport) -> None:
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
                    {
                        **report.fields(),
                        "trial_id": trial_id,
                        "started_at": utc(report.started_at),
                        "ended_at": utc(report.ended_at),
                    }
                )
                .on_conflict_do_nothing(index_elements=[Epoch.trial_id, Epoch.epoch])
                .returning(Epoch.id)
            ).first()
            if added is None:
                return maybe_committed
            val_accuracy, val_loss = report.val_accuracy, report.val_loss
            if val_accuracy is not None and report.complete:
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
            if val_loss is not None and report.complete and math.isfinite(val_loss):
                sql.execute(
                    update(Trial)
                    .where(
                        Trial.id == trial_id,
                        or_(Trial.best_val_loss.is_(None), Trial.best_val_loss > val_loss),
                    )
                    .values(best_val_loss=val_loss)
                )
            return True

        self._work.append(record_epoch)

    def finish_trial(self, trial_id: int, end: TrialEnd) -> None:
        self._update_trial(
            trial_id, status=end.status, ended_at=utc(end.ended_at), message=end.message
        )

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
