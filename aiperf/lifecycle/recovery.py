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
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.lifecycle.reopen import closable_run, used_seconds
from aiperf.lifecycle.scoring import score_run, verify_and_record
from aiperf.store import RunClaim, RunRecord, Store

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
        claim = take_over(store, record, "recovered")
    return _close_and_score(db, record, claim)


def _close_and_score(db: str, record: RunRecord, claim: RunClaim) -> RunRecord:
    """The recovery's writes, with the claim of the process that took the run over."""
    run_id = record.id
    config = stored_config(record, db)
    with RunRecorder.opened(config, claim) as recorder:
        # its open segment closed at its last epoch, and the run stopped
        recorder.run_recovered(
            RECOVERED_MESSAGE + (f" ({record.message})" if record.message else "")
        )
    try:
        score_run(config, claim, recovered=True)
    except ValueError as exc:  # e.g. a window of no length: not one epoch was recorded
        raise UserError(f"run {run_id} cannot be scored: {exc}") from None
    verify_and_record(config, claim)
    with Store.open_existing(db) as store:
        return store.get_run(run_id)
