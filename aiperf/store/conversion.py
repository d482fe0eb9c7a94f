"""ORM rows to the frozen records every reader gets (aiperf.store.records), inside the session,
and the UTC datetimes the Store stores and hands out."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints, overload

from aiperf.status import RunStatus, TrialStatus, derived_status
from aiperf.store.models import Epoch, Run, Score, SearchWindow, System, Trial
from aiperf.store.records import (
    TRIAL_PHASE_COLUMNS,
    CheckRecord,
    EpochRecord,
    RunRecord,
    ScoreResult,
    SystemRecord,
    TrialPhases,
    TrialRecord,
    WindowRecord,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")


@overload
def utc(moment: datetime | float) -> datetime: ...
@overload
def utc(moment: None) -> None: ...
@overload
def utc(moment: datetime | float | None) -> datetime | None: ...


def utc(moment: datetime | float | None) -> datetime | None:
    """UTC-aware datetime from a datetime (naive ones are UTC, as SQLite returns them) or a Unix time."""
    if moment is None:
        return None
    if isinstance(moment, (int, float)):
        return datetime.fromtimestamp(moment, tz=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def now() -> datetime:
    return datetime.now(tz=UTC)


def plain(hint: Any, value: Any) -> Any:
    """A view's value as its record field holds it: UTC times, enum statuses, floats not Decimals
    (PostgreSQL's numeric arithmetic), booleans not SQLite's 0 and 1."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return utc(value)
    if hint in (RunStatus, TrialStatus, bool):
        return hint(value)
    if isinstance(value, Decimal):
        return float(value)
    return value


def copied(record_type: type[R], row: object, **given: Any) -> R:
    """A record whose fields, but those `given`, are the row's columns of the same names as plain
    values: one mapping per record, so a new column and its field are one edit each, not one more
    line in a copy that nothing checks."""
    hints = _HINTS.get(record_type)
    if hints is None:
        hints = _HINTS[record_type] = get_type_hints(record_type)
    values = {
        f.name: plain(hints[f.name], getattr(row, f.name))
        for f in fields(record_type)
        if f.name not in given
    }
    return record_type(**values, **given)


_HINTS: dict[type, dict[str, Any]] = {}  # each record type's resolved field types


def system_record(system: System) -> SystemRecord:
    return copied(SystemRecord, system, gpus=dict(system.gpus))


_SCORE_AS_IS = tuple(f.name for f in fields(ScoreResult) if f.name not in ("total_ops", "reasons"))


def score_result(score: Score) -> ScoreResult:
    return copied(
        ScoreResult,
        score,
        total_ops=int(score.total_ops),
        reasons=list(score.reasons.get("invalid", [])),
    )


def score_columns(score: ScoreResult) -> dict[str, Any]:
    """A scores row's columns from a score (`score_result`'s inverse): the same names, the total
    a float (operations overflow a 64-bit integer), the broken rules under "invalid"."""
    return {
        **{name: getattr(score, name) for name in _SCORE_AS_IS},
        "total_ops": float(score.total_ops),
        "reasons": {"invalid": list(score.reasons)},
    }


def verification_checks(score: Score | None) -> tuple[CheckRecord, ...] | None:
    if score is None or score.verification is None:
        return None
    return tuple(CheckRecord(**check) for check in score.verification)


def epoch_record(epoch: Epoch) -> EpochRecord:
    return copied(EpochRecord, epoch)


def trial_record(trial: Trial) -> TrialRecord:
    return copied(
        TrialRecord,
        trial,
        architecture=dict(trial.architecture),
        hyperparameters=dict(trial.hyperparameters),
        epochs=tuple(epoch_record(e) for e in trial.epochs),
        phases=trial_phases(trial),
        placement=tuple(trial.placement or ()),
    )


def trial_phases(trial: Trial) -> TrialPhases | None:
    """The trial's time breakdown; None when it was recorded without one (before migration 0007)."""
    seconds = {name: getattr(trial, name) for name in TRIAL_PHASE_COLUMNS}
    if all(value is None for value in seconds.values()):
        return None
    return TrialPhases(**{name: value or 0.0 for name, value in seconds.items()})


def window_record(window: SearchWindow) -> WindowRecord:
    return copied(WindowRecord, window)


def run_record(run: Run, *, with_trials: bool = False, at: datetime | None = None) -> RunRecord:
    """`at`: the database's time now, which the heartbeat's age is judged by (the reader's without)."""
    return copied(
        RunRecord,
        run,
        system=system_record(run.system),
        config=dict(run.config),
        status=derived_status(run.status, utc(run.heartbeat_at), at or now()),
        stored_status=RunStatus(run.status),
        windows=tuple(window_record(w) for w in run.windows),
        deviations=tuple(run.deviations or ()),
        score=None if run.score is None else score_result(run.score),
        verification=verification_checks(run.score),
        trials=tuple(trial_record(t) for t in run.trials) if with_trials else (),
        worker_peaks=tuple(run.worker_peaks or ()),
        feed_rates=tuple(run.feed_rates or ()),
        reference_rates=tuple(run.reference_rates or ()),
        energy_windows=tuple(run.energy_windows or ()),
    )
