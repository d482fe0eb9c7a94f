"""Claims for tests that stand in for a run's own process: they plant a run's records as only the
holder of its claim may (aiperf.store.ownership), through the run recorder the product writes
with (aiperf.lifecycle.recorder), so a test exercises the write path a run takes. The claim is read
back from the run's row, so it holds exactly while the row still carries that token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from aiperf.lifecycle.recorder import RunRecorder, Turn
from aiperf.results.mllog import EventLog
from aiperf.status import TrialStatus
from aiperf.store import EpochReport, RunClaim, Store, TrialBuilt, TrialEnd, TrialStart
from aiperf.store.models import Run, Trial
from aiperf.store.records import TrialPhases


def claim_of(store: Store, run_id: int) -> RunClaim:
    """The claim of run `run_id` as its row carries it now (of no one's token when there is no
    such run: a write with it is RecordNotFound)."""
    with store.session() as s:
        owner = s.scalar(select(Run.owner).where(Run.id == run_id))
    return RunClaim(run_id, owner)


def recorder_of(store: Store, run_id: int) -> RunRecorder:
    """The recorder of run `run_id` as its own process holds it, with no event log."""
    return RunRecorder(store, claim_of(store, run_id), EventLog(None))


def in_one_turn(store: Store, run_id: int, write: Callable[[Turn], None]) -> list[int]:
    """The writes `write` makes to a turn, committed as the run's owner commits a turn; the ids of
    the trials it created."""
    recorder = recorder_of(store, run_id)
    turn = recorder.turn()
    write(turn)
    return recorder.commit(turn)


def _run_of(store: Store, trial_id: int) -> int:
    with store.session() as s:
        run_id = s.scalar(select(Trial.run_id).where(Trial.id == trial_id))
    assert run_id is not None, f"trial {trial_id} is not in the database"
    return run_id


def trial_key_of(store: Store, trial_id: int) -> str:
    with store.session() as s:
        key = s.scalar(select(Trial.trial_key).where(Trial.id == trial_id))
    assert key is not None, f"trial {trial_id} is not in the database"
    return key


def add_trial(
    store: Store,
    run_id: int,
    trial_key: str,
    *,
    number: int = 0,
    started_at: float,
    architecture: dict[str, Any] | None = None,
    hyperparameters: dict[str, Any] | None = None,
    parent_trial_id: int | None = None,
    operator: str | None = None,
) -> int:
    """A new running trial of run `run_id`, recorded as the orchestrator records one; its id."""
    start = TrialStart(
        trial_key=trial_key,
        number=number,
        started_at=started_at,
        parent_trial_id=parent_trial_id,
        operator=operator,
        architecture=architecture or {},
        hyperparameters=hyperparameters or {},
        epochs=1,
        seed=0,
    )
    return in_one_turn(store, run_id, lambda turn: turn.trial_created(start))[0]


def add_built(store: Store, trial_id: int, built: TrialBuilt) -> None:
    in_one_turn(store, _run_of(store, trial_id), lambda turn: turn.trial_built(trial_id, built))


def add_epoch(store: Store, trial_id: int, **fields: Any) -> None:
    """One epoch of the trial (EpochReport's fields but its trial's key, which is looked up)."""
    report = EpochReport(trial_key=trial_key_of(store, trial_id), **fields)
    in_one_turn(store, _run_of(store, trial_id), lambda turn: turn.epoch(trial_id, report))


def end_trial(
    store: Store,
    trial_id: int,
    status: TrialStatus | str,
    ended_at: float,
    message: str | None = None,
) -> None:
    end = TrialEnd(trial_key_of(store, trial_id), TrialStatus(status), ended_at, message)
    in_one_turn(store, _run_of(store, trial_id), lambda turn: turn.trial_stopped(trial_id, end))


def add_phases(store: Store, trial_id: int, phases: TrialPhases) -> None:
    key = trial_key_of(store, trial_id)
    in_one_turn(
        store, _run_of(store, trial_id), lambda turn: turn.trial_phases(trial_id, key, phases)
    )


def save_search_state(store: Store, run_id: int, oracle: str, state: dict[str, Any]) -> None:
    in_one_turn(store, run_id, lambda turn: turn.search_state(oracle, state))
