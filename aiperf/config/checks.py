"""The checks of a config against the machine it runs on, and the policies they share: how many
devices a trial trains across, whether its batch fits the data, whether its devices and cores can be
had here, how many workers `auto` means, and whether the run's Keras backend is installed.

The schema's validators call the ones a stored config must pass (`batch_problem`, `devices_problem`,
`local_cores_problem`); the local cluster calls them again where it starts. They read a config
through `RunSettings`, the sections they need, so this module sits below the schema that uses it.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiperf.config.gpu_backend import GPU_BACKEND, INSTALL
from aiperf.config.host import ON_THE_CPUS, machine_cores
from aiperf.config.machine import ClusterConfig
from aiperf.config.workload import (
    BACKENDS,
    TOKEN_KINDS,
    DataConfig,
    SearchConfig,
    TrainConfig,
    ValidityConfig,
)
from aiperf.errors import UserError


class RunSettings(Protocol):
    """What the checks read of a run's config (aiperf.config.schema.BenchmarkConfig)."""

    @property
    def workers(self) -> int: ...

    @property
    def search(self) -> SearchConfig: ...

    @property
    def train(self) -> TrainConfig: ...

    @property
    def cluster(self) -> ClusterConfig: ...

    @property
    def data(self) -> DataConfig: ...

    @property
    def validity(self) -> ValidityConfig: ...


_INSTALL = {
    "tensorflow": "tensorflow (or tensorflow-cpu)",
    "jax": "jax (jax[cuda12] for GPUs)",
    "torch": "torch",
}


def backend_installed(backend: str) -> bool:
    """Whether this Python can import the framework of a Keras backend (found, not imported)."""
    from importlib.util import find_spec

    return find_spec(backend) is not None


def batch_problem(config: RunSettings, train_samples: int, source: str) -> str | None:
    """Why a trial's largest global batch (per-device batch x its devices) is more than the
    `train_samples` the data holds (None: it fits). `source` names where the count came from
    (data.train_samples, or the staged dataset's manifest)."""
    devices = trial_devices(config.cluster)
    space = config.search.space
    if max(space.batch_sequences(config.data.seq_len)) * devices <= train_samples:
        return None
    setting = "batch_size" if space.batch_tokens is None else "batch_tokens"
    return f"search.space.{setting}: a batch is larger than {source} ({train_samples})" + (
        f" (a trial's batch is the batch size x its {devices} devices)" if devices > 1 else ""
    )


def trial_devices(cluster: ClusterConfig) -> int:
    """Devices one trial trains across: cluster.devices_per_trial, with `node` resolved to the GPUs
    of a worker's job or machine (cluster.gpus), or to one device, the CPU, where there are none."""
    if cluster.devices_per_trial == "node":
        return max(1, cluster.gpus)
    return cluster.devices_per_trial


def track_problem(config: RunSettings) -> str | None:
    """Why the data and the search's objective belong to different tracks, or None: token data
    (the LM track) is judged by validation loss and images by accuracy, so a search that would
    maximise the one on the other's data is refused before anything is recorded."""
    tokens = config.data.kind in TOKEN_KINDS
    if tokens != (config.search.objective == "val_loss"):
        wanted = "val_loss" if tokens else "val_accuracy"
        return (
            f"search.objective is {config.search.objective}, but data.kind {config.data.kind} is "
            f"{'token data (the LM track)' if tokens else 'images'}: set search.objective={wanted}"
        )
    # The verdict and the regulated score go by the ceiling (aiperf.results.score.judged_by_loss):
    # a run judged by loss has one, and only such a run.
    if tokens and config.validity.loss_ceiling is None:
        return (
            "validity.loss_ceiling is not set, but token data (the LM track) is judged by its "
            "validation loss: set it, e.g. validity.loss_ceiling=3.0 (nats per token)"
        )
    if not tokens and config.validity.loss_ceiling is not None:
        return (
            f"validity.loss_ceiling applies to token data (the LM track), not to data.kind "
            f"{config.data.kind}: remove it (images are judged by validity.accuracy_floor)"
        )
    if not tokens and config.search.inherit:
        return (
            "search.inherit applies to the LM track's growth (token data), not to data.kind "
            f"{config.data.kind}: remove it (a CNN's grown children start from fresh weights)"
        )
    return None


def feed_problem(config: RunSettings, this_machine: bool = True) -> str | None:
    """Why the run's data.feed cannot run here, or None: `dali` asked for where NVIDIA DALI is not
    installed, for a run that starts on this machine (a cluster's workers decide for themselves)."""
    if (
        not this_machine
        or config.data.feed != "dali"
        or config.cluster.kind != "local"
        or config.train.trainer == "simulated"
    ):
        return None
    import importlib.util

    try:
        found = importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:
        found = False
    if found:
        return None
    return (
        "data.feed is dali, but NVIDIA DALI is not installed: pip install '.[cuda]' (or "
        "nvidia-dali-cuda120), or set data.feed=tf.data"
    )


def devices_problem(config: RunSettings, this_machine: bool = True) -> str | None:
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
    if (
        this_machine
        and not gpus
        and config.train.backend == "jax"
        and not config.train.jit_compile
    ):
        # Op by op, the collectives of a data-parallel step on XLA:CPU's logical devices waited
        # for a participant that never came (XLA aborts after 40 s) in 2 of 2 full test runs, never
        # alone. A stored config that did so still reads: only a run that would start is refused.
        return (
            f"cluster.devices_per_trial {devices} on JAX without GPUs needs train.jit_compile: "
            "true (op by op, XLA:CPU's collectives across a worker's devices can deadlock); set "
            "--set train.jit_compile=true, or devices_per_trial=1"
        )
    return None


def local_cores_problem(config: RunSettings) -> str | None:
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


def jax_missing(gpus: int, found: bool) -> str:
    """The one line that refuses a GPU run without JAX in this Python (`found`: the GPUs were
    found on this node, whose CPUs the user may then ask for)."""
    where = f"this node has {gpus} NVIDIA GPUs" if found else f"cluster.gpus is {gpus}"
    said = f"{where}; aiperf trains on GPUs with JAX, which is not installed: {INSTALL}"
    return said + (f", {ON_THE_CPUS}" if found else "")


def check_backends(config: RunSettings, gpu_run: bool, found: bool) -> None:
    """A run that starts here needs its Keras backend in this Python: JAX where it trains on GPUs
    (`gpu_run`; `found`: the GPUs were found on this machine, not given), and the backend it names."""
    if gpu_run and config.train.backend == GPU_BACKEND and not backend_installed(GPU_BACKEND):
        raise UserError(jax_missing(config.cluster.gpus, found))
    _check_backend(config.train)


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


def worker_count(
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
            f"use --workers {slots} or fewer" + (f", {ON_THE_CPUS}" if found else "")
        )
    if local and count > cores:
        raise UserError(
            f"--workers {count} is more than this machine can hold ({cores} cores); "
            f"use --workers {cores} or fewer"
        )
    return count
