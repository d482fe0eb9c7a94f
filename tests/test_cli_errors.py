"""Each bad input is one line naming the problem, exit status 2, no traceback, and nothing
already recorded is lost."""

import os
import subprocess
import sys

import pytest

from aiperf.store import RunStart, Store

SYSTEM = {
    "fingerprint": "0" * 64,
    "hostname": "h",
    "cpu_model": "c",
    "cpu_cores": 1,
    "memory_bytes": 1,
    "gpus": {"count": 0, "models": []},
    "platform": "p",
    "python_version": "3",
    "tensorflow_version": None,
    "keras_version": "3",
    "keras_backend": "tensorflow",
}


def aiperf(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiperf.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        # the session's own run lock (conftest), and runs pass --allow-concurrent: what they check
        # is refused before any run starts, and a test's run elsewhere must not refuse them first
        env={
            "COLUMNS": "300",
            "PATH": "/usr/bin:/bin",
            "AIPERF_RUN_LOCK": os.environ["AIPERF_RUN_LOCK"],
        },
        cwd=cwd,
    )


def one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.fixture
def recorded_db(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.db'}"
    store = Store.open(url)
    store.create_run(
        RunStart(profile="quick", config={}, seed=0, budget_s=1, workers=1),
        system_id=store.upsert_system(SYSTEM),
    )
    store.close()
    return url


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--profile", "nope"], "unknown profile 'nope'"),
        (["--budget", "0"], "--budget must be positive"),
        (["--budget", "-5s"], "not a duration"),
        # past any run that can finish (and past the year 9999 a deadline's date can hold)
        (["--budget", "99999999h"], "--budget 99999999h is more than the longest budget"),
        (["--budget", "721h"], "aiperf takes, 30 days"),
        (["--workers", "4096"], "more than this machine can hold"),
        (["--workers", "0"], "at least 1"),
        (["--set", "nonsense"], "is not KEY=VALUE"),
        (["--workers", "2", "--cluster-opt", "cores=2"], "cluster.cores 2 per worker x 2 workers"),
        (["--set", "train.epochs=0"], "train.epochs"),
        (["--set", "data.kind=tfrecord"], "needs data.source"),
        (
            ["--set", "data.kind=folder", "--set", "data.source=/no/such/images"],
            "/no/such/images does not exist",
        ),
    ],
)
def test_bad_run_settings(recorded_db, args, fragment):
    result = aiperf("run", "--allow-concurrent", "--db", recorded_db, *args)
    assert result.returncode == 2
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1
    assert len(Store.open(recorded_db).list_runs()) == 1, "the earlier run is still recorded"


@pytest.mark.parametrize(
    "url, fragment",
    [
        ("not a url", "is malformed"),
        ("nosuchdb://x/y", "unknown database kind"),
        ("sqlite:////no/such/folder/a.db", "does not exist"),
        ("postgresql+psycopg://aiperf:secret@127.0.0.1:1/aiperf", "cannot reach database"),
    ],
)
def test_bad_database_urls(url, fragment):
    result = aiperf("run", "--allow-concurrent", "--budget", "5s", "--db", url)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr
    assert "secret" not in result.stderr, "passwords are never printed"
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_show_unknown_run(recorded_db):
    result = aiperf("show", "999", "--db", recorded_db)
    assert result.returncode == 2 and "run 999 is not in" in result.stderr


READ_ONLY = [["runs"], ["show", "1"], ["history"], ["compare", "1", "2"], ["report", "1"]]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_never_create_a_database(tmp_path, command):
    result = aiperf(*command, "--db", "sqlite:///typo/nothere.db", cwd=tmp_path)
    one_line_error(result, "typo/nothere.db")
    assert list(tmp_path.iterdir()) == [], "nothing was created"


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_refuse_a_file_that_is_not_a_database(tmp_path, command):
    (tmp_path / "some-text-file").write_text("these are my notes, not a database\n")
    result = aiperf(*command, "--db", "sqlite:///some-text-file", cwd=tmp_path)
    one_line_error(result, "not an SQLite database")
    assert (tmp_path / "some-text-file").read_text() == "these are my notes, not a database\n"


def test_read_only_commands_ask_for_an_upgrade_then_db_upgrade_does_it(recorded_db):
    from aiperf.store import database

    engine = database.open_engine(recorded_db)
    database.downgrade(engine, "0003")
    engine.dispose()
    one_line_error(aiperf("runs", "--db", recorded_db), "aiperf db upgrade")
    engine = database.open_engine(recorded_db)
    assert database.current_revision(engine) == "0003", "a read-only command did not migrate"
    engine.dispose()
    upgraded = aiperf("db", "upgrade", "--db", recorded_db)
    assert (
        upgraded.returncode == 0 and f"to revision {database.head_revision()}" in upgraded.stdout
    ), upgraded.stderr
    listed = aiperf("runs", "--db", recorded_db)
    assert listed.returncode == 0 and "quick" in listed.stdout, listed.stderr
