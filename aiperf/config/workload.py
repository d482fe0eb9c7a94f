"""The sections of a config that describe the workload: its data, its search (space and limits),
how each trial trains, and the validity rules its result is judged by. A profile sets them; the
machine a run lands on changes none of them (aiperf.config.machine holds the sections that do
describe the machine).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError  # a message without "Value error,"

from aiperf.config.values import _Strict
from aiperf.rules import AUTO_PRECISION

DIGITS_IMAGES = 1797  # scikit-learn's digits: 8x8 grey images of 10 handwritten digits
MAX_SEQ_LEN = 1 << 16  # tokens per sequence: far beyond what any profile's models attend over


class DataConfig(_Strict):
    """The data a run trains on (see aiperf/data/). Kinds: `synthetic` (generated from the seed),
    `folder` (ROOT/train/<class>/* and ROOT/val/<class>/*, JPEG or PNG, converted to TFRecord
    shards), `tfrecord` (shards in the usual ImageNet format), `digits` (scikit-learn's
    digits, real images that ship with the package) and `generated-imagenet` (JPEG-encoded
    TFRecord shards in ImageNet's format generated from the seed, read as real ImageNet shards
    are: an accelerator's input pipeline at work without ImageNet). Two kinds are token streams
    for language models (bytes, vocabulary 256, uint16 shards): `synthetic-text` (a language
    generated from the seed, aiperf/data/text_synthetic.py), `text` (a folder of UTF-8 files,
    split into train and validation at file level by the seed, aiperf/data/text_folder.py) and
    `enwik8` (the user's enwik8.zip or enwik8, split 90/5/5 by bytes as every published result
    splits it, aiperf/data/enwik8.py)."""

    kind: Literal[
        "synthetic",
        "folder",
        "tfrecord",
        "digits",
        "generated-imagenet",
        "synthetic-text",
        "text",
        "enwik8",
    ] = "synthetic"
    source: str | None = None  # folder, tfrecord, text or enwik8: where the user's data is
    stage_to: str | None = None  # node-local folder: one copy of the shards on every node
    image_size: int = Field(32, ge=8, le=512)  # what models see; the input pipeline crops to it
    channels: int = Field(3, ge=1, le=4)
    classes: int = Field(10, ge=2)  # generated: classes made; tfrecord: labels must be in range
    train_samples: int = Field(3000, ge=16)  # generated (synthetic, generated-imagenet), digits
    val_samples: int = Field(1000, ge=8)  # generated (synthetic, generated-imagenet), digits
    noise: float = Field(0.6, ge=0.0)  # generated: pixel noise relative to the class pattern
    clutter: float = Field(
        0.0, ge=0.0
    )  # synthetic: a random smooth pattern per image, unrelated to its class
    label_noise: float = Field(0.05, ge=0.0, lt=1.0)  # generated: share of labels flipped
    shard_images: int = Field(1024, ge=1)  # folder, generated-imagenet: images per TFRecord shard
    label_offset: int = Field(1, ge=0)  # tfrecord: label of the first class (1 in ImageNet shards)
    # What decodes the staged shards on each worker (aiperf.data.feed.choose_feed): "tf.data" on
    # the host's cores, "dali" (NVIDIA DALI, on the GPUs), or "auto": DALI where it is installed
    # and the trials train on GPUs, tf.data elsewhere. The choice made is recorded (runs.data_feed).
    feed: Literal["auto", "tf.data", "dali"] = "auto"
    # Token kinds (TOKEN_KINDS). A model reads seq_len tokens and predicts each one's next: the
    # windows step by seq_len, so a pass over T tokens holds (T - 1) // seq_len sequences.
    seq_len: int = Field(128, ge=2, le=MAX_SEQ_LEN)
    train_tokens: int = Field(2_000_000, ge=64)  # synthetic-text: tokens generated for training
    val_tokens: int = Field(200_000, ge=64)  # synthetic-text: tokens generated for validation
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)  # text: share of the bytes held out (files)

    @model_validator(mode="after")
    def _source_fits_kind(self) -> DataConfig:
        if self.kind in FILE_COUNTED and not self.source:
            what = {
                "folder": "an image folder ROOT with train/ and val/",
                "tfrecord": "a folder of TFRecord shards",
                "text": "a folder of UTF-8 text files",
                "enwik8": "enwik8.zip (or the unzipped enwik8)",
            }[self.kind]
            raise PydanticCustomError(
                "data", f"data.kind {self.kind} needs data.source: the path of {what}"
            )
        if self.kind in ("synthetic", "digits", "generated-imagenet", "synthetic-text") and (
            self.source
        ):
            raise PydanticCustomError(
                "data",
                f"data.source is only for kinds folder and tfrecord (images), text and enwik8, "
                f"not {self.kind}; remove it",
            )
        if self.kind == "synthetic-text":
            for name in ("train_tokens", "val_tokens"):
                if getattr(self, name) < self.seq_len + 1:
                    raise PydanticCustomError(
                        "data",
                        f"data.{name} {getattr(self, name)} holds no sequence of data.seq_len "
                        f"{self.seq_len} (+1, the last target): give at least {self.seq_len + 1}",
                    )
        if self.kind == "generated-imagenet" and self.channels not in (1, 3):
            raise PydanticCustomError(
                "data",
                f"data.channels {self.channels} cannot be a JPEG's; generated-imagenet makes "
                "JPEGs of 3 channels (or 1, grey): set data.channels=3",
            )
        if self.kind == "digits" and self.train_samples + self.val_samples > DIGITS_IMAGES:
            raise PydanticCustomError(
                "data",
                f"data.train_samples + data.val_samples must be at most "
                f"{DIGITS_IMAGES} for digits (e.g. 1437 and 360)",
            )
        return self

    def train_count(self) -> tuple[int, str]:
        """The training samples these settings give, and the settings they come from (for the
        batch check): generated text's samples are its sequences (aiperf/data/tokens.py)."""
        if self.kind == "synthetic-text":
            return (self.train_tokens - 1) // self.seq_len, "data.train_tokens' sequences"
        return self.train_samples, "data.train_samples"


def windows_in(tokens: int, seq_len: int) -> int:
    """Windows of seq_len tokens a batch of `tokens` holds (at least one): the one conversion of
    the LM track's batch in tokens to the sequences a trial steps on."""
    return max(1, tokens // seq_len)


class SpaceConfig(_Strict):
    """The searched hyperparameters; each one changes the built model or its training.

    The morphism oracle searches learning rate, batch size, kernel size (of the convolutions a
    deepen adds) and dropout (before the head) alongside the architecture; keras-tuner's own
    oracles search the ResNet family (stages, blocks per stage, base filters, kernel size) too.
    """

    blocks_per_stage: list[int] = [1, 2]
    stages: list[int] = [2, 3]
    base_filters: list[int] = [8, 16, 24]
    kernel_size: list[int] = [3, 5]
    learning_rate: tuple[float, float] = (0.001, 0.05)
    batch_size: list[int] = [32, 64, 128]
    dropout: list[float] = [0.0, 0.2, 0.4]
    # AIPerf's per-device batch from the device's memory: on a run whose workers train on GPUs,
    # batch_size becomes these times the smallest GPU's memory in whole GiB, resolved once before
    # the first trial (aiperf.train.auto) and stored with the run; on CPUs batch_size stays as
    # listed. None: batch_size as listed everywhere.
    batch_per_gib: list[int] | None = None
    # The largest per-device batch batch_per_gib may resolve to (None: no cap). The GiB the batch
    # is sized by is capped at batch_cap // max(batch_per_gib), so the resolved sizes stay the
    # multipliers times one whole GiB count (aiperf.train.auto.capped_gib; docs/rules.md says why).
    batch_cap: int | None = Field(None, ge=1)
    # The LM track's (a transformer seed; aiperf.search.growth): the batch as tokens a device
    # steps on (a trial's batch_size is these // data.seq_len sequences), and the warm-up and
    # weight decay searched per trial. None: batch_size as listed, and the train section's
    # warmup_epochs and weight_decay for every trial.
    batch_tokens: list[int] | None = None
    warmup_epochs: list[float] | None = None
    weight_decay: list[float] | None = None

    def batch_sequences(self, seq_len: int) -> list[int]:
        """The per-device batches a trial may train at, in samples: for the LM track with
        batch_tokens, each as whole windows of seq_len tokens (at least one); else batch_size."""
        if self.batch_tokens is None:
            return sorted(set(self.batch_size))
        return sorted({windows_in(tokens, seq_len) for tokens in self.batch_tokens})

    @field_validator("warmup_epochs", "weight_decay")
    @classmethod
    def _non_negative_choices(cls, values: list[float] | None) -> list[float] | None:
        if values is not None and (not values or any(v < 0 for v in values)):
            raise ValueError("must be a non-empty list of numbers >= 0")
        return values

    @field_validator("dropout")
    @classmethod
    def _dropout_rates(cls, values: list[float]) -> list[float]:
        if not values or any(not 0.0 <= v < 1.0 for v in values):
            raise ValueError("must be a non-empty list of rates in [0, 1)")
        return values

    @field_validator(
        "blocks_per_stage",
        "stages",
        "base_filters",
        "kernel_size",
        "batch_size",
        "batch_per_gib",
        "batch_tokens",
    )
    @classmethod
    def _positive_choices(cls, values: list[int] | None) -> list[int] | None:
        if values is None:  # batch_per_gib unset
            return None
        if not values or any(v <= 0 for v in values):
            raise ValueError("must be a non-empty list of positive integers")
        return values

    @field_validator("learning_rate")
    @classmethod
    def _lr_range(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        low, high = bounds
        if not 0 < low <= high:
            raise ValueError("must be [low, high] with 0 < low <= high")
        return bounds


class LimitsConfig(_Strict):
    """Bounds on what morphism may grow: a proposal past them is never made."""

    max_layers: int = Field(400, ge=4)
    max_params: int = Field(50_000_000, ge=1)


class SearchConfig(_Strict):
    oracle: Literal["morphism", "random", "bayesian", "hyperband"] = "morphism"
    # What the search maximises (val_accuracy, the CNN track's) or minimises (val_loss, the LM
    # track's: nats per token); the quality a run is judged by (aiperf.quality).
    objective: Literal["val_accuracy", "val_loss"] = "val_accuracy"
    seed_architecture: str = "resnet-mini"  # the morphism oracle's first round (aiperf.arch.seeds)
    candidates: int = Field(24, ge=1)  # morphisms scored by the acquisition per proposal
    ucb_beta: float = Field(2.0, ge=0.0)  # exploration weight of the upper confidence bound
    limits: LimitsConfig = LimitsConfig()
    space: SpaceConfig = SpaceConfig()
    # The LM track's growth (aiperf.search.growth): a grown child continues its parent, starting
    # from the parent's kept weights (aiperf.arch.grow.grow_weights) with the parent's
    # hyperparameters, perturbed within the space. False: every child from fresh weights and
    # hyperparameters drawn afresh. The CNN track's children always start fresh (refused here).
    inherit: bool = False


Precision = Literal["float32", "mixed_bfloat16", "mixed_float16", "auto"]
Backend = Literal["tensorflow", "jax", "torch"]
LrSchedule = Literal["constant", "cosine", "polynomial"]
# The kernel of an LM's causal attention (aiperf.arch.keras_layers.ATTENTION_KERNELS,
# aiperf.train.attention).
Attention = Literal["auto", "fused", "unfused"]
# train.precision auto: the closed precision the workers' devices support, bfloat16 first, decided by
# the devices (never by probe noise) once before the first trial (aiperf.train.auto); trials never
# see it.
AUTO = AUTO_PRECISION
PRECISIONS: tuple[str, ...] = tuple(p for p in get_args(Precision) if p != AUTO)
BACKENDS: tuple[str, ...] = get_args(Backend)


class TrainConfig(_Strict):
    # Epochs per trial, by round: AIPerf grows them (15, 30, 45, 60 on ImageNet). Round r is the
    # r-th wave of trials across the workers; the last entry holds for every later round.
    epochs: list[int] = [2, 3, 4]
    # Stop a trial when its validation loss has not improved for this many epochs (None: never).
    early_stopping_patience: int | None = Field(2, ge=1)
    # lars: SGD with a layer-wise trust ratio, for global batches in the thousands (aiperf.train.lars).
    # adamw: Adam with decoupled weight decay on the matrices, the LM track's (aiperf.train.recipe).
    optimizer: Literal["sgd", "adam", "adamw", "lars"] = "sgd"
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    # "simulated" trains nothing: trials take a modelled time (for orchestration at scale);
    # a result made with it is always invalid.
    trainer: Literal["keras", "simulated"] = "keras"
    # How trials train; the workload is the same, its speed is not (see aiperf/rules/ for which
    # values a closed result may use). precision: Keras' dtype policy for every layer but the
    # softmax head (kept float32). jit_compile: model.compile(jit_compile=...), XLA on TensorFlow,
    # jax.jit on JAX (JAX without it runs op by op: slow). backend: the Keras backend each worker
    # starts with (KERAS_BACKEND, set before the worker imports anything). precision auto: the
    # first of bfloat16, float16, float32 that the ruleset closes and every worker's devices take
    # (GPUs by compute capability, CPUs bfloat16 with AMX only), recorded as the run's precision
    # before its first trial (aiperf.train.auto).
    precision: Precision = "float32"
    jit_compile: bool = False
    backend: Backend = "tensorflow"
    # Which kernel computes an LM's causal attention: fused (the backend's flash kernel, cuDNN's
    # under JAX on NVIDIA GPUs of compute capability 8.0 and later, in bfloat16 or float16: the
    # T x T scores are never held), unfused (scores materialised, softmax, product with the values).
    # auto: fused where the run's devices, backend and precision take it, unfused elsewhere,
    # recorded as the run's choice before its first trial (aiperf.train.attention). Like backend,
    # an implementation of the same training: never in the workload hash, never a deviation.
    attention: Attention = "auto"
    # What the trials train on: auto, the node's GPUs where it has them (a node whose GPUs exist but
    # cannot be listed or queried is refused before anything starts, aiperf.config.host.node_gpus),
    # else its CPUs; cpu, the CPUs even where GPUs exist (the user's own choice, recorded with the
    # run, which is then open: a CPU run's score is not the node's). docs/settings.md says more.
    device: Literal["auto", "cpu"] = "auto"

    # The training recipe (aiperf/train/recipe.py); the defaults are plain SGD at a constant rate.
    # lr_schedule: constant, or cosine (from the trial's learning rate to 0 over the trial's own
    # epochs), or polynomial (MLPerf's ResNet reference with LARS: power 2 to 1e-4 over the trial's
    # own epochs, after a warm-up from 0). warmup_epochs: a linear ramp first, from a tenth of the
    # rate (from 0 before polynomial). weight_decay: an L2 term on every kernel's gradient (1e-4
    # in the ResNet recipes); with adamw, decoupled (each matrix shrinks by rate x weight_decay a
    # step; the LM track's 0.1). label_smoothing: of the
    # cross-entropy's targets. Like precision, each enters the workload hash only away from its
    # default (aiperf.results.division.ADDED_LATER).
    lr_schedule: LrSchedule = "constant"
    warmup_epochs: float = Field(0.0, ge=0.0)
    # Linear scaling (Goyal et al. 2017): the searched learning rate is the rate for a global batch
    # of this many samples, and a trial trains at rate x its global batch / this
    # (aiperf.train.recipe.scaled_rate). None: the searched rate as it is, whatever the batch.
    lr_reference_batch: int | None = Field(None, ge=1)
    weight_decay: float = Field(0.0, ge=0.0, lt=1.0)
    label_smoothing: float = Field(0.0, ge=0.0, lt=1.0)
    # Adam's and AdamW's second-moment decay (Keras' 0.999 by default; the LM track's 0.95, as
    # GPT-2-style training takes), and the global norm every step's gradients are clipped to
    # (None: never clipped; the LM track's 1.0). Out of the workload hash at these defaults.
    beta_2: float = Field(0.999, gt=0.0, lt=1.0)
    clip_norm: float | None = Field(None, gt=0.0)
    # The rate a cosine schedule ends at, as a fraction of the trial's rate: 0 decays to nothing;
    # the LM track's 0.1 (GPT-3's, Brown et al. 2020). Out of the workload hash at 0.
    lr_floor: float = Field(0.0, ge=0.0, lt=1.0)

    @field_validator("warmup_epochs")
    @classmethod
    def _warmup_within_rounds(cls, value: float, info: ValidationInfo) -> float:
        """A warm-up as long as a round would leave that round's trials no decay at all."""
        epochs = info.data.get("epochs")  # absent when epochs itself was refused
        if value and epochs and value >= min(epochs):
            raise ValueError(
                f"must be less than every round's epochs (train.epochs' smallest is {min(epochs)})"
            )
        return value

    @field_validator("epochs", mode="before")
    @classmethod
    def _epochs_schedule(cls, value: Any) -> list[int]:
        values = [value] if isinstance(value, int) else value
        if (
            not isinstance(values, list)
            or not values
            or any(not isinstance(v, int) or v < 1 for v in values)
        ):
            raise ValueError(
                "must be a positive whole number or a list of them (epochs per round)"
            )
        return values


class ValidityConfig(_Strict):
    min_budget_s: float = Field(60.0, ge=0.0)
    accuracy_floor: float = Field(0.2, ge=0.0, le=1.0)
    # The LM track's floor, on validation loss (nats per token): a valid result's best is at most
    # this. None: the profile is judged by accuracy (aiperf.quality).
    loss_ceiling: float | None = Field(None, gt=0.0)
    # The LM track's entropy floor H (rulesets from 1.7): the fewest nats per token any model can
    # expect on the validation split, which the regulation measures a loss's excess over
    # (aiperf.quality.loss_factor). None: the regulation is ln V - loss (rulesets 1.5, 1.6).
    entropy_floor: float | None = Field(None, ge=0.0)


# Data kinds whose sample counts are read from the files when they are staged, not set in the config.
FILE_COUNTED = ("tfrecord", "folder", "text", "enwik8")
# Data kinds that are token streams for language models, not images (aiperf/data/tokens.py).
TOKEN_KINDS = ("synthetic-text", "text", "enwik8")
