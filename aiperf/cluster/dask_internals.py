"""Every call aiperf makes into Dask outside its public API, in one place: the keeper's.

Dask has no public API to stop sending tasks to a worker ahead of its job's walltime (the
worker's own --lifetime kills it, trial and all), nor to resubmit a job that ended (a SpecCluster
replaces one only when scaled). The keeper (aiperf.cluster.keeper) needs both, through these:

- `SpecCluster._correct_state()` (private; dask-jobqueue's JobQueueCluster is a SpecCluster):
  submits a new job for every spec whose worker is gone, under the same name. SpecCluster's own
  docstring names it as the way to align the cluster with its spec; only the underscore is missing.
- `Scheduler.handle_worker_status_change(status, worker, stimulus_id)` (the scheduler's handler of
  a worker's status report, not a documented API): set on a running worker with
  `Status.closing_gracefully`, the scheduler sends it no new task and lets the running one finish.
- `Scheduler.workers` and a `WorkerState`'s `name`, `status` and `processing`: which workers there
  are, and whether one is running and idle.
- `Scheduler.retire_workers(workers=..., close_workers=..., remove=..., stimulus_id=...)`, public,
  and `Cluster.loop`, on which alone the scheduler's state may change.

Checked against distributed 2026.8 and dask-jobqueue 0.9 (pyproject.toml pins distributed<2026.9;
tests/test_slurm.py runs the keeper against a real SLURM). tests/test_internals.py fails, naming the
name, if the installed release drops one or changes its parameters: read each of them in distributed's
deploy/spec.py and scheduler.py before raising that pin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# The names above, with the parameters (after self) each is called with here, keyword-only ones last.
SPEC_CLUSTER_METHODS: dict[str, tuple[str, ...]] = {"_correct_state": ()}
SCHEDULER_METHODS: dict[str, tuple[str, ...]] = {
    "handle_worker_status_change": ("status", "worker", "stimulus_id"),
    "retire_workers": ("workers", "close_workers", "remove", "stimulus_id"),
}
WORKER_STATE_ATTRIBUTES: tuple[str, ...] = ("name", "status", "processing")


class DaskInternals:
    """The scheduler and SpecCluster internals of one cluster, as the keeper uses them."""

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
