"""The state a run's events leave, applied in order (aiperf.results.mllog.rebuild reads them): each
event kind's step checks its values (aiperf.results.mllog.values) and keeps what the records need."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiperf.results.mllog import keys, values
from aiperf.status import RunStatus, TrialStatus
from aiperf.store.records import (
    CheckRecord,
    DatasetRecord,
    ScoreResult,
    TrialPhases,
)


class RunState:
    """What the events told so far, applied in order; the latest event of a kind wins (a resumed run
    repeats some). aiperf.results.mllog.assemble makes the records of it."""

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

    def apply(self, e: keys.Event) -> None:
        """One event into the state: a fact kept as it came, an epoch's part, or the kind's own step."""
        if e.key in _FACT_KEYS:
            self.facts[e.key] = (e.value, e.metadata)
        elif e.key in _EPOCH_KEYS:
            self._epoch(e)
        elif e.key in _STEPS:
            _STEPS[e.key](self, e)

    def _run_start(self, e: keys.Event) -> None:
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

    def _run_stop(self, e: keys.Event) -> None:
        """The run's end as logged: its status and message (a resumed run's later start reopens it)."""
        self.status, self.message = RunStatus(e.value), e.metadata.get("message")

    def _run_resources(self, e: keys.Event) -> None:
        """Emitted as each is recorded, some fields at a time: merged in order, later wins per field."""
        if not isinstance(e.value, dict):
            raise ValueError("run_resources is not an object")
        merged, _ = self.facts.get(keys.RUN_RESOURCES, ({}, {}))
        self.facts[e.key] = ({**merged, **e.value}, e.metadata)

    def _dataset(self, e: keys.Event) -> None:
        """The dataset's record, from the manifest the run staged."""
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

    def _staging_stop(self, e: keys.Event) -> None:
        """The wall seconds staging took, before the timed window."""
        self.staging_s = values.number(e.metadata["staging_s"], "staging_s")

    def _search_start(self, e: keys.Event) -> None:
        """A segment of the timed window opens (a resumed run opens another)."""
        md = e.metadata
        self.segments.append(
            {
                "started": values.utc(md["time_s"]),
                "deadline": values.utc(md["deadline_s"]),
                "ended": None,
            }
        )

    def _search_stop(self, e: keys.Event) -> None:
        """A segment ends: the one it names, else the open one."""
        self._segment(e.metadata.get("segment"))["ended"] = values.utc(e.metadata["time_s"])

    def _trial_start(self, e: keys.Event) -> None:
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

    def _trial_placement(self, e: keys.Event) -> None:
        """Where the trial ran (worker, devices), its size, and the epoch it inherited weights from."""
        md = e.metadata
        trial = self._trial(md)
        trial["worker"], trial["parameters"] = str(e.value), md.get("parameters")
        trial["devices"] = md.get("devices")
        trial["placement"] = tuple(str(d) for d in md.get("placement") or ())
        trial["inherited_epoch"] = md.get("inherited_epoch")

    def _ops_per_sample(self, e: keys.Event) -> None:
        """The trial's operations per sample, train and eval, in both conventions (aiperf, tensor)."""
        self._trial(e.metadata)["ops"] = tuple(
            values.whole(e.value[convention][phase], f"{convention} {phase} ops per sample")
            for convention in ("aiperf", "tensor")
            for phase in ("train", "eval")
        )

    def _trial_stop(self, e: keys.Event) -> None:
        """The trial's end: its status, time and message."""
        md = e.metadata
        self._trial(md).update(
            status=TrialStatus(e.value),
            ended_at=values.utc(md["time_s"]),
            message=md.get("message"),
        )

    def _trial_phases(self, e: keys.Event) -> None:
        """Where the trial's seconds went on its worker."""
        self._trial(e.metadata)["phases"] = TrialPhases(
            **{k: float(values.number(v, k) or 0.0) for k, v in e.value.items()}
        )

    def _set_score(self, e: keys.Event) -> None:
        """The score; the latest stands (a failed verification logs it again, invalid)."""
        self.score = values.checked_score(e.value)

    def _set_best_weights(self, e: keys.Event) -> None:
        """The kept weights of the best trial, which verify evaluates again."""
        self.best_weights = values.checked_best_weights(e.value)

    def _verification(self, e: keys.Event) -> None:
        """The checks the run verified itself with."""
        self.checks = tuple(
            CheckRecord(str(c["check"]), bool(c["passed"]), str(c["detail"]))
            for c in e.metadata["checks"]
        )

    def _segment(self, segment: Any) -> dict[str, Any]:
        """The window segment a search_stop ends: the one it names, else the open one, else the latest."""
        if not self.segments:
            raise ValueError("search_stop before any search_start")
        if segment is None:
            return next(
                (s for s in reversed(self.segments) if s["ended"] is None), self.segments[-1]
            )
        return self.segments[values.whole(segment, "segment")]

    def _trial(self, md: Mapping[str, Any]) -> dict[str, Any]:
        """The started trial an event names; one never started is an error."""
        key = str(md["trial_key"])
        if key not in self.trials:
            raise ValueError(f"trial {key} has no trial_start before it")
        return self.trials[key]

    def _epoch(self, e: keys.Event) -> None:
        """One part of an epoch (start, samples, accuracy, stop) into that epoch's state."""
        key, number = (
            str(e.metadata["trial_key"]),
            values.whole(e.metadata["epoch_num"], "epoch_num"),
        )
        self._trial(e.metadata)
        epoch = self.epochs.setdefault((key, number), {})
        md = e.metadata
        if e.key == keys.EPOCH_START:
            epoch["started_at"] = values.utc(md["time_s"])
        elif e.key == keys.TRAIN_SAMPLES:
            epoch["samples_trained"] = values.whole(e.value, "train_samples")
        elif e.key == keys.EVAL_SAMPLES:
            epoch["samples_evaluated"] = values.whole(e.value, "eval_samples")
        elif e.key == keys.EVAL_ACCURACY:
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


# Kept as they came (value, metadata), the latest of each standing.
_FACT_KEYS = frozenset(
    (
        keys.SUBMISSION_DIVISION,
        keys.RULESET,
        keys.SERIES,
        keys.SEED,
        keys.CONFIG,
        keys.SYSTEM_FINGERPRINT,
        keys.SYSTEM_DESCRIPTION,
        keys.PROVENANCE,
    )
)
_EPOCH_KEYS = frozenset(
    (keys.EPOCH_START, keys.TRAIN_SAMPLES, keys.EVAL_SAMPLES, keys.EVAL_ACCURACY, keys.EPOCH_STOP)
)
# Every other kind the rebuild reads, and its step; a kind not named here is not a record's.
_STEPS: dict[str, Callable[[RunState, keys.Event], None]] = {
    keys.RUN_START: RunState._run_start,
    keys.RUN_STOP: RunState._run_stop,
    keys.RUN_RESOURCES: RunState._run_resources,
    keys.DATASET: RunState._dataset,
    keys.STAGING_STOP: RunState._staging_stop,
    keys.SEARCH_START: RunState._search_start,
    keys.SEARCH_STOP: RunState._search_stop,
    keys.TRIAL_START: RunState._trial_start,
    keys.TRIAL_PLACEMENT: RunState._trial_placement,
    keys.OPS_PER_SAMPLE: RunState._ops_per_sample,
    keys.TRIAL_STOP: RunState._trial_stop,
    keys.TRIAL_PHASES: RunState._trial_phases,
    keys.SCORE: RunState._set_score,
    keys.BEST_WEIGHTS: RunState._set_best_weights,
    keys.VERIFICATION: RunState._verification,
}
