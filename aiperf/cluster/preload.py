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

A worker that closes does so in silence (quiet_own_close): Dask logs, with its traceback, a
heartbeat that the worker's own close cut off, which on a loaded machine happens to some worker of
most runs that end early, so a run refused for a user's mistake would end with a library traceback.

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
import weakref
from collections.abc import Callable
from typing import Any

from aiperf.cluster.environment import FRAMEWORKS, JOB_GPUS_ENV, pin_gpu
from aiperf.urls import SECRET_ENVIRONMENT

PRELOAD = __name__

log = logging.getLogger(__name__)


def dask_setup(worker: Any) -> None:
    """Pin this worker's GPU (when its job or machine has GPUs), before any framework starts, and
    drop the database's secrets from this process's environment."""
    quiet_own_close(worker)
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


HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"


def quiet_own_close(worker: Any) -> Callable[[logging.LogRecord], bool]:
    """Keep the heartbeat that `worker`'s own close cut off out of its log.

    Worker.close stops the heartbeat's timer and then closes the worker's connections, and a
    heartbeat already waiting for the scheduler's answer then fails, logged as an error with its
    traceback. That is the worker shutting down as it was asked to, not a fault. A heartbeat that
    fails while the worker runs (a scheduler lost) is still logged. One worker per process, as
    aiperf starts them: the filter cannot tell which worker of a process logged."""
    from distributed.core import Status

    closing = {Status.closing, Status.closing_gracefully, Status.closed, Status.failed}
    alive = weakref.ref(worker)

    def keep(record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(HEARTBEAT_FAILED):
            return True
        owner = alive()  # gone: the record is another worker's (a heartbeat holds its own)
        return owner is None or owner.status not in closing

    logging.getLogger("distributed.worker").addFilter(keep)
    return keep  # the process's for good: a test that closes its worker removes it
