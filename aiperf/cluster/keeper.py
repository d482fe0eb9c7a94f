"""The keeper: a thread that keeps a job queue cluster whole, so a run outlives any one job.

Every few seconds, on the cluster's event loop:

- a worker whose staggered lifetime is near stops getting trials (its running trial stops itself
  at the worker's end, keeping its epochs); once it is idle it is retired and its job ends cleanly,
  before the queue's walltime would kill it;
- jobs that ended (retired, cancelled, killed) are resubmitted under the same name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiperf.cluster.plan import JobPlan
from aiperf.cluster.queues import staggered_lifetime

RETIRE_LEAD_S = (
    15.0  # the keeper stops sending trials this long before a worker's own end (start-up slack)
)
KEEPER_PERIOD_S = 2.0

log = logging.getLogger(__name__)


# --- Dask internals: the only calls aiperf makes into Dask outside its public API ---------------
#
# Dask has no public API to stop sending tasks to a worker ahead of its job's walltime (the
# worker's own --lifetime kills it, trial and all), nor to resubmit a job that ended (SpecCluster
# replaces one only when scaled). Tested with distributed 2026.8 (pyproject.toml pins
# distributed<2026.9; tests/test_slurm.py runs them against a real SLURM): check each of them
# before raising that pin.


class _DaskInternals:
    """The scheduler and SpecCluster internals the keeper relies on, in one place."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def call_soon(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run `callback` on the cluster's event loop: the scheduler's state is changed only there."""
        self.cluster.loop.add_callback(callback)

    def workers(self) -> list[tuple[str, str, Any]]:
        """(address, name, WorkerState) of every worker the scheduler knows now."""
        return [
            (address, str(ws.name), ws) for address, ws in self.cluster.scheduler.workers.items()
        ]

    def stop_sending_tasks(self, ws: Any, stimulus_id: str) -> bool:
        """Mark a running worker closing_gracefully: the scheduler sends it no new task and lets the
        one it runs finish. False where the worker was not running (already closing, say)."""
        from distributed.core import Status

        if ws.status != Status.running:
            return False
        self.cluster.scheduler.handle_worker_status_change(
            Status.closing_gracefully, ws, stimulus_id=stimulus_id
        )
        return True

    @staticmethod
    def is_idle(ws: Any) -> bool:
        return not ws.processing

    async def retire(self, address: str, stimulus_id: str) -> None:
        """Close the worker and forget it, so its job ends before the queue kills it."""
        await self.cluster.scheduler.retire_workers(
            workers=[address], close_workers=True, remove=True, stimulus_id=stimulus_id
        )

    def resubmit_ended_jobs(self) -> None:
        """SpecCluster keeps the spec of a job whose worker left: correcting its state submits a new
        job under the same name."""
        self.cluster._correct_state()


# --- the keeper ---------------------------------------------------------------------------------


class Keeper(threading.Thread):
    """Retires each worker of `plan` before its job's walltime and resubmits every job that ended."""

    def __init__(self, cluster: Any, plan: JobPlan, period_s: float = KEEPER_PERIOD_S) -> None:
        super().__init__(name="aiperf-cluster-keeper", daemon=True)
        self.dask, self.plan, self.period_s = _DaskInternals(cluster), plan, period_s
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
