"""The event log's vocabulary and line format, in the manner of MLPerf's: one `:::MLLOG {json}` line
per event.

    :::MLLOG {"namespace": "", "time_ms": 1764500000123, "event_type": "POINT_IN_TIME",
              "key": "eval_accuracy", "value": 0.41, "metadata": {"trial_key": "03", "epoch_num": 1}}

The keys are the constants below (one vocabulary, the only place they are spelled out); `time_ms`
is Unix time in whole milliseconds, and where a time enters the score its exact Unix seconds are in
the metadata as `time_s`, so the score recomputed from the log equals the stored one to the last
bit. This module is what both sides share, as mlperf_logging's constants are: the writer
(aiperf.results.mllog.writer) spells lines with it and the reader (aiperf.results.mllog.rebuild)
parses them with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf.errors import UserError

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
# INTERVAL_START; metadata: run_id, profile, budget_s, workers, resumed, and the runs row's own
# created time (time_s) and flow_run_id
RUN_START = "run_start"
RUN_STOP = "run_stop"  # INTERVAL_END; value: the run's status; metadata: message
SUBMISSION_BENCHMARK = "submission_benchmark"  # value "aiperf"; metadata: version
SUBMISSION_DIVISION = (
    "submission_division"  # value closed | open; metadata: deviations, config_hash
)
RULESET = "ruleset"  # value: id-version of the rules the run is judged by
SERIES = "series"  # value: the id of the series of repeated runs it is in; metadata: index (1..N)
SEED = "seed"
CONFIG = "config"  # value: the effective config (no password)
# value: the systems row (id, hostname, cpu_model, ..., first_seen_s)
SYSTEM_FINGERPRINT = "system_fingerprint"
SYSTEM_DESCRIPTION = "system_description"  # value: the compute nodes (aiperf.system.description)
PROVENANCE = "provenance"  # value: prologue, scheduler, code digests, workers' env (aiperf.system.provenance)
RUN_RESOURCES = (
    "run_resources"  # value: precision, backend, jit_compile, peak_flops, worker_peaks,
)
# data_feed and feed_rates (aiperf.train.feedrate), reference_rates (aiperf.train.bare_reference),
# energy_windows (aiperf.lifecycle.metering)
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
# value: the worker; metadata: trial_key, parameters, devices, placement, inherited_epoch (the
# parent's epoch whose weights the model grew from; null: fresh weights)
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
