"""Issue 26 item 6: `make serve` (infra/prefect/serve.sh) is gone within 10 s of SIGTERM, its
worker and reports server included (Prefect's worker alone sat most of a minute reporting to a
server already gone); and a second serve.sh leaves one automation for a failed nightly, not two.

It runs against the session's served Prefect (the "existing server" path of serve.sh: it deploys
and starts a worker), on a work pool of its own, so it takes no other test's flow runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from prefect_serve import REPO, free_port

pytestmark = pytest.mark.slow

POOL = "aiperf-stop-test"


def _worker_processes() -> list[str]:
    found = subprocess.run(
        ["pgrep", "-af", f"worker start --pool {POOL}"], capture_output=True, text=True
    )
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


def _deployed(served) -> bool:
    """The session's serve.sh is up and has deployed (so this one's deploy does not race it)."""
    request = urllib.request.Request(
        f"{served.api}/deployments/filter", data=b"{}", headers=served.headers(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return len(json.load(answer)) >= 2
    except OSError:
        return False


def test_make_serve_stops_within_ten_seconds_of_sigterm(served_prefect, tmp_path):
    served_prefect.wait_for(
        "the served Prefect's deployments", lambda: _deployed(served_prefect), 300
    )
    reports_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_API_URL=served_prefect.api,
        PREFECT_API_AUTH_STRING=served_prefect.auth(),
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        AIPERF_SERVE_DIR=str(tmp_path / "serve"),
        AIPERF_WORK_POOL=POOL,
        AIPERF_REPORTS_PORT=str(reports_port),
        AIPERF_REPORTS_DIR=str(tmp_path / "reports"),
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
        deadline = time.time() + 240
        while not _worker_processes():
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.time() < deadline, "the worker did not start: " + log.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(5)  # the worker polls its pool: stopped while running, not while starting
        asked = time.time()
        process.send_signal(signal.SIGTERM)  # `kill PID`, as a service manager stops it
        process.wait(timeout=30)
        took = time.time() - asked
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert took < 10, f"make serve took {took:.1f} s to stop"
    assert not _worker_processes(), "its worker is gone too"
    with socket.socket() as probe:  # and its reports server (it was up: the log says where)
        assert f"at http://127.0.0.1:{reports_port}" in log.read_text()
        assert probe.connect_ex(("127.0.0.1", reports_port)) != 0, "its reports server is gone too"
    # Its automation was the session's serve.sh's: made by name, so still one (issue 26 item 5).
    request = urllib.request.Request(
        f"{served_prefect.api}/automations/filter",
        data=b"{}",
        headers={**served_prefect.headers(), "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        names = [a["name"] for a in json.load(answer)]
    assert names.count("aiperf-nightly-failed") == 1, names
