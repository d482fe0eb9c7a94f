"""The oracle's state as a run stores it, and an oracle rebuilt from it and the trials' records.

keras-tuner keeps trials in files beside its state; aiperf's records hold the same facts (each
trial's values, status and best objective), so a fresh oracle given both proposes exactly what
the interrupted one would have. Trials that were running at the interruption (`interrupted`) are
ended as failed for the oracle: their finished epochs are in the records, and the resumed run
trains them again under new trial keys (Orchestrator.resume_from).

The state is stored with every proposal, so it is stored without what it lists for every trial
(the order they started and ended in, the hashes of their values): the records hold that, and
restore() derives it again. The stored state then stays a few kilobytes however many trials a run
has; whole, it would grow with every trial, and writing it at every proposal would be a large part
of a freed worker's wait for its next trial at scale (docs/scaling.md, "Paper scale").
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

import keras_tuner as kt

from aiperf import quality
from aiperf.search import space, tuner_internals
from aiperf.status import TrialStatus
from aiperf.store import TrialRecord

_STATUS = {
    TrialStatus.COMPLETED: "COMPLETED",
    TrialStatus.STOPPED: "COMPLETED",
    TrialStatus.FAILED: "FAILED",
    TrialStatus.DIVERGED: "COMPLETED",
    TrialStatus.RUNNING: "FAILED",
    TrialStatus.INTERRUPTED: "FAILED",
    TrialStatus.OUT_OF_MEMORY: "FAILED",
    TrialStatus.TOO_LARGE: "FAILED",
}


def trial_values(record: TrialRecord) -> dict[str, Any]:
    """The oracle's values for a recorded trial (the architecture is stored in its own column)."""
    values = dict(record.hyperparameters)
    if space.OPERATOR in values:  # proposed by the morphism oracle, which carries the architecture
        values[space.ARCHITECTURE] = json.dumps(record.architecture, sort_keys=True)
    return values


# keras-tuner's state entries that list every trial; restore() derives them from the records.
PER_TRIAL = (
    "ongoing_trials",
    "start_order",
    "end_order",
    "run_times",
    "tried_so_far",
    "id_to_hash",
)
NEWEST_TRIAL = (
    "newest_trial"  # the last trial a stored state includes: the newest one recorded with it
)


def stored_state(oracle: kt.Oracle) -> dict[str, Any]:
    """The oracle's state without its per-trial lists, detached from the oracle's live objects by
    a JSON round trip (as the database would store it anyway)."""
    state = {key: value for key, value in oracle.get_state().items() if key not in PER_TRIAL}
    state[NEWEST_TRIAL] = oracle.start_order[-1] if oracle.start_order else None
    return json.loads(json.dumps(state))


def _objective_value(record: TrialRecord, objective: str) -> float | None:
    """The record's best value of the search's objective: its lowest validation loss for the LM
    track's val_loss, else its best validation accuracy (the store keeps both per trial)."""
    return record.best_val_loss if quality.lower_is_better(objective) else record.best_val_accuracy


def restore(
    oracle: kt.Oracle, state: dict[str, Any], records: Iterable[TrialRecord], objective: str
) -> kt.Oracle:
    """`oracle` (fresh) given the stored state and the run's trials: the per-trial lists
    keras-tuner keeps are derived again from the records, whatever the state holds of them."""
    records = sorted(records, key=lambda r: r.number)
    direction = quality.direction(objective)
    for record in records:
        hp = oracle.hyperparameters.copy()
        hp.values = trial_values(record)
        value = _objective_value(record, objective)
        measured = value is not None
        status = (
            _STATUS[record.status] if measured or record.status == TrialStatus.FAILED else "FAILED"
        )
        trial = kt.engine.trial.Trial(hyperparameters=hp, trial_id=record.trial_key, status=status)
        if measured:
            trial.metrics.register(objective, direction=direction)
            trial.metrics.update(objective, value, step=0)
            trial.score, trial.best_step = value, 0
        oracle.trials[record.trial_key] = trial
    ended = sorted(
        (r for r in records if r.status not in (TrialStatus.RUNNING, TrialStatus.INTERRUPTED)),
        key=lambda r: (r.ended_at is None, r.ended_at, r.number),
    )
    state = {key: value for key, value in copy.deepcopy(state).items() if key != NEWEST_TRIAL}
    state.update(
        ongoing_trials={},
        start_order=[r.trial_key for r in records],
        end_order=[r.trial_key for r in ended],
        run_times={r.trial_key: 1 for r in ended},
        tried_so_far=[],
        id_to_hash={},
    )
    oracle.set_state(state)
    for trial in oracle.trials.values():  # the hashes keras-tuner's oracles avoid proposing twice
        tuner_internals.record_values(oracle, trial)
    return oracle
