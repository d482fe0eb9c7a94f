"""The run recorder (aiperf.lifecycle.recorder): each fact of a run written as its owner, rows and
event-log lines together. A process whose run was taken over gets RunTakenOver from every one of
its recorder's methods, and neither a row nor a line is written: the claim is checked in the
write's transaction, and the events follow the commit. On SQLite and PostgreSQL (`db_url`)."""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from test_history_data import system_facts
from test_ownership import age_heartbeat

from aiperf.lifecycle import liveness
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.results import mllog
from aiperf.results.mllog import EventLog, read_events
from aiperf.results.score import ScoreResult
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import (
    CheckRecord,
    EpochReport,
    RunStart,
    RunTakenOver,
    Store,
    TrialBuilt,
    TrialEnd,
    TrialStart,
)
from aiperf.store.models import Base
from aiperf.store.records import TrialPhases

T0 = time.time() - 3600
SCORE = ScoreResult(
    elapsed_s=60.0,
    total_ops=10**9,
    ops=1.6e7,
    tensor_ops=1e7,
    best_val_accuracy=0.5,
    val_samples=1000,
    regulated_score=1e7,
    trials_completed=1,
    samples_trained=100,
    samples_evaluated=10,
    valid=True,
)
MANIFEST = {
    "name": "d",
    "kind": "synthetic",
    "sha256": "ab" * 32,
    "train_samples": 64,
    "val_samples": 32,
    "classes": 10,
}
PEAKS = [{"worker": "w0", "flops": 1e11, "dtype": "float32", "device": "CPU", "seconds": 2.0}]
PHASES = TrialPhases(
    build_s=1.0, count_s=0.5, compile_s=2.0, train_s=30.0, evaluate_s=6.0, report_s=0.25
)
EPOCH = EpochReport(
    "k0",
    epoch=1,
    started_at=T0 + 20,
    ended_at=T0 + 29,
    samples_trained=64,
    samples_evaluated=32,
    loss=1.0,
    accuracy=0.5,
    val_loss=1.1,
    val_accuracy=0.6,
    complete=True,
)


@pytest.fixture
def store(db_url):
    with Store.open(db_url) as opened:
        yield opened


def _recorder(store: Store, log: Path) -> tuple[RunRecorder, int]:
    """A run with a window, a trial with one epoch and a score, as its own process recorded them;
    its recorder, and the trial's id."""
    claim = store.create_run(
        RunStart(profile="quick", config={"profile": "quick"}, seed=1, budget_s=60.0, workers=1),
        system_id=store.upsert_system(system_facts("node-a")),
        owner=liveness.new_owner(),
    )
    recorder = RunRecorder(store, claim, EventLog(log))
    recorder.search_started(T0, T0 + 60)
    turn = recorder.turn()
    turn.trial_created(
        TrialStart(
            trial_key="k0",
            number=0,
            started_at=T0 + 1,
            parent_trial_id=None,
            operator=None,
            architecture={"nodes": [0]},
            hyperparameters={"batch_size": 32},
            epochs=2,
            seed=1,
        )
    )
    (trial_id,) = recorder.commit(turn)
    turn = recorder.turn()
    turn.epoch(trial_id, replace(EPOCH, epoch=0, started_at=T0 + 2, ended_at=T0 + 9))
    recorder.commit(turn)
    recorder.score(SCORE, "closed-1")
    return recorder, trial_id


def _a_turn(recorder: RunRecorder, trial_id: int) -> None:
    """Every kind of write a turn of the orchestrator's loop makes."""
    turn = recorder.turn()
    turn.search_state("random", {"trials": 2})
    turn.trial_created(
        TrialStart(
            trial_key="k1",
            number=1,
            started_at=T0 + 30,
            parent_trial_id=trial_id,
            operator="widen",
            architecture={"nodes": [1]},
            hyperparameters={"batch_size": 32},
            epochs=2,
            seed=2,
        )
    )
    turn.trial_built(
        trial_id,
        TrialBuilt(
            "k0",
            worker="w0",
            parameters=10,
            train_ops=300,
            eval_ops=100,
            tensor_train_ops=30,
            tensor_eval_ops=10,
        ),
    )
    turn.epoch(trial_id, EPOCH)
    turn.trial_phases(trial_id, "k0", PHASES)
    turn.trial_stopped(trial_id, TrialEnd("k0", TrialStatus.COMPLETED, T0 + 30))
    recorder.commit(turn)


# Every method of the recorder that records a fact, called as the run's steps call it.
FACTS: dict[str, Callable[[RunRecorder, int], Any]] = {
    "run_failed": lambda r, _: r.run_failed("RuntimeError: x"),
    "run_resumed": lambda r, _: r.run_resumed(),
    "run_recovered": lambda r, _: r.run_recovered("recovered after a crash"),
    "run_stopped": lambda r, _: r.run_stopped(RunStatus.COMPLETED),
    "heartbeat": lambda r, _: r.heartbeat(),
    "staging": lambda r, _: r.staging(T0 - 10, T0 - 1, 9.0),
    "dataset": lambda r, _: r.dataset(MANIFEST),
    "resolved_settings": lambda r, _: r.resolved_settings(
        config={"profile": "quick", "train": {"precision": "float32"}},
        precision="float32",
        division="open",
        deviations=["train.precision"],
        config_hash="c" * 64,
    ),
    "peaks": lambda r, _: r.peaks(PEAKS),
    "feed": lambda r, _: r.feed("tf.data", [{"worker": "w0", "feed_per_s": 1.0}]),
    "reference": lambda r, _: r.reference([{"worker": None, "skipped": "off"}]),
    "system_description": lambda r, _: r.system_description({"number_of_nodes": 1}),
    "energy": lambda r, _: r.energy({"opened": T0, "closed": T0 + 60, "idle_s": 5, "nodes": []}),
    "provenance": lambda r, _: r.provenance({"scheduler": "local"}),
    "search_started": lambda r, _: r.search_started(T0 + 100, T0 + 160),
    "search_stopped": lambda r, _: r.search_stopped(T0 + 61),
    "commit": _a_turn,
    "score": lambda r, _: r.score(SCORE, "closed-1"),
    "best_weights": lambda r, _: r.best_weights({"trial_key": "k0", "epoch": 0}),
    "verification": lambda r, _: r.verification(
        [CheckRecord("ops", False, "recomputed")],
        rescored=dataclasses.replace(SCORE, valid=False, reasons=["verification failed: ops"]),
        ruleset="closed-1",
    ),
}


def test_every_fact_the_recorder_records_is_checked_here():
    """A new method must join FACTS, so that its refusal is tested too."""
    not_facts = {"of_run", "opened", "new_run", "turn", "run_id", "failed_on_error"}
    public = {
        name
        for name, _ in inspect.getmembers(RunRecorder)
        if not name.startswith("_") and name not in not_facts
    }
    assert public == set(FACTS)


def _rows(store: Store) -> dict[str, list[tuple]]:
    """Every row of every table: what a refused write must leave as it was."""
    with store.session() as s:
        return {
            table.name: sorted(map(tuple, s.execute(select(table)).all()), key=repr)
            for table in Base.metadata.sorted_tables
        }


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_a_process_whose_run_was_taken_over_records_no_fact(store, tmp_path, fact):
    recorder, trial_id = _recorder(store, tmp_path / "events.log")
    age_heartbeat(store, recorder.run_id, 61)  # its process stopped beating
    taken = store.take_over(
        recorder.run_id, owner=liveness.new_owner(), seen_owner=recorder.claim.owner, timeout_s=60
    )
    assert taken is not None
    rows, lines = _rows(store), (tmp_path / "events.log").read_text()
    with pytest.raises(RunTakenOver, match="taken over by another process"):
        FACTS[fact](recorder, trial_id)
    assert _rows(store) == rows, "no row written"
    assert (tmp_path / "events.log").read_text() == lines, "no event emitted"
    # The taker's recorder, with its claim, records the same fact.
    FACTS[fact](RunRecorder(store, taken, EventLog(tmp_path / "events.log")), trial_id)


def test_a_fact_is_logged_when_it_is_written(store, tmp_path):
    """run_resources carries only what each write knows; trial phases go out with their turn."""
    log = tmp_path / "events.log"
    recorder, trial_id = _recorder(store, log)
    recorder.peaks(PEAKS)
    recorder.reference([{"worker": None, "skipped": "off"}])
    _a_turn(recorder, trial_id)
    events = read_events(log)
    resources = [e.value for e in events if e.key == mllog.RUN_RESOURCES]
    assert resources == [
        {"peak_flops": 1e11, "worker_peaks": PEAKS},
        {"reference_rates": [{"worker": None, "skipped": "off"}]},
    ]
    (phases,) = [e for e in events if e.key == mllog.TRIAL_PHASES]
    assert phases.metadata["trial_key"] == "k0" and phases.value["train_s"] == 30.0
    record = store.get_run(recorder.run_id)
    assert record.peak_flops == 1e11 and record.trials[0].phases == PHASES
