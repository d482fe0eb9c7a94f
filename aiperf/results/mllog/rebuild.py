"""Reading the event log back: `rebuild` turns a run's events into the records the database holds
(RunRecord with its trials, epochs and windows, DatasetRecord), so aiperf.results.verify checks a
package's run (`aiperf verify --package`) without a database, as mlperf_logging's parser reads its
logs back. Events apply in order and the latest of a kind stands (a resumed run repeats some).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from aiperf import quality
from aiperf.results.mllog import values
from aiperf.results.mllog.keys import (
    BEST_WEIGHTS,
    CONFIG,
    DATASET,
    EPOCH_START,
    EPOCH_STOP,
    EVAL_ACCURACY,
    EVAL_SAMPLES,
    OPS_PER_SAMPLE,
    PROVENANCE,
    RULESET,
    RUN_RESOURCES,
    RUN_START,
    RUN_STOP,
    SCORE,
    SEARCH_START,
    SEARCH_STOP,
    SEED,
    SERIES,
    STAGING_STOP,
    SUBMISSION_DIVISION,
    SYSTEM_DESCRIPTION,
    SYSTEM_FINGERPRINT,
    TRAIN_SAMPLES,
    TRIAL_PHASES,
    TRIAL_PLACEMENT,
    TRIAL_START,
    TRIAL_STOP,
    VERIFICATION,
    Event,
    EventLogError,
    read_events,
)
from aiperf.status import RunStatus, TrialStatus
from aiperf.store.records import (
    CheckRecord,
    DatasetRecord,
    EpochRecord,
    RunRecord,
    ScoreResult,
    SystemRecord,
    TrialPhases,
    TrialRecord,
    WindowRecord,
)


@dataclass(frozen=True)
class LoggedRun:
    """A run as its event log tells it: the records aiperf.results.verify checks, without a database."""

    run: RunRecord
    dataset: DatasetRecord | None
    events: tuple[Event, ...]


class _Rebuilder:
    """Applies events in order; the latest event of a kind wins (a resumed run repeats some)."""

    def __init__(self) -> None:
        self.run: dict[str, Any] = {}
        # run_start events so far: a trial not stopped before a later one was interrupted
        self.starts = 0
        self.status, self.message = RunStatus.RUNNING, None
        self.facts: dict[str, Any] = {}
        self.segments: list[dict[str, Any]] = []
        self.trials: dict[str, dict[str, Any]] = {}
        self.epochs: dict[tuple[str, int], dict[str, Any]] = {}
        self.dataset: DatasetRecord | None = None
        self.staging_s: float | None = None
        self.score: ScoreResult | None = None
        self.best_weights: dict[str, Any] | None = None
        self.checks: tuple[CheckRecord, ...] | None = None

    def apply(self, e: Event) -> None:
        """One event into the state: a fact kept as it came, an epoch's part, or the kind's own step."""
        if e.key in _FACT_KEYS:
            self.facts[e.key] = (e.value, e.metadata)
        elif e.key in _EPOCH_KEYS:
            self._epoch(e)
        elif e.key in _STEPS:
            _STEPS[e.key](self, e)

    def _run_start(self, e: Event) -> None:
        """A run starts or resumes: a resumed run keeps what its first start said."""
        md = e.metadata
        self.starts += 1
        self.status, self.message = RunStatus.RUNNING, None
        if not md.get("resumed"):
            self.run.update(
                id=values.whole(md["run_id"], "run_id"),
                profile=str(md["profile"]),
                budget_s=float(
                    values.present(values.number(md["budget_s"], "budget_s"), "budget_s")
                ),
                workers=values.whole(md["workers"], "workers"),
                created_at=values.utc(md.get("time_s", e.time_ms / 1000)),
                flow_run_id=None if md.get("flow_run_id") is None else str(md["flow_run_id"]),
            )

    def _run_stop(self, e: Event) -> None:
        self.status, self.message = RunStatus(e.value), e.metadata.get("message")

    def _run_resources(self, e: Event) -> None:
        """Emitted as each is recorded, some fields at a time: merged in order, later wins per field."""
        if not isinstance(e.value, dict):
            raise ValueError("run_resources is not an object")
        merged, _ = self.facts.get(RUN_RESOURCES, ({}, {}))
        self.facts[e.key] = ({**merged, **e.value}, e.metadata)

    def _dataset(self, e: Event) -> None:
        value = e.value
        self.dataset = DatasetRecord(
            name=str(value["name"]),
            kind=str(value["kind"]),
            sha256=str(value["sha256"]),
            train_samples=values.whole(value["train_samples"], "train_samples"),
            val_samples=values.whole(value["val_samples"], "val_samples"),
            classes=values.whole(value["classes"], "classes"),
            manifest=dict(value),
        )

    def _staging_stop(self, e: Event) -> None:
        self.staging_s = values.number(e.metadata["staging_s"], "staging_s")

    def _search_start(self, e: Event) -> None:
        md = e.metadata
        self.segments.append(
            {
                "started": values.utc(md["time_s"]),
                "deadline": values.utc(md["deadline_s"]),
                "ended": None,
            }
        )

    def _search_stop(self, e: Event) -> None:
        self._segment(e.metadata.get("segment"))["ended"] = values.utc(e.metadata["time_s"])

    def _trial_start(self, e: Event) -> None:
        """A trial's state, with what later events fill in (placement, ops, stop, phases) still empty."""
        md = e.metadata
        self.trials[str(md["trial_key"])] = {
            "id": values.whole(md["trial_id"], "trial_id"),
            "number": values.whole(md["number"], "number"),
            "parent_trial_id": md.get("parent_trial_id"),
            "operator": md.get("operator"),
            "architecture": dict(md["architecture"]),
            "hyperparameters": dict(md["hyperparameters"]),
            "started_at": values.utc(md["time_s"]),
            "starts": self.starts,
            "status": None,
            "ended_at": None,
            "message": None,
            "worker": None,
            "parameters": None,
            "ops": (None, None, None, None),
            "phases": None,
            "devices": None,
            "placement": (),
            "inherited_epoch": None,
        }

    def _trial_placement(self, e: Event) -> None:
        md = e.metadata
        trial = self._trial(md)
        trial["worker"], trial["parameters"] = str(e.value), md.get("parameters")
        trial["devices"] = md.get("devices")
        trial["placement"] = tuple(str(d) for d in md.get("placement") or ())
        trial["inherited_epoch"] = md.get("inherited_epoch")

    def _ops_per_sample(self, e: Event) -> None:
        self._trial(e.metadata)["ops"] = tuple(
            values.whole(e.value[convention][phase], f"{convention} {phase} ops per sample")
            for convention in ("aiperf", "tensor")
            for phase in ("train", "eval")
        )

    def _trial_stop(self, e: Event) -> None:
        md = e.metadata
        self._trial(md).update(
            status=TrialStatus(e.value),
            ended_at=values.utc(md["time_s"]),
            message=md.get("message"),
        )

    def _trial_phases(self, e: Event) -> None:
        self._trial(e.metadata)["phases"] = TrialPhases(
            **{k: float(values.number(v, k) or 0.0) for k, v in e.value.items()}
        )

    def _set_score(self, e: Event) -> None:
        self.score = values.checked_score(e.value)

    def _set_best_weights(self, e: Event) -> None:
        self.best_weights = values.checked_best_weights(e.value)

    def _verification(self, e: Event) -> None:
        self.checks = tuple(
            CheckRecord(str(c["check"]), bool(c["passed"]), str(c["detail"]))
            for c in e.metadata["checks"]
        )

    def _segment(self, segment: Any) -> dict[str, Any]:
        if not self.segments:
            raise ValueError("search_stop before any search_start")
        if segment is None:  # the open one (else the latest)
            return next(
                (s for s in reversed(self.segments) if s["ended"] is None), self.segments[-1]
            )
        return self.segments[values.whole(segment, "segment")]

    def _trial(self, md: Mapping[str, Any]) -> dict[str, Any]:
        key = str(md["trial_key"])
        if key not in self.trials:
            raise ValueError(f"trial {key} has no trial_start before it")
        return self.trials[key]

    def _epoch(self, e: Event) -> None:
        key, number = (
            str(e.metadata["trial_key"]),
            values.whole(e.metadata["epoch_num"], "epoch_num"),
        )
        self._trial(e.metadata)
        epoch = self.epochs.setdefault((key, number), {})
        md = e.metadata
        if e.key == EPOCH_START:
            epoch["started_at"] = values.utc(md["time_s"])
        elif e.key == TRAIN_SAMPLES:
            epoch["samples_trained"] = values.whole(e.value, "train_samples")
        elif e.key == EVAL_SAMPLES:
            epoch["samples_evaluated"] = values.whole(e.value, "eval_samples")
        elif e.key == EVAL_ACCURACY:
            epoch["val_accuracy"] = values.number(e.value, "eval_accuracy")
        else:
            if not isinstance(md["complete"], bool):
                raise ValueError(f"complete {md['complete']!r} is not true or false")
            epoch.update(
                ended_at=values.utc(md["time_s"]),
                complete=md["complete"],
                loss=values.number(md.get("loss"), "loss"),
                accuracy=values.number(md.get("accuracy"), "accuracy"),
                val_loss=values.number(md.get("val_loss"), "val_loss"),
            )

    # --- the records ------------------------------------------------------------------------------

    def records(self, where: str) -> LoggedRun:
        """The run's records from the state every event has been applied to."""
        self._require_start(where)
        config, _ = self.facts[CONFIG]
        seed, _ = self.facts.get(SEED, (config.get("seed", 0), {}))
        description, _ = self.facts.get(SYSTEM_DESCRIPTION, (None, {}))
        provenance, _ = self.facts.get(PROVENANCE, (None, {}))
        resources, _ = self.facts.get(RUN_RESOURCES, ({}, {}))
        system = self._system()
        windows = self._windows()
        trials = tuple(
            self._trial_record(key, trial, where)
            for key, trial in sorted(self.trials.items(), key=lambda item: item[1]["number"])
        )
        run = RunRecord(
            id=self.run["id"],
            system=system,
            profile=self.run["profile"],
            config=dict(config),
            seed=seed,
            budget_s=self.run["budget_s"],
            workers=self.run["workers"],
            status=self.status,
            stored_status=self.status,
            created_at=self.run["created_at"],
            **_window_times(windows),
            flow_run_id=self.run["flow_run_id"],
            message=self.message,
            **self._submission(),
            score=self.score,
            verification=self.checks,
            trials=trials,
            windows=windows,
            **values.resource_fields(resources),
            system_description=description,
            staging_s=self.staging_s,
            best_weights=self.best_weights,
            provenance=provenance if isinstance(provenance, dict) else None,
            **self._series(),
        )
        return LoggedRun(run, self.dataset, ())

    def _require_start(self, where: str) -> None:
        """A log that lacks the run's start or a fact every run states is not a whole run's log."""
        missing = [
            k
            for k in (CONFIG, SYSTEM_FINGERPRINT, SUBMISSION_DIVISION, RULESET)
            if k not in self.facts
        ]
        if "id" not in self.run or missing:
            raise EventLogError(
                f"{where} has no {RUN_START if 'id' not in self.run else missing[0]} event: it is "
                "not the log of a run from its start"
            )

    def _system(self) -> SystemRecord:
        """The system's record from its fingerprint; first seen with the run when it does not say."""
        facts, _ = self.facts[SYSTEM_FINGERPRINT]
        return SystemRecord(
            **{f.name: facts[f.name] for f in fields(SystemRecord) if f.name != "first_seen_at"},
            first_seen_at=values.utc(facts["first_seen_s"])
            if "first_seen_s" in facts
            else self.run["created_at"],
        )

    def _windows(self) -> tuple[WindowRecord, ...]:
        return tuple(
            WindowRecord(
                segment=i, started_at=s["started"], deadline=s["deadline"], ended_at=s["ended"]
            )
            for i, s in enumerate(self.segments)
        )

    def _submission(self) -> dict[str, Any]:
        """The run's ruleset and division, with the deviations and config hash the division states."""
        division, division_md = self.facts[SUBMISSION_DIVISION]
        ruleset, _ = self.facts[RULESET]
        return {
            "ruleset": ruleset,
            "division": division,
            "deviations": tuple(division_md.get("deviations", ())),
            "config_hash": division_md.get("config_hash"),
        }

    def _series(self) -> dict[str, Any]:
        series, series_md = self.facts.get(SERIES, (None, {}))
        return {
            "series": None if series is None else str(series),
            "series_index": None
            if series is None
            else values.whole(series_md.get("index"), "index"),
        }

    def _trial_record(self, key: str, t: dict[str, Any], where: str) -> TrialRecord:
        """A trial's record: its epochs, its status, its best qualities over its complete epochs."""
        epochs = self._trial_epochs(key, where)
        complete = [e for e in epochs if e.complete]
        train, evaluate, tensor_train, tensor_eval = t["ops"]
        return TrialRecord(
            id=t["id"],
            run_id=self.run["id"],
            trial_key=key,
            number=t["number"],
            parent_trial_id=t["parent_trial_id"],
            operator=t["operator"],
            architecture=t["architecture"],
            hyperparameters=t["hyperparameters"],
            status=self._trial_status(t),
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

    def _trial_epochs(self, key: str, where: str) -> list[EpochRecord]:
        """A trial's epochs in order; one its log tells only in part is an error naming what is missing."""
        epochs = []
        for (trial_key, number), e in sorted(self.epochs.items()):
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

    def _trial_status(self, t: dict[str, Any]) -> TrialStatus:
        """A trial never stopped ended with its run, as the store ends it."""
        status: TrialStatus | None = t["status"]
        if status is not None:
            return status
        if t["starts"] < self.starts or self.status == RunStatus.INTERRUPTED:
            return TrialStatus.INTERRUPTED
        if self.status in (RunStatus.COMPLETED, RunStatus.FAILED):
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


# Kept as they came (value, metadata), the latest of each standing.
_FACT_KEYS = frozenset(
    (
        SUBMISSION_DIVISION,
        RULESET,
        SERIES,
        SEED,
        CONFIG,
        SYSTEM_FINGERPRINT,
        SYSTEM_DESCRIPTION,
        PROVENANCE,
    )
)
_EPOCH_KEYS = frozenset((EPOCH_START, TRAIN_SAMPLES, EVAL_SAMPLES, EVAL_ACCURACY, EPOCH_STOP))
# Every other kind the rebuild reads, and its step; a kind not named here is not a record's.
_STEPS: dict[str, Callable[[_Rebuilder, Event], None]] = {
    RUN_START: _Rebuilder._run_start,
    RUN_STOP: _Rebuilder._run_stop,
    RUN_RESOURCES: _Rebuilder._run_resources,
    DATASET: _Rebuilder._dataset,
    STAGING_STOP: _Rebuilder._staging_stop,
    SEARCH_START: _Rebuilder._search_start,
    SEARCH_STOP: _Rebuilder._search_stop,
    TRIAL_START: _Rebuilder._trial_start,
    TRIAL_PLACEMENT: _Rebuilder._trial_placement,
    OPS_PER_SAMPLE: _Rebuilder._ops_per_sample,
    TRIAL_STOP: _Rebuilder._trial_stop,
    TRIAL_PHASES: _Rebuilder._trial_phases,
    SCORE: _Rebuilder._set_score,
    BEST_WEIGHTS: _Rebuilder._set_best_weights,
    VERIFICATION: _Rebuilder._verification,
}


def rebuild(events: Iterable[Event], where: str = "event log") -> LoggedRun:
    """The run's records from its events; EventLogError naming the line of an event that does not fit."""
    events = tuple(events)
    state = _Rebuilder()
    for e in events:
        try:
            state.apply(e)
        except EventLogError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise EventLogError(
                f"{where} line {e.lineno}: a {e.key} event that does not fit: {detail}"
            ) from None
    try:
        logged = state.records(where)
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise EventLogError(f"{where}: the run's events do not fit together: {detail}") from None
    return LoggedRun(logged.run, logged.dataset, events)


def read_run(path: Path | str) -> LoggedRun:
    """A log file's run, as records."""
    return rebuild(read_events(path), str(path))
