"""Starting the run's cluster and waiting for its workers, so the timed window opens only once they are up.

- local: a LocalCluster, the machine's cores split evenly between worker processes.
- slurm, pbs, lsf, sge: dask-jobqueue jobs whose workers connect back to a scheduler in this
  process, kept whole by the keeper.
- scheduler: a Dask scheduler already running elsewhere, with its own workers (aiperf.cluster.external).

All speak TLS. Local and job clusters use credentials made for the run (`tls_credentials`): the
scheduler, its workers and every client present the same certificate, so a process without it can
neither join as a worker nor submit work (which would run as the user on every worker). A running
scheduler's TLS files are the user's (cluster.tls_ca_file, tls_cert, tls_key).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dask
import psutil

from aiperf import settings
from aiperf.cluster.environment import WORKER_DASK, worker_environment
from aiperf.cluster.handle import StartedCluster
from aiperf.cluster.keeper import Keeper
from aiperf.cluster.plan import TRIAL_RESOURCE, JobPlan, job_plan, jobqueue_cluster_class
from aiperf.cluster.preload import PRELOAD
from aiperf.cluster.queues import QUEUES
from aiperf.config import (
    BenchmarkConfig,
    devices_problem,
    local_cores_problem,
    machine_cores,
    trial_devices,
)
from aiperf.errors import UserError
from aiperf.urls import secrets_kept_from_children

WORKERS_TIMEOUT_S = settings.number(settings.WORKERS_TIMEOUT, positive=True)

log = logging.getLogger(__name__)


def tls_credentials() -> Any:
    """A fresh self-signed key and certificate for one cluster, in memory (a distributed.Security
    that requires TLS): nothing outside this run can use them, and they end with it."""
    from distributed.security import Security

    return Security.temporary()


def _quiet() -> None:
    for name in ("distributed", "dask_jobqueue"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextmanager
def local_cluster(
    workers: int,
    prefect_api_url: str | None = None,
    simulated: bool = False,
    cores_per_worker: int | None = None,
    backend: str | None = None,
    gpus: int = 0,
    devices: int = 1,
    on_cpus: bool = False,
) -> Iterator[Any]:
    """A LocalCluster of `workers` single-trial slots sharing this machine's cores and memory
    (split evenly unless `cores_per_worker` is given, e.g. 1 for a weak-scaling series).
    Simulated trials use no cores, so then many slots share a few processes as threads.
    Every worker process starts with KERAS_BACKEND=`backend`; each owns `devices` devices for its
    trials: with `gpus`, worker i is pinned to GPUs i*devices on as it starts
    (aiperf.cluster.preload), before any framework does; without, logical devices on its cores.
    `on_cpus` (train.device cpu): the workers see none of the node's GPUs."""
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
    # Its worker processes copy this process's environment as they start (and as the nannies
    # restart them): the database's secrets are out of it while the cluster lives.
    with secrets_kept_from_children():
        # The scheduler and nannies read WORKER_DASK here; the workers, from their environment.
        with dask.config.set({**WORKER_DASK, "distributed.scheduler.allowed-failures": 0}):
            cluster = LocalCluster(
                n_workers=processes,
                threads_per_worker=threads,
                processes=True,
                memory_limit=memory,
                dashboard_address=None,
                resources={TRIAL_RESOURCE: threads},
                preload=[PRELOAD],
                env=worker_environment(
                    cores,
                    prefect_api_url,
                    backend=backend,
                    gpus=0 if simulated else gpus,
                    devices=1 if simulated else devices,
                    on_cpus=on_cpus,
                ),
                host="127.0.0.1",
                security=tls_credentials(),
            )
        try:
            yield cluster
        finally:
            cluster.close()


def _private_folder(path: Path) -> Path:
    """`path`, created if need be, that only this user can enter."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _wait_for_workers(cluster: Any, count: int, kind: str, timeout_s: float) -> None:
    from distributed import Client

    with Client(cluster, set_as_default=False) as client:
        try:
            client.wait_for_workers(count, timeout=timeout_s)
        except (TimeoutError, OSError):
            seen = len(client.scheduler_info(n_workers=-1)["workers"])
            raise UserError(
                f"--cluster {kind}: {seen} of {count} workers started within {timeout_s:g} s; "
                f"check the jobs with `{QUEUES[kind].status_command}` and the queue, account "
                "and walltime settings (job logs are under the run's out folder, jobs/)"
            ) from None


def new_jobqueue_cluster(plan: JobPlan, shared: Path) -> Any:
    """The dask-jobqueue cluster of `plan` (no job submitted yet), speaking TLS with credentials made for
    it. Jobs read the workers' certificate and key from files that dask-jobqueue writes (mode 0600,
    deleted with the cluster) under `shared`, a folder the jobs' nodes see: the run's, as for the logs."""
    cls = jobqueue_cluster_class(plan.kind)
    return cls(
        **plan.kwargs,
        security=tls_credentials(),
        shared_temp_directory=str(_private_folder(shared / "tls")),
    )


@contextmanager
def jobqueue_cluster(
    config: BenchmarkConfig, prefect_api_url: str | None, timeout_s: float = WORKERS_TIMEOUT_S
) -> Iterator[StartedCluster]:
    """Jobs on a batch queue, each running workers that connect back to a scheduler in this process."""
    _quiet()
    logs = Path(config.out).resolve() / "jobs"
    logs.mkdir(parents=True, exist_ok=True)
    plan = job_plan(config, prefect_api_url, log_directory=str(logs))
    settings = {
        **WORKER_DASK,
        "distributed.scheduler.allowed-failures": 0,
        # An ended job is forgotten, and so resubmitted by the keeper, 3 s after its worker left.
        "distributed.deploy.lost-worker-timeout": "3s",
    }
    # The submit command copies this process's environment, and a batch system by default copies
    # it into the job (sbatch --export=ALL): the database's secrets are out of it while the jobs are
    # submitted and resubmitted; the job script unsets them too (plan.py).
    with dask.config.set(settings), secrets_kept_from_children():
        cluster = new_jobqueue_cluster(plan, logs)
        keeper = Keeper(cluster, plan)
        try:
            if plan.adaptive:
                cluster.adapt(minimum_jobs=1, maximum_jobs=plan.jobs)
                ready = plan.workers_per_job
            else:
                cluster.scale(jobs=plan.jobs)
                ready = plan.workers
            log.info(
                "submitted %s jobs of %d worker(s), %d cores, %s, walltime %s",
                f"1-{plan.jobs}" if plan.adaptive else plan.jobs,
                plan.workers_per_job,
                plan.cores,
                plan.memory,
                plan.walltime,
            )
            _wait_for_workers(cluster, ready, plan.kind, timeout_s)
            keeper.start()
            yield StartedCluster(
                kind=plan.kind,
                cluster=cluster,
                workers=plan.workers,
                plan=plan,
                security=cluster.security,
            )
        finally:
            if keeper.is_alive():
                keeper.stop()
            cluster.close()


def preflight(config: BenchmarkConfig) -> None:
    """The cluster checks that cost seconds at most, before a run records anything: a running scheduler
    (kind scheduler) must accept this run. Batch and local clusters are checked as they start."""
    if config.cluster.kind == "scheduler":
        from aiperf.cluster.external import check_scheduler

        check_scheduler(config)


@contextmanager
def start_cluster(
    config: BenchmarkConfig, prefect_api_url: str | None = None
) -> Iterator[StartedCluster]:
    """The run's cluster, its workers up (the timed window opens after this, not before)."""
    if config.cluster.kind == "local":
        simulated = config.train.trainer == "simulated"
        # Checked with the config too, but that may have been on another machine.
        problem = local_cores_problem(config) or devices_problem(config)
        if problem:
            raise UserError(problem)
        with local_cluster(
            config.workers,
            prefect_api_url,
            simulated=simulated,
            cores_per_worker=config.cluster.cores,
            backend=config.train.backend,
            gpus=config.cluster.gpus,
            devices=trial_devices(config.cluster),
            on_cpus=config.train.device == "cpu",
        ) as cluster:
            yield StartedCluster(
                kind="local", cluster=cluster, workers=config.workers, security=cluster.security
            )
        return
    host = (prefect_api_url or "").split("//", 1)[-1].split(":", 1)[0].split("/", 1)[0]
    if host in ("127.0.0.1", "localhost"):
        log.warning(
            "workers will report to %s, which only this node can reach; for workers on other nodes "
            "start `prefect server start --host 0.0.0.0` and set PREFECT_API_URL to its address",
            prefect_api_url,
        )
    if config.cluster.kind == "scheduler":
        from aiperf.cluster.external import external_cluster

        with external_cluster(config, prefect_api_url, timeout_s=WORKERS_TIMEOUT_S) as started:
            yield started
        return
    with jobqueue_cluster(config, prefect_api_url) as started:
        yield started
