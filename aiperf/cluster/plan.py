"""The jobs of a run on a batch queue, planned as pure data before any is submitted, so every job
script can be checked without a queue.

Settings come from dask-jobqueue's defaults, then jobqueue.yaml next to this module (or the file
$AIPERF_JOBQUEUE_CONFIG names), then the profile's `cluster:` section and the command line.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import yaml

from aiperf.cluster.environment import (
    BACKEND_ENV,
    JOB_STARTED_ENV,
    LIFETIME_ENV,
    worker_environment,
)
from aiperf.cluster.preload import PRELOAD
from aiperf.cluster.queues import QUEUES, format_walltime, parse_walltime, worker_lifetime
from aiperf.config import BenchmarkConfig, ClusterConfig
from aiperf.errors import UserError

TRIAL_RESOURCE = "trial"
GPU_RESOURCE = "GPU"
JOBQUEUE_CONFIG_ENV = "AIPERF_JOBQUEUE_CONFIG"
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


def jobqueue_defaults(kind: str) -> dict[str, Any]:
    """dask-jobqueue's settings for `kind` with aiperf/cluster/jobqueue.yaml (or $AIPERF_JOBQUEUE_CONFIG) over them."""
    import dask_jobqueue  # noqa: F401  (registers dask-jobqueue's own defaults in dask.config)

    settings = dict(dask.config.get(f"jobqueue.{kind}", default={}) or {})
    path = Path(os.environ.get(JOBQUEUE_CONFIG_ENV) or DEFAULT_JOBQUEUE_CONFIG)
    if path.is_file():
        try:
            site = (yaml.safe_load(path.read_text()) or {}).get("jobqueue", {}).get(kind, {}) or {}
        except (yaml.YAMLError, AttributeError) as exc:
            raise UserError(
                f"{path} is not a valid dask-jobqueue config: {str(exc).splitlines()[0]}; "
                "fix it or point AIPERF_JOBQUEUE_CONFIG at another file"
            ) from None
        settings.update(site)
    elif os.environ.get(JOBQUEUE_CONFIG_ENV):
        raise UserError(
            f"AIPERF_JOBQUEUE_CONFIG names {path}, which does not exist; give a YAML file"
        )
    return settings


def job_plan(
    config: BenchmarkConfig, prefect_api_url: str | None, log_directory: str | None = None
) -> JobPlan:
    """Jobs, workers and the dask-jobqueue arguments for a run on a batch queue."""
    c: ClusterConfig = config.cluster
    queue_kind = QUEUES[c.kind]
    settings = jobqueue_defaults(c.kind)
    cores = int(c.cores or settings.get("cores") or 1)
    memory = str(c.memory or settings.get("memory") or "2GB")
    per_job = c.gpus if c.gpus else (c.workers_per_job or 1)
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
    cores_per_worker = max(1, cores // per_job)
    resources = f"{TRIAL_RESOURCE}=1" + (f",{GPU_RESOURCE}=1" if c.gpus else "")

    env = worker_environment(cores_per_worker, prefect_api_url, gpus=c.gpus)
    # Ours first, then the site's and the profile's lines, so a user's PREFECT_API_URL wins; the
    # run's Keras backend comes last: it is recorded with the run, so no site line may change it.
    prologue = (
        [queue_kind.workdir_line] if queue_kind.workdir_line else []
    )  # relative data paths resolve
    prologue += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    prologue.append(f"export {JOB_STARTED_ENV}=$(date +%s)")
    prologue.append(f"export {LIFETIME_ENV}={lifetime:.0f},{stagger:.0f}")
    prologue += list(settings.get("job-script-prologue") or []) + list(c.prologue)
    prologue.append(f"export {BACKEND_ENV}={shlex.quote(config.train.backend)}")
    directives = list(settings.get("job-extra-directives") or [])
    if c.gpus:
        directives.append(queue_kind.gpu_directive.format(gpus=c.gpus))

    kwargs: dict[str, Any] = {
        "cores": cores,
        "memory": memory,
        "processes": per_job,
        "walltime": format_walltime(walltime_s, queue_kind.walltime_fields),
        "job_name": settings.get("name") or "aiperf-worker",
        "job_script_prologue": prologue,
        "job_extra_directives": directives,
        # Dask's own lifetime is the backstop, halfway between the latest planned end and the walltime.
        # The preload pins each worker's GPU as the worker starts, before any framework does.
        "worker_extra_args": [
            "--resources",
            resources,
            "--lifetime",
            f"{(lifetime + stagger + walltime_s) / 2:.0f}s",
            "--preload",
            PRELOAD,
        ],
        "scheduler_options": {"dashboard": False, "dashboard_address": ":0"},  # any free port
    }
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
            c.isspace() for c in log_directory
        ):  # a directive's words would become options of their own
            raise UserError(
                f"out folder {log_directory!r}: batch job directives cannot hold a path with spaces; "
                "choose --out without them"
            )
        kwargs["log_directory"] = log_directory
    jobs = max(1, math.ceil(config.workers / per_job))
    return JobPlan(
        kind=c.kind,
        jobs=jobs,
        workers_per_job=per_job,
        cores=cores,
        memory=memory,
        gpus=c.gpus,
        walltime=kwargs["walltime"],
        lifetime_s=lifetime,
        stagger_s=stagger,
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
        resources[GPU_RESOURCE] = 1
    return resources
