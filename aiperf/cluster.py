"""The Dask cluster a run's trials execute on, sized to the machine.

One worker process per trial slot, one task at a time each (a "trial" resource of 1), and the
machine's cores split evenly between workers: each worker tells its trials how many cores they
own (AIPERF_WORKER_CORES), so framework thread pools never oversubscribe the machine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
from distributed import LocalCluster

from aiperf.config import machine_cores
from aiperf.train.trial import CORES_ENV

TRIAL_RESOURCE = "trial"


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


@contextmanager
def local_cluster(workers: int, prefect_api_url: str | None = None) -> Iterator[LocalCluster]:
    """A LocalCluster of `workers` single-task processes sharing this machine's cores and memory."""
    logging.getLogger("distributed").setLevel(logging.WARNING)
    cores = max(1, machine_cores() // workers)
    memory = int(psutil.virtual_memory().total * 0.9 / workers)
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory,
        dashboard_address=None, resources={TRIAL_RESOURCE: 1}, env=worker_environment(cores, prefect_api_url),
        host="127.0.0.1",
    )
    try:
        yield cluster
    finally:
        cluster.close()
