"""Proposals made ahead of need on the oracle's own thread (aiperf.lifecycle.proposals.OracleThread), and
one transaction per turn of the loop (aiperf.store.WriteBatch): a freed worker takes a proposal
that is already made, only one thread ever touches the oracle, a proposal that never runs leaves
no trace in the records, and a resumed run proposes it again."""

from __future__ import annotations

import threading
import time

import pytest
from claims import add_trial, claim_of
from conftest import FinishedTrial
from simulated_search import EndAfter, simulated_orchestrator
from sqlalchemy import event
from test_history_data import system_facts

from aiperf.lifecycle.proposals import OracleThread, proposals_ahead
from aiperf.search.oracles import make_oracle
from aiperf.search.resume import restore, trial_values
from aiperf.status import TrialStatus
from aiperf.store import EpochReport, RecordNotFound, RunStart, Store, TrialEnd, WriteBatch
from aiperf.train.messages import TrialResult
from aiperf.train.simulated import SimulatedModel, plan_trial

FAST = SimulatedModel(ops_per_s=3000 * 1e7 / 0.02, train_samples=384, val_samples=128)
SHAPE = (16, 16, 3)


class _SlowOracle:
    """Proposes numbered trials, each after `delay_s`; records which thread made each call."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.calls, self.threads, self.start_order = delay_s, [], set(), []

    def create_trial(self, tuner_id: str):
        import keras_tuner as kt

        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay_s)
        self.calls.append(("propose", tuner_id))
        self.start_order.append(str(len(self.calls)))
        return kt.engine.trial.Trial(
            kt.HyperParameters(), trial_id=self.start_order[-1], status="RUNNING"
        )

    def get_state(self) -> dict:
        return {"proposed": len(self.calls)}


def test_the_oracle_proposes_ahead_on_one_thread_of_its_own():
    oracle = _SlowOracle(0.1)
    proposals = OracleThread(oracle, ahead=2)
    try:
        (first,) = proposals.take()  # nothing was asked yet: this one is waited for
        assert first.state == {"proposed": 1, "newest_trial": "1"}
        time.sleep(0.35)  # the next two are made meanwhile
        began = time.perf_counter()
        (second,) = proposals.take()
        assert time.perf_counter() - began < 0.05, "a proposal made ahead is taken at once"
        assert second.state == {"proposed": 2, "newest_trial": "2"}, (
            "each proposal carries the state right after it"
        )
        proposals.tell(lambda o: o.calls.append(("told", None)))
        time.sleep(0.2)  # the fourth is made; a fifth is not asked for yet
        began = time.perf_counter()
        taken = proposals.take(3)
        assert time.perf_counter() - began < 0.05, (
            "the ready ones, without waiting for the one not made yet"
        )
        assert [p.state["proposed"] for p in taken] == [3, 4]
    finally:
        proposals.close()
    assert threading.current_thread().name not in oracle.threads and len(oracle.threads) == 1
    kinds = [kind for kind, _ in oracle.calls]
    assert kinds.index("told") == 4, "calls run in the order they were made"


def test_a_failure_of_a_told_call_reaches_the_loop():
    proposals = OracleThread(_SlowOracle(0.0), ahead=0)
    try:
        proposals.tell(lambda _oracle: 1 / 0)
        proposals.call(lambda _oracle: None).result()
        with pytest.raises(ZeroDivisionError):
            proposals.check()
    finally:
        proposals.close()


def test_proposals_ahead_grow_with_the_workers_and_none_for_a_few():
    assert [proposals_ahead(w) for w in (1, 2, 3, 4, 64, 256, 257, 1024)] == [
        0,
        0,
        0,
        1,
        1,
        1,
        2,
        4,
    ]


def _run(tmp_path, ahead: int, trials: int):
    """The real orchestrator, random oracle and store with 4 workers; trials end as they start,
    and the search ends once `trials` have started."""
    planned: dict[str, list[int]] = {}

    def launch(request):
        plan = plan_trial(request, time.time(), "worker-a", FAST)
        planned[request.trial_key] = [e.epoch for e in plan.epochs]
        return FinishedTrial(TrialResult(request.trial_key, plan.status, plan.built, plan.epochs))

    ending = EndAfter(launch, trials)
    orchestrator = simulated_orchestrator(tmp_path, ending, workers=4, poll_s=0.01, ahead=ahead)
    ending.orchestrator = orchestrator
    started = time.time()
    orchestrator.run(started, started + 600.0)
    return (
        orchestrator.config,
        orchestrator.recorder.store,
        orchestrator.run_id,
        orchestrator.oracle,
        planned,
    )


def test_a_proposal_that_never_runs_is_not_recorded_and_a_resumed_run_proposes_it(tmp_path):
    config, store, run_id, oracle, planned = _run(tmp_path, ahead=3, trials=6)
    with store:
        record = store.get_run(run_id)
        state = store.search_state(run_id)
    recorded = {t.trial_key for t in record.trials}
    unlaunched = [oracle.trials[key] for key in oracle.start_order if key not in recorded]
    assert len(record.trials) >= 4 and unlaunched, "proposals were made ahead, and some never ran"
    assert state["newest_trial"] == max(recorded), (
        "the stored state ends at the last trial recorded"
    )
    assert "start_order" not in state and "tried_so_far" not in state, (
        "the records hold the per-trial lists"
    )
    assert {t.trial_key: [e.epoch for e in t.epochs] for t in record.trials} == planned, (
        "every epoch, once"
    )

    # A fresh oracle from the stored state and the records (as `aiperf run --resume` builds it)
    # proposes first what the run had proposed ahead and never ran.
    resumed = restore(
        make_oracle(config, SHAPE, 10), state, record.trials, config.search.objective
    )
    again = resumed.create_trial("resumed")
    assert again.status == "RUNNING"
    assert again.hyperparameters.values == unlaunched[0].hyperparameters.values
    assert all(trial_values(t) != again.hyperparameters.values for t in record.trials)


def test_a_turn_is_one_transaction_and_writing_it_again_duplicates_nothing(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'a.db'}") as store:
        run_id = store.create_run(
            RunStart(profile="quick", config={}, seed=0, budget_s=3, workers=1),
            system_id=store.upsert_system(system_facts()),
        ).run_id
        trial_id = add_trial(store, run_id, "0", started_at=time.time())
        batch = WriteBatch()
        for epoch in range(5):
            batch.record_epoch(
                trial_id,
                EpochReport(
                    "0",
                    epoch=epoch,
                    started_at=time.time(),
                    ended_at=time.time(),
                    samples_trained=32,
                    samples_evaluated=8,
                    loss=1.0,
                    accuracy=0.5,
                    val_loss=1.0,
                    val_accuracy=0.4 + epoch / 100,
                    complete=True,
                ),
            )
        batch.finish_trial(trial_id, TrialEnd("0", TrialStatus.COMPLETED, time.time()))
        claim = claim_of(store, run_id)
        commits = []
        event.listen(store.engine, "commit", lambda _conn: commits.append(1))
        assert store.write(batch, claim) == [True] * 5 + [None]
        assert len(commits) == 1, "one commit for the turn"
        assert store.write(batch, claim)[:5] == [False] * 5, "a repeat is ignored"
        (trial,) = store.get_run(run_id).trials
        assert [e.epoch for e in trial.epochs] == list(
            range(5)
        ) and trial.best_val_accuracy == pytest.approx(0.44)

        broken = WriteBatch()
        broken.record_epoch(
            trial_id,
            EpochReport("0", 5, time.time(), time.time(), 32, 8, 1.0, 0.5, None, None, False),
        )
        broken.finish_trial(trial_id + 1, TrialEnd("1", TrialStatus.COMPLETED, time.time()))
        with pytest.raises(RecordNotFound):
            store.write(broken, claim)
        assert len(store.get_run(run_id).trials[0].epochs) == 5, "all or nothing"
