"""One writer per run (issue 25 item 8): a run belongs to the process holding its owner token;
`aiperf recover` and `aiperf run --resume` take it over only by compare-and-set on that token, on
the database's clock, and only when its heartbeat is older than a timeout of at least three beats;
the process that lost its run writes nothing more and stops.

The store-level tests run on SQLite and PostgreSQL (`db_url`); the end-to-end test recovers a real
live `aiperf run`: refused while it beats, taken over once it stopped beating (SIGSTOP), and the
old process, continued, stops with one line and writes no epoch into the recovered run."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import update
from test_history_data import system_facts
from test_resume import SIMULATED, _aiperf, _start, _wait_for
from test_store import built, new_trial
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.errors import UserError
from aiperf.lifecycle import liveness
from aiperf.status import HEARTBEAT_S, RunStatus, TrialStatus, heartbeat_timeout_s
from aiperf.store import EpochReport, RunClaim, RunStart, RunTakenOver, Store, TrialEnd, WriteBatch
from aiperf.store.database import clock
from aiperf.store.models import Run


def age_heartbeat(store: Store, run_id: int, seconds: float) -> None:
    """The run's last heartbeat `seconds` ago on the database's clock: what a process that stopped
    beating that long ago leaves (tests need not wait out the timeout)."""
    with store.session() as s:
        s.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(heartbeat_at=clock(store.engine.dialect.name, seconds))
        )


def _owned_run(store: Store) -> RunClaim:
    """A run this process created with its token, as a run's process does (record_run)."""
    return store.create_run(
        RunStart(profile="quick", config={"profile": "quick"}, seed=1, budget_s=60.0, workers=1),
        system_id=store.upsert_system(system_facts("node-a")),
        owner=liveness.new_owner(),
    )


@pytest.fixture
def store(db_url):
    with Store.open(db_url) as opened:
        yield opened


def test_a_run_is_taken_over_only_when_its_heartbeat_is_older_than_the_timeout(store):
    claim = _owned_run(store)
    run_id, owner = claim.run_id, claim.owner
    record = store.get_run(run_id)
    assert record.owner == owner
    taker = liveness.new_owner()
    assert store.take_over(run_id, owner=taker, seen_owner=owner, timeout_s=60) is None, (
        "its process beats: a live run is not taken"
    )
    age_heartbeat(store, run_id, 61)
    assert (
        store.take_over(run_id, owner=taker, seen_owner="not-its-token", timeout_s=60) is None
    ), "a taker that read another token takes nothing"
    assert store.take_over(run_id, owner=taker, seen_owner=owner, timeout_s=60) == RunClaim(
        run_id, taker
    )
    assert store.get_run(run_id).owner == taker
    assert store.get_run(run_id).status is RunStatus.RUNNING, "taking stamps a fresh heartbeat"


def test_of_two_takers_at_once_one_wins(store, db_url):
    claim = _owned_run(store)
    run_id = claim.run_id
    age_heartbeat(store, run_id, 61)
    takers = [liveness.new_owner() for _ in range(2)]
    won: dict[str, RunClaim | None] = {}
    start = threading.Barrier(2)

    def take(token: str) -> None:
        with Store.open(db_url, migrate=False) as mine:  # each its own connections
            start.wait()
            won[token] = mine.take_over(run_id, owner=token, seen_owner=claim.owner, timeout_s=60)

    threads = [threading.Thread(target=take, args=(token,)) for token in takers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken is not None for taken in won.values()) == [False, True]
    (winner,) = [token for token, taken in won.items() if taken is not None]
    assert store.get_run(run_id).owner == winner


def test_the_process_that_lost_its_run_writes_nothing_more(store):
    claim = _owned_run(store)
    run_id = claim.run_id
    store.start_search(claim, time.time(), time.time() + 60)
    trial = new_trial(store, run_id, 0)
    built(store, trial)
    age_heartbeat(store, run_id, 61)
    taken = store.take_over(
        run_id, owner=liveness.new_owner(), seen_owner=claim.owner, timeout_s=60
    )
    assert taken is not None
    with pytest.raises(RunTakenOver, match="taken over by another process"):
        store.heartbeat(claim)
    batch = WriteBatch()
    batch.record_epoch(
        trial,
        EpochReport("k0", 0, time.time() - 1, time.time(), 10, 5, 1.0, 0.5, 1.0, 0.5, True),
    )
    with pytest.raises(RunTakenOver):
        store.write(batch, claim)
    with pytest.raises(RunTakenOver):
        store.finish_run(claim, status=RunStatus.COMPLETED)
    with pytest.raises(RunTakenOver):
        store.finish_search(claim, time.time())
    with pytest.raises(RunTakenOver):
        store.record_peaks(claim, [])
    record = store.get_run(run_id)
    assert record.stored_status is RunStatus.RUNNING and not record.trials[0].epochs, (
        "nothing of the old process's was written"
    )
    store.write(batch, taken)  # the taker's claim writes
    store.heartbeat(taken)
    assert len(store.get_run(run_id).trials[0].epochs) == 1


def test_a_run_taken_over_holds_back_no_other_run_of_its_old_process(store):
    earlier, later = _owned_run(store), _owned_run(store)
    trial = new_trial(store, later.run_id, 0)
    with store.session() as s:  # the earlier run, ended here, taken over since by another process
        s.execute(update(Run).where(Run.id == earlier.run_id).values(owner=liveness.new_owner()))
    batch = WriteBatch()
    batch.finish_trial(trial, TrialEnd("k0", TrialStatus.COMPLETED, time.time()))
    with pytest.raises(RunTakenOver):
        store.write(batch, earlier)
    store.write(batch, later)  # each claim is checked alone: no table of this process's runs
    assert store.get_run(later.run_id).trials[0].status is TrialStatus.COMPLETED


def test_the_heartbeat_timeout_is_at_least_three_heartbeats(monkeypatch, tmp_path):
    monkeypatch.setenv("AIPERF_HEARTBEAT_TIMEOUT", str(3 * HEARTBEAT_S))
    assert heartbeat_timeout_s() == 3 * HEARTBEAT_S
    monkeypatch.setenv("AIPERF_HEARTBEAT_TIMEOUT", "0.01")
    with pytest.raises(UserError, match="less than 3 heartbeats"):
        heartbeat_timeout_s()
    url = f"sqlite:///{tmp_path / 'aiperf.db'}"
    with Store.open(url) as store:
        run_id = _owned_run(store).run_id
    result = CliRunner().invoke(app, ["recover", str(run_id), "--db", url])
    assert result.exit_code == 2 and "less than 3 heartbeats" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    monkeypatch.delenv("AIPERF_HEARTBEAT_TIMEOUT")
    with Store.open_existing(url) as store:
        assert store.get_run(run_id).status is RunStatus.RUNNING, "nothing was written"


def _epochs(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]


@pytest.mark.slow
def test_recovering_a_live_run_is_refused_and_a_taken_run_stops_its_old_process(tmp_path):
    db = tmp_path / "aiperf.db"
    url = f"sqlite:///{db}"
    # A budget no slow machine spends before the two refusals below (a 40 s run had completed by
    # the second on a 1.2-CPU reproduction); the takeover stops the run, so it costs no more.
    process = _start(tmp_path, db, "120s", SIMULATED)
    try:
        _wait_for(db, process)
        # Live: refused, at the shortest timeout and at the one that used to close a live run.
        for timeout, why in ((str(3 * HEARTBEAT_S), "run 1 is running"), ("0.01", "3 heartbeats")):
            refused = _aiperf("recover", "1", "--db", url, AIPERF_HEARTBEAT_TIMEOUT=timeout)
            assert refused.returncode == 2, refused.stderr
            errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and why in errors[0], refused.stderr
        with Store.open_existing(url) as store:
            assert store.get_run(1).status is RunStatus.RUNNING and store.get_run(1).score is None

        # Its process stops beating (stopped, as a machine that hangs): once its heartbeat is older
        # than the timeout the run is taken over and recovered, while the process still exists.
        os.killpg(process.pid, signal.SIGSTOP)
        with Store.open(url, migrate=False) as store:
            age_heartbeat(store, 1, 61)
        recovered = _aiperf("recover", "1", "--db", url)
        assert recovered.returncode == 0, recovered.stderr
        epochs = _epochs(db)
        os.killpg(process.pid, signal.SIGCONT)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGCONT)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 5, err[-3000:]  # not 2: nothing in its command was wrong
    assert "taken over by another process" in err, err[-3000:]
    with Store.open_existing(url) as store:
        record = store.get_run(1)
    assert record.status is RunStatus.INTERRUPTED
    assert record.message is not None and record.message.startswith("recovered after a crash")
    assert _epochs(db) == epochs, "the old process wrote no epoch after the takeover"
