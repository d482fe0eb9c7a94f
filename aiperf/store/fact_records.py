"""The facts of a run and its trials as they arise: one typed record each, made once where the
fact arises and passed whole to whoever keeps it.

A run's start is made by the run's first step (aiperf.lifecycle.run.record_run); a trial's start
by the orchestrator's admission; its build and its epochs by the worker that trains it (they
travel back as Dask events and again in the trial's result); its end by the orchestrator. Each
record then goes, unchanged, through the recorder (aiperf.lifecycle.recorder), the write batch or
the Store (aiperf.store), and the event log writer (aiperf.results.mllog), each of which reads
the fields it keeps from it. A new field is one edit here, plus its migration where the database
keeps it, instead of one per layer that nothing checked against the others.

The records are plain, frozen and picklable, and know nothing of the database.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from aiperf.status import TrialStatus

if TYPE_CHECKING:
    from aiperf.config import BenchmarkConfig


@dataclass(frozen=True)
class RunStart:
    """A new run: its effective config (and the fields of it the runs table keeps as columns), the
    rules it is judged by, and the series of repeated runs it is run `series_index` (1..N) of."""

    profile: str
    config: dict[str, Any]
    seed: int
    budget_s: float
    workers: int
    ruleset: str | None = None
    division: str | None = None
    deviations: tuple[str, ...] = ()
    config_hash: str | None = None
    precision: str | None = None  # how its trials train (the config's train section)
    backend: str | None = None
    jit_compile: bool | None = None
    flow_run_id: str | None = None  # the Prefect flow run that runs it
    series: str | None = None
    series_index: int | None = None

    def __post_init__(self) -> None:
        if (self.series is None) != (self.series_index is None) or (
            self.series_index is not None and self.series_index < 1
        ):
            raise ValueError(
                "a run in a series needs its id and an index from 1; "
                f"got {self.series!r}, {self.series_index!r}"
            )

    @classmethod
    def of(cls, config: BenchmarkConfig, **judged: Any) -> RunStart:
        """The start of a run of `config`; `judged`: the other fields (ruleset, division, ...)."""
        return cls(
            profile=config.profile,
            config=config.model_dump(mode="json"),
            seed=config.seed,
            budget_s=config.budget_s,
            workers=config.workers,
            precision=config.train.precision,
            backend=config.train.backend,
            jit_compile=config.train.jit_compile,
            **judged,
        )


@dataclass(frozen=True)
class TrialStart:
    """A trial the search proposed, about to be sent to a worker. `epochs` and `seed` are the
    log's (the trial's request carries them); the trials table keeps the rest."""

    trial_key: str
    number: int
    started_at: float
    parent_trial_id: int | None
    operator: str | None
    architecture: dict[str, Any]
    hyperparameters: dict[str, Any]
    epochs: int
    seed: int


@dataclass(frozen=True)
class TrialBuilt:
    """The worker built the trial's model: where it runs, its counted operations per sample, and
    the parent's epoch whose kept weights it grew from."""

    KIND: ClassVar[str] = "built"  # the Dask event's kind (aiperf.train.messages)

    trial_key: str
    worker: str
    parameters: int
    train_ops: int
    eval_ops: int
    tensor_train_ops: int
    tensor_eval_ops: int
    devices: int = 1  # what the trial trains across, as its framework names them (`placement`)
    placement: tuple[str, ...] = ()
    # The parent's epoch whose kept weights the model started from, grown (search.inherit); None:
    # fresh weights (a seed, or a child whose parent's weights this worker could not read).
    inherited_epoch: int | None = None


@dataclass(frozen=True)
class EpochReport:
    """One epoch of a trial, as its worker measured it (Unix times; the epochs table's columns
    besides the trial's id)."""

    KIND: ClassVar[str] = "epoch"

    trial_key: str
    epoch: int
    started_at: float
    ended_at: float
    samples_trained: int
    samples_evaluated: int
    loss: float | None
    accuracy: float | None
    val_loss: float | None
    val_accuracy: float | None
    complete: bool

    def fields(self) -> dict[str, Any]:
        """The columns of an epochs row, the trial's key aside."""
        data = asdict(self)
        del data["trial_key"]
        return data


@dataclass(frozen=True)
class TrialEnd:
    """A trial ended: how, when, and why (None: nothing to say)."""

    trial_key: str
    status: TrialStatus
    ended_at: float
    message: str | None = None


# The trials table's columns a start fills as they are (epochs and seed are the log's).
TRIAL_START_COLUMNS = tuple(f.name for f in fields(TrialStart) if f.name not in ("epochs", "seed"))
