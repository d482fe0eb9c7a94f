"""The sections of a config that describe the machine rather than the workload: where the workers
run (cluster: a local machine, a batch queue's jobs, or a running Dask scheduler) and what the
machine's owner says of it (system: its name, submitter and MLPerf availability status). Apart
from how many devices a trial trains across (cluster.devices_per_trial), neither changes what a
trial computes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError  # a message without "Value error,"

from aiperf.config.values import _memory, _one_line, _Strict, _walltime

ClusterKind = Literal["local", "slurm", "pbs", "lsf", "sge", "scheduler"]


class BmcConfig(_Strict):
    """Each node's baseboard management controller, read over IPMI for the node's power through
    the timed window (aiperf.system.bmc; docs/rules.md, "Energy"). The password is never a
    setting: it stays in `password_file`, which ipmitool reads on each node."""

    host: str  # the BMC's address; "{node}" is each node's hostname: "{node}-ipmi"
    user: str
    password_file: str  # readable by the workers' user on every node
    port: int = Field(623, ge=1, le=65535)
    reading: str = "dcmi"  # the DCMI power reading, or sensor:NAME for a BMC's power sensor

    _single_lines = field_validator("host", "user", "password_file", "reading")(_one_line)

    @field_validator("reading")
    @classmethod
    def _a_reading(cls, reading: str) -> str:
        if reading == "dcmi" or (reading.startswith("sensor:") and reading != "sensor:"):
            return reading
        raise PydanticCustomError(
            "bmc",
            f"cluster.bmc.reading {reading!r} is neither dcmi nor sensor:NAME; set dcmi (the "
            "DCMI power reading most BMCs serve) or sensor:NAME (the BMC's power sensor)",
        )


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
    bmc: BmcConfig | None = None  # each node's BMC, for its power over the window

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


# MLPerf's availability words (its system-description checker accepts only these), by the short
# name a user types for system.status (or the words themselves).
MLPERF_STATUS = {
    "available": "Available on-premise",
    "cloud": "Available cloud",
    "preview": "Preview",
    "rdi": "Research, Development, or Internal (RDI)",
}


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
