"""The orchestrator's writes of one turn of its loop, kept to be committed in one transaction
(Store.write, which checks the run's claim first)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from aiperf.status import TrialStatus
from aiperf.store.conversion import now, utc
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
        inherited_epoch: int | None = None,
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
            inherited_epoch=inherited_epoch,
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
            if val_loss is not None and complete and math.isfinite(val_loss):
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
