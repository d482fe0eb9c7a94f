"""Crash recovery end to end: `aiperf run` killed with SIGKILL is shown lost, `aiperf recover` scores it
from its records, and `aiperf run --resume` continues it (a second copy of the database) with the
oracle's next proposal and every epoch reported before the kill; SIGTERM ends a run interrupted;
a run whose every trial fails stops at once with the first error."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_SIMULATED

from aiperf.cli.exit_codes import EXIT_INVALID
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import Store

AIPERF = str(Path(sys.executable).with_name("aiperf"))
# Simulated trials (seconds each) on a dataset as large as the simulated trainer reports.
SIMULATED = {
    **TINY_SIMULATED,
    "data.train_samples": 3000,
    "data.val_samples": 1000,
}


def _sets(settings: dict) -> list[str]:
    return [
        arg for key, value in settings.items() for arg in ("--set", f"{key}={json.dumps(value)}")
    ]


def _start(tmp_path: Path, db: Path, budget: str, settings: dict) -> subprocess.Popen:
    """`aiperf run` in its own session, so that killing its group kills its Dask workers too."""
    # --allow-concurrent: other tests may run at once on the test machine.
    return subprocess.Popen(
        [
            AIPERF,
            "run",
            "--allow-concurrent",
            "--budget",
            budget,
            "--workers",
            "2",
            "--seed",
            "3",
            "--db",
            f"sqlite:///{db}",
            "--out",
            str(tmp_path / "out"),
            *_sets(settings),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
    )


def _count(db: Path, sql: str) -> int:
    try:
        with sqlite3.connect(db) as connection:
            return connection.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0  # not created or migrated yet


def _wait_for(db: Path, process: subprocess.Popen, timeout_s: float = 180) -> None:
    """Until two epochs are recorded and one trial completed (so the oracle has a score to grow)."""
    end = time.time() + timeout_s
    while time.time() < end:
        if (
            _count(db, "SELECT COUNT(*) FROM epochs") >= 2
            and _count(db, "SELECT COUNT(*) FROM trials WHERE status = 'completed'") >= 1
        ):
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    raise AssertionError("no two epochs were recorded in time")


def _copy(db: Path, to: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", f"{to}{suffix}")
    return to


def _aiperf(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AIPERF, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "250", **env},
    )


def _epochs(url: str, run_id: int) -> list[tuple[str, int]]:
    with Store.open_existing(url) as store:
        return [(t.trial_key, e.epoch) for t in store.get_run(run_id).trials for e in t.epochs]


def _expected_next_proposal(url: str, run_id: int, tmp_path: Path) -> dict:
    """What the crashed run's oracle proposes next: a fresh oracle given the stored state and records."""
    from aiperf.lifecycle.recovery import stored_config
    from aiperf.search.oracles import make_oracle
    from aiperf.search.resume import restore

    with Store.open_existing(url) as store:
        record, state = store.get_run(run_id), store.search_state(run_id)
    config = stored_config(record, url)
    oracle = make_oracle(config, (16, 16, 3), 10)
    restore(oracle, state, record.trials, config.search.objective)
    trial = oracle.create_trial("expected")
    assert trial.status == "RUNNING"
    return dict(trial.hyperparameters.values)


def _window_checks_pass(record) -> None:
    """The checks about the window and the verdict pass (the simulated trainer's operation counts
    are modelled, so the recount checks cannot)."""
    checks = {c.check: c for c in record.verification}
    for name in ("elapsed_time", "epochs_inside_window", "validity_rules", "best_accuracy"):
        assert checks[name].passed, checks[name]


def _values(trial) -> dict:
    from aiperf.search.resume import trial_values

    values = trial_values(trial)
    values["architecture"] = json.loads(values["architecture"])
    return values


@pytest.mark.slow
def test_a_killed_run_is_lost_then_recovered_or_resumed(tmp_path):
    db = tmp_path / "aiperf.db"
    process = _start(tmp_path, db, "25s", SIMULATED)
    try:
        _wait_for(db, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    url = f"sqlite:///{db}"
    from test_ownership import age_heartbeat

    with Store.open(url, migrate=False) as store:  # as if it died a minute ago (the timeout: 60 s)
        age_heartbeat(store, 1, 61)
    copy = _copy(db, tmp_path / "copy.db")
    copy_url = f"sqlite:///{copy}"
    before = _epochs(url, 1)
    assert len(before) >= 2

    listed = _aiperf("runs", "--db", url)
    assert listed.returncode == 0 and "lost" in listed.stdout and "running" not in listed.stdout, (
        listed.stdout
    )
    shown = _aiperf("show", "1", "--db", url)
    assert "is lost" in shown.stdout, shown.stdout

    recovered = _aiperf("recover", "1", "--db", url)
    assert recovered.returncode == 0, recovered.stderr
    with Store.open_existing(url) as store:
        record = store.get_run(1)
    assert record.status is RunStatus.INTERRUPTED and record.message.startswith(
        "recovered after a crash"
    )
    assert record.score is not None and not record.score.valid
    assert any(r.startswith("recovered after a crash") for r in record.score.reasons)
    _window_checks_pass(record)
    assert TrialStatus.RUNNING not in {t.status for t in record.trials}
    last_epoch = max(e.ended_at for t in record.trials for e in t.epochs)
    assert record.windows[0].ended_at == last_epoch, "the window ends at the last recorded epoch"
    assert record.score.total_ops > 0 and sorted(_epochs(url, 1)) == sorted(before)

    expected = _expected_next_proposal(copy_url, 1, tmp_path)
    with Store.open_existing(copy_url) as store:
        crashed = store.get_run(1)
    was_running = [t for t in crashed.trials if t.status is TrialStatus.RUNNING]
    resumed = _aiperf(
        "run",
        "--allow-concurrent",
        "--resume",
        "1",
        "--db",
        copy_url,
    )
    # A simulated trainer's result is verified and invalid (aiperf.cli.exit_codes)
    assert resumed.returncode == EXIT_INVALID, resumed.stderr[-3000:]
    with Store.open_existing(copy_url) as store:
        record = store.get_run(1)
    assert record.status is RunStatus.COMPLETED and len(record.windows) == 2
    new = [t for t in record.trials if t.number >= len(crashed.trials)]
    retrained, proposed = new[: len(was_running)], new[len(was_running) :]
    assert [_values(t) for t in retrained] == [_values(t) for t in was_running], (
        "interrupted trials train again"
    )
    assert {t.trial_key: t.status for t in record.trials if t.number < len(crashed.trials)} == {
        t.trial_key: TrialStatus.INTERRUPTED if t.status is TrialStatus.RUNNING else t.status
        for t in crashed.trials
    }
    expected["architecture"] = json.loads(expected["architecture"])
    assert proposed and _values(proposed[0]) == expected, (
        "the oracle proposes what the crashed one would have"
    )
    after = _epochs(copy_url, 1)
    assert all(after.count(epoch) == 1 for epoch in before), (
        "every epoch reported before the kill, once"
    )
    elapsed = sum(w.length_s for w in record.windows)
    assert record.score.elapsed_s == pytest.approx(elapsed)
    assert (record.windows[1].started_at - record.windows[0].ended_at).total_seconds() > 0, (
        "the gap is not counted"
    )
    _window_checks_pass(record)
    # The report's score over time runs on the window's own clock, so it ends at the headline.
    from aiperf.report.timeline import (
        aiperf_checkpoints,
        counted_seconds,
        judge_of,
        score_over_time,
    )

    with Store.open_existing(copy_url) as store:
        counted = counted_seconds(record)
        assert counted == pytest.approx(elapsed)
        last = score_over_time(record, aiperf_checkpoints(counted), judge_of(store, record))[-1]
    assert last.ops == pytest.approx(record.score.ops, rel=1e-9)


@pytest.mark.slow
def test_sigterm_ends_a_run_interrupted_with_its_epochs_recorded(tmp_path):
    db = tmp_path / "aiperf.db"
    process = _start(tmp_path, db, "60s", SIMULATED)
    try:
        _wait_for(db, process)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    with Store.open_existing(f"sqlite:///{db}") as store:
        record = store.get_run(1)
    assert record.status is RunStatus.INTERRUPTED, (record.status, record.message, err[-2000:])
    assert "SIGTERM" in (record.message or "")
    assert TrialStatus.RUNNING not in {t.status for t in record.trials}
    assert record.windows[0].ended_at is not None
    recovered = _aiperf("recover", "1", "--db", f"sqlite:///{db}")
    assert recovered.returncode == 0, recovered.stderr


@pytest.mark.slow
def test_a_run_where_every_trial_fails_stops_at_once_with_the_first_error(
    tmp_path, make_image_folder
):
    db = tmp_path / "aiperf.db"
    # A folder of 30 training images and batches of 64: the config cannot know how many images the
    # folder holds, so every trial discovers it when it opens its data, and fails.
    folder = make_image_folder(tmp_path / "images", train_per_class=10, val_per_class=4)
    started = time.time()
    process = _start(
        tmp_path,
        db,
        "30m",
        {
            "data.kind": "folder",
            "data.source": str(folder),
            "data.image_size": 16,
            "search.space.batch_size": [64],
            "train.epochs": 1,
        },
    )
    _out, err = process.communicate(timeout=240)
    took = time.time() - started
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert process.returncode == 2, err[-3000:]
    assert len(lines) == 1 and "failed in a row and none completed" in lines[0], err[-2000:]
    assert "batch size 64 is larger than the" in lines[0], lines[0]
    with Store.open_existing(f"sqlite:///{db}") as store:
        (record,) = store.list_runs()
    assert record.status is RunStatus.FAILED and "failed in a row" in record.message
    print(f"fail-fast run took {took:.1f} s")
    assert took < 120
