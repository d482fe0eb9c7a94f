"""A lost or interrupted run continued (aiperf run --resume) or closed (aiperf recover,
aiperf.lifecycle.recovery): which runs can be, its row taken over by this process, the seconds of
budget its closed segments used, and its search brought back where it stopped (the oracle restored,
the interrupted trials queued again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiperf import settings
from aiperf.config import BenchmarkConfig
from aiperf.errors import UserError
from aiperf.lifecycle import liveness
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.status import RunStatus
from aiperf.store import RecordNotFound, RunRecord, Store, window_seconds
from aiperf.urls import safe_url

if TYPE_CHECKING:  # the orchestrator imports the search (keras-tuner, so TensorFlow): `aiperf
    # recover`, which closes a run and trains nothing, would pay that import for a type
    from aiperf.lifecycle.orchestrator import Orchestrator

CLOSABLE = (RunStatus.LOST, RunStatus.INTERRUPTED)


def closable_run(store: Store, run_id: int, db: str, what: str) -> RunRecord:
    """The run, if it is lost or interrupted; else a one-line error naming what it is."""
    try:
        record = store.get_run(run_id)
    except RecordNotFound:
        raise UserError(
            f"run {run_id} is not in {safe_url(db)}; list runs with "
            f"`aiperf runs --db {safe_url(db)}`"
        ) from None
    if record.status not in CLOSABLE:
        raise UserError(
            f"run {run_id} is {record.status}: only a lost or interrupted run can be {what} "
            f"(a running one is lost once its heartbeat is older than ${settings.HEARTBEAT_TIMEOUT.name} s)"
        )
    return record


def used_seconds(record: RunRecord) -> float:
    """Seconds of its budget the run used in its closed segments (0 before its search started)."""
    closed = [w for w in record.windows if w.ended_at is not None]
    return window_seconds(closed) if closed else 0.0


def reopen_run(store: Store, config: BenchmarkConfig, run_id: int) -> RunRecorder:
    """Continue a lost or interrupted run: the same row, running again, with a fresh heartbeat,
    once this process took it over (liveness.take_over: refused while its process still beats);
    its recorder, with this process's claim."""
    claim = liveness.take_over(store, closable_run(store, run_id, config.db, "resumed"), "resumed")
    recorder = RunRecorder.of_run(store, claim, config)
    recorder.run_resumed()
    return recorder


def resume_search(
    config: BenchmarkConfig, recorder: RunRecorder, orchestrator: Orchestrator
) -> float:
    """Bring a resumed run's search back where it stopped: the oracle from its stored state and the
    trials' records (it proposes what it would have proposed next), the interrupted trials queued
    to train again. Returns the seconds of budget left."""
    from aiperf.search.resume import restore

    record = recorder.store.get_run(recorder.run_id)
    state = recorder.store.search_state(recorder.run_id)
    if (
        state is not None
    ):  # None: it stopped before its first proposal, so a fresh oracle is the same
        restore(orchestrator.oracle, state, record.trials, config.search.objective)
    orchestrator.resume_from(list(record.trials))
    return max(1.0, config.budget_s - used_seconds(record))
