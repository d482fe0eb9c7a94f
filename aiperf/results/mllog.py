"""The run's event log, in the manner of MLPerf's: one `:::MLLOG {json}` line per event.

    :::MLLOG {"namespace": "", "time_ms": 1764500000123, "event_type": "POINT_IN_TIME",
              "key": "eval_accuracy", "value": 0.41, "metadata": {"trial_key": "03", "epoch_num": 1}}

Every run writes it as it goes, into its own folder (aiperf.paths.run_folder, file EVENT_LOG): each
line is appended with one write and flushed, so a crash loses no line already written, two writers
never interleave a line, and a resumed run appends to the same file. The keys are the constants
below (one vocabulary, the only place they are spelled out); `time_ms` is Unix time in whole
milliseconds, and where a time enters the score its exact Unix seconds are in the metadata as
`time_s`, so the score recomputed from the log equals the stored one to the last bit.

What the log holds is enough, alone, to recompute and check the score (`aiperf verify --package`):
the effective config, its ruleset and division, the system, the dataset's sizes (and its staging
time, outside the score), the timed window's segments, each trial's architecture, placement and
operations per sample in both conventions, each epoch's samples, completeness and accuracy, each
trial's end, the score and its verification.
`rebuild` turns a log back into the records aiperf.results.verify checks (RunRecord, TrialRecord, ...).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiperf.errors import UserError
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

PREFIX = ":::MLLOG "
NAMESPACE = ""
BENCHMARK = "aiperf"

# event types
POINT_IN_TIME = "POINT_IN_TIME"
INTERVAL_START = "INTERVAL_START"
INTERVAL_END = "INTERVAL_END"
EVENT_TYPES = (POINT_IN_TIME, INTERVAL_START, INTERVAL_END)

# --- keys: the one vocabulary ------------------------------------------------------------------------
# the run
RUN_START = "run_start"  # INTERVAL_START; metadata: run_id, profile, budget_s, workers, resumed
RUN_STOP = "run_stop"  # INTERVAL_END; value: the run's status; metadata: message
SUBMISSION_BENCHMARK = "submission_benchmark"  # value "aiperf"; metadata: version
SUBMISSION_DIVISION = (
    "submission_division"  # value closed | open; metadata: deviations, config_hash
)
RULESET = "ruleset"  # value: id-version of the rules the run is judged by
SERIES = "series"  # value: the id of the series of repeated runs it is in; metadata: index (1..N)
SEED = "seed"
CONFIG = "config"  # value: the effective config (no password)
SYSTEM_FINGERPRINT = "system_fingerprint"  # value: the systems row (id, hostname, cpu_model, ...)
SYSTEM_DESCRIPTION = "system_description"  # value: the compute nodes (aiperf.system.description)
PROVENANCE = "provenance"  # value: prologue, scheduler, code digests, workers' env (aiperf.system.provenance)
RUN_RESOURCES = (
    "run_resources"  # value: precision, backend, jit_compile, peak_flops, worker_peaks,
)
# data_feed and feed_rates (aiperf.train.feedrate), reference_rates (aiperf.train.bare_reference)
DATASET = "dataset"  # value: the manifest (name, kind, sha256, sizes, classes, ...)
# the data's staging, before the window and not in it (MLPerf HPC's keys)
STAGING_START = "staging_start"  # INTERVAL_START; metadata: time_s
STAGING_STOP = "staging_stop"  # INTERVAL_END; metadata: time_s, staging_s (wall seconds)
# the timed window
SEARCH_START = "search_start"  # INTERVAL_START; metadata: time_s, deadline_s
SEARCH_STOP = (
    "search_stop"  # INTERVAL_END; metadata: time_s (segment: which one, when not the open one)
)
# trials
TRIAL_START = (
    "trial_start"  # INTERVAL_START; metadata: trial_id, trial_key, number, parent_trial_id, ...
)
# value: the worker; metadata: trial_key, parameters, devices, placement
TRIAL_PLACEMENT = "trial_placement"
OPS_PER_SAMPLE = (
    "ops_per_sample"  # value: {"aiperf": {"train", "eval"}, "tensor": {"train", "eval"}}
)
TRIAL_STOP = (
    "trial_stop"  # INTERVAL_END; value: the trial's status; metadata: trial_key, time_s, message
)
TRIAL_PHASES = "trial_phases"  # value: where the trial's seconds went on its worker
# epochs (metadata: trial_key, epoch_num)
EPOCH_START = "epoch_start"  # INTERVAL_START; metadata: time_s
TRAIN_SAMPLES = "train_samples"  # value: samples trained
EVAL_SAMPLES = "eval_samples"  # value: samples evaluated
EVAL_ACCURACY = "eval_accuracy"  # value: validation accuracy (null: not evaluated)
EPOCH_STOP = "epoch_stop"  # INTERVAL_END; metadata: time_s, complete, loss, accuracy, val_loss
# the result
SCORE = "score"  # value: the ScoreResult's fields; metadata: ruleset
# value: the best trial's kept weights {trial, epoch, file, sha256, val_accuracy} (none kept: null)
BEST_WEIGHTS = "best_weights"
VERIFICATION = "verification"  # value: verified (bool); metadata: checks [{check, passed, detail}]

KEYS = (
    RUN_START,
    RUN_STOP,
    SUBMISSION_BENCHMARK,
    SUBMISSION_DIVISION,
    RULESET,
    SERIES,
    SEED,
    CONFIG,
    SYSTEM_FINGERPRINT,
    SYSTEM_DESCRIPTION,
    PROVENANCE,
    RUN_RESOURCES,
    DATASET,
    STAGING_START,
    STAGING_STOP,
    SEARCH_START,
    SEARCH_STOP,
    TRIAL_START,
    TRIAL_PLACEMENT,
    OPS_PER_SAMPLE,
    TRIAL_STOP,
    TRIAL_PHASES,
    EPOCH_START,
    TRAIN_SAMPLES,
    EVAL_SAMPLES,
    EVAL_ACCURACY,
    EPOCH_STOP,
    SCORE,
    BEST_WEIGHTS,
    VERIFICATION,
)


class EventLogError(UserError):
    """A log that cannot be read back: the line and what is wrong with it, on one line."""


@dataclass(frozen=True)
class Event:
    """One line of the log."""

    time_ms: int
    event_type: str
    key: str
    value: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    namespace: str = NAMESPACE
    lineno: int = 0  # where it was read (0: not read from a file)

    def to_line(self) -> str:
        body = {
            "namespace": self.namespace,
            "time_ms": self.time_ms,
            "event_type": self.event_type,
            "key": self.key,
            "value": self.value,
            "metadata": self.metadata,
        }
        return PREFIX + json.dumps(body, separators=(", ", ": ")) + "\n"


def parse_line(line: str, lineno: int = 0, where: str = "event log") -> Event | None:
    """One line as an Event; None for a blank line; EventLogError for anything else that is not one."""
    text = line.strip()
    if not text:
        return None
    at = f"{where} line {lineno}"
    if not text.startswith(PREFIX.strip()):
        raise EventLogError(
            f"{at} is not an MLLOG event (it does not start with {PREFIX.strip()})"
        )
    try:
        body = json.loads(text[len(PREFIX.strip()) :])
    except ValueError as exc:
        raise EventLogError(f"{at} is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise EventLogError(f"{at}: the event is not a JSON object")
    missing = [k for k in ("time_ms", "event_type", "key", "value", "metadata") if k not in body]
    if missing:
        raise EventLogError(f"{at}: the event has no {', '.join(missing)}")
    if body["event_type"] not in EVENT_TYPES:
        raise EventLogError(f"{at}: unknown event_type {body['event_type']!r}")
    if (
        not isinstance(body["key"], str)
        or not isinstance(body["metadata"], dict)
        or not isinstance(body["time_ms"], int)
        or isinstance(body["time_ms"], bool)
    ):
        raise EventLogError(
            f"{at}: key must be text, time_ms a whole number and metadata an object"
        )
    return Event(
        time_ms=body["time_ms"],
        event_type=body["event_type"],
        key=body["key"],
        value=body["value"],
        metadata=body["metadata"],
        namespace=str(body.get("namespace", NAMESPACE)),
        lineno=lineno,
    )


def read_events(path: Path | str) -> list[Event]:
    """Every event of a log file, in order; EventLogError naming the first line that is not one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EventLogError(f"event log {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EventLogError(f"event log {path} cannot be read: {exc}") from None
    events = [parse_line(line, n, str(path)) for n, line in enumerate(text.splitlines(), start=1)]
    return [e for e in events if e is not None]


# --- writing ------------------------------------------------------------------------------------------


def _ms(time_s: float) -> int:
    return int(round(time_s * 1000))


class EventLog:
    """Appends events to a log file as they happen. EventLog(None) writes nothing (an orchestrator
    driven by tests without a run folder). Each line is one os.write on a file opened O_APPEND."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = None if path is None else Path(path)

    def emit(
        self,
        key: str,
        value: Any = None,
        *,
        event_type: str = POINT_IN_TIME,
        at: float | None = None,
        **metadata: Any,
    ) -> Event:
        """One event at Unix time `at` (default: now); `metadata` as given."""
        event = Event(
            time_ms=_ms(time.time() if at is None else at),
            event_type=event_type,
            key=key,
            value=value,
            metadata=metadata,
        )
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(handle, event.to_line().encode("utf-8"))
            finally:
                os.close(handle)
        return event

    # --- the run ----------------------------------------------------------------------------------

    def run_started(
        self,
        *,
        run_id: int,
        config: Mapping[str, Any],
        system_id: int,
        system: Mapping[str, Any],
        division: str,
        ruleset: str,
        deviations: Iterable[str],
        config_hash: str,
        series: str | None = None,
        series_index: int | None = None,
    ) -> None:
        """The run was recorded: what it is, where it runs and by which rules it is judged, and
        the series of repeated runs it is run `series_index` of (aiperf run --repeat), if any."""
        from aiperf import __version__

        now = time.time()
        self.emit(
            RUN_START,
            event_type=INTERVAL_START,
            at=now,
            run_id=run_id,
            profile=config["profile"],
            budget_s=config["budget_s"],
            workers=config["workers"],
            resumed=False,
        )
        self.emit(SUBMISSION_BENCHMARK, BENCHMARK, at=now, version=__version__)
        self.emit(
            SUBMISSION_DIVISION,
            division,
            at=now,
            deviations=list(deviations),
            config_hash=config_hash,
        )
        self.emit(RULESET, ruleset, at=now)
        if series is not None:
            self.emit(SERIES, series, at=now, index=series_index)
        self.emit(SEED, config["seed"], at=now)
        self.emit(CONFIG, dict(config), at=now)
        self.emit(SYSTEM_FINGERPRINT, {"id": system_id, **system}, at=now)

    def run_resumed(self, *, run_id: int, windows: Iterable[WindowRecord]) -> None:
        """The run runs again: its open segment was closed at its last recorded epoch."""
        self.windows_closed(windows)
        self.emit(RUN_START, event_type=INTERVAL_START, run_id=run_id, resumed=True)

    def windows_closed(self, windows: Iterable[WindowRecord]) -> None:
        """Each closed segment's end as the records have it (after a crash: its last epoch)."""
        for w in windows:
            if w.ended_at is not None:
                end = w.ended_at.timestamp()
                self.emit(
                    SEARCH_STOP, event_type=INTERVAL_END, at=end, time_s=end, segment=w.segment
                )

    def run_stopped(self, status: str, message: str | None = None) -> None:
        self.emit(RUN_STOP, str(status), event_type=INTERVAL_END, message=message)

    def dataset(self, manifest: Mapping[str, Any]) -> None:
        """The staged dataset's whole manifest, as the run records it (datasets.manifest): a package
        checks the data from the log as `aiperf verify` does from the database (its classes per
        split, its overlap check, where it was staged)."""
        self.emit(DATASET, dict(manifest))

    def staging_started(self, started: float) -> None:
        self.emit(STAGING_START, event_type=INTERVAL_START, at=started, time_s=started)

    def staging_stopped(self, ended: float, seconds: float) -> None:
        """The data is staged: `seconds` of wall time (a monotonic clock's, not ended - started)."""
        self.emit(STAGING_STOP, event_type=INTERVAL_END, at=ended, time_s=ended, staging_s=seconds)

    def system_description(self, description: Mapping[str, Any]) -> None:
        self.emit(SYSTEM_DESCRIPTION, dict(description))

    def provenance(self, provenance: Mapping[str, Any]) -> None:
        """What ran on the workers (aiperf.system.provenance)."""
        self.emit(PROVENANCE, dict(provenance))

    def resources(self, **resources: Any) -> None:
        """The run's precision, backend, XLA setting and measured peaks (MFU's divisor), when known."""
        self.emit(RUN_RESOURCES, resources)

    # --- the timed window ---------------------------------------------------------------------------

    def search_started(self, started: float, deadline: float) -> None:
        self.emit(
            SEARCH_START,
            event_type=INTERVAL_START,
            at=started,
            time_s=started,
            deadline_s=deadline,
        )

    def search_stopped(self, ended: float) -> None:
        self.emit(SEARCH_STOP, event_type=INTERVAL_END, at=ended, time_s=ended)

    # --- trials and epochs ------------------------------------------------------------------------

    def trial_started(
        self,
        *,
        trial_id: int,
        trial_key: str,
        number: int,
        started_at: float,
        parent_trial_id: int | None,
        operator: str | None,
        architecture: Mapping[str, Any],
        hyperparameters: Mapping[str, Any],
        epochs: int,
        seed: int,
    ) -> None:
        self.emit(
            TRIAL_START,
            event_type=INTERVAL_START,
            at=started_at,
            time_s=started_at,
            trial_id=trial_id,
            trial_key=trial_key,
            number=number,
            parent_trial_id=parent_trial_id,
            operator=operator,
            architecture=dict(architecture),
            hyperparameters=dict(hyperparameters),
            epochs=epochs,
            seed=seed,
        )

    def trial_built(
        self,
        *,
        trial_key: str,
        worker: str,
        parameters: int,
        train_ops: int,
        eval_ops: int,
        tensor_train_ops: int,
        tensor_eval_ops: int,
        devices: int = 1,
        placement: Sequence[str] = (),
    ) -> None:
        now = time.time()
        self.emit(
            TRIAL_PLACEMENT,
            worker,
            at=now,
            trial_key=trial_key,
            parameters=parameters,
            devices=devices,
            placement=list(placement),
        )
        self.emit(
            OPS_PER_SAMPLE,
            {
                "aiperf": {"train": train_ops, "eval": eval_ops},
                "tensor": {"train": tensor_train_ops, "eval": tensor_eval_ops},
            },
            at=now,
            trial_key=trial_key,
        )

    def epoch(
        self,
        trial_key: str,
        *,
        epoch: int,
        started_at: float,
        ended_at: float,
        samples_trained: int,
        samples_evaluated: int,
        loss: float | None,
        accuracy: float | None,
        val_loss: float | None,
        val_accuracy: float | None,
        complete: bool,
        **_later: Any,
    ) -> None:
        which: dict[str, Any] = {"trial_key": trial_key, "epoch_num": epoch}
        self.emit(
            EPOCH_START, event_type=INTERVAL_START, at=started_at, **which, time_s=started_at
        )
        self.emit(TRAIN_SAMPLES, samples_trained, at=ended_at, **which)
        self.emit(EVAL_SAMPLES, samples_evaluated, at=ended_at, **which)
        self.emit(EVAL_ACCURACY, val_accuracy, at=ended_at, **which)
        self.emit(
            EPOCH_STOP,
            event_type=INTERVAL_END,
            at=ended_at,
            **which,
            time_s=ended_at,
            complete=bool(complete),
            loss=loss,
            accuracy=accuracy,
            val_loss=val_loss,
        )

    def trial_stopped(
        self, trial_key: str, status: str, ended_at: float, message: str | None
    ) -> None:
        self.emit(
            TRIAL_STOP,
            str(status),
            event_type=INTERVAL_END,
            at=ended_at,
            time_s=ended_at,
            trial_key=trial_key,
            message=message,
        )

    def trial_phases(self, trial_key: str, phases: TrialPhases) -> None:
        self.emit(
            TRIAL_PHASES,
            {f.name: getattr(phases, f.name) for f in fields(phases)},
            trial_key=trial_key,
        )

    # --- the result -------------------------------------------------------------------------------

    def score(self, score: ScoreResult, ruleset: str | None) -> None:
        self.emit(SCORE, score.to_dict(), ruleset=ruleset)

    def best_weights(self, kept: Mapping[str, Any] | None) -> None:
        """The best trial's weights file kept with the run (aiperf.results.remeasure), with its
        sha256: what `verify --package` evaluates again from the package's copy."""
        self.emit(BEST_WEIGHTS, None if kept is None else dict(kept))

    def verification(self, checks: Iterable[CheckRecord]) -> None:
        checks = list(checks)
        self.emit(
            VERIFICATION,
            all(c.passed for c in checks),
            checks=[{"check": c.check, "passed": c.passed, "detail": c.detail} for c in checks],
        )


# --- reading back: the records the log holds ----------------------------------------------------------


@dataclass(frozen=True)
class LoggedRun:
    """A run as its event log tells it: the records aiperf.results.verify checks, without a database."""

    run: RunRecord
    dataset: DatasetRecord | None
    events: tuple[Event, ...]


def _utc(seconds: Any) -> datetime:
    """The datetime the store makes of the same Unix time (aiperf.store.repository.utc)."""
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
                    created_at=_utc(e.time_ms / 1000),
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
            RUN_RESOURCES,
        ):
            self.facts[e.key] = (value, md)
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
            }
        elif e.key == TRIAL_PLACEMENT:
            trial = self._trial(md)
            trial["worker"], trial["parameters"] = str(value), md.get("parameters")
            trial["devices"] = md.get("devices")
            trial["placement"] = tuple(str(d) for d in md.get("placement") or ())
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
            first_seen_at=self.run["created_at"],
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
            flow_run_id=None,
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
        measured = [e.val_accuracy for e in epochs if e.complete and e.val_accuracy is not None]
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
            best_val_accuracy=max(measured) if measured else None,
            message=t["message"],
            epochs=tuple(epochs),
            phases=t["phases"],
            devices=t["devices"],
            placement=t["placement"],
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
