"""The orchestrator wakes the moment a trial ends (a handle's done callback), not at its next poll:
a freed worker gets its next trial at once. The real orchestrator, oracle and store; trials are
modelled plans that end on a timer, as a Dask future does when its task returns."""

from __future__ import annotations

import logging
import queue
import re
import threading
import time

from simulated_search import simulated_orchestrator

from aiperf.train.messages import TrialResult, to_event
from aiperf.train.simulated import SimulatedModel, plan_trial

FAST = SimulatedModel(ops_per_s=3000 * 1e7 / 0.05, train_samples=384, val_samples=128)
TRIAL_S = 0.15


class _Timed:
    """Ends TRIAL_S after launch and then calls its done callbacks, from another thread."""

    def __init__(self, result: TrialResult, seconds: float = TRIAL_S) -> None:
        self._result, self._done, self._callbacks = result, threading.Event(), []
        threading.Timer(seconds, self._finish).start()

    def _finish(self) -> None:
        self._done.set()
        for fn in self._callbacks:
            fn(self)

    def add_done_callback(self, fn) -> None:
        self._callbacks.append(fn)

    def done(self) -> bool:
        return self._done.is_set()

    def result(self) -> TrialResult:
        return self._result

    def cancel(self) -> None:
        pass


def test_a_trial_that_ends_wakes_the_loop_before_its_poll(tmp_path, caplog):
    events: queue.Queue = queue.Queue()

    def launch(request):
        plan = plan_trial(request, time.time(), "worker-a", FAST)
        events.put({**to_event(plan.built), "sent_from": "tcp://127.0.0.1:40001"})
        return _Timed(TrialResult(request.trial_key, plan.status, plan.built, []))

    orchestrator = simulated_orchestrator(
        tmp_path,
        launch,
        events=events,
        poll_s=30.0,
        grace_s=60.0,
        logger=logging.getLogger("test-orchestrator"),
    )
    with orchestrator.recorder.store:
        started = time.time()
        with caplog.at_level(logging.INFO, logger="test-orchestrator"):
            summary = orchestrator.run(started, started + 1.5)
        took = time.time() - started
    # Polling every 30 s, one trial would have started and the loop would have slept past the deadline.
    assert summary.trials >= 4, f"{summary.trials} trials in 1.5 s of {TRIAL_S} s trials"
    assert took < 10, f"the loop took {took:.1f} s to see its last trial end"
    # Issue 26 item 3: one line per trial as it ends, in the logger the run passes (the flow's).
    ended = [r.getMessage() for r in caplog.records if r.name == "test-orchestrator"]
    assert len(ended) == summary.trials, ended
    assert all(
        re.fullmatch(r"trial \S+ \w+: .+, \d+ epoch\(s\), val acc .+ s left", e) for e in ended
    )
