"""Claims for tests that stand in for a run's own process: they plant a run's records with the
Store directly, as only the holder of its claim may (aiperf.store.ownership). The claim is read
back from the run's row, so it holds exactly while the row still carries that token."""

from __future__ import annotations

from sqlalchemy import select

from aiperf.store import RunClaim, Store
from aiperf.store.models import Run, Trial


def claim_of(store: Store, run_id: int) -> RunClaim:
    """The claim of run `run_id` as its row carries it now (of no one's token when there is no
    such run: a write with it is RecordNotFound)."""
    with store.session() as s:
        owner = s.scalar(select(Run.owner).where(Run.id == run_id))
    return RunClaim(run_id, owner)


def trial_claim(store: Store, trial_id: int) -> RunClaim:
    """The claim of the run trial `trial_id` is in."""
    with store.session() as s:
        run_id = s.scalar(select(Trial.run_id).where(Trial.id == trial_id))
    assert run_id is not None, f"trial {trial_id} is not in the database"
    return claim_of(store, run_id)
