"""A real two-node run on one machine: two network namespaces joined by a bridge are the compute
nodes, each with its own address (10.213.X.2 and .3), hostname, CPU, memory and node-local disk;
the host side of the bridge (10.213.X.1) is the head node.

On the head node run a Dask scheduler (TLS, from CA/certificate/key files) and the Prefect API, both
on the bridge address only (the API is the test session's server, which listens on 127.0.0.1, behind
a relay on that address, as a reverse proxy fronts a server); in each node one Dask worker, started
by hand as a user would on a real node, reaching both over the bridge. The benchmark flow then runs
here, as `aiperf run --cluster scheduler` runs it, on those two workers. Checked: node-local staging
made one verified copy on each node's disk and none on the head node; every trial records its worker,
and that worker is one node's address; the workers' task runs reached the Prefect API from the nodes'
addresses; and the system description is the two nodes (their hostnames, cores, memory,
accelerators), not the submitting host.

What each node "has" is made for it: a hostname (its own UTS namespace), one CPU (taskset), a
memory size (its own /proc/meminfo, bind-mounted in its own mount namespace, as LXCFS does), a
local disk (a folder bind-mounted over data.stage_to) and, on node b, an accelerator (an
`nvidia-smi` on its worker's PATH that lists one). Nothing routes out of the bridge (no default
route in the namespaces, no forwarding, no NAT). Everything is bounded in time and torn down at
the end, failed or not: the processes (each in its own session), the relay, the namespaces and the
bridge.

Needs root, `ip` (iproute2), `unshare` and `taskset`; skipped, saying why, where namespaces cannot
be made. The first tests, quick and without namespaces, check the settings of `--cluster scheduler`
and what it refuses (no TLS, missing files, a scheduler that does not answer or refuses the run's
certificate, workers without a trial slot, a Prefect API or the run's Keras backend).
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, scored

from aiperf.data.pins import arrays_digest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODE_MEMORY_GIB = {"a": 5, "b": 7}
ACCELERATOR = "aiperf-test-accelerator"  # what node b's nvidia-smi lists (MiB)
ACCELERATOR_MIB = 16384
STEP_TIMEOUT_S = 240  # for the workers to join (seconds when the machine is quiet)
# Long enough for each node's first trial to finish an epoch on a 2-core machine, with room for a
# busy one: that trial spends seconds of the window before its first step ends (Prefect's task run
# starts on the worker, the model is built, its first step traced). More for a heavily loaded machine.
BUDGET = os.environ.get("AIPERF_TEST_TWO_NODE_BUDGET", "20s")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _why_no_namespaces() -> str | None:
    """Why this machine cannot make the test's nodes (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces, a bridge and bind mounts needs root"
    missing = [tool for tool in ("ip", "unshare", "taskset") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (iproute2, util-linux)"
    probe = f"aiperf-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        inside = subprocess.run(
            ["ip", "netns", "exec", probe, "unshare", "--uts", "--mount", "--", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if inside.returncode != 0:
            return f"`unshare --uts --mount` inside a network namespace failed: {inside.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.213.0.0/16 that no address or route of this machine touches."""
    used = [
        ipaddress.ip_interface(word).network
        for line in _ip("-4", "-o", "addr").stdout.splitlines()
        for word in line.split()
        if "/" in word and word[0].isdigit()
    ]
    for line in _ip("-4", "route").stdout.splitlines():
        first = line.split()[0]
        if first[0].isdigit():
            used.append(
                ipaddress.ip_network(first if "/" in first else f"{first}/32", strict=False)
            )
    start = os.getpid() % 200
    for i in range(200):
        net = ipaddress.ip_network(f"10.213.{20 + (start + i) % 200}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 in 10.213.0.0/16")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Node:
    name: str  # a, b
    namespace: str
    hostname: str
    address: str
    cpu: int
    disk: Path  # its node-local disk, seen at data.stage_to inside the node


@dataclass(frozen=True)
class Nodes:
    head: str  # the host side of the bridge
    nodes: tuple[Node, ...]
    stage_to: Path  # the same path on every node; on the head node an empty folder


@contextmanager
def two_nodes(tmp: Path) -> Iterator[Nodes]:
    """A bridge with the head node's address and two namespaces on it, each a node; deleted at the end."""
    tag = str(os.getpid() % 100000)
    bridge = f"aip{tag}br"
    net = _free_subnet()
    hosts = list(net.hosts())
    cpus = sorted(os.sched_getaffinity(0))
    stage_to = tmp / "node-local"
    stage_to.mkdir()
    made: list[tuple[str, ...]] = []  # how to undo each step, last first
    for name in ("a", "b"):  # left by a killed run of a process that had this pid: no one else's
        _ip("netns", "del", f"aiperf-{tag}-{name}", check=False)
    _ip("link", "del", bridge, check=False)
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made.append(("link", "del", bridge))
        _ip("addr", "add", f"{hosts[0]}/{net.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        nodes = []
        for i, name in enumerate(("a", "b")):
            namespace, veth = f"aiperf-{tag}-{name}", f"aip{tag}{name}"
            _ip("netns", "add", namespace)
            made.append(("netns", "del", namespace))
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            made.append(("link", "del", veth))
            _ip("link", "set", veth, "master", bridge, "up")
            address = str(hosts[i + 1])
            _ip("-n", namespace, "addr", "add", f"{address}/{net.prefixlen}", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            disk = tmp / f"disk-{name}"
            disk.mkdir()
            nodes.append(
                Node(
                    name,
                    namespace,
                    f"aiperf-node-{name}-{tag}",
                    address,
                    cpus[i % len(cpus)],
                    disk,
                )
            )
        yield Nodes(str(hosts[0]), tuple(nodes), stage_to)
    finally:
        for undo in reversed(made):
            _ip(*undo, check=False)


def _meminfo(gib: int) -> str:
    """This machine's /proc/meminfo with the node's total (free and available capped under it)."""
    total_kb = gib * 2**20
    lines = []
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "MemTotal":
            line = f"MemTotal:       {total_kb} kB"
        elif key in ("MemFree", "MemAvailable"):
            line = f"{key}:       {min(int(value.split()[0]), total_kb * 3 // 4)} kB"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _tls_files(folder: Path) -> dict[str, Path]:
    """A self-signed certificate (its own CA) and its key, which the scheduler, the workers and the run
    all present and trust: what Security.temporary makes, but in files, as a site hands them out."""
    from distributed.security import Security

    made = Security.temporary()
    folder.mkdir(mode=0o700)
    files = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    files["ca"].write_text(made.tls_ca_file)
    files["cert"].write_text(made.tls_client_cert)
    files["key"].write_text(made.tls_client_key)
    files["key"].chmod(0o600)
    return files


class Relay:
    """The head node's Prefect API on its bridge address: a TCP relay to the session's API server
    (which listens on 127.0.0.1, where no node reaches), as a reverse proxy fronts a server. It
    notes every address that connects through it."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.peers: set[str] = set()
        self.sockets: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, name="two-nodes-relay", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, (peer, _port) = self.server.accept()
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                continue
            upstream.settimeout(None)
            self.peers.add(peer)
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        for sock in [self.server, *self.sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class Processes:
    """Processes started by the test, each in its own session; all stopped at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: dict[str, tuple[subprocess.Popen, Path]] = {}

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = self.logs / f"{name}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                command,
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started[name] = (process, log)
        return process

    def stop(self) -> None:
        for process, _log in self.started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3  # a moment to end cleanly, then killed
        for process, _log in self.started.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever of its session is left (a nanny's worker process)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=10)


def _base_env(tmp: Path, name: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "AIPERF_DB_URL", "DASK_"))
    }
    env.update(
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        TF_CPP_MIN_LOG_LEVEL="2",
        PREFECT_HOME=str(tmp / f"prefect-{name}"),
        PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
    )
    return env


@dataclass(frozen=True)
class TwoNodeRun:
    nodes: Nodes
    result: dict
    db: Path
    api: str  # the Prefect API as the nodes reach it
    relay: Relay
    tls: dict[str, Path]
    phases: dict[str, float]  # seconds from the fixture's start to the end of each step


# --- quick: the settings and checks of --cluster scheduler, on an in-process TLS cluster -------------


def _scheduler_overrides(address: str, tls: dict[str, Path], **more) -> dict:
    return {
        "cluster.kind": "scheduler",
        "cluster.address": address,
        "cluster.tls_ca_file": str(tls["ca"]),
        "cluster.tls_cert": str(tls["cert"]),
        "cluster.tls_key": str(tls["key"]),
        **more,
    }


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"cluster.kind": "scheduler"}, "needs cluster.address"),
        (
            {"cluster.kind": "scheduler", "cluster.address": "tcp://head:8786"},
            "must be tls://HOST:PORT",
        ),
        (
            {"cluster.kind": "scheduler", "cluster.address": "tls://head"},
            "must be tls://HOST:PORT",
        ),
        (
            {"cluster.kind": "scheduler", "cluster.address": "tls://head:8786"},
            "needs cluster.tls_ca_file",
        ),
        ({"cluster.address": "tls://head:8786"}, "is for cluster.kind scheduler"),
    ],
)
def test_scheduler_settings_are_checked(overrides, words):
    from aiperf.config import load_config
    from aiperf.errors import UserError

    with pytest.raises(UserError, match=words):
        load_config("quick", workers=1, overrides=overrides)


@pytest.fixture
def tls_cluster(tmp_path):
    """A running TLS scheduler with one in-process worker, started from certificate files, as a user's is."""
    from distributed import LocalCluster
    from distributed.security import Security

    tls = _tls_files(tmp_path / "tls")

    def start(**worker_kwargs):
        security = Security(
            tls_ca_file=str(tls["ca"]),
            require_encryption=True,
            **{
                f"tls_{role}_{part}": str(tls[part])
                for role in ("client", "scheduler", "worker")
                for part in ("cert", "key")
            },
        )
        return LocalCluster(
            n_workers=1,
            processes=False,
            threads_per_worker=1,
            host="127.0.0.1",
            protocol="tls",
            security=security,
            dashboard_address=":0",
            **worker_kwargs,
        )

    return start, tls


def test_a_running_scheduler_is_used_once_its_workers_offer_a_trial_slot(
    tls_cluster, tmp_path, monkeypatch
):
    from distributed import Client

    from aiperf.cluster import preflight, start_cluster
    from aiperf.config import load_config
    from aiperf.errors import UserError

    start, tls = tls_cluster
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    monkeypatch.setattr("aiperf.cluster.start.WORKERS_TIMEOUT_S", 1.5)
    api = socket.create_server(("127.0.0.1", 0))  # where the run's Prefect API would answer
    api_url = f"http://127.0.0.1:{api.getsockname()[1]}/api"
    with api, start() as bare, start(resources={"trial": 1}) as ready:
        config = load_config(
            "quick", workers=1, overrides=_scheduler_overrides(bare.scheduler_address, tls)
        )
        preflight(config)  # it answers
        with pytest.raises(
            UserError, match=r"0 of 1 workers with resources trial=1 joined within 1.5 s"
        ):
            with start_cluster(config):
                pass
        config = load_config(
            "quick", workers=1, overrides=_scheduler_overrides(ready.scheduler_address, tls)
        )
        nowhere = f"http://127.0.0.1:{_free_port('127.0.0.1')}/api"
        with pytest.raises(UserError, match=f"cannot reach this run's Prefect API {nowhere}"):
            with start_cluster(config, prefect_api_url=nowhere):
                pass
        jax = load_config(
            "quick",
            workers=1,
            runs_here=False,
            overrides=_scheduler_overrides(
                ready.scheduler_address, tls, **{"train.backend": "jax"}
            ),
        )
        with pytest.raises(UserError, match="start it with KERAS_BACKEND=jax"):
            with start_cluster(jax, prefect_api_url=api_url):
                pass
        with start_cluster(config, prefect_api_url=api_url) as started:
            assert (
                started.kind == "scheduler"
                and started.scheduler_address == ready.scheduler_address
            )
            with Client(
                started.scheduler_address, security=started.security, set_as_default=False
            ) as client:
                assert client.submit(sum, [1, 2], resources={"trial": 1}, pure=False).result() == 3
        assert ready.scheduler.workers, "the run leaves the scheduler and its workers running"


def test_a_scheduler_that_refuses_the_runs_certificate_is_one_line(
    tls_cluster, tmp_path, monkeypatch
):
    from aiperf.cluster import preflight
    from aiperf.config import load_config
    from aiperf.errors import UserError

    start, _tls = tls_cluster
    other = _tls_files(tmp_path / "other")  # another CA and certificate
    monkeypatch.setattr("aiperf.cluster.external.CONNECT_TIMEOUT_S", 1.0)
    with start() as cluster:
        config = load_config(
            "quick", workers=1, overrides=_scheduler_overrides(cluster.scheduler_address, other)
        )
        with pytest.raises(UserError) as refused:
            preflight(config)
    message = str(refused.value)
    assert (
        message.startswith(f"cluster.address {cluster.scheduler_address}:") and "\n" not in message
    )
    missing = load_config(
        "quick",
        workers=1,
        overrides=_scheduler_overrides(
            "tls://127.0.0.1:1", {**other, "key": tmp_path / "no-such-key.pem"}
        ),
    )
    with pytest.raises(UserError, match=r"cluster.tls_key .*no-such-key.pem: No such file"):
        preflight(missing)


def test_a_bad_scheduler_address_is_one_line(tmp_path, monkeypatch):
    """`aiperf run --cluster scheduler` with nothing at the address: one error line naming it, exit 2,
    no traceback, after a bounded wait, and nothing recorded."""
    from typer.testing import CliRunner

    from aiperf.cli.main import app

    tls = _tls_files(tmp_path / "tls")
    nowhere = f"tls://127.0.0.1:{_free_port('127.0.0.1')}"
    monkeypatch.setattr("aiperf.cluster.external.CONNECT_TIMEOUT_S", 2.0)
    args = [
        "run",
        "--budget",
        "5s",
        "--workers",
        "1",
        "--db",
        f"sqlite:///{tmp_path / 'aiperf.db'}",
        "--out",
        str(tmp_path / "out"),
        "--cluster",
        "scheduler",
        "--cluster-opt",
        f"address={nowhere}",
        "--cluster-opt",
        f"tls_ca_file={tls['ca']}",
        "--cluster-opt",
        f"tls_cert={tls['cert']}",
        "--cluster-opt",
        f"tls_key={tls['key']}",
    ]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cluster.address {nowhere}: no Dask scheduler"
    ), lines
    assert not (tmp_path / "aiperf.db").exists() and not (tmp_path / "out").exists()


# --- slow: two namespace nodes -------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_node_run(prefect_api, tmp_path_factory) -> Iterator[TwoNodeRun]:
    reason = _why_no_namespaces()
    if reason:
        pytest.skip(f"no two-node test: {reason}")
    from distributed import Client
    from distributed.security import Security
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from aiperf.config import load_config
    from aiperf_flows.benchmark import benchmark_config

    began = time.monotonic()
    tmp = tmp_path_factory.mktemp("two-nodes")
    logs = tmp / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        nodes = stack.enter_context(two_nodes(tmp))
        processes = Processes(logs)
        stack.callback(processes.stop)  # before the namespaces go
        tls = _tls_files(tmp / "tls")
        tls_args = [
            "--tls-ca-file",
            str(tls["ca"]),
            "--tls-cert",
            str(tls["cert"]),
            "--tls-key",
            str(tls["key"]),
        ]

        # The head node: a Dask scheduler and the Prefect API, on the bridge address only.
        scheduler = f"tls://{nodes.head}:{_free_port(nodes.head)}"
        env = _base_env(tmp, "scheduler")
        env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = "0"
        processes.start(
            "scheduler",
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                nodes.head,
                "--port",
                scheduler.rsplit(":", 1)[1],
                "--no-dashboard",
                *tls_args,
            ],
            env,
        )
        local_api = urllib.parse.urlsplit(PREFECT_API_URL.value())
        relay = Relay(nodes.head, (local_api.hostname, local_api.port))
        stack.callback(relay.close)
        api = f"http://{nodes.head}:{relay.port}/api"

        # One worker on each node, started as on a real node (README: Clusters).
        for node in nodes.nodes:
            meminfo = tmp / f"meminfo-{node.name}"
            meminfo.write_text(_meminfo(NODE_MEMORY_GIB[node.name]))
            env = _base_env(tmp, f"node-{node.name}")
            env.update(
                KERAS_BACKEND="tensorflow",
                AIPERF_WORKER_CORES="1",
                OMP_NUM_THREADS="1",
                TF_NUM_INTRAOP_THREADS="1",
                TF_NUM_INTEROP_THREADS="1",
                DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED="False",
            )
            if node.name == "b":
                tools = tmp / "node-b-bin"
                tools.mkdir()
                smi = tools / "nvidia-smi"
                smi.write_text(f"#!/bin/sh\necho '{ACCELERATOR}, {ACCELERATOR_MIB}'\n")
                smi.chmod(0o755)
                env["PATH"] = f"{tools}:{env['PATH']}"
            setup = 'hostname "$1" && mount --bind "$2" /proc/meminfo && mount --bind "$3" "$4" && shift 4 && exec "$@"'
            processes.start(
                f"worker-{node.name}",
                [
                    "ip",
                    "netns",
                    "exec",
                    node.namespace,
                    "unshare",
                    "--uts",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    setup,
                    "node",
                    node.hostname,
                    str(meminfo),
                    str(node.disk),
                    str(nodes.stage_to),
                    "taskset",
                    "-c",
                    str(node.cpu),
                    str(BIN / "dask"),
                    "worker",
                    scheduler,
                    *tls_args,
                    "--nthreads",
                    "1",
                    "--resources",
                    "trial=1",
                    "--preload",
                    "aiperf.cluster.preload",
                    "--no-dashboard",
                    "--local-directory",
                    str(tmp / f"scratch-{node.name}"),
                ],
                env,
            )
        phases = {"nodes and processes started": time.monotonic() - began}
        # Each worker's first trial imports Prefect's task engine and the flow's module, seconds of the
        # window on a busy machine before the trial builds anything; done here, before the run, so
        # that a budget of seconds trains on both nodes however busy the machine.
        security = Security(
            tls_ca_file=str(tls["ca"]),
            tls_client_cert=str(tls["cert"]),
            tls_client_key=str(tls["key"]),
            require_encryption=True,
        )
        with Client(
            scheduler, security=security, timeout=STEP_TIMEOUT_S, set_as_default=False
        ) as client:
            client.wait_for_workers(2, timeout=STEP_TIMEOUT_S)
            client.run(importlib.import_module, "aiperf_flows.benchmark")
        phases["workers up"] = time.monotonic() - began

        # The run, from the head node (this process, as `aiperf run` would): it waits for the workers.
        db = tmp / "aiperf.db"
        config = load_config(
            "quick",
            budget=BUDGET,
            workers=2,
            db=f"sqlite:///{db}",
            seed=3,
            out=str(tmp / "out"),
            overrides={
                **TINY,
                "train.epochs": [1, 2],
                "data.stage_to": str(nodes.stage_to),
                "cluster.kind": "scheduler",
                "cluster.address": scheduler,
                "cluster.tls_ca_file": str(tls["ca"]),
                "cluster.tls_cert": str(tls["cert"]),
                "cluster.tls_key": str(tls["key"]),
            },
        )
        # The run's Prefect API is the nodes' (Prefect sends it with every task): the head node's address.
        with (
            pytest.MonkeyPatch.context() as patch,
            temporary_settings(updates={PREFECT_API_URL: api}),
        ):
            patch.setattr("aiperf.cluster.start.WORKERS_TIMEOUT_S", float(STEP_TIMEOUT_S))
            try:
                result = scored(benchmark_config, config=config)
            except BaseException:
                for name, (_process, log) in processes.started.items():
                    print(f"--- {name}\n{log.read_text()[-2000:]}")
                raise
            finally:  # this process's logs and events sent to the relay's address, before it goes
                APILogWorker.drain_all(timeout=30)
                EventsWorker.drain_all(timeout=30)
        phases["run ended"] = time.monotonic() - began
        yield TwoNodeRun(nodes, result, db, api, relay, tls, phases)
    # Torn down: nothing of the test is left on the machine.
    assert not [n for n in nodes.nodes if n.namespace in _ip("netns", "list").stdout]


def _sql(run: TwoNodeRun, query: str, *args) -> list[tuple]:
    with sqlite3.connect(run.db) as sql:
        return sql.execute(query, args).fetchall()


def _ip_of(worker: str) -> str:
    return worker.removeprefix("tls://").rsplit(":", 1)[0]


@pytest.mark.slow
def test_a_run_on_two_nodes_uses_both_and_records_where_each_trial_ran(two_node_run):
    run = two_node_run
    ((status,),) = _sql(run, "SELECT status FROM runs")
    assert status == "completed"
    description = json.loads(_sql(run, "SELECT system_description FROM runs")[0][0])
    node_of = {
        worker: node["hostname"] for node in description["nodes"] for worker in node["workers"]
    }
    trials = _sql(run, "SELECT trial_key, status, worker FROM trials")
    assert trials and all(status in ("completed", "stopped") for _k, status, _w in trials), trials
    # Each trial's worker is one node's worker, named by its address on that node.
    addresses = {n.address: n.hostname for n in run.nodes.nodes}
    for key, _status, worker in trials:
        assert worker is not None, (
            f"trial {key} has no worker: it had not built its model by the deadline"
        )
        assert worker in node_of, (worker, node_of)
        assert addresses[_ip_of(worker)] == node_of[worker], (worker, node_of)
    assert {node_of[w] for _k, _s, w in trials} == set(addresses.values()), (
        "trials ran on both nodes"
    )
    # Both nodes trained, on their own copy of the data (built from it, or the trial would have failed).
    trained = _sql(
        run,
        "SELECT t.worker, SUM(e.samples_trained), SUM(e.complete) FROM epochs e "
        "JOIN trials t ON t.id = e.trial_id GROUP BY t.worker",
    )
    print(
        f"two-node run: {len(trials)} trials, {sum(c for _w, _s, c in trained)} complete epochs; "
        + ", ".join(f"{what} at {t:.1f} s" for what, t in run.phases.items())
    )
    assert {node_of[w] for w, samples, _c in trained if samples > 0} == set(addresses.values()), (
        trained
    )


@pytest.mark.slow
def test_node_local_staging_made_one_copy_on_each_node(two_node_run):
    run = two_node_run
    manifest = json.loads(_sql(run, "SELECT manifest FROM datasets")[0][0])
    copies = manifest["copies"]
    hosts = {n.hostname for n in run.nodes.nodes}
    assert len(copies) == 2 and {where.split(":", 1)[0] for where in copies.values()} == hosts, (
        copies
    )
    assert {_ip_of(worker) for worker in copies} == {n.address for n in run.nodes.nodes}
    for node in run.nodes.nodes:
        # The copy, beside its lock and marker (.copy.lock, .verified: placement's own files).
        files = [p for p in node.disk.rglob("*") if p.is_file() and not p.name.startswith(".")]
        assert len(files) == 1, (node.name, files)
        # The manifest's sha256 is the data's content digest (the arrays), whatever file holds it.
        with np.load(files[0]) as copy:
            assert (
                arrays_digest(
                    [
                        (s, copy[f"x_{k}"], copy[f"y_{k}"])
                        for s, k in (("train", "train"), ("validation", "val"))
                    ]
                )
                == manifest["sha256"]
            )
        assert Path(manifest["path"]) == run.nodes.stage_to / files[0].relative_to(node.disk)
    assert not any(run.nodes.stage_to.iterdir()), (
        "no copy on the head node: trials read their node's own"
    )


@pytest.mark.slow
def test_the_system_description_is_the_two_nodes_not_the_submitting_host(two_node_run):
    run = two_node_run
    description = json.loads(_sql(run, "SELECT system_description FROM runs")[0][0])
    # The fingerprint is the submitting host's (where the flow ran); the description is the nodes'.
    ((submitting_host, host_memory),) = _sql(
        run, "SELECT s.hostname, s.memory_bytes FROM systems s JOIN runs r ON r.system_id = s.id"
    )
    assert submitting_host == socket.gethostname()
    assert description["number_of_nodes"] == 2
    by_name = {node["hostname"]: node for node in description["nodes"]}
    assert set(by_name) == {n.hostname for n in run.nodes.nodes}
    assert socket.gethostname() not in by_name
    for node in run.nodes.nodes:
        described = by_name[node.hostname]
        assert described["host_cores_usable"] == 1
        assert described["host_memory_bytes"] == NODE_MEMORY_GIB[node.name] * 2**30
        assert [_ip_of(w) for w in described["workers"]] == [node.address]
    b = by_name[run.nodes.nodes[1].hostname]
    assert b["accelerators_per_node"] == 1 and b["accelerator_model_name"] == ACCELERATOR
    assert b["accelerators"][0]["memory_bytes"] == ACCELERATOR_MIB * 2**20
    assert ACCELERATOR not in by_name[run.nodes.nodes[0].hostname]["accelerator_model_name"]
    assert host_memory not in {node["host_memory_bytes"] for node in description["nodes"]}


@pytest.mark.slow
def test_the_workers_task_runs_reached_the_prefect_server(two_node_run):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    run = two_node_run
    ((flow_run_id,),) = _sql(run, "SELECT flow_run_id FROM runs")
    keys = {f"trial-{key}" for (key,) in _sql(run, "SELECT trial_key FROM trials")}
    with SyncPrefectClient(run.api) as client:
        deadline = time.monotonic() + 30
        while True:  # task run states arrive as events, recorded by the server a moment later
            tasks = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            reported = {
                t.name
                for t in tasks
                if t.name.startswith("trial-") and t.state and t.state.is_completed()
            }
            if keys <= reported or time.monotonic() > deadline:
                break
            time.sleep(1)
    assert keys <= reported, (keys, reported)
    # ... and they came from the nodes, over the bridge: nothing else reaches the relay's address.
    assert {n.address for n in run.nodes.nodes} <= run.relay.peers, run.relay.peers
