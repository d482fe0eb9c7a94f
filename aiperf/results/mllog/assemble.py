"""The records of a run from the state its events left (aiperf.results.mllog.state): the run with
its system, windows, trials and their epochs, as the database holds them. A log that leaves out what
a record needs is an EventLogError naming what is missing."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from aiperf import quality
from aiperf.results.mllog import values
from aiperf.results.mllog.keys import (
    CONFIG,
    EPOCH_START,
    EPOCH_STOP,
    EVAL_SAMPLES,
    PROVENANCE,
    RULESET,
    RUN_RESOURCES,
    RUN_START,
    SEED,
    SERIES,
    SUBMISSION_DIVISION,
    SYSTEM_DESCRIPTION,
    SYSTEM_FINGERPRINT,
    TRAIN_SAMPLES,
    Event,
    EventLogError,
)
from aiperf.status import RunStatus, TrialStatus
from aiperf.store.records import (
    DatasetRecord,
    EpochRecord,
    RunRecord,
    SystemRecord,
    TrialRecord,
    WindowRecord,
)

if TYPE_CHECKING:
    from aiperf.results.mllog.state import RunState


@dataclass(frozen=True)
class LoggedRun:
    """A run as its event log tells it: the records aiperf.results.verify checks, without a database."""

    run: RunRecord
    dataset: DatasetRecord | None
    events: tuple[Event, ...]


def logged_run(state: RunState, where: str) -> LoggedRun:
    """The run's records from the state every event has been applied to."""
    _require_start(state, where)
    config, _ = state.facts[CONFIG]
    seed, _ = state.facts.get(SEED, (config.get("seed", 0), {}))
    description, _ = state.facts.get(SYSTEM_DESCRIPTION, (None, {}))
    provenance, _ = state.facts.get(PROVENANCE, (None, {}))
    resources, _ = state.facts.get(RUN_RESOURCES, ({}, {}))
    system = _system(state)
    windows = _windows(state)
    trials = tuple(
        _trial_record(state, key, trial, where)
        for key, trial in sorted(state.trials.items(), key=lambda item: item[1]["number"])
    )
    run = RunRecord(
        id=state.run["id"],
        system=system,
        profile=state.run["profile"],
        config=dict(config),
        seed=seed,
        budget_s=state.run["budget_s"],
        workers=state.run["workers"],
        status=state.status,
        stored_status=state.status,
        created_at=state.run["created_at"],
        **_window_times(windows),
        flow_run_id=state.run["flow_run_id"],
        message=state.message,
        **_submission(state),
        score=state.score,
        verification=state.checks,
        trials=trials,
        windows=windows,
        **values.resource_fields(resources),
        system_description=description,
        staging_s=state.staging_s,
        best_weights=state.best_weights,
        provenance=provenance if isinstance(provenance, dict) else None,
        **_series(state),
    )
    return LoggedRun(run, state.dataset, ())


def _require_start(state: RunState, where: str) -> None:
    """A log that lacks the run's start or a fact every run states is not a whole run's log."""
    missing = [
        k
        for k in (CONFIG, SYSTEM_FINGERPRINT, SUBMISSION_DIVISION, RULESET)
        if k not in state.facts
    ]
    if "id" not in state.run or missing:
        raise EventLogError(
            f"{where} has no {RUN_START if 'id' not in state.run else missing[0]} event: it is "
            "not the log of a run from its start"
        )


def _system(state: RunState) -> SystemRecord:
    """The system's record from its fingerprint; first seen with the run when it does not say."""
    facts, _ = state.facts[SYSTEM_FINGERPRINT]
    return SystemRecord(
        **{f.name: facts[f.name] for f in fields(SystemRecord) if f.name != "first_seen_at"},
        first_seen_at=values.utc(facts["first_seen_s"])
        if "first_seen_s" in facts
        else state.run["created_at"],
    )


def _windows(state: RunState) -> tuple[WindowRecord, ...]:
    """The timed window's segments, in the order they opened."""
    return tuple(
        WindowRecord(
            segment=i, started_at=s["started"], deadline=s["deadline"], ended_at=s["ended"]
        )
        for i, s in enumerate(state.segments)
    )


def _submission(state: RunState) -> dict[str, Any]:
    """The run's ruleset and division, with the deviations and config hash the division states."""
    division, division_md = state.facts[SUBMISSION_DIVISION]
    ruleset, _ = state.facts[RULESET]
    return {
        "ruleset": ruleset,
        "division": division,
        "deviations": tuple(division_md.get("deviations", ())),
        "config_hash": division_md.get("config_hash"),
    }


def _series(state: RunState) -> dict[str, Any]:
    """The series of repeated runs the run is in, and its place; none when it is in none."""
    series, series_md = state.facts.get(SERIES, (None, {}))
    return {
        "series": None if series is None else str(series),
        "series_index": None if series is None else values.whole(series_md.get("index"), "index"),
    }


def _trial_record(state: RunState, key: str, t: dict[str, Any], where: str) -> TrialRecord:
    """A trial's record: its epochs, its status, its best qualities over its complete epochs."""
    epochs = _trial_epochs(state, key, where)
    complete = [e for e in epochs if e.complete]
    train, evaluate, tensor_train, tensor_eval = t["ops"]
    return TrialRecord(
        id=t["id"],
        run_id=state.run["id"],
        trial_key=key,
        number=t["number"],
        parent_trial_id=t["parent_trial_id"],
        operator=t["operator"],
        architecture=t["architecture"],
        hyperparameters=t["hyperparameters"],
        status=_trial_status(state, t),
        worker=t["worker"],
        started_at=t["started_at"],
        ended_at=t["ended_at"],
        parameters=t["parameters"],
        train_ops_per_sample=train,
        eval_ops_per_sample=evaluate,
        tensor_train_ops_per_sample=tensor_train,
        tensor_eval_ops_per_sample=tensor_eval,
        best_val_accuracy=quality.best(quality.ACCURACY, (e.val_accuracy for e in complete)),
        best_val_loss=quality.best(quality.LOSS, (e.val_loss for e in complete)),
        message=t["message"],
        epochs=tuple(epochs),
        phases=t["phases"],
        devices=t["devices"],
        placement=t["placement"],
        inherited_epoch=t["inherited_epoch"],
    )


def _trial_epochs(state: RunState, key: str, where: str) -> list[EpochRecord]:
    """A trial's epochs in order; one its log tells only in part is an error naming what is missing."""
    epochs = []
    for (trial_key, number), e in sorted(state.epochs.items()):
        if trial_key != key:
            continue
        absent = [name for name in _EPOCH_NEEDS if name not in e]
        if absent:
            raise EventLogError(
                f"{where}: epoch {number} of trial {key} has no {', '.join(absent)} "
                f"(its {EPOCH_START}, {TRAIN_SAMPLES}, {EVAL_SAMPLES} or {EPOCH_STOP} is missing)"
            )
        epochs.append(
            EpochRecord(
                epoch=number,
                started_at=e["started_at"],
                ended_at=e["ended_at"],
                samples_trained=e["samples_trained"],
                samples_evaluated=e["samples_evaluated"],
                loss=e.get("loss"),
                accuracy=e.get("accuracy"),
                val_loss=e.get("val_loss"),
                val_accuracy=e.get("val_accuracy"),
                complete=e["complete"],
            )
        )
    return epochs


def _trial_status(state: RunState, t: dict[str, Any]) -> TrialStatus:
    """A trial never stopped ended with its run, as the store ends it."""
    status: TrialStatus | None = t["status"]
    if status is not None:
        return status
    if t["starts"] < state.starts or state.status == RunStatus.INTERRUPTED:
        return TrialStatus.INTERRUPTED
    if state.status in (RunStatus.COMPLETED, RunStatus.FAILED):
        return TrialStatus.STOPPED
    return TrialStatus.RUNNING


# What an epoch's events must all have told for it to be a record.
_EPOCH_NEEDS = ("started_at", "ended_at", "samples_trained", "samples_evaluated", "complete")


def _window_times(windows: tuple[WindowRecord, ...]) -> dict[str, Any]:
    """The search's start, deadline and end: the first window's start, the last one's others."""
    return {
        "search_started_at": windows[0].started_at if windows else None,
        "deadline": windows[-1].deadline if windows else None,
        "search_ended_at": windows[-1].ended_at if windows else None,
    }
