"""Runs at once: two first runs on one fresh database both succeed (migrations lock, the system row is
an upsert), their files never collide, and a second local run on one machine is refused unless
--allow-concurrent."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_SIMULATED
from test_history_data import system_facts

from aiperf import paths, settings
from aiperf.cli.exit_codes import EXIT_INVALID
from aiperf.config import load_config
from aiperf.paths import try_hold
from aiperf.status import RunStatus
from aiperf.store import RunStart, Store


def _first_run(db_url: str, barrier, results) -> None:
    """One process's first run: open (migrating), upsert the system, create the run."""
    try:
        barrier.wait()
        with Store.open(db_url) as store:
            system_id = store.upsert_system(system_facts("node-a"))
            results.put(
                store.create_run(
                    RunStart(profile="quick", config={}, seed=1, budget_s=60.0, workers=1),
                    system_id=system_id,
                ).run_id
            )
    except Exception as exc:  # noqa: BLE001 - reported by the test
        results.put(repr(exc))


def test_first_runs_opening_a_fresh_database_at_once_all_succeed(db_url):
    """Four processes (as runs are: Alembic is not thread-safe) each migrate or find the work done,
    and upsert the same system: four runs, one system row."""
    # Forked from a fork server that imported this module once, not from this pytest worker: a
    # child forked from a process with threads (execnet's in a pytest-xdist worker, the session's
    # Prefect clients') can inherit a lock one of them held and hang (both parametrisations did, in
    # a full run). The children still start at once, with nothing to import again.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    barrier, results = context.Barrier(4), context.Queue()
    openers = [
        context.Process(target=_first_run, args=(db_url, barrier, results)) for _ in range(4)
    ]
    for opener in openers:
        opener.start()
    run_ids = [results.get(timeout=120) for _ in openers]
    for opener in openers:
        opener.join(60)
    assert all(isinstance(run_id, int) for run_id in run_ids), run_ids
    with Store.open_existing(db_url) as store:
        assert (
            sorted(r.id for r in store.list_runs()) == sorted(run_ids) and len(set(run_ids)) == 4
        )
        assert len(store.find_systems()) == 1


def test_reports_and_run_folders_of_different_databases_never_share_a_name(tmp_path):
    configs = [
        load_config(
            "quick", db=f"sqlite:///{tmp_path / name / 'aiperf.db'}", out=str(tmp_path / "out")
        )
        for name in ("a", "b")
    ]
    reports = {paths.report_path(config.out, config.db, 1) for config in configs}
    folders = {paths.run_folder(config.out, config.db, 1) for config in configs}
    assert len(reports) == 2 and len(folders) == 2
    assert all(
        p.parent == tmp_path / "out" / "reports"
        and p.name.startswith("aiperf-report-aiperf-")
        and p.name.endswith("-1.html")
        for p in reports
    )


def _aiperf(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "aiperf.cli.main", *args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _tiny_run_args(db: str, out: Path) -> list[str]:
    """A tiny run's arguments, with the simulated trainer: what these tests ask of two runs at once
    (the database they share, their files, the lock) is the same whatever trains."""
    settings = [f"--set={key}={json.dumps(value)}" for key, value in TINY_SIMULATED.items()]
    return [
        "run",
        "--budget",
        "8s",
        "--workers",
        "1",
        "--seed",
        "2",
        "--db",
        db,
        "--out",
        str(out),
        *settings,
    ]


def test_a_second_local_run_is_refused_in_one_line(tmp_path):
    lock = tmp_path / "local-run.lock"
    env = {**os.environ, settings.RUN_LOCK.name: str(lock), "COLUMNS": "300"}
    holder = try_hold(lock)  # a local run is running
    assert holder is not None
    try:
        refused = _aiperf(
            *_tiny_run_args("sqlite:///aiperf.db", tmp_path / "out"), cwd=tmp_path, env=env
        )
        stdout, stderr = refused.communicate(timeout=120)
    finally:
        os.close(holder)
    assert refused.returncode == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "another local aiperf run is running" in lines[0]
        and "--allow-concurrent" in lines[0]
    )
    assert not (tmp_path / "aiperf.db").exists(), "refused before anything was written"


@pytest.mark.slow
def test_two_concurrent_first_runs_on_one_fresh_sqlite_database_both_finish(prefect_api, tmp_path):
    from prefect.settings import PREFECT_API_URL

    db = f"sqlite:///{tmp_path / 'shared.db'}"
    # The session's Prefect API for both (conftest.prefect_api): a temporary server of their own
    # each would cost a minute of CPU on a 2-core machine and test nothing of the database's.
    env = {**os.environ, "COLUMNS": "200", "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    runs = [
        _aiperf(*_tiny_run_args(db, tmp_path / "out"), "--allow-concurrent", cwd=tmp_path, env=env)
        for _ in range(2)
    ]
    for process in runs:
        stdout, stderr = process.communicate(timeout=600)
        # 8 s is under the profile's minimum budget: verified, and invalid (aiperf.cli.exit_codes)
        assert process.returncode == EXIT_INVALID, stdout[-3000:] + stderr[-3000:]
        assert "regulated score" in stdout
    with Store.open_existing(db) as store:
        records = store.list_runs()
    assert sorted(r.id for r in records) == [1, 2]
    assert all(r.status is RunStatus.COMPLETED and r.score is not None for r in records)
    reports = sorted(p.name for p in (tmp_path / "out" / "reports").iterdir())
    assert len(reports) == 2 and reports[0].endswith("-1.html") and reports[1].endswith("-2.html")
