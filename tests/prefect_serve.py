"""`make serve` for tests: infra/prefect/serve.sh (Prefect server, work pool `aiperf`, the deployments
of prefect.yaml, a worker) in its own process group, against a fresh PREFECT_HOME and a free port.
Used by tests/test_deployments.py (through the API) and tests/test_prefect_ui.py (through the UI).
As `make serve` does, serve.sh makes up the API's auth string and writes it to a file the tests
read (`Served.auth`); the worker's AIPERF_PROFILE_DIR is a folder of the test session's
(`Served.profiles`), so a test's own profile is a name there, as a flow run's profile must be.

Starting it (server, work pool, `prefect deploy`, worker) and stopping it take most of a minute on
a 2-core machine, so those tests share one: the `served_prefect` fixture (tests/conftest.py) hands
each of them the same serve.sh, started for the first and stopped after the last. conftest.py runs
them one after another, so it is up only while they run. Each test starts its own flow runs, with
its own database and output folder, and checks them by their own ids."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def tiny_profile(folder: Path) -> Path:
    """The packaged quick profile with TINY_SIMULATED's settings, as tiny-profile.yaml in `folder`:
    a profile file (its run is in the open division). serve() puts it in the worker's
    AIPERF_PROFILE_DIR before serve.sh deploys, as a host puts its profiles there before `make
    serve`: the run form offers the profiles the folder held when the deployments were made. The UI
    test that runs it follows the flow run's pages, not what trains, so its trials are simulated (its
    Dask worker imports no framework); the served `benchmark` run trains Keras (benchmark_run)."""
    from importlib import resources

    from conftest import TINY_SIMULATED

    raw = yaml.safe_load((resources.files("aiperf") / "profiles" / "quick.yaml").read_text())
    for key, value in TINY_SIMULATED.items():
        *sections, name = key.split(".")
        node = raw
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    path = folder / "tiny-profile.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Served:
    ui: str  # http://127.0.0.1:PORT
    api: str  # http://127.0.0.1:PORT/api
    process: subprocess.Popen
    log: Path  # serve.sh's output (the server's own log is under PREFECT_HOME/aiperf-serve)
    auth_file: Path  # where serve.sh keeps the API's auth string, user:password (made up by it)
    profiles: (
        Path  # the worker's AIPERF_PROFILE_DIR: a flow run's `profile` may name NAME.yaml here
    )
    reports: Path  # AIPERF_REPORTS_DIR: a run whose `out` is below it has its report served
    reports_url: str  # http://127.0.0.1:PORT, where serve.sh serves them

    def auth(self) -> str:
        """The API's auth string, once serve.sh has written it (before it starts the server)."""
        return str(
            self.wait_for(
                "serve.sh's auth string",
                lambda: self.auth_file.is_file() and self.auth_file.read_text().strip(),
                120,
                0.2,
            )
        )

    def headers(self) -> dict[str, str]:
        """What a plain HTTP client sends: HTTP basic authentication with the auth string."""
        return {"Authorization": "Basic " + base64.b64encode(self.auth().encode()).decode()}

    def wait_for(
        self, what: str, check: Callable[[], Any], timeout: float, interval: float = 1.0
    ) -> Any:
        """Poll `check` until it returns something truthy; fail (with serve.sh's log) on a timeout
        or when serve.sh exits first."""
        return wait_for(what, check, timeout, self.process, self.log, interval)


@contextmanager
def serve(tmp_path: Path) -> Iterator[Served]:
    port, reports_port = free_port(), free_port()
    reports = tmp_path / "reports-root"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    tiny_profile(profiles)  # before serve.sh deploys: the form's profile choices are made then
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        AIPERF_PROFILE_DIR=str(profiles),
        AIPERF_PREFECT_PORT=str(port),
        AIPERF_REPORTS_PORT=str(reports_port),
        AIPERF_REPORTS_DIR=str(reports),
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_WORKER_PREFETCH_SECONDS="5",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(REPO / "infra/prefect/serve.sh")],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield Served(
            f"http://127.0.0.1:{port}",
            f"http://127.0.0.1:{port}/api",
            process,
            log,
            tmp_path / "prefect-home" / "aiperf-serve" / "api-auth",
            profiles,
            reports,
            f"http://127.0.0.1:{reports_port}",
        )
    finally:
        # Stopped as `make serve` is, with Ctrl-C: SIGINT to the whole group, which usually ends it in a
        # second. Prefect's worker may instead start a graceful shutdown that keeps sending events to
        # the server already gone; a SIGTERM then has it kill itself.
        for stop, grace in ((signal.SIGINT, 10), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if process.poll() is not None:
                break
            os.killpg(process.pid, stop)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
        try:  # whatever of the group outlived serve.sh (a flow run's processes)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class SharedServe:
    """One serve.sh for the tests that share it: started by the first `get()`, stopped by `close()`
    (and started afresh by a later `get()`, or when the one running has exited)."""

    def __init__(self, new_folder: Callable[[], Path]) -> None:
        self._new_folder = new_folder
        self._stack: ExitStack | None = None
        self._served: Served | None = None

    def get(self) -> Served:
        if self._served is not None and self._served.process.poll() is not None:
            self.close()  # a test before stopped it or it crashed (that test failed): a fresh one for the next
        if self._served is None:
            stack = ExitStack()
            self._served = stack.enter_context(serve(self._new_folder()))
            self._stack = stack
        return self._served

    def close(self) -> None:
        stack, self._stack, self._served = self._stack, None, None
        if stack is not None:
            stack.close()


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    process: subprocess.Popen,
    log: Path,
    interval: float = 1.0,
) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        if process.poll() is not None:
            pytest.fail(
                f"serve.sh exited ({process.returncode}) before {what}:\n{log.read_text()[-4000:]}"
            )
        time.sleep(interval)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


@dataclass(frozen=True)
class ServedRun:
    """A flow run of the served `benchmark` deployment and what it left: its final state, the
    deployments it was made from, its artifacts (key: (type, data)), database and `out` folder."""

    id: Any
    final: Any  # the flow run, in its final state
    deployments: dict[str, Any]
    artifacts: dict[str, tuple[str, Any]]
    db: Path
    out: Path


_RUNS: dict[tuple[str, int], ServedRun] = {}


def benchmark_run(served: Served, new_folder: Callable[[], Path]) -> ServedRun:
    """One run of the `benchmark` deployment created through the API, as the UI's Run button makes
    it (quick, 8 s, one worker, TINY data, its `out` below the served folder so its report is
    served), made once per serve.sh and read by every test that asks what such a run leaves
    (tests/test_deployments.py, tests/test_serve_reports.py): each run costs a worker's start, its
    window and its report, about half a minute of CPU on a slow machine."""
    key = (served.api, served.process.pid)
    if key not in _RUNS:
        _RUNS[key] = _new_benchmark_run(served, new_folder())
    return _RUNS[key]


def _new_benchmark_run(served: Served, folder: Path) -> ServedRun:
    from conftest import TINY
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    out = served.reports / f"run-{folder.name}"
    db = folder / "aiperf.db"
    with SyncPrefectClient(served.api, auth_string=served.auth()) as client:

        def deployed() -> dict[str, Any] | None:
            try:
                return {d.name: d for d in client.read_deployments()}
            except Exception:
                return None

        deployments = served.wait_for(
            "both deployments", lambda: (d := deployed()) and len(d) == 2 and d, 240
        )
        run = client.create_flow_run_from_deployment(
            deployments["benchmark"].id,
            parameters={
                "profile": "quick",
                "budget": "8s",
                "workers": 1,
                "db": f"sqlite:///{db}",
                "seed": 5,
                "out": str(out),
                "overrides": TINY,
            },
        )
        final = served.wait_for(
            "the flow run to finish",
            lambda: (r := client.read_flow_run(run.id)).state.is_final() and r,
            420,
        )
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
    artifacts = {a.key: (a.type, a.data) for a in found}
    return ServedRun(run.id, final, deployments, artifacts, db, out)
