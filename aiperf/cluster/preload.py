"""What every worker process does when it starts, before it runs any task: a Dask preload.

A LocalCluster's workers get it as `preload=[PRELOAD]` (start.py), a batch job's as
`--preload aiperf.cluster.preload` on its worker command line (plan.py). Dask imports this module
when it creates the worker and calls `dask_setup` as the worker starts, before the worker
connects to its scheduler: no task (staging, warm-up, a trial) can have run in the process yet, so
no framework has started either. Here the worker pins its GPU (environment.pin_gpu, from its name):
a framework fixes the CUDA devices it sees when it starts, so pinning later would leave every
worker of a node on the same GPU.

What is the same for every worker (KERAS_BACKEND, thread counts) is in the environment the
worker process starts with (environment.worker_environment). Nothing here imports a framework.

A worker never connects to the database, so it also drops the variables that carry its secrets
(aiperf.urls.SECRET_ENVIRONMENT) from its environment, in case its process was given them (a worker
started by hand for --cluster scheduler, a job prologue that exports one): nothing the worker
starts, a trial's subprocess included, inherits them. The worker processes aiperf starts never had
them (aiperf.urls.secrets_kept_from_children, and the job script's `unset` line).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from aiperf.cluster.environment import FRAMEWORKS, JOB_GPUS_ENV, pin_gpu
from aiperf.urls import SECRET_ENVIRONMENT

PRELOAD = __name__

log = logging.getLogger(__name__)


def dask_setup(worker: Any) -> None:
    """Pin this worker's GPU (when its job or machine has GPUs), before any framework starts, and
    drop the database's secrets from this process's environment."""
    for name in SECRET_ENVIRONMENT:
        os.environ.pop(name, None)
    started = [name for name in FRAMEWORKS if name in sys.modules]
    device = pin_gpu(str(worker.name))
    if device is not None:
        if started:  # pragma: no cover - a site preload or sitecustomize imported one first
            log.warning(
                "worker %s: %s started before its GPU was pinned; it may see every GPU of the node",
                worker.name,
                ", ".join(started),
            )
        log.info(
            "worker %s pinned to GPU %s (one of %s)",
            worker.name,
            device,
            os.environ.get(JOB_GPUS_ENV),
        )
