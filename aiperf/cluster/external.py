"""A Dask scheduler that is already running (cluster.kind scheduler): workers started by hand on each
node, by Kubernetes (the Dask Helm chart, dask-kubernetes) or by anything else, that a run uses
without starting or stopping any of them.

The run connects to `cluster.address` (tls://HOST:PORT: Dask traffic is TLS only) presenting the
client certificate and key of `cluster.tls_cert` and `cluster.tls_key`, and trusts the scheduler's
certificate through the CA of `cluster.tls_ca_file`. It then waits for `--workers` workers that offer
a trial slot (the Dask resource trial=1, and GPU=1 with cluster.gpus) and checks that each starts
Keras with the run's backend and reaches the run's Prefect API (Prefect sends the flow's API address
with every task, so the workers report there, whatever their own environment says). When the run
ends its client leaves; the scheduler and the workers go on running.

A worker on another node is started as (README, "Clusters"; docs/scaling.md):

    KERAS_BACKEND=tensorflow AIPERF_WORKER_CORES=8 \\
    dask worker tls://HEAD:8786 --tls-ca-file ca.pem --tls-cert cert.pem --tls-key key.pem \\
        --nthreads 1 --resources trial=1 --preload aiperf.cluster.preload
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiperf import settings
from aiperf.cluster.broadcast import on_every_worker
from aiperf.cluster.environment import worker_settings
from aiperf.cluster.handle import StartedCluster
from aiperf.cluster.plan import trial_resources
from aiperf.config import BenchmarkConfig, ClusterConfig
from aiperf.errors import UserError

# How long a run waits for the scheduler to answer (it is running already: seconds are plenty).
CONNECT_TIMEOUT_S = settings.number(settings.SCHEDULER_TIMEOUT, positive=True)
WORKER_COMMAND = (
    "dask worker ADDRESS --tls-ca-file CA --tls-cert CERT --tls-key KEY --nthreads 1 "
    "--resources trial=1 --preload aiperf.cluster.preload"
)

log = logging.getLogger(__name__)


def scheduler_security(cluster: ClusterConfig) -> Any:
    """The distributed.Security a run presents to the scheduler: the user's CA, certificate and key,
    TLS required. A missing or unreadable file is a one-line error naming the setting."""
    from distributed.security import Security

    paths = {}
    for setting in ("tls_ca_file", "tls_cert", "tls_key"):
        path = Path(str(getattr(cluster, setting))).expanduser()
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as exc:
            raise UserError(
                f"cluster.{setting} {path}: {exc.strerror or exc}; give the PEM file the "
                "scheduler's CA signed (README: Your own Dask cluster)"
            ) from None
        paths[setting] = str(path)
    return Security(
        tls_ca_file=paths["tls_ca_file"],
        tls_client_cert=paths["tls_cert"],
        tls_client_key=paths["tls_key"],
        require_encryption=True,
    )


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def connect(address: str, security: Any, timeout_s: float | None = None) -> Any:
    """A client of the running scheduler, or a one-line UserError: nothing answered, or it refused
    this run's certificate."""
    from distributed import Client

    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        return Client(address, security=security, timeout=timeout_s, set_as_default=False)
    except (
        OSError,
        TimeoutError,
        ValueError,
    ) as exc:  # refused, unreachable, a TLS handshake that failed
        raise UserError(
            f"cluster.address {address}: no Dask scheduler accepted this run within {timeout_s:g} s "
            f"({_reason(exc)}); check that the scheduler runs there with TLS and that "
            "cluster.tls_ca_file, tls_cert and tls_key are the ones it trusts"
        ) from None


def check_scheduler(config: BenchmarkConfig) -> None:
    """Before anything is recorded (aiperf run calls it first): the TLS files can be read and the
    scheduler accepts this run; a one-line UserError otherwise."""
    cluster = config.cluster
    assert cluster.address is not None
    connect(cluster.address, scheduler_security(cluster)).close()


def _slots(client: Any, resources: dict[str, int]) -> tuple[list[str], int]:
    """(workers offering a trial slot, workers the scheduler has)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    ready = [
        address
        for address, info in workers.items()
        if all(
            (info.get("resources") or {}).get(name, 0) >= need for name, need in resources.items()
        )
    ]
    return ready, len(workers)


def wait_for_slots(
    client: Any, address: str, count: int, resources: dict[str, int], timeout_s: float
) -> list[str]:
    """The addresses of at least `count` workers with the trial's resources, or a UserError once
    `timeout_s` has passed without them."""
    deadline = time.monotonic() + timeout_s
    while True:
        ready, seen = _slots(client, resources)
        if len(ready) >= count:
            return ready
        if time.monotonic() >= deadline:
            wanted = ",".join(f"{name}={need}" for name, need in resources.items())
            raise UserError(
                f"cluster.address {address}: {len(ready)} of {count} workers with resources {wanted} "
                f"joined within {timeout_s:g} s ({seen} connected in all); start them with "
                f"`{WORKER_COMMAND}` or lower --workers"
            )
        time.sleep(0.5)


def check_workers(
    client: Any, workers: list[str], config: BenchmarkConfig, prefect_api_url: str | None
) -> None:
    """Every worker that may run trials reaches the run's Prefect API (Prefect sends the flow's API
    address with every task: the workers report there, whatever their own environment says) and
    starts Keras with the run's backend."""
    settings = on_every_worker(client, worker_settings, prefect_api_url, workers=workers)
    for worker, found in sorted(settings.items()):
        if found["api_unreachable"]:
            raise UserError(
                f"worker {worker} on {found['host']} cannot reach this run's Prefect API {prefect_api_url} "
                f"({found['api_unreachable']}), where its trials report; start a server the nodes "
                "reach (prefect server start --host 0.0.0.0) and set PREFECT_API_URL to its address"
            )
        backend = found["backend"] or "tensorflow"  # Keras' own default
        if config.train.trainer == "keras" and backend != config.train.backend:
            how = "has loaded Keras on" if found["backend_loaded"] else "would start Keras on"
            raise UserError(
                f"worker {worker} on {found['host']} {how} {backend}, not the run's train.backend "
                f"{config.train.backend}; start it with KERAS_BACKEND={config.train.backend}"
            )
        if not found["cores"]:
            log.warning(
                "worker %s on %s has no AIPERF_WORKER_CORES: its trials use every core of its node",
                worker,
                found["host"],
            )
    try:  # a lambda travels by value: the scheduler need not have aiperf installed
        retried = client.run_on_scheduler(
            lambda dask_scheduler: getattr(dask_scheduler, "allowed_failures", None)
        )
    except Exception:  # pragma: no cover - a scheduler that runs no client code
        retried = None
    if retried:
        log.warning(
            "the scheduler at %s reruns a task up to %s times after its worker is lost, so a lost "
            "trial starts again from scratch; start it with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0",
            client.scheduler.address,
            retried,
        )


@contextmanager
def external_cluster(
    config: BenchmarkConfig, prefect_api_url: str | None, timeout_s: float
) -> Iterator[Any]:
    """The running scheduler of `config.cluster`, once `config.workers` workers offer a trial slot:
    a StartedCluster whose address and security every client of the run uses. Nothing is started,
    and nothing is stopped at the end."""
    cluster = config.cluster
    assert cluster.address is not None
    security = scheduler_security(cluster)
    with connect(cluster.address, security) as client:  # the run's own clients connect as it goes
        workers = wait_for_slots(
            client, cluster.address, config.workers, trial_resources(config), timeout_s
        )
        check_workers(client, workers, config, prefect_api_url)
    log.info(
        "using the Dask scheduler at %s: %d workers with a trial slot",
        cluster.address,
        len(workers),
    )
    yield StartedCluster(
        kind="scheduler",
        cluster=None,
        workers=config.workers,
        security=security,
        address=cluster.address,
    )
