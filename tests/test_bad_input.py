"""Issue 25 item 11: every bad input is caught before anything is recorded (each setting parsed,
each path checked for writing), and a run that fails before its search is closed as failed."""

from __future__ import annotations

import os
import sqlite3

import pytest

from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.lifecycle.run import run_benchmark
from aiperf.lifecycle.stages import Stages
from aiperf.status import RunStatus
from aiperf.store import Store
from tests.test_cli_errors import aiperf, one_line_error, recorded_db  # noqa: F401 (a fixture)


def _newer_database(url: str) -> None:
    """A database as a newer aiperf leaves it: a schema revision this one does not know."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0999'")


BAD_RUNS = {
    "out names a file": (["--out", "{tmp}/a-file"], "cannot write there"),
    "out is read-only": (["--out", "/proc/aiperf-out"], "cannot write there"),
    "out is not UTF-8": (["--out", "{tmp}/x\udcff"], "not UTF-8"),
    "memory of a job": (["--cluster", "slurm", "--cluster-opt", "memory=abc"], "memory"),
    "walltime of a job": (["--cluster", "slurm", "--cluster-opt", "walltime=1x"], "walltime"),
    "binary profile": (["--profile", "{tmp}/binary.yaml"], "not UTF-8 text"),
    "newer database": ([], "written by a newer aiperf"),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_input_is_one_line_and_records_nothing(tmp_path, recorded_db, case):  # noqa: F811
    args, fragment = BAD_RUNS[case]
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    if case == "newer database":
        _newer_database(recorded_db)
    before = (
        sqlite3.connect(recorded_db.removeprefix("sqlite:///"))
        .execute("SELECT id, status FROM runs")
        .fetchall()
    )
    result = aiperf(
        "run", "--budget", "5s", "--db", recorded_db, *[a.format(tmp=tmp_path) for a in args]
    )
    one_line_error(result, fragment)
    after = (
        sqlite3.connect(recorded_db.removeprefix("sqlite:///"))
        .execute("SELECT id, status FROM runs")
        .fetchall()
    )
    assert after == before, "nothing was recorded"


def test_db_upgrade_refuses_a_newer_database_in_one_line(recorded_db):  # noqa: F811
    _newer_database(recorded_db)
    one_line_error(aiperf("db", "upgrade", "--db", recorded_db), "written by a newer aiperf")


def test_a_flow_run_checks_before_it_records(tmp_path):
    """A deployment's flow run comes through the story, not the CLI: it checks too."""
    (tmp_path / "a-file").write_text("")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    config = load_config("quick", budget="5s", db=url, out=str(tmp_path / "a-file"))
    with pytest.raises(UserError, match="cannot write there"):
        run_benchmark(config)
    assert not (tmp_path / "runs.db").exists() or Store.open(url).list_runs() == []


class _FailsAfterRecording(Stages):
    def recorded(self, config, run_id, event_log) -> None:
        raise OSError("the Prefect API went away")


def test_a_run_that_fails_before_its_search_is_closed_failed(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    config = load_config("quick", budget="5s", db=url, out=str(tmp_path / "out"))
    with pytest.raises(OSError, match="went away"):
        run_benchmark(config, _FailsAfterRecording())
    (run,) = Store.open(url).list_runs()
    assert run.status == RunStatus.FAILED and "went away" in (run.message or "")
    assert os.path.isdir(tmp_path / "out")
