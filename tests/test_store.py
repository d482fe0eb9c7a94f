"""The Store's conformance suite, in the manner of optuna's storage tests: every Store method, one
test each (or a few), run on SQLite and on PostgreSQL alike through the `db_url` fixture. Whatever
engine a user picks, the same calls give the same records."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from claims import (
    add_built,
    add_epoch,
    add_trial,
    claim_of,
    end_trial,
    in_one_turn,
    save_search_state,
)
from claims import trial_key_of as trial_key
from test_history_data import plant_run, system_facts

from aiperf.config import ValidityConfig
from aiperf.results.score import EpochWork, ScoreResult, compute_score
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import (
    RecordNotFound,
    RunRecord,
    RunStart,
    RunWork,
    Store,
    SystemRecord,
    TrialBuilt,
    TrialEnd,
    TrialRecord,
)

T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def store(db_url):
    with Store.open(db_url) as opened:
        yield opened


def new_run(store: Store, *, profile: str = "quick", host: str = "node-a") -> int:
    system_id = store.upsert_system(system_facts(host))
    return store.create_run(
        RunStart(
            profile=profile,
            config={"profile": profile, "seed": 4},
            seed=4,
            budget_s=60.0,
            workers=2,
            flow_run_id="flow-1",
        ),
        system_id=system_id,
    ).run_id


def new_trial(store: Store, run_id: int, number: int = 0, **fields) -> int:
    return add_trial(
        store,
        run_id,
        f"k{number}",
        number=number,
        architecture={"nodes": [number]},
        hyperparameters={"batch_size": 32},
        started_at=T0 + number,
        **fields,
    )


def built(store: Store, trial_id: int, worker: str = "w0", **inherited) -> None:
    add_built(
        store,
        trial_id,
        TrialBuilt(
            trial_key(store, trial_id),
            worker=worker,
            parameters=1234,
            train_ops=300,
            eval_ops=100,
            tensor_train_ops=30,
            tensor_eval_ops=10,
            **inherited,
        ),
    )


def epoch(
    store: Store,
    trial_id: int,
    number: int,
    *,
    val_accuracy: float | None = 0.5,
    complete: bool = True,
    started_at: float | None = None,
    ended_at: float | None = None,
) -> None:
    add_epoch(
        store,
        trial_id,
        epoch=number,
        started_at=T0 + 10 * number if started_at is None else started_at,
        ended_at=T0 + 10 * number + 9 if ended_at is None else ended_at,
        samples_trained=64,
        samples_evaluated=32,
        loss=1.5,
        accuracy=0.4,
        val_loss=1.6,
        val_accuracy=val_accuracy,
        complete=complete,
    )


# --- opening and closing ---------------------------------------------------------------------------


def test_store_is_a_context_manager_that_closes_its_engine(db_url):
    with Store.open(db_url) as store:
        new_run(store)
    with Store.open_existing(db_url) as again:
        assert len(again.list_runs()) == 1
    assert again.engine.pool.checkedout() == 0


# --- systems ----------------------------------------------------------------------------------------


def test_upsert_system_returns_one_id_per_fingerprint(store):
    first = store.upsert_system(system_facts("node-a"))
    assert store.upsert_system(system_facts("node-a")) == first
    assert store.upsert_system(system_facts("node-b")) != first


def test_find_systems_by_id_hostname_and_fingerprint_prefix(store):
    a = store.upsert_system(system_facts("node-a"))
    store.upsert_system(system_facts("node-b"))
    (by_host,) = store.find_systems("node-a")
    assert isinstance(by_host, SystemRecord) and by_host.id == a and by_host.hostname == "node-a"
    assert [s.id for s in store.find_systems(str(a))] == [a]
    assert [s.id for s in store.find_systems(by_host.fingerprint[:10])] == [a]
    assert [s.hostname for s in store.find_systems()] == ["node-a", "node-b"]
    assert store.find_systems("nowhere") == []


# --- runs -------------------------------------------------------------------------------------------


def test_create_run_and_get_it_back_as_a_frozen_record(store):
    run_id = new_run(store)
    record = store.get_run(run_id)
    assert isinstance(record, RunRecord)
    assert (record.profile, record.seed, record.budget_s, record.workers) == ("quick", 4, 60.0, 2)
    assert record.status is RunStatus.RUNNING and record.flow_run_id == "flow-1"
    assert record.config == {"profile": "quick", "seed": 4}
    assert record.system.hostname == "node-a" and record.system_id == record.system.id
    assert record.created_at.tzinfo is not None and record.score is None and record.trials == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = RunStatus.FAILED  # type: ignore[misc]


def test_a_missing_run_or_trial_is_record_not_found(store):
    with pytest.raises(RecordNotFound, match="run 99 is not in the database"):
        store.get_run(99)
    with pytest.raises(RecordNotFound, match="run 99"):
        store.start_search(claim_of(store, 99), T0, T0 + 60)
    run_id = new_run(store)  # the run's own writer, naming a trial it lacks
    end = TrialEnd("k99", TrialStatus.COMPLETED, T0)
    with pytest.raises(RecordNotFound, match="trial 99"):
        in_one_turn(store, run_id, lambda turn: turn.trial_stopped(99, end))
    made = TrialBuilt(
        "k99", "w0", parameters=1, train_ops=3, eval_ops=1, tensor_train_ops=3, tensor_eval_ops=1
    )
    with pytest.raises(RecordNotFound, match="trial 99"):
        in_one_turn(store, run_id, lambda turn: turn.trial_built(99, made))


def test_list_runs_newest_first_with_their_scores(store):
    first, second = new_run(store), new_run(store, profile="digits")
    listed = store.list_runs()
    assert [r.id for r in listed] == [second, first]
    assert [r.profile for r in store.list_runs(limit=1)] == ["digits"]
    assert all(r.trials == () for r in listed), "listing does not load trials"


def test_search_window_is_recorded_in_utc(store):
    run_id = new_run(store)
    store.start_search(claim_of(store, run_id), T0, T0 + 60)
    store.finish_search(claim_of(store, run_id), T0 + 61.5)
    record = store.get_run(run_id)
    assert record.search_started_at == datetime.fromtimestamp(T0, UTC)
    assert record.deadline == datetime.fromtimestamp(T0 + 60, UTC)
    assert (record.search_ended_at - record.search_started_at).total_seconds() == pytest.approx(
        61.5
    )


def test_finish_run_ends_the_trials_still_running(store):
    run_id = new_run(store)
    running, done = new_trial(store, run_id, 0), new_trial(store, run_id, 1)
    end_trial(store, done, TrialStatus.COMPLETED, T0 + 5)
    store.finish_run(
        claim_of(store, run_id), status=RunStatus.INTERRUPTED, message="KeyboardInterrupt: "
    )
    record = store.get_run(run_id)
    assert record.status is RunStatus.INTERRUPTED and record.message == "KeyboardInterrupt: "
    statuses = {t.id: t.status for t in record.trials}
    assert statuses == {running: TrialStatus.INTERRUPTED, done: TrialStatus.COMPLETED}, (
        "an interrupted run's running trials are retrained when it is resumed"
    )
    assert all(t.ended_at is not None for t in record.trials)
    failed_run = new_run(store)
    stopped = new_trial(store, failed_run, 0)
    store.finish_run(
        claim_of(store, failed_run), status=RunStatus.FAILED, message="RuntimeError: x"
    )
    assert {t.id: t.status for t in store.get_run(failed_run).trials} == {
        stopped: TrialStatus.STOPPED
    }


def test_a_running_run_without_a_heartbeat_for_the_timeout_is_lost(store):
    from test_ownership import age_heartbeat

    run_id = new_run(store)
    assert store.get_run(run_id).status is RunStatus.RUNNING, "a new run has a fresh heartbeat"
    age_heartbeat(store, run_id, 61)  # its last beat a minute ago on the database's clock (60 s)
    (listed,) = store.list_runs()
    record = store.get_run(run_id)
    assert (
        record.status is listed.status is RunStatus.LOST
        and record.stored_status is RunStatus.RUNNING
    )
    store.heartbeat(claim_of(store, run_id))
    assert store.get_run(run_id).status is RunStatus.RUNNING, "a heartbeat shows it alive again"
    store.finish_run(claim_of(store, run_id), status=RunStatus.INTERRUPTED)
    age_heartbeat(store, run_id, 61)
    assert store.get_run(run_id).status is RunStatus.INTERRUPTED, "only a running run can be lost"


def test_recovery_closes_the_window_at_the_last_epoch_and_interrupts_running_trials(store):
    run_id = new_run(store)
    store.start_search(claim_of(store, run_id), T0, T0 + 60)
    running, done = new_trial(store, run_id, 0), new_trial(store, run_id, 1)
    built(store, running)
    built(store, done)
    for trial_id, ended in ((running, T0 + 7), (done, T0 + 9)):
        epoch(store, trial_id, 0, started_at=T0 + 1, ended_at=ended)
    end_trial(store, done, TrialStatus.COMPLETED, T0 + 9)
    assert store.interrupt_trials(claim_of(store, run_id)) == 1
    store.close_window_at_last_epoch(claim_of(store, run_id))
    record = store.get_run(run_id)
    trials = {t.id: t for t in record.trials}
    assert trials[running].status is TrialStatus.INTERRUPTED
    assert trials[running].ended_at == datetime.fromtimestamp(T0 + 7, UTC), (
        "ended at its last epoch"
    )
    (window,) = record.windows
    assert window.ended_at == datetime.fromtimestamp(T0 + 9, UTC) == record.search_ended_at
    assert store.run_work(run_id).elapsed_s == pytest.approx(9.0)


def test_a_resumed_run_scores_the_sum_of_its_segments_not_the_gap(store):
    run_id = new_run(store)
    store.start_search(claim_of(store, run_id), T0, T0 + 60)
    store.start_search(claim_of(store, run_id), T0, T0 + 60)  # a retried start adds no segment
    store.finish_search(claim_of(store, run_id), T0 + 20)
    store.finish_run(claim_of(store, run_id), status=RunStatus.INTERRUPTED)
    store.reopen_run(claim_of(store, run_id))
    assert store.get_run(run_id).status is RunStatus.RUNNING
    store.start_search(claim_of(store, run_id), T0 + 100, T0 + 140)
    store.finish_search(claim_of(store, run_id), T0 + 141)
    record = store.get_run(run_id)
    assert [w.segment for w in record.windows] == [0, 1]
    assert record.search_started_at == datetime.fromtimestamp(T0, UTC)
    assert store.run_work(run_id).elapsed_s == pytest.approx(20 + 41)
    from aiperf.store import window_gaps

    assert window_gaps(record.windows) == [pytest.approx(80)]
    # The score over time runs on the same clock: stopped in the gap, the last checkpoint the 61 s
    # the headline divides by (aiperf.report.timeline).
    from aiperf.report.timeline import counted_seconds, window_time

    segments = list(record.windows)
    at = [window_time(datetime.fromtimestamp(T0 + t, UTC), segments) for t in (10, 50, 110)]
    assert at == [pytest.approx(10), pytest.approx(20), pytest.approx(30)]
    assert counted_seconds(record) == pytest.approx(61)


# --- datasets ---------------------------------------------------------------------------------------


def test_record_dataset_with_and_without_a_run(store):
    run_id = new_run(store)
    manifest = {
        "name": "synthetic",
        "kind": "synthetic",
        "sha256": "a" * 64,
        "train_samples": 384,
        "val_samples": 128,
        "classes": 10,
        "shards": [],
    }
    assert store.record_dataset(claim_of(store, run_id), manifest) != store.record_dataset(
        None, manifest
    )
    store.start_search(claim_of(store, run_id), T0, T0 + 60)
    store.finish_search(claim_of(store, run_id), T0 + 60)
    assert store.run_work(run_id).val_samples == 128, (
        "the run's own dataset sizes its accuracy cap"
    )


# --- trials and epochs ------------------------------------------------------------------------------


def test_create_trial_links_parent_and_operator(store):
    run_id = new_run(store)
    parent = new_trial(store, run_id, 0, operator="seed")
    child = new_trial(store, run_id, 1, parent_trial_id=parent, operator="deepen(after=relu)")
    trials = store.get_run(run_id).trials
    assert [t.id for t in trials] == [parent, child], "in creation order"
    assert isinstance(trials[1], TrialRecord)
    assert (trials[1].parent_trial_id, trials[1].operator) == (parent, "deepen(after=relu)")
    assert trials[1].status is TrialStatus.RUNNING and trials[1].architecture == {"nodes": [1]}


def test_record_trial_built_stores_worker_and_counts(store):
    trial_id = new_trial(store, new_run(store))
    built(store, trial_id, worker="w7@slurm-job-3")
    (trial,) = store.get_run(1).trials
    assert trial.worker == "w7@slurm-job-3" and trial.parameters == 1234
    assert (trial.train_ops_per_sample, trial.eval_ops_per_sample) == (300, 100)
    assert (trial.tensor_train_ops_per_sample, trial.tensor_eval_ops_per_sample) == (30, 10)
    assert trial.inherited_epoch is None  # fresh weights
    child = new_trial(store, 1, number=1, parent_trial_id=trial.id)
    built(store, child, inherited_epoch=2)
    assert store.get_run(1).trials[1].inherited_epoch == 2


def test_record_epoch_once_and_keep_the_best_complete_accuracy(store):
    trial_id = new_trial(store, new_run(store))
    epoch(store, trial_id, 0, val_accuracy=0.6)
    epoch(store, trial_id, 0, val_accuracy=0.9)  # a repeat: ignored
    epoch(store, trial_id, 1, val_accuracy=0.7)
    epoch(store, trial_id, 2, val_accuracy=0.95, complete=False)  # partial: does not count
    (trial,) = store.get_run(1).trials
    assert [e.epoch for e in trial.epochs] == [0, 1, 2]
    assert trial.epochs[0].val_accuracy == 0.6, "a repeated epoch is ignored"
    assert trial.epochs[2].complete is False
    assert trial.best_val_accuracy == 0.7
    assert trial.epochs[0].ended_at > trial.epochs[0].started_at


def test_a_trial_ends_with_its_status_and_message(store):
    run_id = new_run(store)
    for number, status in enumerate(
        [TrialStatus.COMPLETED, TrialStatus.COMPLETED, TrialStatus.FAILED]
    ):
        end_trial(store, new_trial(store, run_id, number), status, T0 + 9, status.value)
    new_trial(store, run_id, 3)
    trials = store.get_run(run_id).trials
    assert [t.status for t in trials] == [
        TrialStatus.COMPLETED,
        TrialStatus.COMPLETED,
        TrialStatus.FAILED,
        TrialStatus.RUNNING,
    ]
    assert [t.message for t in trials] == [
        "completed",
        "completed",
        "failed",
        None,
    ]


# --- search state -----------------------------------------------------------------------------------


def test_search_state_is_replaced_by_the_latest(store):
    run_id = new_run(store)
    assert store.search_state(run_id) is None
    save_search_state(store, run_id, "morphism", {"tried": ["a"]})
    save_search_state(store, run_id, "morphism", {"tried": ["a", "b"]})
    assert store.search_state(run_id) == {"tried": ["a", "b"]}


# --- the score --------------------------------------------------------------------------------------


def test_run_work_is_what_the_score_is_computed_from(store):
    run_id = new_run(store)
    store.record_dataset(
        claim_of(store, run_id),
        {
            "name": "d",
            "kind": "synthetic",
            "sha256": "0" * 64,
            "train_samples": 64,
            "val_samples": 32,
            "classes": 10,
        },
    )
    store.start_search(claim_of(store, run_id), T0, T0 + 60)
    trial_id = new_trial(store, run_id)
    built(store, trial_id)
    epoch(store, trial_id, 0, val_accuracy=0.5)
    epoch(store, trial_id, 1, val_accuracy=0.8)
    end_trial(store, trial_id, TrialStatus.COMPLETED, T0 + 20)
    store.finish_search(claim_of(store, run_id), T0 + 60)
    work = store.run_work(run_id)
    # Each epoch's trial and seconds too: the score's interval weighs each trial's rate by them.
    assert work.epochs == [EpochWork(64, 32, 300, 100, 30, 10, trial=trial_id, seconds=9.0)] * 2
    assert (
        work.elapsed_s,
        work.best_val_accuracy,
        work.val_samples,
        work.trials_completed,
        work.budget_s,
    ) == (60.0, 0.8, 32, 1, 60.0)


def test_run_work_needs_a_finished_window(store):
    with pytest.raises(ValueError, match="no finished search window"):
        store.run_work(new_run(store))


def test_save_score_stores_every_figure_and_replaces_an_older_one(store):
    run_id = new_run(store)
    rules = ValidityConfig(min_budget_s=0.0, accuracy_floor=0.0)
    older = compute_score(
        RunWork(
            epochs=[EpochWork(1, 1, 1, 1, 1, 1)],
            elapsed_s=1.0,
            best_val_accuracy=0.1,
            val_samples=10,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=1,
            budget_s=1.0,
        ),
        rules=rules,
    )
    score = compute_score(
        RunWork(
            epochs=[EpochWork(64, 32, 300, 100, 30, 10)] * 3,
            elapsed_s=60.0,
            best_val_accuracy=0.8,
            val_samples=32,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=2,
            budget_s=60.0,
        ),
        rules=ValidityConfig(),
    )
    store.save_score(claim_of(store, run_id), older)
    store.save_score(claim_of(store, run_id), score)
    stored = store.get_run(run_id).score
    assert isinstance(stored, ScoreResult) and stored == score
    assert stored.reasons == score.reasons


# --- the views --------------------------------------------------------------------------------------


def test_run_scores_rows_filter_by_system_profile_and_ids(store):
    node_a, node_b = system_facts("node-a"), system_facts("node-b")
    first = plant_run(store, node_a, profile="nightly")
    second = plant_run(
        store, node_a, profile="nightly", started=datetime(2026, 11, 2, 2, 0, tzinfo=UTC)
    )
    other = plant_run(
        store, node_b, profile="quick", started=datetime(2026, 11, 3, 2, 0, tzinfo=UTC)
    )
    rows = store.run_scores()
    assert [r.run_id for r in rows] == [first, second, other]
    system_a = store.find_systems("node-a")[0].id
    assert [r.run_id for r in store.run_scores(system_id=system_a)] == [first, second]
    assert [r.run_id for r in store.run_scores(profile="quick")] == [other]
    assert [r.run_id for r in store.run_scores(run_ids=[other, first])] == [first, other]
    assert rows[1].previous_ops == pytest.approx(rows[0].ops) and rows[
        1
    ].ops_change_pct == pytest.approx(0.0)
    assert rows[0].status is RunStatus.COMPLETED and rows[0].valid is True
    assert isinstance(rows[0].ops, float) and rows[0].created_at.tzinfo is not None


def test_trial_summary_rows_total_each_trial(store):
    run_id = plant_run(store, system_facts())
    rows = store.trial_summary(run_id)
    assert [(r.trial_key, r.status, r.epochs, r.samples_trained) for r in rows] == [
        ("t00", TrialStatus.COMPLETED, 2, 768),
        ("t01", TrialStatus.COMPLETED, 2, 768),
    ]
    assert rows[0].total_ops == pytest.approx(2 * (384 * 3_000_000 + 128 * 1_000_000))
