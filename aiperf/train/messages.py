"""What a trial's worker and the orchestrator say to each other: plain, picklable data.

The worker sends `TrialBuilt` once it has built the model and `EpochReport` after every epoch,
as Dask events, the moment they happen; the same facts come back again in `TrialResult`, so an
event lost in transit is recovered when the trial ends (the store ignores repeats). Both are the
trial's typed facts (aiperf.store.fact_records), which the orchestrator records whole.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from aiperf.rules import FitRule
from aiperf.status import TrialStatus
from aiperf.store.fact_records import EpochReport, TrialBuilt
from aiperf.train.fit import StepRecipe

__all__ = ["EpochReport", "TrialBuilt", "TrialRequest", "TrialResult", "from_event", "to_event"]


@dataclass(frozen=True)
class TrialRequest:
    run_id: int
    trial_key: str
    architecture: dict[str, Any]
    learning_rate: float
    batch_size: int
    epochs: int
    deadline: float  # Unix time at which the trial stops, whatever it is doing
    data_path: str
    seed: int
    optimizer: str = "sgd"
    momentum: float = 0.9
    dropout: float = 0.0  # rate of the Dropout layer before the head (0: none)
    early_stopping_patience: int | None = None  # epochs without a better val loss before stopping
    events_topic: str | None = None  # Dask event topic for live reports; None: report nothing live
    precision: str = "float32"  # Keras dtype policy the model is built under (train.precision)
    jit_compile: bool = (
        False  # model.compile(jit_compile=...): XLA, or jax.jit (train.jit_compile)
    )
    # The training recipe (aiperf.train.recipe; the train section's settings of the same names).
    # The schedule spans this trial's `epochs`, whatever its round.
    lr_schedule: str = "constant"
    warmup_epochs: float = 0.0
    weight_decay: float = 0.0  # an L2 term on every kernel's gradient (adamw: decoupled)
    label_smoothing: float = 0.0
    # Devices the trial trains across, data-parallel (aiperf.train.devices): batch_size is each
    # device's, so a step trains batch_size * devices samples.
    devices: int = 1
    # Where the trial writes the weights of its best complete epoch when it ends (the run's
    # folder, aiperf.paths.weights_path), for verify to evaluate again; None: keep none.
    weights_path: str | None = None
    feed: str = "auto"  # data.feed: what decodes the staged shards (aiperf.data.feed.choose_feed)
    attention: str = "auto"  # train.attention: an LM's attention kernel (aiperf.train.attention)
    # The fraction of a device's memory its step must leave free (the ruleset's fit rule): a trial
    # on JAX accelerators whose compiled step needs more ends too_large, untrained (aiperf.train.fit).
    fit_headroom: float = FitRule().headroom
    # A grown LM child that continues its parent (search.inherit): the parent's architecture and
    # where the parent keeps its best epoch's weights (its weights_path). The child starts from
    # them, grown (aiperf.train.kept.inherited_lm); None: from fresh weights.
    parent_architecture: dict[str, Any] | None = None
    parent_weights: str | None = None
    # The rest of the recipe (train.beta_2, train.clip_norm): Adam's and AdamW's second-moment
    # decay, and the global norm a step's gradients are clipped to (None: never).
    beta_2: float = 0.999
    clip_norm: float | None = None
    lr_floor: float = 0.0  # train.lr_floor: where a cosine schedule ends, a fraction of the rate

    def step_recipe(self, language: bool = False) -> StepRecipe:
        """What the trial's step is compiled with besides its network (aiperf.train.fit)."""
        return StepRecipe.of_train(self, language)

    @property
    def global_batch(self) -> int:
        """Samples one training step takes, across all of the trial's devices."""
        return self.batch_size * self.devices


@dataclass(frozen=True)
class TrialResult:
    trial_key: str
    status: TrialStatus
    built: TrialBuilt | None
    epochs: list[EpochReport] = field(default_factory=list)
    message: str | None = None
    # Where the trial's seconds went on its worker, {"build_s": ..., "report_s": ...} (the trials
    # table's columns, aiperf.train.phases); None from a trainer that measured none.
    phases: dict[str, float] | None = None


def to_event(message: TrialBuilt | EpochReport) -> dict[str, Any]:
    """The message as a Dask event: its fields and its kind, which `from_event` reads back."""
    return {**asdict(message), "kind": message.KIND}


def from_event(data: dict[str, Any]) -> TrialBuilt | EpochReport:
    """Rebuild a message from a Dask event (Dask adds keys of its own, such as 'worker')."""
    # Keyed by object: the event's "kind" may be missing (None) or anything a sender put there.
    kinds: dict[object, type[TrialBuilt] | type[EpochReport]] = {
        TrialBuilt.KIND: TrialBuilt,
        EpochReport.KIND: EpochReport,
    }
    cls = kinds.get(data.get("kind"))
    if cls is None:
        raise ValueError(f"unknown trial event {data.get('kind')!r}")
    names = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in names}
    if "placement" in values:  # a list once it has travelled
        values["placement"] = tuple(values["placement"])
    return cls(**values)
