"""What a flow-run parameter may carry (the flows in flows/ check theirs here, first thing).

Prefect stores every flow run's parameters on its server, and anyone allowed to run a deployment
chooses them. So a parameter never holds a database password (it belongs where the flow runs:
AIPERF_DB_URL, PGPASSWORD or ~/.pgpass), and never a job setting that reaches a job script as text:
`cluster.prologue` is shell that every batch job runs, and queue, account, memory and interface are
written into its directives and its worker's command line as given. Those come from the profile or
`aiperf run --cluster-opt`, which only someone on the machine can change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiperf.errors import UserError
from aiperf.urls import split_password

# The cluster settings a parameter may choose: each is checked to a fixed form before any job script
# sees it (a kind, a flag, whole numbers, and a walltime that is parsed and written anew as HH:MM:SS).
PARAMETER_CLUSTER_SETTINGS = frozenset(
    {"kind", "adaptive", "walltime", "cores", "gpus", "workers_per_job"}
)


def check_parameters(
    db: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    config: object | None = None,
    from_deployment: bool = False,
) -> None:
    """Refuse, naming the fix, parameters that hold a database password or a job setting, and a
    whole `config` in a deployment's run (only `aiperf run` passes one, to its own flow run)."""
    overrides = overrides or {}
    for name, url in (("db", db), ("overrides db", overrides.get("db"))):
        if isinstance(url, str):
            bare, password = split_password(url)
            if password is not None:
                raise UserError(
                    f"flow parameter {name} holds a database password, which Prefect stores with the "
                    f"flow run; pass {bare} and set the password where the flow runs (AIPERF_DB_URL, "
                    "PGPASSWORD or ~/.pgpass)"
                )
    for key, value in overrides.items():
        for setting in sorted(_cluster_settings(key, value) - PARAMETER_CLUSTER_SETTINGS):
            raise UserError(
                f"flow parameter overrides may not set cluster.{setting}: it is written into batch job "
                "scripts, so it comes from the profile or `aiperf run --cluster-opt` only"
            )
    if config is not None and from_deployment:
        raise UserError(
            "flow parameter config is for `aiperf run` only; a deployment's run takes profile, budget, "
            "workers, db, seed, out, cluster and overrides"
        )


def _cluster_settings(key: str, value: Any) -> set[str]:
    """The cluster settings one override sets: `cluster.queue`, or `cluster` with a mapping (or a kind)."""
    section, _, rest = key.partition(".")
    if section != "cluster":
        return set()
    if rest:
        return {rest.split(".", 1)[0]}
    return {str(k) for k in value} if isinstance(value, Mapping) else {"kind"}
