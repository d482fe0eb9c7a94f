"""After a crash or a stop: recover a run (score it from what it recorded) or resume it.

A run whose process died is `lost` (its heartbeat stopped; aiperf.lifecycle.liveness); one stopped by a
signal is `interrupted`. Either can be

- recovered (`aiperf recover RUN_ID`): its running trials become `interrupted`, the open segment
  of its timed window ends at its last recorded epoch, and it is scored and verified from its
  records, invalid with the reason "recovered after a crash" (aiperf.results.score.RECOVERED); it stays
  `interrupted`, so it can still be resumed;
- resumed (`aiperf run --resume RUN_ID`): the same run, config and seed, for what is left of its
  budget, in a new segment of its window (aiperf.lifecycle.run.run_benchmark).

Either first takes the run over (aiperf.lifecycle.liveness.take_over): compare-and-set on its owner
token, on the database's clock, so a run whose process still beats is refused, and of two
recoveries or resumptions at once only one writes.
"""

from __future__ import annotations

from aiperf.config import BenchmarkConfig
from aiperf.errors import UserError
from aiperf.lifecycle.liveness import take_over
from aiperf.lifecycle.run import (
    closable_run,
    event_log,
    score_run,
    used_seconds,
    verify_and_record,
)
from aiperf.status import RunStatus
from aiperf.store import RunRecord, Store

RECOVERED_MESSAGE = "recovered after a crash"


def stored_config(record: RunRecord, db: str) -> BenchmarkConfig:
    """The run's own config, validated again, reading and writing the database at `db` (which may
    hold a password the stored config never does)."""
    try:
        return BenchmarkConfig.model_validate({**record.config, "db": db})
    except ValueError as exc:
        raise UserError(
            f"run {record.id}'s stored config is no longer valid: {exc}".splitlines()[0]
        ) from None


def resume_config(db: str, run_id: int) -> BenchmarkConfig:
    """The config to resume run `run_id` with: its own, for what is left of its budget. One line
    of error when it is not lost or interrupted, or has no budget left."""
    with Store.open(db) as store:
        record = closable_run(store, run_id, db, "resumed")
    left = record.budget_s - used_seconds(record)
    if left <= 1.0:
        raise UserError(
            f"run {run_id} used its whole budget ({record.budget_s:g} s) before it stopped; "
            f"score it with `aiperf recover {run_id}`"
        )
    return stored_config(record, db)


def recover(db: str, run_id: int) -> RunRecord:
    """Close a lost or interrupted run and score it from its records (see the module's docstring)."""
    with Store.open(db) as store:
        record = closable_run(store, run_id, db, "recovered")
        if not record.windows:
            raise UserError(
                f"run {run_id} stopped before its search started: there is nothing to score"
            )
        # Compare-and-set on the token read above, on the database's clock: a run whose process
        # still beats is refused, and of two recoveries at once one writes.
        take_over(store, record, "recovered")
    try:
        return _close_and_score(db, record)
    finally:
        store.disown(run_id)  # this process wrote the run for its recovery only


def _close_and_score(db: str, record: RunRecord) -> RunRecord:
    """The recovery's writes, by the process that took the run over."""
    run_id = record.id
    with Store.open(db) as store:
        store.interrupt_trials(run_id)
        store.close_window_at_last_epoch(run_id)
        message = RECOVERED_MESSAGE + (f" ({record.message})" if record.message else "")
        store.finish_run(run_id, status=RunStatus.INTERRUPTED, message=message)
        config = stored_config(record, db)
        events = event_log(
            config, run_id
        )  # its open segment closed at its last epoch, and the run stopped
        events.windows_closed(store.get_run(run_id).windows)
        events.run_stopped(RunStatus.INTERRUPTED, message)
    try:
        score_run(config, run_id, recovered=True)
    except ValueError as exc:  # e.g. a window of no length: not one epoch was recorded
        raise UserError(f"run {run_id} cannot be scored: {exc}") from None
    verify_and_record(config, run_id)
    with Store.open_existing(db) as store:
        return store.get_run(run_id)
