"""The Dask cluster a run's trials execute on: this machine, or jobs on a batch queue.

Every worker runs one trial at a time (a "trial" resource of 1; a trial on GPUs also asks for its
"GPU" resource) and tells its trials how many cores it owns (AIPERF_WORKER_CORES), so framework
thread pools never oversubscribe a node.

- local: a LocalCluster, the machine's cores split evenly between worker processes.
- slurm, pbs, lsf, sge: dask-jobqueue. The batch systems differ only in data (`QUEUES`): one job
  per node (or part of one) running one worker, or one worker per GPU when jobs have GPUs. Defaults
  come from infra/jobqueue.yaml, then the profile's `cluster:` section, then the command line.

Walltime: each worker retires (`--lifetime`, staggered so jobs do not all end at once) before the
queue would kill it, and a keeper replaces jobs that ended, whether retired, cancelled or killed.
A trial stops itself at its worker's end of life, like at the run's deadline, keeping every step
it finished. A worker lost mid-trial fails that trial at once (allowed-failures 0: Dask does not
rerun it from scratch); its reported epochs are already recorded, and the run goes on.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import psutil
import yaml

from aiperf.config import BenchmarkConfig, ClusterConfig, machine_cores, parse_duration
from aiperf.errors import UserError
from aiperf.train.trial import CORES_ENV

TRIAL_RESOURCE = "trial"
GPU_RESOURCE = "GPU"
JOB_STARTED_ENV = "AIPERF_JOB_STARTED"  # Unix time the job's script began; with the lifetime, its end
JOB_GPUS_ENV = "AIPERF_JOB_GPUS"  # GPUs of the job, shared one per worker
LIFETIME_ENV = "AIPERF_WORKER_LIFETIME"  # "<lifetime>,<stagger>" seconds: when a worker stops taking trials
RETIRE_LEAD_S = 15.0  # the keeper stops sending trials this long before a worker's own end (start-up slack)
JOBQUEUE_CONFIG_ENV = "AIPERF_JOBQUEUE_CONFIG"
DEFAULT_JOBQUEUE_CONFIG = Path(__file__).resolve().parent.parent / "infra" / "jobqueue.yaml"
WORKERS_TIMEOUT_S = float(os.environ.get("AIPERF_WORKERS_TIMEOUT", "600"))
KEEPER_PERIOD_S = 2.0

log = logging.getLogger("aiperf.cluster")


@dataclass(frozen=True)
class QueueKind:
    """What one batch system needs that another does not: data only, as in dask-jobqueue."""

    cluster_class: str  # in dask_jobqueue
    account_kwarg: str  # SLURM and PBS charge an "account", LSF and SGE a "project"
    gpu_directive: str  # job directive for {gpus} GPUs (dask-jobqueue adds the #SBATCH/#PBS/... prefix)
    job_id_env: str  # set inside a job: its id
    walltime_fields: int  # 3: HH:MM:SS, 2: HH:MM (LSF)
    status_command: str  # how a user sees the jobs
    workdir_line: str = ""  # start the job where it was submitted (SLURM and LSF do by themselves)


QUEUES: dict[str, QueueKind] = {
    "slurm": QueueKind("SLURMCluster", "account", "--gres=gpu:{gpus}", "SLURM_JOB_ID", 3, "squeue"),
    "pbs": QueueKind("PBSCluster", "account", "-l ngpus={gpus}", "PBS_JOBID", 3, "qstat",
                     'cd "${PBS_O_WORKDIR:-$PWD}"'),
    "lsf": QueueKind("LSFCluster", "project", '-gpu "num={gpus}"', "LSB_JOBID", 2, "bjobs"),
    "sge": QueueKind("SGECluster", "project", "-l gpu={gpus}", "JOB_ID", 3, "qstat",
                     'cd "${SGE_O_WORKDIR:-$PWD}"'),
}


# --- walltime and worker lifetime ---------------------------------------------------------------

def parse_walltime(text: str | int | float) -> float:
    """Seconds from a queue's walltime ([D-]HH:MM[:SS]) or an aiperf duration (90m, 2h)."""
    value = str(text).strip()
    days = 0
    if "-" in value:
        day_part, value = value.split("-", 1)
        days = int(day_part)
    if ":" in value:
        parts = [float(p) for p in value.split(":")]
        if len(parts) not in (2, 3):
            raise ValueError(f"not a walltime: {text!r} (use HH:MM:SS)")
        hours, minutes, seconds = (parts + [0.0])[:3]
        total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    else:
        total = days * 86400 + parse_duration(value)
    if total <= 0:
        raise ValueError(f"walltime must be positive, got {text!r}")
    return total


def format_walltime(seconds: float, fields: int = 3) -> str:
    """HH:MM:SS (or HH:MM, rounded up, for LSF) as batch systems take it."""
    seconds = int(math.ceil(seconds))
    if fields == 2:
        minutes = int(math.ceil(seconds / 60))
        return f"{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def worker_lifetime(walltime_s: float) -> tuple[float, float]:
    """(lifetime, stagger) of a worker in a job of this walltime: it retires between
    lifetime - stagger and lifetime + stagger, which still leaves half the margin (at least 5 s)
    for a clean exit before the queue's kill. The margin is 10% of the walltime, 10 s to 10 min."""
    margin = min(max(0.1 * walltime_s, 10.0), 600.0, walltime_s / 2)
    return walltime_s - margin, margin / 2


def staggered_lifetime(worker_name: str, lifetime_s: float, stagger_s: float) -> float:
    """This worker's own lifetime in [lifetime - stagger, lifetime + stagger], fixed by its name, so
    the worker (stopping its trial) and the keeper (retiring it) agree without talking."""
    fraction = zlib.crc32(worker_name.encode()) / 2**32
    return lifetime_s + stagger_s * (2 * fraction - 1)


# --- the plan of a job queue cluster (pure data, testable without a queue) ---------------------

@dataclass(frozen=True)
class JobPlan:
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
    """dask-jobqueue's settings for `kind` with infra/jobqueue.yaml (or $AIPERF_JOBQUEUE_CONFIG) over them."""
    import dask_jobqueue  # noqa: F401  (registers dask-jobqueue's own defaults in dask.config)

    settings = dict(dask.config.get(f"jobqueue.{kind}", default={}) or {})
    path = Path(os.environ.get(JOBQUEUE_CONFIG_ENV) or DEFAULT_JOBQUEUE_CONFIG)
    if path.is_file():
        try:
            site = (yaml.safe_load(path.read_text()) or {}).get("jobqueue", {}).get(kind, {}) or {}
        except (yaml.YAMLError, AttributeError) as exc:
            raise UserError(f"{path} is not a valid dask-jobqueue config: {str(exc).splitlines()[0]}; "
                            "fix it or point AIPERF_JOBQUEUE_CONFIG at another file") from None
        settings.update(site)
    elif os.environ.get(JOBQUEUE_CONFIG_ENV):
        raise UserError(f"AIPERF_JOBQUEUE_CONFIG names {path}, which does not exist; give a YAML file")
    return settings


def worker_environment(cores_per_worker: int, prefect_api_url: str | None = None) -> dict[str, str]:
    """Environment of every worker process. Workers must report task runs to the flow's own
    Prefect API: without PREFECT_API_URL each would start a temporary server of its own."""
    env = {
        CORES_ENV: str(cores_per_worker),
        "OMP_NUM_THREADS": str(cores_per_worker),
        "TF_NUM_INTRAOP_THREADS": str(cores_per_worker),
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    if prefect_api_url:
        env["PREFECT_API_URL"] = prefect_api_url
    return env


def job_plan(config: BenchmarkConfig, prefect_api_url: str | None, log_directory: str | None = None) -> JobPlan:
    """Jobs, workers and the dask-jobqueue arguments for a run on a batch queue."""
    c: ClusterConfig = config.cluster
    queue_kind = QUEUES[c.kind]
    settings = jobqueue_defaults(c.kind)
    cores = int(c.cores or settings.get("cores") or 1)
    memory = str(c.memory or settings.get("memory") or "2GB")
    per_job = c.gpus if c.gpus else (c.workers_per_job or 1)
    if per_job > cores:
        raise UserError(f"cluster: {per_job} workers per job need at least {per_job} cores per job, "
                        f"got cores={cores}; raise cluster.cores or lower the workers per job")
    walltime_text = c.walltime or settings.get("walltime") or "01:00:00"
    try:
        walltime_s = parse_walltime(walltime_text)
    except ValueError as exc:
        raise UserError(f"cluster.walltime: {exc}") from None
    lifetime, stagger = worker_lifetime(walltime_s)
    cores_per_worker = max(1, cores // per_job)
    resources = f"{TRIAL_RESOURCE}=1" + (f",{GPU_RESOURCE}=1" if c.gpus else "")

    env = worker_environment(cores_per_worker, prefect_api_url)
    if c.gpus:
        env[JOB_GPUS_ENV] = str(c.gpus)
    # Ours first, then the site's and the profile's lines, so a user's PREFECT_API_URL wins.
    prologue = [queue_kind.workdir_line] if queue_kind.workdir_line else []  # relative data paths resolve
    prologue += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    prologue.append(f"export {JOB_STARTED_ENV}=$(date +%s)")
    prologue.append(f"export {LIFETIME_ENV}={lifetime:.0f},{stagger:.0f}")
    prologue += list(settings.get("job-script-prologue") or []) + list(c.prologue)
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
        "worker_extra_args": ["--resources", resources, "--lifetime",
                              f"{(lifetime + stagger + walltime_s) / 2:.0f}s"],
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
        kwargs["log_directory"] = log_directory
    jobs = max(1, math.ceil(config.workers / per_job))
    return JobPlan(kind=c.kind, jobs=jobs, workers_per_job=per_job, cores=cores, memory=memory, gpus=c.gpus,
                   walltime=kwargs["walltime"], lifetime_s=lifetime, stagger_s=stagger, adaptive=c.adaptive,
                   kwargs=kwargs)


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


# --- inside a worker ----------------------------------------------------------------------------

def job_id() -> str | None:
    """'slurm-job-123' inside a batch job, None elsewhere: recorded with every trial it runs."""
    for kind, queue_kind in QUEUES.items():
        value = os.environ.get(queue_kind.job_id_env)
        if value:
            return f"{kind}-job-{value}"
    return None


def worker_end(worker_name: str) -> float | None:
    """Unix time this worker stops taking trials (its job's start plus its staggered lifetime),
    inside a job with a walltime; None elsewhere."""
    started, lifetime = os.environ.get(JOB_STARTED_ENV), os.environ.get(LIFETIME_ENV)
    if not started or not lifetime:
        return None
    base, stagger = (float(v) for v in lifetime.split(","))
    return float(started) + staggered_lifetime(worker_name, base, stagger)


def pin_gpu(worker_name: str) -> None:
    """One worker per GPU: the i-th worker of a job sees only the job's i-th GPU. dask-jobqueue
    names a job's workers '<job>-0', '<job>-1', ...; set before any framework starts."""
    gpus = int(os.environ.get(JOB_GPUS_ENV) or 0)
    if gpus < 1 or os.environ.get("AIPERF_GPU_PINNED"):
        return
    index = int(worker_name.rsplit("-", 1)[-1]) if gpus > 1 and worker_name.rsplit("-", 1)[-1].isdigit() else 0
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d] or [str(i) for i in range(gpus)]
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[index % len(visible)]
    os.environ["AIPERF_GPU_PINNED"] = "1"


# --- starting a cluster -------------------------------------------------------------------------

@dataclass
class StartedCluster:
    """A cluster whose workers are up: the flow connects to `scheduler_address`."""

    kind: str
    cluster: Any
    workers: int
    plan: JobPlan | None = None

    @property
    def scheduler_address(self) -> str:
        return self.cluster.scheduler_address


def _quiet() -> None:
    for name in ("distributed", "dask_jobqueue"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextmanager
def local_cluster(workers: int, prefect_api_url: str | None = None, simulated: bool = False,
                  cores_per_worker: int | None = None):
    """A LocalCluster of `workers` single-trial slots sharing this machine's cores and memory
    (split evenly unless `cores_per_worker` is given, e.g. 1 for a weak-scaling series).
    Simulated trials use no cores, so then many slots share a few processes as threads."""
    from distributed import LocalCluster

    _quiet()
    if simulated:
        processes = max(1, min(workers, machine_cores()))
        threads = math.ceil(workers / processes)
        cores = 1
    else:
        processes, threads = workers, 1
        cores = cores_per_worker or max(1, machine_cores() // workers)
    memory = int(psutil.virtual_memory().total * 0.9 / processes)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(
            n_workers=processes, threads_per_worker=threads, processes=True, memory_limit=memory,
            dashboard_address=None, resources={TRIAL_RESOURCE: threads},
            env=worker_environment(cores, prefect_api_url), host="127.0.0.1",
        )
    try:
        yield cluster
    finally:
        cluster.close()


class _Keeper(threading.Thread):
    """Keeps a job queue cluster whole, every few seconds, on the cluster's event loop:

    - a worker whose staggered lifetime is near stops getting trials (the scheduler marks it
      closing_gracefully; its running trial stops itself at the worker's end, keeping its epochs);
      once it is idle it is retired and its job ends cleanly, before the queue's walltime;
    - jobs that ended (retired, cancelled, killed) are resubmitted: dask's SpecCluster keeps their
      spec, so correcting its state submits a new job under the same name.
    """

    def __init__(self, cluster: Any, plan: JobPlan, period_s: float = KEEPER_PERIOD_S) -> None:
        super().__init__(name="aiperf-cluster-keeper", daemon=True)
        self.cluster, self.plan, self.period_s = cluster, plan, period_s
        self.first_seen: dict[str, float] = {}
        self.retiring: set[str] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.period_s):
            try:
                self.cluster.loop.add_callback(self._tend)
            except Exception as exc:  # pragma: no cover - the loop is closing
                log.debug("keeper: %s", exc)
                return

    async def _tend(self) -> None:
        from distributed.core import Status

        scheduler = self.cluster.scheduler
        now = time.time()
        for address, ws in list(scheduler.workers.items()):
            first = self.first_seen.setdefault(address, now)
            own = staggered_lifetime(str(ws.name), self.plan.lifetime_s, self.plan.stagger_s)
            if now < first + own - RETIRE_LEAD_S or address in self.retiring:
                continue
            if ws.status == Status.running:
                log.info("worker %s is near its end of life: no more trials for it", ws.name)
                scheduler.handle_worker_status_change(Status.closing_gracefully, ws,
                                                      stimulus_id=f"aiperf-lifetime-{now}")
            if not ws.processing:
                self.retiring.add(address)
                log.info("retiring worker %s before its job's walltime", ws.name)
                await scheduler.retire_workers(workers=[address], close_workers=True, remove=True,
                                               stimulus_id=f"aiperf-retire-{now}")
        self.cluster._correct_state()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=self.period_s + 1)


def _wait_for_workers(cluster: Any, count: int, kind: str, timeout_s: float) -> None:
    from distributed import Client

    with Client(cluster, set_as_default=False) as client:
        try:
            client.wait_for_workers(count, timeout=timeout_s)
        except (TimeoutError, OSError):
            seen = len(client.scheduler_info(n_workers=-1)["workers"])
            raise UserError(f"--cluster {kind}: {seen} of {count} workers started within {timeout_s:g} s; "
                            f"check the jobs with `{QUEUES[kind].status_command}` and the queue, account "
                            "and walltime settings (job logs are under the run's out folder, jobs/)") from None


@contextmanager
def jobqueue_cluster(config: BenchmarkConfig, prefect_api_url: str | None,
                     timeout_s: float = WORKERS_TIMEOUT_S) -> Iterator[StartedCluster]:
    """Jobs on a batch queue, each running workers that connect back to a scheduler in this process."""
    _quiet()
    logs = Path(config.out).resolve() / "jobs"
    logs.mkdir(parents=True, exist_ok=True)
    plan = job_plan(config, prefect_api_url, log_directory=str(logs))
    cls = jobqueue_cluster_class(plan.kind)
    settings = {"distributed.scheduler.allowed-failures": 0,
                # An ended job is forgotten, and so resubmitted by the keeper, 3 s after its worker left.
                "distributed.deploy.lost-worker-timeout": "3s"}
    with dask.config.set(settings):
        cluster = cls(**plan.kwargs)
        keeper = _Keeper(cluster, plan)
        try:
            if plan.adaptive:
                cluster.adapt(minimum_jobs=1, maximum_jobs=plan.jobs)
                ready = plan.workers_per_job
            else:
                cluster.scale(jobs=plan.jobs)
                ready = plan.workers
            log.info("submitted %s jobs of %d worker(s), %d cores, %s, walltime %s",
                     f"1-{plan.jobs}" if plan.adaptive else plan.jobs, plan.workers_per_job, plan.cores,
                     plan.memory, plan.walltime)
            _wait_for_workers(cluster, ready, plan.kind, timeout_s)
            keeper.start()
            yield StartedCluster(kind=plan.kind, cluster=cluster, workers=plan.workers, plan=plan)
        finally:
            if keeper.is_alive():
                keeper.stop()
            cluster.close()


@contextmanager
def start_cluster(config: BenchmarkConfig, prefect_api_url: str | None = None) -> Iterator[StartedCluster]:
    """The run's cluster, its workers up (the timed window opens after this, not before)."""
    if config.cluster.kind == "local":
        simulated = config.train.trainer == "simulated"
        wanted = (config.cluster.cores or 1) * config.workers
        if config.cluster.cores and not simulated and wanted > machine_cores():
            raise UserError(f"cluster.cores {config.cluster.cores} per worker x {config.workers} workers is more "
                            f"than this machine's {machine_cores()} cores; lower one of them")
        with local_cluster(config.workers, prefect_api_url, simulated=simulated,
                           cores_per_worker=config.cluster.cores) as cluster:
            yield StartedCluster(kind="local", cluster=cluster, workers=config.workers)
        return
    host = (prefect_api_url or "").split("//", 1)[-1].split(":", 1)[0].split("/", 1)[0]
    if host in ("127.0.0.1", "localhost"):
        log.warning("workers will report to %s, which only this node can reach; for jobs on other nodes "
                    "start `prefect server start --host 0.0.0.0` and set PREFECT_API_URL to its address",
                    prefect_api_url)
    with jobqueue_cluster(config, prefect_api_url) as started:
        yield started

