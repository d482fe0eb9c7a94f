"""What the Store hands out: plain, frozen records, built inside a session and detached from it.

Reports, history, the regression check and resume read these, never SQLAlchemy objects, so no
caller can trigger a lazy load after the session closed or write to the database by accident,
and the records pickle and compare like any value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiperf.score import ScoreResult
from aiperf.status import RunStatus, TrialStatus


class RecordNotFound(LookupError):
    """A run or trial that is not in the database. The CLI prints it as one line."""


@dataclass(frozen=True)
class SystemRecord:
    """The machine under test (table systems)."""

    id: int
    fingerprint: str
    hostname: str
    cpu_model: str
    cpu_cores: int
    memory_bytes: int
    gpus: dict[str, Any]
    platform: str
    python_version: str
    tensorflow_version: str | None
    keras_version: str
    keras_backend: str
    first_seen_at: datetime


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of one trial (table epochs)."""

    epoch: int
    started_at: datetime
    ended_at: datetime
    samples_trained: int
    samples_evaluated: int
    loss: float | None
    accuracy: float | None
    val_loss: float | None
    val_accuracy: float | None
    complete: bool


@dataclass(frozen=True)
class TrialRecord:
    """One trial (table trials) with its epochs in order."""

    id: int
    run_id: int
    trial_key: str
    number: int
    parent_trial_id: int | None
    operator: str | None
    architecture: dict[str, Any]
    hyperparameters: dict[str, Any]
    status: TrialStatus
    worker: str | None
    started_at: datetime
    ended_at: datetime | None
    parameters: int | None
    train_ops_per_sample: int | None
    eval_ops_per_sample: int | None
    tensor_train_ops_per_sample: int | None
    tensor_eval_ops_per_sample: int | None
    best_val_accuracy: float | None
    message: str | None
    epochs: tuple[EpochRecord, ...] = ()


@dataclass(frozen=True)
class RunRecord:
    """One run (table runs) with its system, its score if scored (the row of table scores, as the
    same ScoreResult the score arithmetic returns), and, when asked for, its trials."""

    id: int
    system: SystemRecord
    profile: str
    config: dict[str, Any]
    seed: int
    budget_s: float
    workers: int
    status: RunStatus
    created_at: datetime
    search_started_at: datetime | None
    deadline: datetime | None
    search_ended_at: datetime | None
    flow_run_id: str | None
    message: str | None
    score: ScoreResult | None
    trials: tuple[TrialRecord, ...] = ()

    @property
    def system_id(self) -> int:
        return self.system.id


@dataclass(frozen=True)
class RunScoreRow:
    """A row of the run_scores view: one scored run with its change from the previous run of the
    same system and profile. The figures users get from `SELECT * FROM run_scores`."""

    run_id: int
    system_id: int
    fingerprint: str
    hostname: str
    profile: str
    workers: int
    budget_s: float
    seed: int
    status: RunStatus
    created_at: datetime
    elapsed_s: float
    total_ops: float
    ops: float
    tensor_ops: float
    regulated_score: float
    best_val_accuracy: float | None
    trials_completed: int
    valid: bool
    previous_ops: float | None
    previous_regulated_score: float | None
    ops_change_pct: float | None


@dataclass(frozen=True)
class TrialSummaryRow:
    """A row of the trial_summary view: one trial's totals over its epochs."""

    run_id: int
    trial_id: int
    trial_key: str
    number: int
    status: TrialStatus
    worker: str | None
    started_at: datetime
    ended_at: datetime | None
    duration_s: float | None
    parameters: int | None
    train_ops_per_sample: int | None
    eval_ops_per_sample: int | None
    best_val_accuracy: float | None
    epochs: int
    complete_epochs: int
    samples_trained: int
    samples_evaluated: int
    total_ops: float
