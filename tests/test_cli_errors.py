"""Each bad input is one line naming the problem, exit status 2, no traceback, and nothing
already recorded is lost."""

import subprocess
import sys

import pytest

from aiperf.store import Store

SYSTEM = {"fingerprint": "0" * 64, "hostname": "h", "cpu_model": "c", "cpu_cores": 1, "memory_bytes": 1,
          "gpus": {"count": 0, "models": []}, "platform": "p", "python_version": "3",
          "tensorflow_version": None, "keras_version": "3", "keras_backend": "tensorflow"}


def aiperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aiperf.cli", *args], capture_output=True, text=True,
                          timeout=120, env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})


@pytest.fixture
def recorded_db(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.db'}"
    store = Store.open(url)
    store.create_run(system_id=store.upsert_system(SYSTEM), profile="quick", config={}, seed=0, budget_s=1,
                     workers=1)
    store.close()
    return url


@pytest.mark.parametrize("args, fragment", [
    (["--profile", "nope"], "unknown profile 'nope'"),
    (["--budget", "0"], "--budget must be positive"),
    (["--budget", "-5s"], "not a duration"),
    (["--workers", "4096"], "more than this machine can hold"),
    (["--workers", "0"], "at least 1"),
    (["--set", "nonsense"], "is not KEY=VALUE"),
    (["--workers", "2", "--cluster-opt", "cores=2"], "cluster.cores 2 per worker x 2 workers"),
    (["--set", "train.epochs=0"], "train.epochs"),
    (["--set", "data.kind=tfrecord"], "needs data.source"),
    (["--set", "data.kind=folder", "--set", "data.source=/no/such/images"], "/no/such/images does not exist"),
])
def test_bad_run_settings(recorded_db, args, fragment):
    result = aiperf("run", "--db", recorded_db, *args)
    assert result.returncode == 2
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1
    assert len(Store.open(recorded_db).list_runs()) == 1, "the earlier run is still recorded"


@pytest.mark.parametrize("url, fragment", [
    ("not a url", "is malformed"),
    ("nosuchdb://x/y", "unknown database kind"),
    ("sqlite:////no/such/folder/a.db", "does not exist"),
    ("postgresql+psycopg://aiperf:secret@127.0.0.1:1/aiperf", "cannot reach database"),
])
def test_bad_database_urls(url, fragment):
    result = aiperf("run", "--budget", "5s", "--db", url)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr
    assert "secret" not in result.stderr, "passwords are never printed"
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_show_unknown_run(recorded_db):
    result = aiperf("show", "999", "--db", recorded_db)
    assert result.returncode == 2 and "run 999 is not in" in result.stderr
