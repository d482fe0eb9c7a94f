"""The jobs of a run on a batch queue, planned as pure data before any is submitted, so every job
script can be checked without a queue.

Settings, each over the one before (the order of dask's own configuration, with aiperf's packaged file as
one more library default):

1. dask-jobqueue's packaged defaults;
2. aiperf's packaged jobqueue.yaml, next to this module (registered with dask.config.update_defaults, the
   way dask-jobqueue registers its own);
3. the site's dask config: YAML files in /etc/dask, {sys.prefix}/etc/dask, ~/.config/dask and the folder
   $DASK_CONFIG names, then DASK_* environment variables (dask reads them when it is imported);
4. the file $AIPERF_JOBQUEUE_CONFIG names, when set: a site's aiperf settings kept outside the package, in
   the same format, chosen for this shell or job rather than for every dask program of the user;
5. the profile's `cluster:` section and the command line (`--cluster-opt key=value`).
"""

from __future__ import annotations

import functools
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import yaml

from aiperf import settings as variables
from aiperf.cluster.environment import (
    BACKEND_ENV,
    JOB_STARTED_ENV,
    LIFETIME_ENV,
    worker_environment,
)
from aiperf.cluster.preload import PRELOAD
from aiperf.cluster.queues import QUEUES, format_walltime, worker_lifetime
from aiperf.config import BenchmarkConfig, ClusterConfig, trial_devices
from aiperf.errors import UserError
from aiperf.units import parse_walltime
from aiperf.urls import SECRET_ENVIRONMENT

TRIAL_RESOURCE = "trial"
GPU_RESOURCE = "GPU"
JOBQUEUE_CONFIG_ENV = variables.JOBQUEUE_CONFIG.name
# Inside the package, so an installed wheel finds it whatever the working folder.
DEFAULT_JOBQUEUE_CONFIG = Path(__file__).resolve().parent / "jobqueue.yaml"


@dataclass(frozen=True)
class JobPlan:
    """Everything decided about a run's jobs: what start-up submits, logs and hands the keeper."""

    kind: str
    jobs: int
    workers_per_job: int
    cores: int  # per job
    memory: str  # per job
    gpus: int  # per job
    walltime: str  # in the queue's format
    lifetime_s: float
    stagger_s: float
    adaptive: bool
    kwargs: dict[str, Any] = field(default_factory=dict)  # for the dask-jobqueue cluster class

    @property
    def workers(self) -> int:
        return self.jobs * self.workers_per_job

    @property
    def cores_per_worker(self) -> int:
        return max(1, self.cores // self.workers_per_job)


def _jobqueue_file(path: Path) -> dict[str, Any]:
    """The `jobqueue:` section of a dask-jobqueue config file, or one clear error."""
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        problem = str(exc).splitlines()[0]
    else:
        section = (loaded.get("jobqueue") or {}) if isinstance(loaded, dict) else None
        if isinstance(section, dict) and all(
            isinstance(kind, dict | None) for kind in section.values()
        ):
            return {"jobqueue": section}
        problem = "not a mapping of `jobqueue:` to batch systems to their settings"
    raise UserError(
        f"{path} is not a valid dask-jobqueue config: {problem}; "
        "fix it or point AIPERF_JOBQUEUE_CONFIG at another file"
    )


@functools.cache
def _packaged_defaults() -> dict[str, Any]:
    """aiperf's jobqueue.yaml, read once: dask.config.defaults keeps this very mapping."""
    return _jobqueue_file(DEFAULT_JOBQUEUE_CONFIG)


def register_packaged_defaults() -> None:
    """aiperf's jobqueue.yaml as dask defaults: over dask-jobqueue's, under anything the site sets.

    dask.config.update_defaults puts a later library's defaults over earlier ones wherever the site set
    nothing; dask.config.refresh(), though, replays the registered defaults with the first registered
    winning, dask-jobqueue's over aiperf's. So this runs before every read, and after a refresh it applies
    aiperf's file over dask-jobqueue's again by update_defaults' own rule.
    """
    import dask_jobqueue  # noqa: F401  (registers dask-jobqueue's own defaults first)

    packaged = _packaged_defaults()
    at = next((i for i, d in enumerate(dask.config.defaults) if d is packaged), None)
    if at is None:
        dask.config.update_defaults(packaged)
        return
    earlier = dask.config.merge(*dask.config.defaults[:at])
    dask.config.update(dask.config.config, packaged, priority="new-defaults", defaults=earlier)


def jobqueue_defaults(kind: str) -> dict[str, Any]:
    """The settings of `kind` (slurm, pbs, ...) before the profile's: dask-jobqueue's and aiperf's packaged
    defaults, the site's dask config over them, and the file $AIPERF_JOBQUEUE_CONFIG names over all three
    (the order in this module's docstring)."""
    register_packaged_defaults()
    settings = dict(dask.config.get(f"jobqueue.{kind}", default={}) or {})
    named = variables.text(variables.JOBQUEUE_CONFIG)
    if named:
        path = Path(named)
        if not path.is_file():
            raise UserError(
                f"AIPERF_JOBQUEUE_CONFIG names {path}, which does not exist; give a YAML file"
            )
        settings.update(_jobqueue_file(path)["jobqueue"].get(kind) or {})
    return settings


def user_prologue(config: BenchmarkConfig) -> list[str]:
    """The shell lines of the site's and the profile's that a run's job scripts run before the
    worker starts (after aiperf's own): recorded with the run (aiperf.system.provenance). A local
    cluster and a running scheduler start no job, so run none."""
    if config.cluster.kind not in QUEUES:
        return []
    site = jobqueue_defaults(config.cluster.kind).get("job-script-prologue") or []
    return [*site, *config.cluster.prologue]


@dataclass(frozen=True)
class _JobShape:
    """The numbers a run's jobs are cut to: decided once, then read by the prologue and the arguments."""

    cores: int  # per job
    memory: str  # per job
    devices: int  # per trial, so per worker
    per_job: int  # workers
    walltime_s: float
    lifetime_s: float
    stagger_s: float

    @property
    def cores_per_worker(self) -> int:
        return max(1, self.cores // self.per_job)


def _job_shape(c: ClusterConfig, settings: dict[str, Any]) -> _JobShape:
    """Cores, memory, workers per job and the walltime, from the profile over the site's settings;
    a job too small for its workers, or a walltime that does not parse, is the user's to fix."""
    cores = int(c.cores or settings.get("cores") or 1)
    memory = str(c.memory or settings.get("memory") or "2GB")
    devices = trial_devices(c)  # a worker owns what one trial trains across
    per_job = c.gpus // devices if c.gpus else (c.workers_per_job or 1)
    if per_job > cores:
        raise UserError(
            f"cluster: {per_job} workers per job need at least {per_job} cores per job, "
            f"got cores={cores}; raise cluster.cores or lower the workers per job"
        )
    walltime_text = c.walltime or settings.get("walltime") or "01:00:00"
    try:
        walltime_s = parse_walltime(walltime_text)
    except ValueError as exc:
        raise UserError(f"cluster.walltime: {exc}") from None
    lifetime, stagger = worker_lifetime(walltime_s)
    return _JobShape(cores, memory, devices, per_job, walltime_s, lifetime, stagger)


def _job_prologue(
    config: BenchmarkConfig, shape: _JobShape, prefect_api_url: str | None
) -> list[str]:
    """The shell lines a job runs before its workers start, in an order that decides who wins.

    Ours first, then the site's and the profile's lines, so a user's PREFECT_API_URL wins; the
    run's Keras backend comes last: it is recorded with the run, so no site line may change it.
    The very first line drops the database's secrets, which a batch system copies from the
    submitting shell by default (sbatch --export=ALL, qsub -V): workers never connect to it.
    """
    c = config.cluster
    env = worker_environment(
        shape.cores_per_worker,
        prefect_api_url,
        gpus=c.gpus,
        devices=shape.devices,
        on_cpus=config.train.device == "cpu",
    )
    prologue = [f"unset {' '.join(SECRET_ENVIRONMENT)}"]
    workdir_line = QUEUES[c.kind].workdir_line
    if workdir_line:
        prologue.append(workdir_line)  # relative data paths resolve
    prologue += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    prologue.append(f"export {JOB_STARTED_ENV}=$(date +%s)")
    prologue.append(f"export {LIFETIME_ENV}={shape.lifetime_s:.0f},{shape.stagger_s:.0f}")
    prologue += user_prologue(config)
    prologue.append(f"export {BACKEND_ENV}={shlex.quote(config.train.backend)}")
    return prologue


def _cluster_kwargs(
    config: BenchmarkConfig,
    settings: dict[str, Any],
    shape: _JobShape,
    prologue: list[str],
) -> dict[str, Any]:
    """The arguments every dask-jobqueue cluster of a run gets, whatever the site set."""
    c = config.cluster
    queue_kind = QUEUES[c.kind]
    directives = list(settings.get("job-extra-directives") or [])
    if c.gpus:
        directives.append(queue_kind.gpu_directive.format(gpus=c.gpus))
    resources = f"{TRIAL_RESOURCE}=1" + (f",{GPU_RESOURCE}={shape.devices}" if c.gpus else "")
    backstop_s = (shape.lifetime_s + shape.stagger_s + shape.walltime_s) / 2
    return {
        "cores": shape.cores,
        "memory": shape.memory,
        "processes": shape.per_job,
        "walltime": format_walltime(shape.walltime_s, queue_kind.walltime_fields),
        "job_name": settings.get("name") or "aiperf-worker",
        "job_script_prologue": prologue,
        "job_extra_directives": directives,
        # Dask's own lifetime is the backstop, halfway between the latest planned end and the walltime.
        # The preload pins each worker's GPU as the worker starts, before any framework does.
        "worker_extra_args": [
            "--resources",
            resources,
            "--lifetime",
            f"{backstop_s:.0f}s",
            "--preload",
            PRELOAD,
        ],
        "scheduler_options": {"dashboard": False, "dashboard_address": ":0"},  # any free port
    }


def _add_site_kwargs(
    kwargs: dict[str, Any],
    c: ClusterConfig,
    settings: dict[str, Any],
    log_directory: str | None,
) -> None:
    """The arguments only some sites set (queue, account, interface, ...), and the jobs' log folder,
    added to `kwargs` where given."""
    queue_kind = QUEUES[c.kind]
    for key in ("death-timeout", "local-directory"):
        if settings.get(key) is not None:
            kwargs[key.replace("-", "_")] = settings[key]
    queue = c.queue or settings.get("queue")
    account = c.account or settings.get(queue_kind.account_kwarg)
    interface = c.interface or settings.get("interface")
    if queue:
        kwargs["queue"] = queue
    if account:
        kwargs[queue_kind.account_kwarg] = account
    if interface:
        kwargs["interface"] = interface
        kwargs["scheduler_options"]["interface"] = interface
    if log_directory:
        if any(
            ch.isspace() for ch in log_directory
        ):  # a directive's words would become options of their own
            raise UserError(
                f"out folder {log_directory!r}: batch job directives cannot hold a path with spaces; "
                "choose --out without them"
            )
        kwargs["log_directory"] = log_directory


def job_plan(
    config: BenchmarkConfig, prefect_api_url: str | None, log_directory: str | None = None
) -> JobPlan:
    """Jobs, workers and the dask-jobqueue arguments for a run on a batch queue."""
    c: ClusterConfig = config.cluster
    settings = jobqueue_defaults(c.kind)
    shape = _job_shape(c, settings)
    prologue = _job_prologue(config, shape, prefect_api_url)
    kwargs = _cluster_kwargs(config, settings, shape, prologue)
    _add_site_kwargs(kwargs, c, settings, log_directory)
    return JobPlan(
        kind=c.kind,
        jobs=max(1, math.ceil(config.workers / shape.per_job)),
        workers_per_job=shape.per_job,
        cores=shape.cores,
        memory=shape.memory,
        gpus=c.gpus,
        walltime=kwargs["walltime"],
        lifetime_s=shape.lifetime_s,
        stagger_s=shape.stagger_s,
        adaptive=c.adaptive,
        kwargs=kwargs,
    )


def jobqueue_cluster_class(kind: str) -> type:
    """The dask-jobqueue cluster class of a batch system."""
    import dask_jobqueue

    return getattr(dask_jobqueue, QUEUES[kind].cluster_class)


def trial_resources(config: BenchmarkConfig) -> dict[str, int]:
    """What one trial asks of its worker, as Dask resources."""
    resources = {TRIAL_RESOURCE: 1}
    if config.cluster.kind != "local" and config.cluster.gpus:
        resources[GPU_RESOURCE] = trial_devices(config.cluster)
    return resources
