"""Does the event log tell the same run as the database? Every fact, field by field.

The house rule of issue 34: each fact of a run is recorded once, in the database, and its event goes
to the log with it, so the log alone rebuilds every fact the database holds (aiperf.results.mllog
.rebuild). `compare` is the check: the run as the database holds it (RunRecord with its trials,
epochs and windows, and the run's DatasetRecord) against the run rebuilt from its log, returning
each fact on which they differ with both values. It normalises only what must be: times to whole
milliseconds (the log's `time_ms` resolution; the database may round microseconds differently), and
every value as JSON has it (a tuple is a list, a float is the float the log wrote, which JSON
round-trips exactly). A value the database holds and the log has no event for is a mismatch too,
even when both read None (an absent best_weights event is not "no weights kept").
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass
from datetime import datetime
from typing import Any

from aiperf.results.mllog.keys import (
    BEST_WEIGHTS,
    CONFIG,
    PROVENANCE,
    RULESET,
    RUN_RESOURCES,
    SCORE,
    SEED,
    STAGING_STOP,
    SUBMISSION_DIVISION,
    SYSTEM_DESCRIPTION,
    VERIFICATION,
    Event,
    EventLogError,
)
from aiperf.results.mllog.rebuild import LoggedRun, rebuild
from aiperf.store.records import (
    DatasetRecord,
    EpochRecord,
    RunRecord,
    TrialRecord,
    WindowRecord,
)

# Facts of the runs row that are not facts of the run but of the process that writes it: its
# heartbeat (a clock that ticks while it lives) and its owner token (aiperf.lifecycle.liveness).
# Neither is in the log, by design: a log read later has no live process to speak of.
NOT_RUN_FACTS = {
    "heartbeat_at": "the writing process's last sign of life, not a fact of the run",
    "owner": "the writing process's token (aiperf.lifecycle.liveness), not a fact of the run",
    "status": "derived on reading from stored_status and the heartbeat (LOST); stored_status is "
    "compared",
}

# The event that carries each run-level fact, where one event carries it and the writer always
# emits it (even when the value is None): its absence is a mismatch whatever the values say.
RUN_FACT_EVENTS = {
    "config": CONFIG,
    "seed": SEED,
    "ruleset": RULESET,
    "division": SUBMISSION_DIVISION,
    "deviations": SUBMISSION_DIVISION,
    "config_hash": SUBMISSION_DIVISION,
    "score": SCORE,
    "verification": VERIFICATION,
    "system_description": SYSTEM_DESCRIPTION,
    "provenance": PROVENANCE,
    "staging_s": STAGING_STOP,
    "best_weights": BEST_WEIGHTS,
}
# The run_resources fields: each must be in some run_resources event (they come a few at a time).
RESOURCE_FIELDS = (
    "precision",
    "backend",
    "jit_compile",
    "peak_flops",
    "worker_peaks",
    "data_feed",
    "feed_rates",
    "reference_rates",
    "energy_windows",
)


@dataclass(frozen=True)
class Mismatch:
    """One fact on which the database and the log differ: `fact` names it ("run.precision",
    "trial.worker", "epoch.loss", "score.ops", ...), `where` says which trial, epoch or window."""

    fact: str
    db: Any
    log: Any
    where: str = ""

    def __str__(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return f"{self.fact}{at}: database {self.db!r}, log {self.log!r}"


def plain(value: Any) -> Any:
    """A value as the log holds it: times in whole milliseconds, records and tuples as JSON."""
    if isinstance(value, datetime):
        return int(round(value.timestamp() * 1000))
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return json.loads(json.dumps(value))


def _fields(
    prefix: str, db: Any, log: Any, where: str = "", skip: Iterable[str] = ()
) -> list[Mismatch]:
    """Every field of two records of one dataclass that differs (after `plain`)."""
    skipped = set(skip)
    found = []
    for f in fields(db):
        if f.name in skipped:
            continue
        a, b = plain(getattr(db, f.name)), plain(getattr(log, f.name))
        if a != b:
            found.append(Mismatch(f"{prefix}.{f.name}", a, b, where))
    return found


def _one(prefix: str, db: Any, log: Any, where: str = "") -> list[Mismatch]:
    """Two records of one kind, either of which may be missing."""
    if db is None or log is None:
        return [] if db is log else [Mismatch(prefix, plain(db), plain(log), where)]
    return _fields(prefix, db, log, where)


def _trial(db: TrialRecord, log: TrialRecord) -> list[Mismatch]:
    where = f"trial {db.trial_key}"
    found = _fields("trial", db, log, where, skip=("epochs",))
    logged: dict[int, EpochRecord] = {e.epoch: e for e in log.epochs}
    for epoch in db.epochs:
        found += _one(
            "epoch", epoch, logged.pop(epoch.epoch, None), f"{where} epoch {epoch.epoch}"
        )
    found += [
        Mismatch("epoch", None, plain(e), f"{where} epoch {e.epoch}") for e in logged.values()
    ]
    return found


def _windows(db: tuple[WindowRecord, ...], log: tuple[WindowRecord, ...]) -> list[Mismatch]:
    logged = {w.segment: w for w in log}
    found = []
    for w in db:
        found += _one("window", w, logged.pop(w.segment, None), f"segment {w.segment}")
    return found + [
        Mismatch("window", None, plain(w), f"segment {w.segment}") for w in logged.values()
    ]


def _absent_events(record: RunRecord, events: Iterable[Event]) -> list[Mismatch]:
    """Run-level facts whose event is not in the log at all (so a None there says nothing)."""
    keys = set()
    resources: set[str] = set()
    for e in events:
        keys.add(e.key)
        if e.key == RUN_RESOURCES and isinstance(e.value, dict):
            resources.update(e.value)
    found = [
        Mismatch(f"run.{fact}", plain(getattr(record, fact)), f"no {key} event")
        for fact, key in RUN_FACT_EVENTS.items()
        if key not in keys
    ]
    return found + [
        Mismatch(f"run.{fact}", plain(getattr(record, fact)), f"no {fact} in any {RUN_RESOURCES}")
        for fact in RESOURCE_FIELDS
        if fact not in resources
    ]


def compare(record: RunRecord, dataset: DatasetRecord | None, logged: LoggedRun) -> list[Mismatch]:
    """Every fact on which the run in the database (`record` with its trials, and its `dataset`)
    and the run rebuilt from its log differ; [] when the log tells the same run."""
    run = logged.run
    skip = {"system", "score", "trials", "windows", *NOT_RUN_FACTS}
    found = _fields("run", record, run, skip=skip)
    found += _absent_events(record, logged.events)
    found += _one("system", record.system, run.system)
    found += _one("score", record.score, run.score)
    found += _one("dataset", dataset, logged.dataset)
    found += _windows(record.windows, run.windows)
    trials = {t.trial_key: t for t in run.trials}
    for trial in record.trials:
        log = trials.pop(trial.trial_key, None)
        found += (
            _trial(trial, log)
            if log is not None
            else [Mismatch("trial", plain(trial), None, f"trial {trial.trial_key}")]
        )
    found += [Mismatch("trial", None, plain(t), f"trial {t.trial_key}") for t in trials.values()]
    return found


def check(
    record: RunRecord, dataset: DatasetRecord | None, events: Iterable[Event]
) -> list[Mismatch]:
    """`compare` on the run's events; a log that cannot be rebuilt at all (an event that carries the
    run's identity is missing) is one mismatch, fact "log", with the reason the rebuild gave."""
    try:
        logged = rebuild(events)
    except EventLogError as exc:
        return [Mismatch("log", f"run {record.id}", str(exc))]
    return compare(record, dataset, logged)
