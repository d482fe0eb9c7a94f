"""The states a run and a trial can be in: one name per state, shared by the orchestrator, the
workers' messages, the records and the SQL CHECK constraints (the values are what SQL stores)."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class TrialStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"  # trained every epoch it was given (or stopped early on a plateau)
    STOPPED = "stopped"  # cut by the deadline or its worker's end of life; finished steps count
    FAILED = "failed"
