"""Database faults: a locked SQLite file and a PostgreSQL restart in the middle of a run. Writes wait
and retry (aiperf.store.retry), the run completes, and every epoch is recorded exactly once."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from claims import claim_of
from conftest import TINY_SIMULATED
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from test_history_data import system_facts

from aiperf.config import load_config
from aiperf.lifecycle import run
from aiperf.status import RunStatus
from aiperf.store import EpochReport, RunClaim, RunStart, Store, TrialStart, WriteBatch
from aiperf.store.retry import is_transient

ROOT = Path(__file__).resolve().parents[1]
DUPLICATE_EPOCHS = (
    "SELECT trial_id, epoch, COUNT(*) FROM epochs GROUP BY trial_id, epoch HAVING COUNT(*) > 1"
)


@pytest.fixture
def short_busy_timeout(monkeypatch):
    """SQLite gives up on a lock after 0.2 s, so the Store's retries (not the busy wait) carry a run."""
    monkeypatch.setenv("AIPERF_SQLITE_BUSY_TIMEOUT_S", "0.2")


def _hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another connection holds the file's write lock (BEGIN EXCLUSIVE plus a write) for `seconds`."""
    locked = threading.Event()

    def hold() -> None:
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN EXCLUSIVE")
        connection.execute("CREATE TABLE IF NOT EXISTS lock_holder (x INTEGER)")
        locked.set()
        time.sleep(seconds)
        connection.execute("ROLLBACK")
        connection.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert locked.wait(10)
    return holder


def _new_run(store: Store) -> int:
    system_id = store.upsert_system(system_facts("node-a"))
    return store.create_run(
        RunStart(profile="quick", config={}, seed=1, budget_s=60.0, workers=1), system_id=system_id
    ).run_id


# --- the Store's retry, one transaction at a time ------------------------------------------------


def _one_write(store: Store, claim: RunClaim, add: Callable[[WriteBatch], None]) -> Any:
    """One write the orchestrator's turn would make, committed as its turn is (Store.write); its
    result (a new trial's id, whether an epoch was new)."""
    batch = WriteBatch()
    add(batch)
    return store.write(batch, claim)[0]


def test_a_write_waits_out_a_lock_held_longer_than_the_busy_timeout(
    sqlite_url, tmp_path, short_busy_timeout, caplog
):
    # Held 3 s: SQLite's busy wait counts the sleeps it asks for, not the time they take, so on a
    # loaded machine its 0.2 s stretched to outlast a lock held for 1 s, and no retry was needed.
    with Store.open(sqlite_url) as store:
        holder = _hold_write_lock(tmp_path / "aiperf.db", 3.0)
        began = time.monotonic()
        run_id = _new_run(store)
        waited = time.monotonic() - began
        holder.join()
        assert [r.id for r in store.list_runs()] == [run_id]
    assert waited >= 2.5, "the write waited for the lock"
    assert any("retrying" in r.getMessage() for r in caplog.records if r.name == "aiperf.store")


def test_a_lock_that_outlasts_the_retry_budget_fails_the_write(
    sqlite_url, tmp_path, short_busy_timeout
):
    with Store.open(sqlite_url) as opened, Store(opened.engine, retry_s=0.5) as store:
        holder = _hold_write_lock(tmp_path / "aiperf.db", 2.0)
        with pytest.raises(OperationalError, match="locked"):
            _new_run(store)
        holder.join()


def test_only_transient_faults_are_retried(sqlite_url, tmp_path, short_busy_timeout):
    engine = create_engine(sqlite_url)
    with pytest.raises(OperationalError) as missing:
        with engine.connect() as connection:
            connection.execute(text("SELECT * FROM no_such_table"))
    assert not is_transient(missing.value), "a missing table is a real error"
    with Store.open(sqlite_url) as opened, Store(opened.engine, retry_s=0) as store:
        holder = _hold_write_lock(tmp_path / "aiperf.db", 1.0)
        with pytest.raises(OperationalError) as locked:
            _new_run(store)
        holder.join()
    assert is_transient(locked.value), "a locked database is transient"
    engine.dispose()


def test_a_retry_after_a_lost_commit_acknowledgement_records_nothing_twice(db_url):
    """The commit takes effect, then the connection drops before the client hears of it: each write
    is tried again, and finds its own row instead of adding another."""
    with Store.open(db_url) as store:
        lost = {"left": 0}

        @event.listens_for(store._sessions, "after_commit")
        def drop_acknowledgement(_session) -> None:
            if lost["left"]:
                lost["left"] -= 1
                raise OperationalError(
                    "COMMIT",
                    {},
                    ConnectionError("server closed the connection"),
                    connection_invalidated=True,
                )

        def once(write):
            lost["left"] = 1
            result = write()
            assert lost["left"] == 0, "the acknowledgement was lost once"
            return result

        run_id = once(lambda: _new_run(store))
        claim = claim_of(store, run_id)  # the run's process's, read outside the faulty commits
        start = TrialStart("k0", 0, time.time(), None, None, {}, {}, epochs=1, seed=0)
        trial_id = once(lambda: _one_write(store, claim, lambda b: b.create_trial(run_id, start)))
        manifest = {
            "name": "d",
            "kind": "synthetic",
            "sha256": "0" * 64,
            "train_samples": 10,
            "val_samples": 5,
            "classes": 2,
        }
        once(lambda: store.record_dataset(claim, manifest))
        epoch = EpochReport(
            "k0",
            epoch=0,
            started_at=time.time(),
            ended_at=time.time() + 1,
            samples_trained=8,
            samples_evaluated=4,
            loss=1.0,
            accuracy=0.5,
            val_loss=1.0,
            val_accuracy=0.5,
            complete=True,
        )

        def record_epoch() -> bool:
            return _one_write(store, claim, lambda b: b.record_epoch(trial_id, epoch))

        assert once(record_epoch) is True, "recorded, and said so once"
        assert record_epoch() is False, "a repeated event is still ignored"
        with store.engine.connect() as connection:
            counts = {
                table: connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
                for table in ("runs", "trials", "datasets", "epochs")
            }
    assert counts == {"runs": 1, "trials": 1, "datasets": 1, "epochs": 1}


# --- faults in the middle of a real run ------------------------------------------------------------


def _config(db: str, tmp_path: Path):
    """Two workers' run with the simulated trainer: the faults (a write that meets the lock, a
    restarted server, every epoch recorded once) test the store whatever trains, and modelled
    trials record epochs all through the window, not only after a Keras trial's first epoch."""
    return load_config(
        "quick",
        budget="12s",
        workers=2,
        db=db,
        seed=5,
        out=str(tmp_path / "out"),
        overrides=TINY_SIMULATED,
    )


def _epochs(db: str) -> int:
    engine = create_engine(db)
    try:
        with engine.connect() as connection:
            return connection.execute(text("SELECT COUNT(*) FROM epochs")).scalar_one()
    except (OperationalError, ProgrammingError):  # the schema is not there yet
        return 0
    finally:
        engine.dispose()


def _run_with_a_fault(config, url: str, fault) -> tuple[run.RunOutcome, int]:
    """Run the benchmark in a thread; once two epochs are recorded in `url` (the database with its
    password: the config's has none), inject `fault()`; return the outcome and the epochs recorded
    before the fault."""
    result: dict = {}

    def benchmark() -> None:
        try:
            result["outcome"] = run.run_benchmark(config)
        except BaseException as exc:  # noqa: BLE001 - shown by the assertions below
            result["error"] = exc

    runner = threading.Thread(target=benchmark, daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while (before := _epochs(url)) < 2:
        assert runner.is_alive() and time.monotonic() < deadline, (
            f"no two epochs recorded: {result}"
        )
        time.sleep(0.1)
    fault()
    runner.join(180)
    assert "outcome" in result, f"the run did not complete: {result}"
    return result["outcome"], before


def _assert_completed_once(db: str, outcome: run.RunOutcome, before: int) -> None:
    with Store.open_existing(db) as store:
        record = store.get_run(outcome.run_id)
        with store.engine.connect() as connection:
            duplicates = connection.execute(text(DUPLICATE_EPOCHS)).all()
    assert (
        record.status is RunStatus.COMPLETED
        and record.score is not None
        and outcome.score.total_ops > 0
    )
    assert duplicates == []
    assert sum(len(t.epochs) for t in record.trials) > before, (
        "epochs were recorded after the fault"
    )


@pytest.mark.slow
def test_a_run_waits_for_an_sqlite_write_lock_and_completes(tmp_path, short_busy_timeout, caplog):
    caplog.set_level(logging.WARNING, logger="aiperf.store")
    config = _config(f"sqlite:///{tmp_path / 'aiperf.db'}", tmp_path)
    outcome, before = _run_with_a_fault(
        config, config.db, lambda: _hold_write_lock(tmp_path / "aiperf.db", 2.0).join()
    )
    _assert_completed_once(config.db, outcome, before)
    assert any("retrying" in r.getMessage() for r in caplog.records), (
        "a write met the lock and waited"
    )


@pytest.fixture
def private_postgres():
    """A PostgreSQL server of this test's own (infra/postgres/ctl.sh, AIPERF_PG_SERVICE), so that
    restarting it cuts nobody else's connections; yields a fresh database's URL and `restart(s)`."""
    env = {**os.environ, "AIPERF_PG_SERVICE": "postgres-faults"}
    ctl = str(ROOT / "infra" / "postgres" / "ctl.sh")
    started = subprocess.run([ctl, "start"], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    server = started.stdout.strip().rpartition("=")[2]

    def restart(down_s: float) -> None:
        subprocess.run([ctl, "restart", str(down_s)], env=env, check=True, timeout=120)

    try:
        yield server, restart
    finally:
        subprocess.run([ctl, "stop"], env=env, timeout=120)


@pytest.mark.slow
def test_a_run_survives_a_postgresql_restart_and_records_every_epoch_once(
    private_postgres, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="aiperf.store")
    server, restart = private_postgres
    config = _config(server, tmp_path)
    outcome, before = _run_with_a_fault(config, server, lambda: restart(1.5))
    _assert_completed_once(config.db, outcome, before)
