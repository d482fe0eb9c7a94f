"""Proposals: asking the oracle for the next trials, on the oracle's own thread.

keras-tuner oracles are not thread-safe, and a proposal of the morphism oracle takes long enough to
idle workers if the search loop waited for it. So every oracle call goes through one thread
(OracleThread), which also proposes the next trials ahead of need (proposals_ahead): a freed worker
takes a proposal that is already made. The functions below run on that thread; each proposal
carries the oracle's state right after it, which the run stores with the trial.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import keras_tuner as kt

from aiperf.search.resume import stored_state
from aiperf.store import TrialRecord


def proposals_ahead(workers: int) -> int:
    """How many proposals the oracle thread keeps ready beyond the one being taken.

    A proposal made ahead does not know the trials that end between its making and its launch.
    With W workers every proposal already misses the W - 1 trials still running, so k made ahead
    add k / (W - 1) to that: nothing at a thousand workers, where a slow proposal would idle
    them, and as much again at two, where a proposal costs little against a trial. Hence none
    under 4 workers (the oracle still runs on its thread, on demand), then one per 256 workers
    (ends arrive about workers / trial length per second, in bursts of a few per turn)."""
    return 0 if workers < 4 else math.ceil(workers / 256)


@dataclass(frozen=True)
class Proposal:
    """A trial the oracle proposed, its values, and the oracle's state right after proposing it.

    The run stores that state in the transaction that records the trial, never an older one: a
    resumed run then never proposes a recorded trial again. Proposals made after it (ready, not yet
    launched) are not in it, so one that never runs leaves no trace in the records."""

    trial: kt.engine.trial.Trial
    values: dict[str, Any]
    state: dict[str, Any]


class OracleThread:
    """The one thread that touches the oracle (keras-tuner oracles are not thread-safe, and a
    proposal of the morphism oracle takes long enough to idle workers if the loop waited for it).

    Every call runs on one worker thread, in the order it was made: what the loop tells the oracle
    (an epoch's score, a trial's end) is fire-and-forget; proposals are asked `ahead` at a time and
    taken in order. A failure in a told call is raised at the next take() or check()."""

    def __init__(self, oracle: kt.Oracle, ahead: int) -> None:
        self.oracle, self.ahead = oracle, ahead
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiperf-oracle")
        self._ready: deque[Future[Proposal | None]] = deque()
        self._asked = 0
        self._failure: BaseException | None = None

    def call(self, fn: Callable[..., Any], *args: Any) -> Future:
        """fn(oracle, *args) on the oracle's thread, after everything asked before it."""
        return self._executor.submit(fn, self.oracle, *args)

    def tell(self, fn: Callable[..., Any], *args: Any) -> None:
        """Like call, for calls whose answer nobody waits for; a failure is kept and raised later."""
        self.call(fn, *args).add_done_callback(self._keep_failure)

    def _keep_failure(self, done: Future) -> None:
        if not done.cancelled() and done.exception() is not None and self._failure is None:
            self._failure = done.exception()

    def check(self) -> None:
        """Raise what a told call raised, in the loop's thread."""
        if self._failure is not None:
            raise self._failure

    def take(self, wanted: int = 1) -> list[Proposal]:
        """Up to `wanted` proposals, in order: the next one (waited for when it is not made yet),
        then each one after it that is already made, so that a slow proposal never holds the ones
        before it. Empty when the oracle has nothing to propose now. Every proposal wanted is asked
        for, and `ahead` more are kept asked for."""
        self.check()
        while len(self._ready) < wanted:
            self._ask()
        taken = [self._ready.popleft().result()]
        while len(taken) < wanted and self._ready and self._ready[0].done():
            taken.append(self._ready.popleft().result())
        while len(self._ready) < self.ahead:
            self._ask()
        return [proposal for proposal in taken if proposal is not None]

    def _ask(self) -> None:
        self._asked += 1
        self._ready.append(self.call(propose, f"proposal-{self._asked}"))

    def close(self) -> None:
        """Drop the proposals not yet started (nothing of theirs was recorded) and wait for the
        calls already made, so the oracle has learnt every end it was told."""
        for pending in self._ready:
            pending.cancel()
        self._ready.clear()
        self._executor.shutdown(wait=True)


def propose(oracle: kt.Oracle, tuner_id: str) -> Proposal | None:
    """On the oracle's thread: a proposal and the state that includes it, as the run stores it."""
    trial = oracle.create_trial(tuner_id)
    if trial.status != kt.engine.trial.TrialStatus.RUNNING:
        return None  # the oracle has nothing to propose right now
    return Proposal(trial, dict(trial.hyperparameters.values), stored_state(oracle))


def retrain(oracle: kt.Oracle, record: TrialRecord, tuner_id: str) -> kt.engine.trial.Trial:
    """On the oracle's thread: an interrupted trial of a resumed run registered again under a new
    trial key with the same values; the oracle counts it as its own, not as a proposal."""
    from aiperf.search.resume import trial_values

    trial_id = f"{{:0{len(str(oracle.max_trials))}d}}".format(len(oracle.trials))
    hp = oracle.hyperparameters.copy()
    hp.values = trial_values(record)
    trial = kt.engine.trial.Trial(
        hyperparameters=hp, trial_id=trial_id, status=kt.engine.trial.TrialStatus.RUNNING
    )
    oracle.trials[trial_id], oracle.ongoing_trials[tuner_id] = trial, trial
    oracle.start_order.append(trial_id)
    return trial


def score(oracle: kt.Oracle, trial_id: str, objective: str, value: float, step: int) -> None:
    oracle.update_trial(trial_id, {objective: value}, step=step)


def end_trial(
    oracle: kt.Oracle, trial: kt.engine.trial.Trial, objective: str, message: str | None
) -> None:
    """On the oracle's thread, after every score told before it: the trial ends for the oracle,
    completed if it was ever scored."""
    measured = trial.metrics.exists(objective)
    trial.status = (
        kt.engine.trial.TrialStatus.COMPLETED if measured else kt.engine.trial.TrialStatus.FAILED
    )
    trial.message = message
    oracle.end_trial(trial)
