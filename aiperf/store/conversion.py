"""ORM rows to the frozen records every reader gets (aiperf.store.records), inside the session,
and the UTC datetimes the Store stores and hands out."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, overload

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


def system_record(system: System) -> SystemRecord:
    return SystemRecord(
        id=system.id,
        fingerprint=system.fingerprint,
        hostname=system.hostname,
        cpu_model=system.cpu_model,
        cpu_cores=system.cpu_cores,
        memory_bytes=system.memory_bytes,
        gpus=dict(system.gpus),
        platform=system.platform,
        python_version=system.python_version,
        tensorflow_version=system.tensorflow_version,
        keras_version=system.keras_version,
        keras_backend=system.keras_backend,
        first_seen_at=utc(system.first_seen_at),
    )


def score_result(score: Score) -> ScoreResult:
    return ScoreResult(
        elapsed_s=score.elapsed_s,
        total_ops=int(score.total_ops),
        ops=score.ops,
        tensor_ops=score.tensor_ops,
        best_val_accuracy=score.best_val_accuracy,
        val_samples=score.val_samples,
        regulated_score=score.regulated_score,
        trials_completed=score.trials_completed,
        samples_trained=score.samples_trained,
        samples_evaluated=score.samples_evaluated,
        valid=score.valid,
        reasons=list(score.reasons.get("invalid", [])),
        mfu=score.mfu,
        utilisation=score.utilisation,
        best_val_loss=score.best_val_loss,
    )


def verification_checks(score: Score | None) -> tuple[CheckRecord, ...] | None:
    if score is None or score.verification is None:
        return None
    return tuple(CheckRecord(**check) for check in score.verification)


def epoch_record(epoch: Epoch) -> EpochRecord:
    return EpochRecord(
        epoch=epoch.epoch,
        started_at=utc(epoch.started_at),
        ended_at=utc(epoch.ended_at),
        samples_trained=epoch.samples_trained,
        samples_evaluated=epoch.samples_evaluated,
        loss=epoch.loss,
        accuracy=epoch.accuracy,
        val_loss=epoch.val_loss,
        val_accuracy=epoch.val_accuracy,
        complete=bool(epoch.complete),
    )


def trial_record(trial: Trial) -> TrialRecord:
    return TrialRecord(
        id=trial.id,
        run_id=trial.run_id,
        trial_key=trial.trial_key,
        number=trial.number,
        parent_trial_id=trial.parent_trial_id,
        operator=trial.operator,
        architecture=dict(trial.architecture),
        hyperparameters=dict(trial.hyperparameters),
        status=TrialStatus(trial.status),
        worker=trial.worker,
        started_at=utc(trial.started_at),
        ended_at=utc(trial.ended_at),
        parameters=trial.parameters,
        train_ops_per_sample=trial.train_ops_per_sample,
        eval_ops_per_sample=trial.eval_ops_per_sample,
        tensor_train_ops_per_sample=trial.tensor_train_ops_per_sample,
        tensor_eval_ops_per_sample=trial.tensor_eval_ops_per_sample,
        best_val_accuracy=trial.best_val_accuracy,
        message=trial.message,
        epochs=tuple(epoch_record(e) for e in trial.epochs),
        phases=trial_phases(trial),
        devices=trial.devices,
        placement=tuple(trial.placement or ()),
        best_val_loss=trial.best_val_loss,
        inherited_epoch=trial.inherited_epoch,
    )


def trial_phases(trial: Trial) -> TrialPhases | None:
    """The trial's time breakdown; None when it was recorded without one (before migration 0007)."""
    seconds = {name: getattr(trial, name) for name in TRIAL_PHASE_COLUMNS}
    if all(value is None for value in seconds.values()):
        return None
    return TrialPhases(**{name: value or 0.0 for name, value in seconds.items()})


def window_record(window: SearchWindow) -> WindowRecord:
    return WindowRecord(
        segment=window.segment,
        started_at=utc(window.started_at),
        deadline=utc(window.deadline),
        ended_at=utc(window.ended_at),
    )


def run_record(run: Run, *, with_trials: bool = False, at: datetime | None = None) -> RunRecord:
    """`at`: the database's time now, which the heartbeat's age is judged by (the reader's without)."""
    return RunRecord(
        id=run.id,
        system=system_record(run.system),
        profile=run.profile,
        config=dict(run.config),
        seed=run.seed,
        budget_s=run.budget_s,
        workers=run.workers,
        status=derived_status(run.status, utc(run.heartbeat_at), at or now()),
        stored_status=RunStatus(run.status),
        heartbeat_at=utc(run.heartbeat_at),
        owner=run.owner,
        windows=tuple(window_record(w) for w in run.windows),
        created_at=utc(run.created_at),
        search_started_at=utc(run.search_started_at),
        deadline=utc(run.deadline),
        search_ended_at=utc(run.search_ended_at),
        flow_run_id=run.flow_run_id,
        message=run.message,
        ruleset=run.ruleset,
        division=run.division,
        deviations=tuple(run.deviations or ()),
        config_hash=run.config_hash,
        score=None if run.score is None else score_result(run.score),
        verification=verification_checks(run.score),
        trials=tuple(trial_record(t) for t in run.trials) if with_trials else (),
        precision=run.precision,
        backend=run.backend,
        jit_compile=run.jit_compile,
        peak_flops=run.peak_flops,
        worker_peaks=tuple(run.worker_peaks or ()),
        data_feed=run.data_feed,
        feed_rates=tuple(run.feed_rates or ()),
        reference_rates=tuple(run.reference_rates or ()),
        system_description=run.system_description,
        staging_s=run.staging_s,
        best_weights=run.best_weights,
        provenance=run.provenance,
        series=run.series,
        series_index=run.series_index,
    )
