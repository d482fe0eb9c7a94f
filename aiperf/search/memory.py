"""What the morphism oracle remembers between proposals, so a proposal's cost stays flat however many
trials a run has scored.

- Each trial's network is parsed and described once, not at every proposal.
- The Gaussian process trains on a bounded set of scored trials: the best ones (where the search
  grows from), the most recent ones (what it learnt last), and an even spread over the rest (so it
  still knows the regions it left). Up to TRAINING_SIZE trials, that is every scored trial, exactly
  as an unbounded GP would train.
- The edit distances among the training set are kept from one proposal to the next: a trial that
  joins adds one row; a pair is never computed twice while both stay in the set.

Nothing here is part of the oracle's saved state: it is all derived from the trials, so a resumed
oracle rebuilds it and proposes exactly what the interrupted one would have.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import keras_tuner as kt
import numpy as np

from aiperf.arch.graph import Network
from aiperf.arch.spec import network_from_dict
from aiperf.search import space
from aiperf.search.distance import describe, distance_matrix

BEST, RECENT, SPREAD = 32, 16, 16
TRAINING_SIZE = BEST + RECENT + SPREAD


def training_set(scored: Sequence[kt.engine.trial.Trial]) -> list[kt.engine.trial.Trial]:
    """The scored trials the GP trains on, in the order given (the oracle's, creation order)."""
    if len(scored) <= TRAINING_SIZE:
        return list(scored)
    best = {t.trial_id for t in sorted(scored, key=lambda t: t.score, reverse=True)[:BEST]}
    recent = {t.trial_id for t in scored[-RECENT:]}
    rest = [t for t in scored if t.trial_id not in best | recent]
    wanted = TRAINING_SIZE - len(best | recent)  # SPREAD, or more where a recent trial is also a best one
    step = len(rest) / wanted
    spread = {rest[int(i * step)].trial_id for i in range(wanted)}
    chosen = best | recent | spread
    return [t for t in scored if t.trial_id in chosen]


class SearchMemory:
    def __init__(self) -> None:
        self._networks: dict[str, Network] = {}
        self._described: dict[str, tuple] = {}
        self._ids: list[str] = []  # the training set the distances below belong to
        self._distances = np.zeros((0, 0))

    def network(self, trial: kt.engine.trial.Trial) -> Network:
        if trial.trial_id not in self._networks:
            self._networks[trial.trial_id] = network_from_dict(
                json.loads(trial.hyperparameters.values[space.ARCHITECTURE]))
        return self._networks[trial.trial_id]

    def described(self, trial: kt.engine.trial.Trial) -> tuple:
        if trial.trial_id not in self._described:
            self._described[trial.trial_id] = describe(self.network(trial))
        return self._described[trial.trial_id]

    def training_distances(self, trials: Sequence[kt.engine.trial.Trial]) -> np.ndarray:
        """Edit distances among `trials` (n x n); only pairs with a trial new to the set are computed."""
        ids = [t.trial_id for t in trials]
        known = {trial_id: i for i, trial_id in enumerate(self._ids)}
        old = [i for i, trial_id in enumerate(ids) if trial_id in known]
        new = [i for i, trial_id in enumerate(ids) if trial_id not in known]
        matrix = np.zeros((len(ids), len(ids)))
        if old:
            previous = [known[ids[i]] for i in old]
            matrix[np.ix_(old, old)] = self._distances[np.ix_(previous, previous)]
        if new:
            rows = distance_matrix([self.described(trials[i]) for i in new], [self.described(t) for t in trials])
            matrix[new, :] = rows
            matrix[:, new] = rows.T
        self._ids, self._distances = ids, matrix
        return matrix

    def distances_to(self, candidates: Sequence[tuple], trials: Sequence[kt.engine.trial.Trial]) -> np.ndarray:
        """Edit distances from each candidate (described) to each trial (candidates x trials)."""
        return distance_matrix(list(candidates), [self.described(t) for t in trials])
