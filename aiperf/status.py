"""The states a run and a trial can be in: one name per state, shared by the orchestrator, the
workers' messages, the records and the SQL CHECK constraints (the values are what SQL stores)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from aiperf import settings
from aiperf.errors import UserError


class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    # Never stored: a run whose status is running but whose heartbeat stopped (its process died).
    # The Store derives it when it reads a run, so no command can show such a run as running.
    LOST = "lost"

    @classmethod
    def stored(cls) -> tuple[RunStatus, ...]:
        """The states the runs table holds (its CHECK constraint): every one but the derived LOST."""
        return tuple(s for s in cls if s is not cls.LOST)


class TrialStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"  # trained every epoch it was given (or stopped early on a plateau)
    STOPPED = "stopped"  # cut by the deadline or its worker's end of life; finished steps count
    FAILED = "failed"
    DIVERGED = (
        "diverged"  # its loss became NaN or infinite: stopped at once; its finished samples count
    )
    INTERRUPTED = (
        "interrupted"  # running when its run crashed or was stopped; finished epochs count
    )
    # the device's memory ran out (XLA RESOURCE_EXHAUSTED, TensorFlow's ResourceExhaustedError):
    # its batch does not fit; the run goes on (aiperf.train.gpu_failures)
    OUT_OF_MEMORY = "out_of_memory"
    # its step, compiled before it trained, needs more of a device's memory than the device has
    # (XLA's memory analysis against the fit rule's share): never trained; the run goes on
    # (aiperf.train.fit)
    TOO_LARGE = "too_large"


# --- liveness: the orchestrator's heartbeat ------------------------------------------------------

HEARTBEAT_S = 5.0  # how often a running run's process writes runs.heartbeat_at


HEARTBEATS_BEFORE_LOST = 3  # the timeout's floor, in heartbeats


def heartbeat_timeout_s() -> float:
    """Seconds without a heartbeat after which a running run is lost ($AIPERF_HEARTBEAT_TIMEOUT).
    It is the reader's setting (the process that would write is gone), so it lives in the
    environment of the command that reads, not in the run's config. It is at least three
    heartbeats: below that a live run would look lost between two of its beats (or after one beat
    slowed by a busy database) and `aiperf recover` could take it over while it runs; a lower
    value is refused in one line rather than raised quietly, since the user asked for something
    that cannot be had."""
    timeout = settings.number(settings.HEARTBEAT_TIMEOUT, positive=True)
    floor = HEARTBEATS_BEFORE_LOST * HEARTBEAT_S
    if timeout < floor:
        raise UserError(
            f"{settings.HEARTBEAT_TIMEOUT.name}={settings.HEARTBEAT_TIMEOUT.raw()} is less than "
            f"{HEARTBEATS_BEFORE_LOST} heartbeats ({floor:g} s, one every {HEARTBEAT_S:g} s), so a "
            f"live run would look lost; set it to {floor:g} or more, or unset it"
        )
    return timeout


def derived_status(
    stored: str, heartbeat_at: datetime | None, now: datetime, timeout_s: float | None = None
) -> RunStatus:
    """The run's state as every command shows it: a stored `running` whose heartbeat is older than
    the timeout (or missing) is LOST, whatever the row says, since its process can no longer say so."""
    status = RunStatus(stored)
    if status is not RunStatus.RUNNING:
        return status
    timeout = heartbeat_timeout_s() if timeout_s is None else timeout_s
    if heartbeat_at is None or (now - heartbeat_at).total_seconds() > timeout:
        return RunStatus.LOST
    return status
