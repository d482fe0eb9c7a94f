"""The run's event log, in the manner of MLPerf's: one `:::MLLOG {json}` line per event, written
as the run goes and enough, alone, to rebuild every fact the database holds for the run.

Split as mlperf_logging splits its own: the vocabulary and line format (keys), the writer that
appends events (writer: EventLog), the reader that rebuilds the records from them (rebuild:
read_run, rebuild, LoggedRun), and the check that the two tell the same run (conformance). What the
log holds is enough to recompute and check the score (`aiperf verify --package`): the effective
config, its ruleset and division, the system, the dataset's sizes (and its staging time, outside
the score), the timed window's segments, each trial's architecture, placement and operations per
sample in both conventions, each epoch's samples, completeness and accuracy, each trial's end, the
score and its verification. Everyone imports it through this package: `from aiperf.results import
mllog; mllog.EventLog(path)`.
"""

from __future__ import annotations

from aiperf.results.mllog.keys import (
    BENCHMARK,
    BEST_WEIGHTS,
    CONFIG,
    DATASET,
    EPOCH_START,
    EPOCH_STOP,
    EVAL_ACCURACY,
    EVAL_SAMPLES,
    EVENT_TYPES,
    INTERVAL_END,
    INTERVAL_START,
    KEYS,
    NAMESPACE,
    OPS_PER_SAMPLE,
    POINT_IN_TIME,
    PREFIX,
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
    STAGING_START,
    STAGING_STOP,
    SUBMISSION_BENCHMARK,
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
    parse_line,
    read_events,
)
from aiperf.results.mllog.rebuild import LoggedRun, read_run, rebuild
from aiperf.results.mllog.writer import EventLog

__all__ = [
    "BENCHMARK",
    "BEST_WEIGHTS",
    "CONFIG",
    "DATASET",
    "EPOCH_START",
    "EPOCH_STOP",
    "EVAL_ACCURACY",
    "EVAL_SAMPLES",
    "EVENT_TYPES",
    "Event",
    "EventLog",
    "EventLogError",
    "INTERVAL_END",
    "INTERVAL_START",
    "KEYS",
    "LoggedRun",
    "NAMESPACE",
    "OPS_PER_SAMPLE",
    "POINT_IN_TIME",
    "PREFIX",
    "PROVENANCE",
    "RULESET",
    "RUN_RESOURCES",
    "RUN_START",
    "RUN_STOP",
    "SCORE",
    "SEARCH_START",
    "SEARCH_STOP",
    "SEED",
    "SERIES",
    "STAGING_START",
    "STAGING_STOP",
    "SUBMISSION_BENCHMARK",
    "SUBMISSION_DIVISION",
    "SYSTEM_DESCRIPTION",
    "SYSTEM_FINGERPRINT",
    "TRAIN_SAMPLES",
    "TRIAL_PHASES",
    "TRIAL_PLACEMENT",
    "TRIAL_START",
    "TRIAL_STOP",
    "VERIFICATION",
    "parse_line",
    "read_events",
    "read_run",
    "rebuild",
]
