"""The cluster a run's trials execute on, once its workers are up: what every client of the run
needs (the scheduler's address and the TLS credentials), whichever way it was started."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiperf.cluster.plan import JobPlan


@dataclass
class StartedCluster:
    """A cluster whose workers are up: the flow connects to `scheduler_address` with `security`."""

    kind: str
    cluster: Any
    workers: int
    plan: JobPlan | None = None
    security: Any = (
        None  # distributed.Security every client must present (None: the cluster has no TLS)
    )
    address: str | None = None  # a running scheduler's (kind scheduler: `cluster` is None)

    @property
    def scheduler_address(self) -> str:
        return self.address or self.cluster.scheduler_address
