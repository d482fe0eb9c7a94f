"""One writer per run: the claim a process writes a run with, and the checks that hold it to it.

A run belongs to the process whose owner token its row carries (runs.owner). The process that
creates a run, or takes one over (`aiperf recover`, `aiperf run --resume`), gets a `RunClaim`:
the run's id and that token. Every Store write that touches a run takes the claim and calls
`guard` in the same transaction, first, so a process whose run was taken over writes nothing
more (RunTakenOver) whichever of its stores or threads tries. The claim is a plain value, passed
to whoever writes for the run: there is no process-wide table of owned runs to forget to clear.

Take-over is one compare-and-set UPDATE on the token the taker read (`take_over`), judged on the
database's clock (aiperf.store.database.clock), so of two takers one wins, and a run whose
process still beats is never taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from aiperf import settings
from aiperf.status import RunStatus
from aiperf.store import database
from aiperf.store.models import Run
from aiperf.store.records import RecordNotFound, RunTakenOver


@dataclass(frozen=True)
class RunClaim:
    """The right to write run `run_id`, held while its row still carries `owner` (None: a run
    created without a token, which is written only while it still has none)."""

    run_id: int
    owner: str | None


def taken_over(run_id: int) -> RunTakenOver:
    """The one line a process that lost its run stops with."""
    return RunTakenOver(
        f"run {run_id} was taken over by another process (`aiperf recover` or `aiperf run "
        f"--resume`, after its heartbeat stopped for longer than ${settings.HEARTBEAT_TIMEOUT.name} "
        "on the database's clock): this process stops without writing to it again"
    )


def _mine(claim: RunClaim):  # noqa: ANN202 (an SQL condition)
    return (Run.id == claim.run_id) & (
        Run.owner.is_(None) if claim.owner is None else Run.owner == claim.owner
    )


def _refuse(s: Session, run_id: int) -> RunTakenOver:
    """RecordNotFound when there is no such run, else the RunTakenOver to raise."""
    if s.scalar(select(Run.id).where(Run.id == run_id)) is None:
        raise RecordNotFound(f"run {run_id} is not in the database")
    return taken_over(run_id)


def guard(s: Session, claim: RunClaim) -> None:
    """Before a write to the claim's run in this transaction: RunTakenOver unless the row still
    carries the claim's token (RecordNotFound when there is no such run). A no-op UPDATE, not a
    SELECT: it locks the row until the commit, so a take-over waits for this transaction on
    PostgreSQL (and SQLite's one writer) and then sees its fresh writes."""
    mine = update(Run).where(_mine(claim)).values(owner=Run.owner)
    if s.execute(mine.execution_options(synchronize_session=False)).rowcount == 0:  # type: ignore[attr-defined]
        raise _refuse(s, claim.run_id)


def beat(s: Session, claim: RunClaim) -> None:
    """The run's heartbeat, stamped on the database's clock, only while the claim holds."""
    dialect = s.get_bind().dialect.name
    stamp = update(Run).where(_mine(claim)).values(heartbeat_at=database.clock(dialect))
    if s.execute(stamp.execution_options(synchronize_session=False)).rowcount == 0:  # type: ignore[attr-defined]
        raise _refuse(s, claim.run_id)


def take_over(
    s: Session, run_id: int, *, owner: str, seen_owner: str | None, timeout_s: float
) -> RunClaim | None:
    """Compare-and-set: run `run_id` becomes `owner`'s if it still carries the token its taker
    saw and is interrupted, or running with a heartbeat older than `timeout_s` on the database's
    clock (or none). One UPDATE decides, so of two takers one wins, and a live run (its heartbeat
    fresh) is never taken. The new claim when taken (the row's heartbeat is then fresh, so no
    third process takes it before this one writes), else None."""
    dialect = s.get_bind().dialect.name
    seen = Run.owner.is_(None) if seen_owner is None else Run.owner == seen_owner
    lost = (Run.status == RunStatus.RUNNING.value) & (
        Run.heartbeat_at.is_(None) | (Run.heartbeat_at < database.clock(dialect, timeout_s))
    )
    take = (
        update(Run)
        .where(Run.id == run_id, seen, lost | (Run.status == RunStatus.INTERRUPTED.value))
        .values(owner=owner, heartbeat_at=database.clock(dialect))
        .execution_options(synchronize_session=False)
    )
    taken = s.execute(take).rowcount == 1  # type: ignore[attr-defined]
    # A retry after a commit whose acknowledgement was lost finds its own token there.
    taken = taken or s.scalar(select(Run.owner).where(Run.id == run_id)) == owner
    return RunClaim(run_id, owner) if taken else None
