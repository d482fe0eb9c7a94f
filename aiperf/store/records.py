"""What the Store hands out: plain, frozen records, built inside a session and detached from it.

Reports, history, the regression check and resume read these, never SQLAlchemy objects, so no
caller can trigger a lazy load after the session closed or write to the database by accident,
and the records pickle and compare like any value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from aiperf.errors import UserError
from aiperf.status import RunStatus, TrialStatus


@dataclass(frozen=True)
class EpochWork:
    """The operations one epoch performed: its samples times its trial's per-sample counts."""

    samples_trained: int
    samples_evaluated: int
    train_ops_per_sample: int
    eval_ops_per_sample: int
    tensor_train_ops_per_sample: int
    tensor_eval_ops_per_sample: int
    # Which trial, and the seconds the epoch took: the run's interval weighs each trial's rate
    # (aiperf.results.uncertainty).
    trial: int = 0
    seconds: float = 0.0

    @property
    def ops(self) -> int:
        return (
            self.samples_trained * self.train_ops_per_sample
            + self.samples_evaluated * self.eval_ops_per_sample
        )

    @property
    def tensor_ops(self) -> int:
        return (
            self.samples_trained * self.tensor_train_ops_per_sample
            + self.samples_evaluated * self.tensor_eval_ops_per_sample
        )


@dataclass(frozen=True)
class ScoreResult:
    elapsed_s: float
    total_ops: int
    ops: float
    tensor_ops: float
    best_val_accuracy: float | None
    val_samples: int
    regulated_score: float
    trials_completed: int
    samples_trained: int
    samples_evaluated: int
    valid: bool
    reasons: list[str] = field(default_factory=list)
    mfu: float | None = None  # model FLOPs utilisation: tensor_ops / the workers' summed peak
    utilisation: float | None = (
        None  # seconds in train and eval steps / (workers x window seconds)
    )
    # The LM track's quality: the best complete epoch's validation loss, nats per token (None on
    # the CNN track, judged by best_val_accuracy; aiperf.quality).
    best_val_loss: float | None = None
    # 95% intervals of OPS and of the regulated score from what the run measured (None: fewer than
    # two trials measured; aiperf.results.uncertainty).
    ops_low: float | None = None
    ops_high: float | None = None
    regulated_low: float | None = None
    regulated_high: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class RecordNotFound(LookupError):
    """A run or trial that is not in the database. The CLI prints it as one line."""


class RunTakenOver(UserError):
    """The run's process no longer owns the run: `aiperf recover` or `aiperf run --resume` took it
    over (its heartbeat had stopped for longer than the timeout, on the database's clock). The
    process stops without writing another record (aiperf.lifecycle.liveness)."""


@dataclass(frozen=True)
class SystemRecord:
    """The machine under test (table systems)."""

    id: int
    fingerprint: str
    hostname: str
    cpu_model: str
    cpu_cores: int
    memory_bytes: int
    gpus: dict[str, Any]
    platform: str
    python_version: str
    tensorflow_version: str | None
    keras_version: str
    keras_backend: str
    first_seen_at: datetime


@dataclass(frozen=True)
class DatasetRecord:
    """A staged dataset (table datasets): what trials could at most train and evaluate per epoch."""

    name: str
    kind: str
    sha256: str
    train_samples: int
    val_samples: int
    classes: int
    # The whole manifest as staged (classes per split, the overlap check): verify's data checks
    # (aiperf.results.data_checks) read it.
    manifest: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckRecord:
    """One check of a run's verification: its name, whether it passed, and what it found."""

    check: str
    passed: bool
    detail: str

    @classmethod
    def of(cls, check: str, problems: list[str], passed_detail: str) -> CheckRecord:
        """Passed with `passed_detail` when nothing is wrong; else failed, naming the first five
        problems and how many more there are."""
        if not problems:
            return cls(check, True, passed_detail)
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        return cls(check, False, "; ".join(problems[:5]) + more)


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of one trial (table epochs)."""

    epoch: int
    started_at: datetime
    ended_at: datetime
    samples_trained: int
    samples_evaluated: int
    loss: float | None
    accuracy: float | None
    val_loss: float | None
    val_accuracy: float | None
    complete: bool


TRIAL_PHASE_COLUMNS = ("build_s", "count_s", "compile_s", "train_s", "evaluate_s", "report_s")


@dataclass(frozen=True)
class TrialPhases:
    """Where one trial's seconds went on its worker (the trials table's *_s columns)."""

    build_s: float = 0.0  # data feed and model built
    count_s: float = 0.0  # operations counted
    compile_s: float = 0.0  # compile, and tracing of the first steps
    train_s: float = 0.0  # in training steps
    evaluate_s: float = 0.0  # in evaluation steps
    report_s: float = 0.0  # sending reports back

    @classmethod
    def from_seconds(cls, seconds: dict[str, float]) -> TrialPhases:
        """From a worker's report ({"build_s": ..., "report_s": ...}); a missing phase is 0 s. An
        unknown phase, or seconds that are negative or not finite, is a ValueError naming it."""
        unknown = set(seconds) - set(TRIAL_PHASE_COLUMNS)
        if unknown:
            raise ValueError(
                f"unknown trial phases {sorted(unknown)}; known: {list(TRIAL_PHASE_COLUMNS)}"
            )
        try:
            values = {name: float(value) for name, value in seconds.items()}
        except (TypeError, ValueError):
            raise ValueError(f"trial phases must be numbers of seconds; got {seconds}") from None
        bad = {name: value for name, value in values.items() if not 0.0 <= value < float("inf")}
        if bad:
            raise ValueError(f"trial phases must be finite, non-negative seconds; got {bad}")
        return cls(**values)

    @property
    def stepping_s(self) -> float:
        """The seconds that did the machine's AI work: training and evaluation steps."""
        return self.train_s + self.evaluate_s

    @property
    def total_s(self) -> float:
        return (
            self.build_s
            + self.count_s
            + self.compile_s
            + self.train_s
            + self.evaluate_s
            + self.report_s
        )


@dataclass(frozen=True)
class TrialRecord:
    """One trial (table trials) with its epochs in order."""

    id: int
    run_id: int
    trial_key: str
    number: int
    parent_trial_id: int | None
    operator: str | None
    architecture: dict[str, Any]
    hyperparameters: dict[str, Any]
    status: TrialStatus
    worker: str | None
    started_at: datetime
    ended_at: datetime | None
    parameters: int | None
    train_ops_per_sample: int | None
    eval_ops_per_sample: int | None
    tensor_train_ops_per_sample: int | None
    tensor_eval_ops_per_sample: int | None
    best_val_accuracy: float | None
    message: str | None
    epochs: tuple[EpochRecord, ...] = ()
    phases: TrialPhases | None = (
        None  # where its seconds went; None for trials recorded before 0007
    )
    devices: int | None = None  # what it trained across, data-parallel (None: before 0008, one)
    placement: tuple[str, ...] = ()  # those devices, as its framework names them
    best_val_loss: float | None = (
        None  # the LM track's quality (nats/token); None on the CNN track
    )
    inherited_epoch: int | None = None  # the parent's epoch it grew from; None: fresh weights


@dataclass(frozen=True)
class WindowRecord:
    """One segment of a run's timed window (table search_windows): a resumed run has one per start."""

    segment: int
    started_at: datetime
    deadline: datetime
    ended_at: datetime | None  # None while the segment runs (or after a crash, until recovered)

    @property
    def length_s(self) -> float | None:
        return None if self.ended_at is None else (self.ended_at - self.started_at).total_seconds()


def window_seconds(windows: tuple[WindowRecord, ...] | list[WindowRecord]) -> float:
    """The seconds a score divides by: the sum of the segments' lengths (the gaps between segments,
    a crash and its restart, are not counted). The one definition the score and `verify` share."""
    if not windows or any(w.ended_at is None for w in windows):
        raise ValueError("the run has no finished search window to score")
    return sum(w.length_s for w in windows)  # type: ignore[misc]


def window_gaps(windows: tuple[WindowRecord, ...] | list[WindowRecord]) -> list[float]:
    """Seconds between one segment's end and the next one's start: shown, never counted."""
    ordered = sorted(windows, key=lambda w: w.segment)
    return [
        (b.started_at - a.ended_at).total_seconds()
        for a, b in zip(ordered, ordered[1:], strict=False)
        if a.ended_at is not None
    ]


@dataclass(frozen=True)
class RunRecord:
    """One run (table runs) with its system, its score if scored (the row of table scores, as the
    same ScoreResult the score arithmetic returns), and, when asked for, its trials."""

    id: int
    system: SystemRecord
    profile: str
    config: dict[str, Any]
    seed: int
    budget_s: float
    workers: int
    status: RunStatus
    created_at: datetime
    search_started_at: datetime | None
    deadline: datetime | None
    search_ended_at: datetime | None
    flow_run_id: str | None
    message: str | None
    ruleset: str | None  # id-version of the rules it is judged by
    division: str | None  # closed or open
    deviations: tuple[str, ...]  # how an open run differs from its packaged profile
    config_hash: str | None  # the workload's identity: runs are compared only with equal hashes
    score: ScoreResult | None
    verification: tuple[CheckRecord, ...] | None  # None until verified
    trials: tuple[TrialRecord, ...] = ()
    heartbeat_at: datetime | None = None  # the process's last sign of life
    owner: str | None = None  # the token of the process that writes the run (None before 0009)
    windows: tuple[WindowRecord, ...] = ()  # the timed window's segments, in order
    stored_status: RunStatus | None = (
        None  # what the row says; `status` is LOST when it says running in vain
    )
    precision: str | None = None  # float32, mixed_bfloat16 or mixed_float16
    backend: str | None = None  # the Keras backend the workers ran
    jit_compile: bool | None = None  # trials compiled with XLA
    peak_flops: float | None = None  # sum of the workers' measured peaks, FLOP/s: MFU's divisor
    worker_peaks: tuple[dict[str, Any], ...] = ()  # each worker's measured peak
    data_feed: str | None = None  # the input pipeline that fed the trials: tf.data (or dali)
    # Each worker's feed rate against its devices' rate (aiperf.train.feedrate), before the window.
    feed_rates: tuple[dict[str, Any], ...] = ()
    # Each worker's bare Keras rate in a clean process (aiperf.train.bare_reference), before the
    # window, or {"worker", "skipped": why}; () when not recorded.
    reference_rates: tuple[dict[str, Any], ...] = ()
    # Per window segment, each metered node's energy (aiperf.lifecycle.metering); () if none.
    energy_windows: tuple[dict[str, Any], ...] = ()
    system_description: dict[str, Any] | None = None  # the compute nodes, MLPerf-style
    staging_s: float | None = None  # the data's staging, before the window (None: not recorded)
    # The best trial's kept weights: {"trial", "epoch", "file" (relative to the run's folder),
    # "sha256", "val_accuracy"}; verify evaluates them again (aiperf.results.remeasure).
    best_weights: dict[str, Any] | None = None
    # What ran: {"prologue", "scheduler", "submit_files", "workers": {worker: {"env", "files"}}}
    # (aiperf.system.provenance; None: recorded before it existed, or the workers never answered).
    provenance: dict[str, Any] | None = None
    # The series of repeated runs it belongs to (aiperf run --repeat): its id, a uuid4 hex shared by
    # the series' runs, and its place in it, 1..N. None: a run of its own (or recorded before 0010).
    series: str | None = None
    series_index: int | None = None

    @property
    def verified(self) -> bool | None:
        return None if self.verification is None else all(c.passed for c in self.verification)

    @property
    def system_id(self) -> int:
        return self.system.id


@dataclass(frozen=True)
class RunScoreRow:
    """A row of the run_scores view: one scored run with its change from the previous run of the
    same system and profile. The figures users get from `SELECT * FROM run_scores`."""

    run_id: int
    system_id: int
    fingerprint: str
    hostname: str
    profile: str
    division: str | None
    config_hash: str | None
    ruleset: str | None
    workers: int
    budget_s: float
    seed: int
    status: RunStatus
    created_at: datetime
    elapsed_s: float
    total_ops: float
    ops: float
    tensor_ops: float
    regulated_score: float
    best_val_accuracy: float | None
    trials_completed: int
    valid: bool
    verified: bool | None
    precision: str | None
    backend: str | None
    mfu: float | None
    utilisation: float | None
    previous_ops: float | None
    previous_regulated_score: float | None
    ops_change_pct: float | None
    best_val_loss: float | None = None  # the LM track's quality, nats/token (None on the CNN's)


@dataclass(frozen=True)
class TrialSummaryRow:
    """A row of the trial_summary view: one trial's totals over its epochs."""

    run_id: int
    trial_id: int
    trial_key: str
    number: int
    status: TrialStatus
    worker: str | None
    started_at: datetime
    ended_at: datetime | None
    duration_s: float | None
    parameters: int | None
    train_ops_per_sample: int | None
    eval_ops_per_sample: int | None
    best_val_accuracy: float | None
    epochs: int
    complete_epochs: int
    samples_trained: int
    samples_evaluated: int
    total_ops: float
