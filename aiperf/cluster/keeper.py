"""The keeper: a thread that keeps a job queue cluster whole, so a run outlives any one job.

Every few seconds, on the cluster's event loop:

- a worker whose staggered lifetime is near stops getting trials (its running trial stops itself
  at the worker's end, keeping its epochs); once it is idle it is retired and its job ends cleanly,
  before the queue's walltime would kill it;
- jobs that ended (retired, cancelled, killed) are resubmitted under the same name.

Dask offers neither step publicly: the keeper takes both from aiperf.cluster.dask_internals, the one
module that reaches into Dask's internals.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from aiperf.cluster.dask_internals import DaskInternals
from aiperf.cluster.plan import JobPlan
from aiperf.cluster.queues import staggered_lifetime

RETIRE_LEAD_S = (
    15.0  # the keeper stops sending trials this long before a worker's own end (start-up slack)
)
KEEPER_PERIOD_S = 2.0

log = logging.getLogger(__name__)


class Keeper(threading.Thread):
    """Retires each worker of `plan` before its job's walltime and resubmits every job that ended."""

    def __init__(self, cluster: Any, plan: JobPlan, period_s: float = KEEPER_PERIOD_S) -> None:
        super().__init__(name="aiperf-cluster-keeper", daemon=True)
        self.dask, self.plan, self.period_s = DaskInternals(cluster), plan, period_s
        self.first_seen: dict[str, float] = {}
        self.retiring: set[str] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.period_s):
            try:
                self.dask.call_soon(self._tend)
            except Exception as exc:  # pragma: no cover - the loop is closing
                log.debug("keeper: %s", exc)
                return

    async def _tend(self) -> None:
        now = time.time()
        for address, name, ws in self.dask.workers():
            first = self.first_seen.setdefault(address, now)
            own = staggered_lifetime(name, self.plan.lifetime_s, self.plan.stagger_s)
            if now < first + own - RETIRE_LEAD_S or address in self.retiring:
                continue
            if self.dask.stop_sending_tasks(ws, stimulus_id=f"aiperf-lifetime-{now}"):
                log.info("worker %s is near its end of life: no more trials for it", name)
            if self.dask.is_idle(ws):
                self.retiring.add(address)
                log.info("retiring worker %s before its job's walltime", name)
                await self.dask.retire(address, stimulus_id=f"aiperf-retire-{now}")
        self.dask.resubmit_ended_jobs()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=self.period_s + 1)
