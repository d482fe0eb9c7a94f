"""Workers' reports are checked when they arrive: a forged event (from another worker, with more
samples than the dataset, or stamped by no worker) is refused and logged, and its trial fails with
the reason. The real orchestrator, oracle and store; trials are modelled (the simulated trainer's
plans), their events put on the queue as the Dask scheduler delivers them."""

from __future__ import annotations

import logging
import queue
import time

import pytest
from conftest import FinishedTrial
from simulated_search import EndAfter, simulated_orchestrator

from aiperf.status import TrialStatus
from aiperf.train.messages import TrialResult, to_event
from aiperf.train.simulated import SimulatedModel, plan_trial

FAST = SimulatedModel(ops_per_s=3000 * 1e7 / 0.05, train_samples=384, val_samples=128)
WORKER, OTHER = "tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"


class _Forger:
    """Runs every trial on WORKER; for the first trial, also puts `forge(epoch event)` on the queue."""

    def __init__(self, events: queue.Queue, forge) -> None:
        self.events, self.forge, self.first = events, forge, True

    def __call__(self, request):
        plan = plan_trial(request, time.time(), "worker-a", FAST)
        self.events.put({**to_event(plan.built), "sent_from": WORKER})
        if self.first:
            self.first = False
            self.events.put(self.forge({**to_event(plan.epochs[0]), "sent_from": WORKER}))
        return FinishedTrial(TrialResult(request.trial_key, plan.status, plan.built, plan.epochs))


def _search(tmp_path, forge) -> tuple[list, str]:
    events: queue.Queue = queue.Queue()
    launch = EndAfter(_Forger(events, forge), 3)  # the forged trial and two after it
    orchestrator = simulated_orchestrator(tmp_path, launch, events=events)
    launch.orchestrator = orchestrator
    with orchestrator.recorder.store as store:
        started = time.time()
        orchestrator.run(started, started + 600.0)
        trials = store.get_run(orchestrator.run_id).trials
    return list(trials), trials[0].message or ""


@pytest.mark.parametrize(
    "forge, reason",
    [
        (
            lambda e: {**e, "sent_from": OTHER, "samples_trained": 10**6},
            f"it came from {OTHER}, but the trial runs on {WORKER}",
        ),
        (
            lambda e: {
                **e,
                "samples_trained": 10**6,
            },  # whole batches, but more than the dataset holds
            "reports 1000000 trained and 128 evaluated samples; the dataset has 384 and 128",
        ),
        (lambda e: {**e, "samples_trained": 33}, "not whole batches of"),
        (
            lambda e: {k: v for k, v in e.items() if k != "sent_from"},
            "the event was not sent by a worker",
        ),
    ],
)
def test_a_forged_report_is_refused_and_fails_its_trial(tmp_path, caplog, forge, reason):
    with caplog.at_level(logging.WARNING, logger="aiperf.lifecycle.orchestrator"):
        trials, message = _search(tmp_path, forge)
    first, later = trials[0], trials[1:]
    assert first.status == TrialStatus.FAILED and reason in message, message
    assert message.startswith("refused a worker's report")
    assert any(
        "refused a report for trial" in r.message and reason in r.message for r in caplog.records
    )
    assert all(e.samples_trained <= 384 for t in trials for e in t.epochs), (
        "nothing forged was recorded"
    )
    assert later and all(t.status != TrialStatus.FAILED for t in later), "the run went on"


def test_honest_reports_are_all_accepted(tmp_path):
    trials, _ = _search(
        tmp_path, lambda e: e
    )  # the "forgery" repeats a genuine event: a harmless repeat
    assert trials and all(t.status in (TrialStatus.COMPLETED, TrialStatus.STOPPED) for t in trials)
    assert all([e.epoch for e in t.epochs] == list(range(len(t.epochs))) for t in trials)
