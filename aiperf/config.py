"""One validated benchmark config, built from a YAML profile plus command-line overrides.

A profile is the whole description of a workload (data, search space, epochs, validity rules);
the command line only changes how long and where it runs. Every value is checked here, before
anything touches the database or starts a worker, so a mistake costs nothing already recorded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from aiperf import settings
from aiperf.errors import UserError
from aiperf.gpu_backend import GPU_BACKEND, jax_missing, train_on_gpus
from aiperf.rules import AUTO_PRECISION, load_ruleset
from aiperf.units import parse_duration, parse_walltime
from aiperf.urls import DEFAULT_DB_URL, environment_value, withhold_password

CUSTOM_PREFIX = "custom-"  # the name of every profile read from a file


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a profile must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


from pydantic_core import PydanticCustomError  # noqa: E402  (a message without "Value error,")


def _one_line(value: str | None) -> str | None:
    """Settings written into job scripts as directives or paths: a line break there would start a
    shell line of its own, so one is refused wherever the value came from."""
    if value is not None and any(c in value for c in "\n\r\0"):
        raise ValueError("must be one line (it is written into job scripts)")
    return value


def _utf8(value: str | None) -> str | None:
    """A path given with a byte that is not UTF-8 (Python keeps it as a lone surrogate) cannot be
    stored, logged or sent to Prefect: it is refused here, with the config, not deep in a client."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ValueError(
                f"{shown!r} holds a byte that is not UTF-8; rename the folder or give another path"
            ) from None
    return value


def _memory(value: str | None) -> str | None:
    """A job's memory as dask-jobqueue reads it (8GB, 512MiB): read now, so a typo stops the run
    before anything is recorded rather than when the cluster starts."""
    if value is not None:
        from dask.utils import parse_bytes

        try:
            parse_bytes(value)
        except (ValueError, TypeError):
            raise ValueError(
                f"{value!r} is not an amount of memory; give one such as 8GB or 512MiB"
            ) from None
    return value


def _walltime(value: str | None) -> str | None:
    """A job's walltime as the queues take it ([D-]HH:MM[:SS], or a duration such as 2h)."""
    if value is not None:
        try:
            parse_walltime(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is not a walltime; give HH:MM:SS, D-HH:MM:SS or a duration such as 2h"
            ) from None
    return value


# The longest budget a run may ask for: 30 days. A week or two is the longest walltime batch
# queues usually grant, and ImageNet's closed minimum is an hour: a month is far beyond any run that
# can finish, so a longer one is a typo (99999999h reaches past the year 9999 that dates can hold,
# and would fail after the run was recorded).
MAX_BUDGET_S = 30 * 86400.0

DIGITS_IMAGES = 1797  # scikit-learn's digits: 8x8 grey images of 10 handwritten digits


class DataConfig(_Strict):
    """The data a run trains on (see aiperf/data/). Kinds: `synthetic` (generated from the seed),
    `folder` (ROOT/train/<class>/* and ROOT/val/<class>/*, JPEG or PNG, converted to TFRecord
    shards), `tfrecord` (shards in the usual ImageNet format), `digits` (scikit-learn's
    digits, real images that ship with the package) and `generated-imagenet` (JPEG-encoded
    TFRecord shards in ImageNet's format generated from the seed, read as real ImageNet shards
    are: an accelerator's input pipeline at work without ImageNet)."""

    kind: Literal["synthetic", "folder", "tfrecord", "digits", "generated-imagenet"] = "synthetic"
    source: str | None = None  # folder or tfrecord: where the user's data is
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

    @model_validator(mode="after")
    def _source_fits_kind(self) -> DataConfig:
        if self.kind in ("folder", "tfrecord") and not self.source:
            what = (
                "an image folder ROOT with train/ and val/"
                if self.kind == "folder"
                else "a folder of TFRecord shards"
            )
            raise PydanticCustomError(
                "data", f"data.kind {self.kind} needs data.source: the path of {what}"
            )
        if self.kind in ("synthetic", "digits", "generated-imagenet") and self.source:
            raise PydanticCustomError(
                "data",
                f"data.source is only for kinds folder and tfrecord, not {self.kind}; remove it",
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

    @field_validator("dropout")
    @classmethod
    def _dropout_rates(cls, values: list[float]) -> list[float]:
        if not values or any(not 0.0 <= v < 1.0 for v in values):
            raise ValueError("must be a non-empty list of rates in [0, 1)")
        return values

    @field_validator(
        "blocks_per_stage", "stages", "base_filters", "kernel_size", "batch_size", "batch_per_gib"
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
    objective: Literal["val_accuracy"] = "val_accuracy"
    seed_architecture: str = "resnet-mini"  # the morphism oracle's first round (aiperf.arch.seeds)
    candidates: int = Field(24, ge=1)  # morphisms scored by the acquisition per proposal
    ucb_beta: float = Field(2.0, ge=0.0)  # exploration weight of the upper confidence bound
    limits: LimitsConfig = LimitsConfig()
    space: SpaceConfig = SpaceConfig()


ClusterKind = Literal["local", "slurm", "pbs", "lsf", "sge", "scheduler"]


class ClusterConfig(_Strict):
    """Where the workers run. Unset job settings come from aiperf/cluster/jobqueue.yaml (Dask config), so a
    site sets its queue once there; a profile's `cluster:` section and the command line override it.
    Kind `scheduler` uses a Dask scheduler that is already running, with workers started by other means
    (by hand, Kubernetes): `address` is its tls://HOST:PORT and the tls_* files what a client presents
    (aiperf/cluster/external.py); job settings do not apply to it."""

    kind: ClusterKind = "local"
    queue: str | None = None
    account: str | None = None
    walltime: str | None = None  # HH:MM:SS, as the queue takes it
    cores: int | None = Field(
        None, ge=1
    )  # per job; on a local cluster, per worker (default: split evenly)
    memory: str | None = None  # per job, e.g. "8GB"
    # Per job; local: this machine's. Each worker owns devices_per_trial of them (one by default).
    gpus: int = Field(0, ge=0)
    workers_per_job: int | None = Field(
        None, ge=1
    )  # without GPUs; default 1 (one worker per node)
    prologue: list[
        str
    ] = []  # shell lines run before the worker starts (module loads, environment)
    interface: str | None = None  # network interface the workers and the scheduler talk on
    adaptive: bool = False  # scale between 1 and `workers` with demand instead of a fixed number
    # Devices one trial trains across, data-parallel (AIPerf's unit is a node: every trial on all of
    # its GPUs): a number, or `node` for all the GPUs of the worker's job or machine (one device,
    # the CPU, where there are none). A worker owns that many devices: its GPUs, or on a machine
    # without accelerators as many logical devices sharing the worker's cores.
    devices_per_trial: Annotated[int, Field(ge=1)] | Literal["node"] = 1
    # kind scheduler: the running scheduler, and the PEM files of the CA that signed its certificate and of
    # the client certificate and key this run presents (Dask traffic is TLS only)
    address: str | None = None  # tls://HOST:PORT
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    _single_lines = field_validator(
        "queue",
        "account",
        "walltime",
        "memory",
        "interface",
        "address",
        "tls_ca_file",
        "tls_cert",
        "tls_key",
    )(_one_line)
    _memory_amount = field_validator("memory")(_memory)
    _walltime_format = field_validator("walltime")(_walltime)

    @model_validator(mode="after")
    def _scheduler_settings(self) -> ClusterConfig:
        external = ("address", "tls_ca_file", "tls_cert", "tls_key")
        if self.kind != "scheduler":
            given = [name for name in external if getattr(self, name) is not None]
            if given:
                raise PydanticCustomError(
                    "cluster",
                    f"cluster.{given[0]} is for cluster.kind scheduler (a running "
                    f"Dask scheduler), not {self.kind}; remove it or set cluster.kind=scheduler",
                )
            return self
        if not self.address:
            raise PydanticCustomError(
                "cluster",
                "cluster.kind scheduler needs cluster.address: the running Dask "
                "scheduler's tls://HOST:PORT",
            )
        host, _, port = self.address.removeprefix("tls://").rpartition(":")
        if not self.address.startswith("tls://") or not host or not port.isdigit():
            raise PydanticCustomError(
                "cluster",
                f"cluster.address {self.address!r} must be tls://HOST:PORT: Dask "
                "traffic is TLS only (start the scheduler with --tls-ca-file, --tls-cert and "
                "--tls-key)",
            )
        missing = [f"cluster.{name}" for name in external[1:] if not getattr(self, name)]
        if missing:
            raise PydanticCustomError(
                "cluster",
                f"cluster.kind scheduler needs {', '.join(missing)}: the PEM "
                "files of the CA that signed the scheduler's certificate and of this run's "
                "client certificate and key",
            )
        return self


Precision = Literal["float32", "mixed_bfloat16", "mixed_float16", "auto"]
Backend = Literal["tensorflow", "jax", "torch"]
LrSchedule = Literal["constant", "cosine"]
# train.precision auto: the closed precision the workers' devices support, bfloat16 first, decided by
# the devices (never by probe noise) once before the first trial (aiperf.train.auto); trials never
# see it.
AUTO = AUTO_PRECISION
PRECISIONS: tuple[str, ...] = tuple(p for p in get_args(Precision) if p != AUTO)
BACKENDS: tuple[str, ...] = get_args(Backend)
_INSTALL = {
    "tensorflow": "tensorflow (or tensorflow-cpu)",
    "jax": "jax (jax[cuda12] for GPUs)",
    "torch": "torch",
}


def backend_installed(backend: str) -> bool:
    """Whether this Python can import the framework of a Keras backend (found, not imported)."""
    from importlib.util import find_spec

    return find_spec(backend) is not None


class TrainConfig(_Strict):
    # Epochs per trial, by round: AIPerf grows them (15, 30, 45, 60 on ImageNet). Round r is the
    # r-th wave of trials across the workers; the last entry holds for every later round.
    epochs: list[int] = [2, 3, 4]
    # Stop a trial when its validation loss has not improved for this many epochs (None: never).
    early_stopping_patience: int | None = Field(2, ge=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
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

    # The training recipe (aiperf/train/recipe.py); the defaults are plain SGD at a constant rate.
    # lr_schedule: constant, or cosine (from the trial's learning rate to 0 over the trial's own
    # epochs). warmup_epochs: a linear ramp from a tenth of the rate first. weight_decay: an L2
    # term on every kernel's gradient (1e-4 in the ResNet recipes). label_smoothing: of the
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


# MLPerf's availability words (its system-description checker accepts only these), by the short
# name a user types for system.status (or the words themselves).
MLPERF_STATUS = {
    "available": "Available on-premise",
    "cloud": "Available cloud",
    "preview": "Preview",
    "rdi": "Research, Development, or Internal (RDI)",
}
# The site file in AIPERF_PROFILE_DIR: the machine's `system:` facts, under every profile's and --set.
# Its leading underscore keeps it from being read as a profile (no profile name starts with one).
SITE_FILE = "_site.yaml"


class SystemConfig(_Strict):
    """What only the machine's owner knows about it, for results lists and MLPerf's system
    description (aiperf.system.mlperf): the name results show it by (unset: its nodes' hostnames,
    aiperf.system.description.system_name), who submits it, its availability (`status`), its cooling
    and free notes. Set in the site file, a profile's `system:` or `--set system.name=...`. Never
    part of the workload (aiperf.results.division.DESCRIPTIVE): a machine's name changes nothing it
    runs, so naming it keeps the run's hash and its division."""

    name: str | None = None
    submitter: str | None = None
    status: str | None = None  # a key of MLPERF_STATUS, or MLPerf's words for it
    cooling: str | None = None  # e.g. "air", "liquid"
    hw_notes: str | None = None
    sw_notes: str | None = None

    _single_lines = field_validator(
        "name", "submitter", "status", "cooling", "hw_notes", "sw_notes"
    )(_one_line)

    @field_validator("status")
    @classmethod
    def _known_status(cls, value: str | None) -> str | None:
        return None if value is None else mlperf_status(value)


def mlperf_status(value: str) -> str:
    """A status as MLPerf writes it: a short name (available, cloud, preview, rdi) or MLPerf's
    own words; anything else is refused naming the choices."""
    if value.strip().lower() in MLPERF_STATUS:
        return MLPERF_STATUS[value.strip().lower()]
    if value in MLPERF_STATUS.values():
        return value
    raise ValueError(
        f"{value!r} is not a status; give one of {', '.join(MLPERF_STATUS)} "
        "(available on-premise, available cloud, preview, research/development/internal)"
    )


def site_system() -> dict[str, Any]:
    """The `system:` facts of the site file (SITE_FILE in AIPERF_PROFILE_DIR); none when unset or
    absent. A site file that is not a mapping with only a `system:` mapping is refused in one line."""
    folder = settings.text(settings.PROFILE_DIR)
    path = Path(folder) / SITE_FILE if folder else None
    if path is None or not path.is_file():
        return {}
    fix = f"site file {path} must hold only a `system:` mapping (name, submitter, status, ...)"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        raise UserError(f"site file {path} cannot be read as YAML; {fix}") from None
    if not isinstance(raw, dict) or set(raw) - {"system"}:
        raise UserError(fix)
    system = raw.get("system") or {}
    if not isinstance(system, dict):
        raise UserError(fix)
    return system


class BenchmarkConfig(_Strict):
    """Everything one run needs. Stored verbatim (as JSON) with the run."""

    profile: str  # a packaged profile's name, or custom-<sha of the file> for a profile file
    ruleset: str | None = (
        None  # the rules a packaged profile is judged by (aiperf/rules/), id-version
    )
    budget_s: float = Field(gt=0, le=MAX_BUDGET_S)
    workers: int = Field(ge=1)
    db: str = DEFAULT_DB_URL
    seed: int = Field(0, ge=0)
    out: str = "aiperf-out"
    data: DataConfig = DataConfig()
    search: SearchConfig = SearchConfig()
    train: TrainConfig = TrainConfig()
    validity: ValidityConfig = ValidityConfig()
    cluster: ClusterConfig = ClusterConfig()
    system: SystemConfig = SystemConfig()

    _out_one_line = field_validator("out")(_one_line)  # job logs and TLS certificates go under it
    _out_utf8 = field_validator("out")(_utf8)

    @field_validator("db")
    @classmethod
    def _db_without_password(cls, url: str) -> str:
        """The config is stored with the run and passed to the flow as a Prefect parameter, so it never
        holds a password: this process keeps it for its own connections (aiperf.urls)."""
        return withhold_password(url)

    @model_validator(mode="after")
    def _batch_fits_data(self) -> BenchmarkConfig:
        """Only where the config says how many samples there are (generated data, digits): a
        tfrecord or folder dataset's count comes from its files, and is checked against the staged
        manifest (`batch_problem`, called once it is known) rather than a default never read. On
        GPUs with batch_per_gib the listed batch_size is not what trains (the devices resolve it),
        so it too is checked against the staged count once the workers' peaks are known."""
        resolved_by_devices = bool(self.search.space.batch_per_gib) and self.cluster.gpus > 0
        if self.data.kind not in FILE_COUNTED and not resolved_by_devices:
            problem = batch_problem(self, self.data.train_samples, "data.train_samples")
            if problem:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _devices_fit(self, info: ValidationInfo) -> BenchmarkConfig:
        """A trial's devices must be had: against this machine's cores only when a run starts here
        (`CHECK_MACHINE`), so a stored config validates on any machine."""
        problem = devices_problem(self, this_machine=_checks_machine(info))
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _local_cores_fit(self, info: ValidationInfo) -> BenchmarkConfig:
        """Cores per worker times workers must fit this machine's cores, checked only when a run
        starts here (load_config passes `CHECK_MACHINE`, before anything is recorded; the local
        cluster checks again as it starts): a run recorded on a bigger machine must still validate
        where its records are verified, reported or resumed from."""
        problem = local_cores_problem(self) if _checks_machine(info) else None
        if problem:
            raise ValueError(problem)
        return self


# The validation context of a config for a run that starts on this machine (load_config): only then
# are the machine's cores checked. A stored config is validated without it, wherever it is read.
CHECK_MACHINE: dict[str, bool] = {"check_machine": True}


def _checks_machine(info: ValidationInfo) -> bool:
    """Whether this validation is for a run starting on this machine (context `CHECK_MACHINE`)."""
    return isinstance(info.context, dict) and bool(info.context.get("check_machine"))


# Data kinds whose sample counts are read from the files when they are staged, not set in the config.
FILE_COUNTED = ("tfrecord", "folder")


def batch_problem(config: BenchmarkConfig, train_samples: int, source: str) -> str | None:
    """Why a trial's largest global batch (per-device batch x its devices) is more than the
    `train_samples` the data holds (None: it fits). `source` names where the count came from
    (data.train_samples, or the staged dataset's manifest)."""
    devices = trial_devices(config.cluster)
    if max(config.search.space.batch_size) * devices <= train_samples:
        return None
    return f"search.space.batch_size: a batch is larger than {source} ({train_samples})" + (
        f" (a trial's batch is the batch size x its {devices} devices)" if devices > 1 else ""
    )


def trial_devices(cluster: ClusterConfig) -> int:
    """Devices one trial trains across: cluster.devices_per_trial, with `node` resolved to the GPUs
    of a worker's job or machine (cluster.gpus), or to one device, the CPU, where there are none."""
    if cluster.devices_per_trial == "node":
        return max(1, cluster.gpus)
    return cluster.devices_per_trial


def devices_problem(config: BenchmarkConfig, this_machine: bool = True) -> str | None:
    """Why the run's devices per trial cannot be had, or None. Keras trains data-parallel through its
    distribution API on JAX and through tf.distribute on TensorFlow, not on torch; with GPUs a
    trial's devices come whole out of its job's (or machine's), and every worker gets as many.
    `this_machine`: the run starts here, so a local worker's share of this machine's cores counts
    too (off when a stored config is validated, wherever that is)."""
    devices, gpus = trial_devices(config.cluster), config.cluster.gpus
    if devices == 1 or config.train.trainer == "simulated":
        return None
    if config.train.backend == "torch":
        return (
            f"cluster.devices_per_trial {devices} needs train.backend jax or tensorflow: Keras "
            "trains data-parallel on those, not on torch; set one, or devices_per_trial=1"
        )
    if gpus and gpus % devices:
        return (
            f"cluster.devices_per_trial {devices} does not divide cluster.gpus {gpus} (the GPUs of "
            f"a job, or of this machine): every worker owns the same number; use a divisor or node"
        )
    if not gpus and config.cluster.kind == "local" and (config.cluster.cores or this_machine):
        cores = config.cluster.cores or machine_cores() // config.workers
        if devices > cores:
            return (
                f"cluster.devices_per_trial {devices} is more than a worker's {cores} cores: on a "
                "machine without GPUs each device is a share of its worker's cores; use fewer "
                "--workers or fewer devices"
            )
    return None


def local_cores_problem(config: BenchmarkConfig) -> str | None:
    """Why a local run's cores per worker times its workers do not fit this machine's cores, or None
    when they fit. Only local runs of real trials count: simulated trials use no cores, and a batch
    job's cores are its node's."""
    cores = config.cluster.cores
    if (
        config.cluster.kind == "local"
        and config.train.trainer != "simulated"
        and cores
        and cores * config.workers > machine_cores()
    ):
        return (
            f"cluster.cores {cores} per worker x {config.workers} workers is more than this "
            f"machine's {machine_cores()} cores; lower one of them"
        )
    return None


def available_profiles() -> list[str]:
    folder = resources.files("aiperf") / "profiles"
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def _read_profile(name_or_path: str) -> tuple[dict[str, Any], str]:
    """The profile's settings and its name: a packaged profile's own, or custom-<sha> for a file."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise UserError(
                f"profile file {name_or_path} does not exist; give a YAML file or one of: "
                f"{', '.join(available_profiles())}"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = (
                "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc.strerror
            )
            raise UserError(
                f"profile file {name_or_path} cannot be read ({reason}); give a YAML profile file"
            ) from None
        name = f"{CUSTOM_PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    elif name_or_path in available_profiles():
        text = (resources.files("aiperf") / "profiles" / f"{name_or_path}.yaml").read_text()
        name = name_or_path
    else:
        raise UserError(
            f"unknown profile {name_or_path!r}; use one of: {', '.join(available_profiles())} "
            "(or a path to a .yaml profile)"
        )
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UserError(
            f"profile {name_or_path} is not valid YAML: {str(exc).splitlines()[0]}"
        ) from None
    if not isinstance(raw, dict):
        raise UserError(f"profile {name_or_path} must be a YAML mapping of settings")
    return raw, name


def _apply_ruleset(raw: dict[str, Any]) -> None:
    """A packaged profile names its ruleset; its validity section is the ruleset's, for that profile."""
    if raw["profile"].startswith(CUSTOM_PREFIX) or not raw.get("ruleset"):
        return
    rules = load_ruleset(raw["ruleset"]).for_profile(raw["profile"])
    raw["validity"] = {"min_budget_s": rules.min_budget_s, "accuracy_floor": rules.accuracy_floor}


def machine_cores() -> int:
    """Cores this process may use (respects CPU affinity, e.g. inside a SLURM allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def visible_gpus() -> int:
    """NVIDIA GPUs this process may use: those `nvidia-smi -L` lists, narrowed as CUDA narrows them
    by CUDA_VISIBLE_DEVICES. Nothing is spawned without nvidia-smi on PATH, so a CPU machine pays
    one PATH lookup; a failing nvidia-smi (no driver loaded) finds none."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    return len(visible_devices(listing, os.environ.get("CUDA_VISIBLE_DEVICES")))


def visible_devices(listing: str, cuda_visible: str | None) -> list[str]:
    """The UUIDs of the devices CUDA would show, from `nvidia-smi -L` and CUDA_VISIBLE_DEVICES.

    Unset, every listed GPU. Set, its entries in order: an index among the listed GPUs, or a
    UUID (or a unique start of one) of a GPU or a MIG instance; like CUDA, the first entry that
    names no device ends the list, so "" and "-1" show none."""
    gpus, migs = [], []
    for line in listing.splitlines():
        head, _, uuid = line.rpartition("(UUID: ")
        uuid = uuid.rstrip(")").strip() if head else ""
        if line.startswith("GPU "):
            gpus.append(uuid or line.split(":", 1)[0])
        elif head.lstrip().startswith("MIG ") and uuid:
            migs.append(uuid)
    if cuda_visible is None:
        return gpus
    shown: list[str] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        named = [u for u in gpus + migs if entry and u.startswith(entry)]
        if entry.isdigit() and int(entry) < len(gpus):
            named = [gpus[int(entry)]]
        if len(named) != 1 or named[0] in shown:
            break
        shown.append(named[0])
    return shown


def _first_error(exc: ValidationError) -> str:
    """One line for the first problem: the setting's dotted name and pydantic's message."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    return f"invalid setting {where}: {message}" if where else f"invalid profile: {message}"


def load_config(
    profile: str = "quick",
    *,
    budget: str | float | None = None,
    workers: int | str | None = None,
    db: str | None = None,
    seed: int | None = None,
    out: str | None = None,
    cluster: str | dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    runs_here: bool = True,
) -> BenchmarkConfig:
    """Profile + overrides -> a validated config, or a UserError naming the bad value.

    A packaged profile's validity rules come from its ruleset. A profile file is named
    custom-<sha256 of its text, 12 digits> whatever it says inside, so no file can pass for a
    packaged profile; `profile` and `ruleset` cannot be overridden. `runs_here`: the config is for
    a run that starts on this machine, so refuse a train.backend this Python cannot import and
    cores it lacks (`CHECK_MACHINE`); off where a config is only judged (aiperf.results.division),
    so judging a run never depends on the judging machine."""
    raw, name = _read_profile(profile)
    raw["profile"] = name
    from_environment = environment_value(settings.DB_URL.name)  # kept out of workers: aiperf.urls
    if from_environment:  # over the profile's; a `db` override and --db win over it
        raw["db"] = from_environment
    _apply_ruleset(raw)
    site = site_system()
    if site:  # under the profile's own system: facts and any --set
        if not isinstance(raw.get("system", {}), dict):
            raise UserError("system: must be a mapping of facts (name, submitter, status, ...)")
        raw["system"] = {**site, **raw.get("system", {})}
    for key, value in (overrides or {}).items():
        if key.split(".", 1)[0] in ("profile", "ruleset"):
            raise UserError(
                f"{key} cannot be overridden: choose a packaged profile with --profile, or give your "
                "own profile file (its result is in the open division)"
            )
        _set_dotted(raw, key, value)
    if budget is not None:
        raw["budget"] = budget
    if workers is not None:
        raw["workers"] = workers
    if db is not None:
        raw["db"] = db
    if seed is not None:
        raw["seed"] = seed
    if out is not None:
        raw["out"] = out
    if cluster is not None:  # a kind ("slurm") or a mapping of cluster settings
        section = raw.setdefault("cluster", {})
        if not isinstance(section, dict):
            raise UserError("cluster: must be a mapping of settings (kind, queue, walltime, ...)")
        section.update({"kind": cluster} if isinstance(cluster, str) else cluster)

    raw["budget_s"] = _budget_seconds(raw.pop("budget", "3m"))
    section = raw.get("cluster")
    kind = section.get("kind", "local") if isinstance(section, dict) else "local"
    train = raw.get("train")
    simulated = isinstance(train, dict) and train.get("trainer") == "simulated"  # uses no cores
    local = kind == "local" and not simulated
    gpus = section.get("gpus") if isinstance(section, dict) and local else None
    found = 0
    if local and gpus is None and (section is None or isinstance(section, dict)):
        # The one place found GPUs become cluster.gpus: the workers are then pinned one per GPU
        # exactly as with a cluster.gpus given (`--cluster-opt gpus=0` keeps a run on the CPUs).
        found = visible_gpus()
        if found:
            gpus = found
            raw["cluster"] = {**(section or {}), "gpus": found}
    gpu_run = train_on_gpus(raw, overrides or {})  # GPUs: JAX with jit (aiperf.gpu_backend)
    per_trial = section.get("devices_per_trial") if isinstance(section, dict) else None
    raw["workers"] = _worker_count(
        raw.get("workers", "auto"), local=local, gpus=gpus, found=found > 0, per_trial=per_trial
    )
    validity = raw.get("validity")
    if isinstance(validity, dict) and "min_budget" in validity:
        try:
            validity["min_budget_s"] = parse_duration(validity.pop("min_budget"))
        except ValueError as exc:
            raise UserError(f"validity.min_budget: {exc}") from None
    try:
        config = BenchmarkConfig.model_validate(raw, context=CHECK_MACHINE if runs_here else None)
    except ValidationError as exc:
        raise UserError(_first_error(exc)) from None
    if runs_here:
        if gpu_run and config.train.backend == GPU_BACKEND and not backend_installed(GPU_BACKEND):
            raise UserError(jax_missing(config.cluster.gpus, found > 0))
        _check_backend(config.train)
    return config


def _check_backend(train: TrainConfig) -> None:
    """The run's Keras backend must be importable here (its workers share this Python; a simulated
    run trains nothing and needs none)."""
    if train.trainer == "keras" and not backend_installed(train.backend):
        others = [b for b in BACKENDS if b != train.backend and backend_installed(b)]
        raise UserError(
            f"train.backend {train.backend} is not installed in this Python; install "
            f"{_INSTALL[train.backend]}"
            + (
                f" or choose --set train.backend={others[0]} (installed: {', '.join(others)})"
                if others
                else ""
            )
        )


def _budget_seconds(value: Any) -> float:
    """The budget in seconds, refused in one line before anything is recorded when it is not a
    positive duration of at most MAX_BUDGET_S."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UserError(f"--budget: {exc}") from None
    if seconds <= 0:
        raise UserError(f"--budget must be positive, got {value!r}; give e.g. --budget 3m")
    if seconds > MAX_BUDGET_S:
        raise UserError(
            f"--budget {value} is more than the longest budget aiperf takes, "
            f"{MAX_BUDGET_S // 86400:.0f} days; give e.g. --budget 2h"
        )
    return seconds


def _worker_count(
    value: Any,
    local: bool = True,
    gpus: Any = None,
    found: bool = False,
    per_trial: Any = None,
) -> int:
    """Workers for the local machine: 'auto' is one per core, or with cluster.gpus (given, or
    `found` on this machine by `visible_gpus`) one per `per_trial` GPUs (cluster.devices_per_trial:
    one GPU by default, all of them for `node`); more than the cores, or than the GPUs hold, is
    refused. On a job queue the machine is the cluster and its GPUs are on the nodes, not here: any
    count goes, and 'auto' means one worker (one job: a worker per devices_per_trial GPUs)."""
    cores = machine_cores()
    try:
        gpus = int(gpus or 0)
    except (TypeError, ValueError):
        gpus = 0  # not a number: the config's validation names it
    try:
        per = gpus if per_trial == "node" else max(1, int(per_trial or 1))
    except (TypeError, ValueError):
        per = 1  # not a number: the config's validation names it
    slots = max(1, gpus // per) if gpus > 0 else 0  # workers the GPUs hold
    if value in (None, "auto"):
        return (min(slots, cores) if gpus > 0 else cores) if local else 1
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise UserError(f"--workers must be a whole number or 'auto', got {value!r}") from None
    if count < 1:
        raise UserError(f"--workers must be at least 1, got {count}")
    if local and gpus > 0 and count > slots:
        where = f"the {gpus} GPUs nvidia-smi lists" if found else f"cluster.gpus {gpus}"
        each = "one GPU" if per == 1 else f"{per} GPUs (cluster.devices_per_trial)"
        raise UserError(
            f"--workers {count} is more than {where} hold: a local worker owns {each}; "
            f"use --workers {slots} or fewer"
            + (" (or --cluster-opt gpus=0 to train on the CPUs)" if found else "")
        )
    if local and count > cores:
        raise UserError(
            f"--workers {count} is more than this machine can hold ({cores} cores); "
            f"use --workers {cores} or fewer"
        )
    return count


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    node = raw
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"cannot set {dotted}: {part} is not a section")
    node[leaf] = value
