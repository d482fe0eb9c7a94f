"""Writing the event log: EventLog appends one line per event as the run goes.

Every run writes it into its own folder (aiperf.paths.run_folder, file EVENT_LOG): each line is
appended with one write and flushed, so a crash loses no line already written, two writers never
interleave a line, and a resumed run appends to the same file. One method per fact, so every caller
spells an event the same way (the keys: aiperf.results.mllog.keys).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from aiperf.results.mllog import keys
from aiperf.store.fact_records import EpochReport, RunStart, TrialBuilt, TrialEnd, TrialStart
from aiperf.store.records import CheckRecord, ScoreResult, TrialPhases, WindowRecord


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
        event_type: str = keys.POINT_IN_TIME,
        at: float | None = None,
        **metadata: Any,
    ) -> keys.Event:
        """One event at Unix time `at` (default: now); `metadata` as given."""
        event = keys.Event(
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
        run_id: int,
        start: RunStart,
        *,
        system_id: int,
        system: Mapping[str, Any],
        created_at: float | None = None,
        system_first_seen_at: float | None = None,
    ) -> None:
        """The run was recorded: what it is, where it runs and by which rules it is judged, and
        the series of repeated runs it is run `series_index` of (aiperf run --repeat), if any.
        `created_at` and `system_first_seen_at` (Unix seconds) are the runs row's and the systems
        row's own, so the log rebuilds them exactly; without them the run starts now and the log
        has no system's first sighting (logs before issue 34)."""
        from aiperf import __version__

        now = time.time() if created_at is None else created_at
        exact: dict[str, Any] = {} if created_at is None else {"time_s": created_at}
        if start.flow_run_id is not None:
            exact["flow_run_id"] = start.flow_run_id
        self.emit(
            keys.RUN_START,
            event_type=keys.INTERVAL_START,
            at=now,
            run_id=run_id,
            profile=start.config["profile"],
            budget_s=start.config["budget_s"],
            workers=start.config["workers"],
            resumed=False,
            **exact,
        )
        self.emit(keys.SUBMISSION_BENCHMARK, keys.BENCHMARK, at=now, version=__version__)
        self.emit(
            keys.SUBMISSION_DIVISION,
            start.division,
            at=now,
            deviations=list(start.deviations),
            config_hash=start.config_hash,
        )
        self.emit(keys.RULESET, start.ruleset, at=now)
        if start.series is not None:
            self.emit(keys.SERIES, start.series, at=now, index=start.series_index)
        self.emit(keys.SEED, start.config["seed"], at=now)
        self.emit(keys.CONFIG, dict(start.config), at=now)
        first_seen = {} if system_first_seen_at is None else {"first_seen_s": system_first_seen_at}
        self.emit(keys.SYSTEM_FINGERPRINT, {"id": system_id, **system, **first_seen}, at=now)

    def run_resumed(self, *, run_id: int, windows: Iterable[WindowRecord]) -> None:
        """The run runs again: its open segment was closed at its last recorded epoch."""
        self.windows_closed(windows)
        self.emit(keys.RUN_START, event_type=keys.INTERVAL_START, run_id=run_id, resumed=True)

    def windows_closed(self, windows: Iterable[WindowRecord]) -> None:
        """Each closed segment's end as the records have it (after a crash: its last epoch)."""
        for w in windows:
            if w.ended_at is not None:
                end = w.ended_at.timestamp()
                self.emit(
                    keys.SEARCH_STOP,
                    event_type=keys.INTERVAL_END,
                    at=end,
                    time_s=end,
                    segment=w.segment,
                )

    def run_stopped(self, status: str, message: str | None = None) -> None:
        self.emit(keys.RUN_STOP, str(status), event_type=keys.INTERVAL_END, message=message)

    def dataset(self, manifest: Mapping[str, Any]) -> None:
        """The staged dataset's whole manifest, as the run records it (datasets.manifest): a package
        checks the data from the log as `aiperf verify` does from the database (its classes per
        split, its overlap check, where it was staged)."""
        self.emit(keys.DATASET, dict(manifest))

    def staging_started(self, started: float) -> None:
        self.emit(keys.STAGING_START, event_type=keys.INTERVAL_START, at=started, time_s=started)

    def staging_stopped(self, ended: float, seconds: float) -> None:
        """The data is staged: `seconds` of wall time (a monotonic clock's, not ended - started)."""
        self.emit(
            keys.STAGING_STOP,
            event_type=keys.INTERVAL_END,
            at=ended,
            time_s=ended,
            staging_s=seconds,
        )

    def system_description(self, description: Mapping[str, Any]) -> None:
        self.emit(keys.SYSTEM_DESCRIPTION, dict(description))

    def provenance(self, provenance: Mapping[str, Any]) -> None:
        """What ran on the workers (aiperf.system.provenance)."""
        self.emit(keys.PROVENANCE, dict(provenance))

    def resources(self, **resources: Any) -> None:
        """The run's precision, backend, XLA setting and measured peaks (MFU's divisor), when known."""
        self.emit(keys.RUN_RESOURCES, resources)

    # --- the timed window ---------------------------------------------------------------------------

    def search_started(self, started: float, deadline: float) -> None:
        self.emit(
            keys.SEARCH_START,
            event_type=keys.INTERVAL_START,
            at=started,
            time_s=started,
            deadline_s=deadline,
        )

    def search_stopped(self, ended: float) -> None:
        self.emit(keys.SEARCH_STOP, event_type=keys.INTERVAL_END, at=ended, time_s=ended)

    # --- trials and epochs ------------------------------------------------------------------------

    def trial_started(self, trial_id: int, start: TrialStart) -> None:
        self.emit(
            keys.TRIAL_START,
            event_type=keys.INTERVAL_START,
            at=start.started_at,
            time_s=start.started_at,
            trial_id=trial_id,
            trial_key=start.trial_key,
            number=start.number,
            parent_trial_id=start.parent_trial_id,
            operator=start.operator,
            architecture=dict(start.architecture),
            hyperparameters=dict(start.hyperparameters),
            epochs=start.epochs,
            seed=start.seed,
        )

    def trial_built(self, built: TrialBuilt) -> None:
        now = time.time()
        self.emit(
            keys.TRIAL_PLACEMENT,
            built.worker,
            at=now,
            trial_key=built.trial_key,
            parameters=built.parameters,
            devices=built.devices,
            placement=list(built.placement),
            inherited_epoch=built.inherited_epoch,
        )
        self.emit(
            keys.OPS_PER_SAMPLE,
            {
                "aiperf": {"train": built.train_ops, "eval": built.eval_ops},
                "tensor": {"train": built.tensor_train_ops, "eval": built.tensor_eval_ops},
            },
            at=now,
            trial_key=built.trial_key,
        )

    def epoch(self, report: EpochReport) -> None:
        which: dict[str, Any] = {"trial_key": report.trial_key, "epoch_num": report.epoch}
        started_at, ended_at = report.started_at, report.ended_at
        self.emit(
            keys.EPOCH_START,
            event_type=keys.INTERVAL_START,
            at=started_at,
            **which,
            time_s=started_at,
        )
        self.emit(keys.TRAIN_SAMPLES, report.samples_trained, at=ended_at, **which)
        self.emit(keys.EVAL_SAMPLES, report.samples_evaluated, at=ended_at, **which)
        self.emit(keys.EVAL_ACCURACY, report.val_accuracy, at=ended_at, **which)
        self.emit(
            keys.EPOCH_STOP,
            event_type=keys.INTERVAL_END,
            at=ended_at,
            **which,
            time_s=ended_at,
            complete=bool(report.complete),
            loss=report.loss,
            accuracy=report.accuracy,
            val_loss=report.val_loss,
        )

    def trial_stopped(self, end: TrialEnd) -> None:
        self.emit(
            keys.TRIAL_STOP,
            str(end.status),
            event_type=keys.INTERVAL_END,
            at=end.ended_at,
            time_s=end.ended_at,
            trial_key=end.trial_key,
            message=end.message,
        )

    def trial_phases(self, trial_key: str, phases: TrialPhases) -> None:
        self.emit(
            keys.TRIAL_PHASES,
            {f.name: getattr(phases, f.name) for f in fields(phases)},
            trial_key=trial_key,
        )

    # --- the result -------------------------------------------------------------------------------

    def score(self, score: ScoreResult, ruleset: str | None) -> None:
        self.emit(keys.SCORE, score.to_dict(), ruleset=ruleset)

    def best_weights(self, kept: Mapping[str, Any] | None) -> None:
        """The best trial's weights file kept with the run (aiperf.results.remeasure), with its
        sha256: what `verify --package` evaluates again from the package's copy."""
        self.emit(keys.BEST_WEIGHTS, None if kept is None else dict(kept))

    def verification(self, checks: Iterable[CheckRecord]) -> None:
        checks = list(checks)
        self.emit(
            keys.VERIFICATION,
            all(c.passed for c in checks),
            checks=[{"check": c.check, "passed": c.passed, "detail": c.detail} for c in checks],
        )
