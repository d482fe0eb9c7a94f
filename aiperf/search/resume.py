"""Rebuild an oracle from the database: its stored state plus the trials' records.

keras-tuner keeps trials in files beside its state; aiperf's records hold the same facts (each
trial's values, status and best objective), so a fresh oracle given both proposes exactly what
the interrupted one would have. Trials that were running at the interruption (`interrupted`) are
ended as failed for the oracle: their finished epochs are in the records, and the resumed run
trains them again under new trial keys (Orchestrator.resume_from).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

import keras_tuner as kt

from aiperf.search import space
from aiperf.status import TrialStatus
from aiperf.store import TrialRecord

_STATUS = {TrialStatus.COMPLETED: "COMPLETED", TrialStatus.STOPPED: "COMPLETED", TrialStatus.FAILED: "FAILED",
           TrialStatus.DIVERGED: "COMPLETED", TrialStatus.RUNNING: "FAILED", TrialStatus.INTERRUPTED: "FAILED"}


def trial_values(record: TrialRecord) -> dict[str, Any]:
    """The oracle's values for a recorded trial (the architecture is stored in its own column)."""
    values = dict(record.hyperparameters)
    if space.OPERATOR in values:  # proposed by the morphism oracle, which carries the architecture
        values[space.ARCHITECTURE] = json.dumps(record.architecture, sort_keys=True)
    return values


def restore(oracle: kt.Oracle, state: dict[str, Any], records: Iterable[TrialRecord], objective: str) -> kt.Oracle:
    for record in sorted(records, key=lambda r: r.number):
        hp = oracle.hyperparameters.copy()
        hp.values = trial_values(record)
        measured = record.best_val_accuracy is not None
        status = _STATUS[record.status] if measured or record.status == TrialStatus.FAILED else "FAILED"
        trial = kt.engine.trial.Trial(hyperparameters=hp, trial_id=record.trial_key, status=status)
        if measured:
            trial.metrics.register(objective, direction="max")
            trial.metrics.update(objective, record.best_val_accuracy, step=0)
            trial.score, trial.best_step = record.best_val_accuracy, 0
        oracle.trials[record.trial_key] = trial
    state = copy.deepcopy(state)
    state["ongoing_trials"] = {}
    oracle.set_state(state)
    return oracle
