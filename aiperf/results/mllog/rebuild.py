"""Reading the event log back: `rebuild` turns a run's events into the records the database holds
(RunRecord with its trials, epochs and windows, DatasetRecord), so aiperf.results.verify checks a
package's run (`aiperf verify --package`) without a database, as mlperf_logging's parser reads its
logs back. Events apply in order and the latest of a kind stands (a resumed run repeats some).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiperf import quality
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


def _utc(seconds: Any) -> datetime:
    """The datetime the store makes of the same Unix time (aiperf.store.conversion.utc)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"time_s {seconds!r} is not a number")
    return datetime.fromtimestamp(seconds, tz=UTC)


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} {value!r} is not a whole number of at least 0")
    return value


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} {value!r} is not a number")
    return value


def _present(value: float | None, what: str) -> float:
    """A number an event must carry (a None would otherwise reach float())."""
    if value is None:
        raise ValueError(f"{what} None is not a number")
    return value


class _Rebuilder:
    """Applies events in order; the latest event of a kind wins (a resumed run repeats some)."""

    def __init__(self) -> None:
        self.run: dict[str, Any] = {}
        self.starts = (
            0  # run_start events so far: a trial not stopped before a later one was interrupted
        )
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
        md, value = e.metadata, e.value
        if e.key == RUN_START:
            self.starts += 1
            self.status, self.message = RunStatus.RUNNING, None
            if not md.get("resumed"):
                self.run.update(
                    id=_whole(md["run_id"], "run_id"),
                    profile=str(md["profile"]),
                    budget_s=float(_present(_number(md["budget_s"], "budget_s"), "budget_s")),
                    workers=_whole(md["workers"], "workers"),
                    created_at=_utc(md.get("time_s", e.time_ms / 1000)),
                    flow_run_id=None if md.get("flow_run_id") is None else str(md["flow_run_id"]),
                )
        elif e.key == RUN_STOP:
            self.status, self.message = RunStatus(value), md.get("message")
        elif e.key in (
            SUBMISSION_DIVISION,
            RULESET,
            SERIES,
            SEED,
            CONFIG,
            SYSTEM_FINGERPRINT,
            SYSTEM_DESCRIPTION,
            PROVENANCE,
        ):
            self.facts[e.key] = (value, md)
        elif e.key == RUN_RESOURCES:
            # Emitted as each is recorded, some fields at a time: merged in order, later wins per field.
            if not isinstance(value, dict):
                raise ValueError("run_resources is not an object")
            merged, _ = self.facts.get(RUN_RESOURCES, ({}, {}))
            self.facts[e.key] = ({**merged, **value}, md)
        elif e.key == DATASET:
            self.dataset = DatasetRecord(
                name=str(value["name"]),
                kind=str(value["kind"]),
                sha256=str(value["sha256"]),
                train_samples=_whole(value["train_samples"], "train_samples"),
                val_samples=_whole(value["val_samples"], "val_samples"),
                classes=_whole(value["classes"], "classes"),
                manifest=dict(value),
            )
        elif e.key == STAGING_STOP:
            self.staging_s = _number(md["staging_s"], "staging_s")
        elif e.key == SEARCH_START:
            self.segments.append(
                {"started": _utc(md["time_s"]), "deadline": _utc(md["deadline_s"]), "ended": None}
            )
        elif e.key == SEARCH_STOP:
            self._segment(md.get("segment"))["ended"] = _utc(md["time_s"])
        elif e.key == TRIAL_START:
            self.trials[str(md["trial_key"])] = {
                "id": _whole(md["trial_id"], "trial_id"),
                "number": _whole(md["number"], "number"),
                "parent_trial_id": md.get("parent_trial_id"),
                "operator": md.get("operator"),
                "architecture": dict(md["architecture"]),
                "hyperparameters": dict(md["hyperparameters"]),
                "started_at": _utc(md["time_s"]),
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
        elif e.key == TRIAL_PLACEMENT:
            trial = self._trial(md)
            trial["worker"], trial["parameters"] = str(value), md.get("parameters")
            trial["devices"] = md.get("devices")
            trial["placement"] = tuple(str(d) for d in md.get("placement") or ())
            trial["inherited_epoch"] = md.get("inherited_epoch")
        elif e.key == OPS_PER_SAMPLE:
            self._trial(md)["ops"] = tuple(
                _whole(value[convention][phase], f"{convention} {phase} ops per sample")
                for convention in ("aiperf", "tensor")
                for phase in ("train", "eval")
            )
        elif e.key == TRIAL_STOP:
            trial = self._trial(md)
            trial.update(
                status=TrialStatus(value), ended_at=_utc(md["time_s"]), message=md.get("message")
            )
        elif e.key == TRIAL_PHASES:
            self._trial(md)["phases"] = TrialPhases(
                **{k: float(_number(v, k) or 0.0) for k, v in value.items()}
            )
        elif e.key in (EPOCH_START, TRAIN_SAMPLES, EVAL_SAMPLES, EVAL_ACCURACY, EPOCH_STOP):
            self._epoch(e)
        elif e.key == SCORE:
            self.score = _score(value)
        elif e.key == BEST_WEIGHTS:
            self.best_weights = _best_weights(value)
        elif e.key == VERIFICATION:
            self.checks = tuple(
                CheckRecord(str(c["check"]), bool(c["passed"]), str(c["detail"]))
                for c in md["checks"]
            )

    def _segment(self, segment: Any) -> dict[str, Any]:
        if not self.segments:
            raise ValueError("search_stop before any search_start")
        if segment is None:  # the open one (else the latest)
            return next(
                (s for s in reversed(self.segments) if s["ended"] is None), self.segments[-1]
            )
        return self.segments[_whole(segment, "segment")]

    def _trial(self, md: Mapping[str, Any]) -> dict[str, Any]:
        key = str(md["trial_key"])
        if key not in self.trials:
            raise ValueError(f"trial {key} has no trial_start before it")
        return self.trials[key]

    def _epoch(self, e: Event) -> None:
        key, number = str(e.metadata["trial_key"]), _whole(e.metadata["epoch_num"], "epoch_num")
        self._trial(e.metadata)
        epoch = self.epochs.setdefault((key, number), {})
        md = e.metadata
        if e.key == EPOCH_START:
            epoch["started_at"] = _utc(md["time_s"])
        elif e.key == TRAIN_SAMPLES:
            epoch["samples_trained"] = _whole(e.value, "train_samples")
        elif e.key == EVAL_SAMPLES:
            epoch["samples_evaluated"] = _whole(e.value, "eval_samples")
        elif e.key == EVAL_ACCURACY:
            epoch["val_accuracy"] = _number(e.value, "eval_accuracy")
        else:
            if not isinstance(md["complete"], bool):
                raise ValueError(f"complete {md['complete']!r} is not true or false")
            epoch.update(
                ended_at=_utc(md["time_s"]),
                complete=md["complete"],
                loss=_number(md.get("loss"), "loss"),
                accuracy=_number(md.get("accuracy"), "accuracy"),
                val_loss=_number(md.get("val_loss"), "val_loss"),
            )

    # --- the records ------------------------------------------------------------------------------

    def records(self, where: str) -> LoggedRun:
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
        config, _ = self.facts[CONFIG]
        facts, _ = self.facts[SYSTEM_FINGERPRINT]
        division, division_md = self.facts[SUBMISSION_DIVISION]
        ruleset, _ = self.facts[RULESET]
        seed, _ = self.facts.get(SEED, (config.get("seed", 0), {}))
        description, _ = self.facts.get(SYSTEM_DESCRIPTION, (None, {}))
        provenance, _ = self.facts.get(PROVENANCE, (None, {}))
        resources, _ = self.facts.get(RUN_RESOURCES, ({}, {}))
        series, series_md = self.facts.get(SERIES, (None, {}))
        system = SystemRecord(
            **{f.name: facts[f.name] for f in fields(SystemRecord) if f.name != "first_seen_at"},
            first_seen_at=_utc(facts["first_seen_s"])
            if "first_seen_s" in facts
            else self.run["created_at"],
        )
        windows = tuple(
            WindowRecord(
                segment=i, started_at=s["started"], deadline=s["deadline"], ended_at=s["ended"]
            )
            for i, s in enumerate(self.segments)
        )
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
            search_started_at=windows[0].started_at if windows else None,
            deadline=windows[-1].deadline if windows else None,
            search_ended_at=windows[-1].ended_at if windows else None,
            flow_run_id=self.run["flow_run_id"],
            message=self.message,
            ruleset=ruleset,
            division=division,
            deviations=tuple(division_md.get("deviations", ())),
            config_hash=division_md.get("config_hash"),
            score=self.score,
            verification=self.checks,
            trials=trials,
            windows=windows,
            precision=resources.get("precision"),
            backend=resources.get("backend"),
            jit_compile=resources.get("jit_compile"),
            peak_flops=resources.get("peak_flops"),
            worker_peaks=tuple(resources.get("worker_peaks") or ()),
            data_feed=resources.get("data_feed"),
            feed_rates=tuple(resources.get("feed_rates") or ()),
            reference_rates=tuple(resources.get("reference_rates") or ()),
            system_description=description,
            staging_s=self.staging_s,
            best_weights=self.best_weights,
            provenance=provenance if isinstance(provenance, dict) else None,
            series=None if series is None else str(series),
            series_index=None if series is None else _whole(series_md.get("index"), "index"),
        )
        return LoggedRun(run, self.dataset, ())

    def _trial_record(self, key: str, t: dict[str, Any], where: str) -> TrialRecord:
        epochs = []
        for (trial_key, number), e in sorted(self.epochs.items()):
            if trial_key != key:
                continue
            absent = [
                name
                for name in (
                    "started_at",
                    "ended_at",
                    "samples_trained",
                    "samples_evaluated",
                    "complete",
                )
                if name not in e
            ]
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
        status = t["status"]
        if status is None:  # never stopped: ended with its run, as the store ends it
            if t["starts"] < self.starts or self.status == RunStatus.INTERRUPTED:
                status = TrialStatus.INTERRUPTED
            elif self.status in (RunStatus.COMPLETED, RunStatus.FAILED):
                status = TrialStatus.STOPPED
            else:
                status = TrialStatus.RUNNING
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
            status=status,
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


def _best_weights(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("best_weights is not an object")
    missing = [k for k in ("trial", "epoch", "file", "sha256", "val_accuracy") if k not in value]
    if missing:
        raise ValueError(f"best_weights has no {', '.join(missing)}")
    if not isinstance(value["file"], str) or not isinstance(value["sha256"], str):
        raise ValueError("best_weights' file and sha256 must be text")
    return dict(value)


def _score(value: Any) -> ScoreResult:
    if not isinstance(value, dict):
        raise ValueError("the score is not an object")
    names = {f.name for f in fields(ScoreResult)}
    known = {
        k: v for k, v in value.items() if k in names
    }  # a figure a later aiperf adds is left out
    try:
        return ScoreResult(**known)
    except TypeError as exc:
        raise ValueError(f"the score lacks a figure: {exc}") from None


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
