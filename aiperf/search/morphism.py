"""MorphismOracle: network-morphism architecture search with hyperparameter search, as a
keras-tuner Oracle the flow drives (create_trial / update_trial / end_trial).

- First round: the seed network on every worker, each with its own hyperparameters (and, through
  the trial number, its own weight seed).
- Later: for every free worker, candidates are drawn as one random morphism (deepen, widen, skip)
  of a well-scoring parent; a Gaussian process over architectures with an edit-distance kernel
  predicts each candidate's score and the upper confidence bound picks one (AIPerf and Auto-Keras
  do the same). Architectures already tried are not proposed again.
- Hyperparameters (learning rate, batch size, kernel size of added convolutions, dropout) are
  drawn from the space for each proposal.

Everything the oracle decides is in the trial's values (architecture JSON, parent trial,
operator, hyperparameters); its own state is its random state, in get_state(), which the
orchestrator stores in the database with every proposal. Which architectures were tried is derived
from the trials (set_state).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from typing import Any

import keras_tuner as kt
import numpy as np

from aiperf.arch.graph import Network
from aiperf.arch.morph import Limits, random_morphism
from aiperf.arch.spec import network_from_dict
from aiperf.config import SpaceConfig
from aiperf.search import space
from aiperf.search.distance import describe
from aiperf.search.gp import ArchitectureGP, upper_confidence_bound
from aiperf.search.memory import SearchMemory, best, training_set
from aiperf.search.tried import TriedArchitectures

RUNNING = kt.engine.trial.TrialStatus.RUNNING
IDLE = kt.engine.trial.TrialStatus.IDLE


class MorphismOracle(kt.Oracle):
    def __init__(
        self,
        *,
        seed_network: Network,
        search_space: SpaceConfig,
        first_round: int,
        limits: Limits,
        objective: kt.Objective,
        seed: int,
        max_trials: int,
        candidates: int = 24,
        beta: float = 2.0,
        top_parents: int = 5,
    ) -> None:
        super().__init__(
            objective=objective,
            max_trials=max_trials,
            hyperparameters=space.morphism_hyperparameters(search_space),
            seed=seed,
            max_consecutive_failed_trials=max_trials,
        )
        self.seed_network, self.search_space = seed_network, search_space
        self.first_round, self.limits = first_round, limits
        self.candidates, self.beta, self.top_parents = candidates, beta, top_parents
        self._rng = random.Random(seed)
        self._tried = TriedArchitectures([(seed_network, seed_network.to_json())])
        self._memory = SearchMemory()  # parsed networks and edit distances, kept between proposals
        self._seeds_counted = (0, 0)  # (seed trials, among the first this many trials)

    # --- proposals ------------------------------------------------------------------------------

    def populate_space(self, trial_id: str) -> dict[str, Any]:
        seeds = self._seeds()
        scored, scores, ranks = self._memory.scored(self.trials)
        if seeds >= self.first_round and not scored and self.ongoing_trials:
            # The first round is still training: nothing to grow yet. Nothing random is drawn, so
            # how often the flow asks does not change what comes next (a resumed run proposes the same).
            return {"status": IDLE}
        values = self._sample_hyperparameters()
        if seeds < self.first_round or not scored:
            # The first round, or a first round that failed: the seed again, with other
            # hyperparameters and weights (the orchestrator stops a run where nothing trains).
            return {"status": RUNNING, "values": {**values, **self._seed_values()}}
        proposal = self._propose(scored, scores, ranks, int(values[space.KERNEL_SIZE]))
        if proposal is None:  # the limits leave no room to grow: train the seed again, fresh
            return {"status": RUNNING, "values": {**values, **self._seed_values()}}
        child, parent_id, operator = proposal
        spec = child.to_json()
        self._tried.add(child, spec)
        return {
            "status": RUNNING,
            "values": {
                **values,
                space.ARCHITECTURE: spec,
                space.PARENT: parent_id,
                space.OPERATOR: operator,
            },
        }

    def _seeds(self) -> int:
        """Seed trials so far, up to first_round. Counted over the trials added since the last call
        (trials are only ever added), so the first round of a thousand workers costs a thousand
        steps, not half a million."""
        if self._seeds_counted[0] < self.first_round:
            trials = list(self.trials.values())
            seen, seeds = self._seeds_counted[1], self._seeds_counted[0]
            seeds += sum(
                1
                for t in trials[seen:]
                if t.hyperparameters.values.get(space.OPERATOR) == space.SEED_OPERATOR
            )
            self._seeds_counted = (seeds, len(trials))
        return min(self._seeds_counted[0], self.first_round)

    def _seed_values(self) -> dict[str, Any]:
        return {
            space.ARCHITECTURE: self.seed_network.to_json(),
            space.PARENT: None,
            space.OPERATOR: space.SEED_OPERATOR,
        }

    def _sample_hyperparameters(self) -> dict[str, Any]:
        s, rng = self.search_space, self._rng
        low, high = s.learning_rate
        return {
            space.LEARNING_RATE: math.exp(rng.uniform(math.log(low), math.log(high))),
            space.BATCH_SIZE: rng.choice(s.batch_size),
            space.KERNEL_SIZE: rng.choice(s.kernel_size),
            space.DROPOUT: rng.choice(s.dropout),
        }

    def _propose(
        self,
        scored: list[kt.engine.trial.Trial],
        scores: np.ndarray,
        ranks: np.ndarray,
        kernel: int,
    ) -> tuple[Network, str, str] | None:
        ranked = [scored[i] for i in best(scores, self.top_parents)]
        proposals: list[
            tuple[Network, kt.engine.trial.Trial]
        ] = []  # (child, parent), new architectures
        drawn = TriedArchitectures()
        for _ in range(self.candidates * 3):
            if len(proposals) >= self.candidates:
                break
            parent = self._rng.choice(ranked)
            child = random_morphism(self._memory.network(parent), self._rng, kernel, self.limits)
            if child is not None and child not in self._tried and child not in drawn:
                drawn.add(child)
                proposals.append((child, parent))
        if not proposals:
            return None
        train = training_set(scored, scores, ranks)
        gp = ArchitectureGP().fit_distances(
            self._memory.training_distances(train), [t.score for t in train]
        )
        distances = self._memory.children_distances(
            [(describe(c), p) for c, p in proposals], ranked, train
        )
        mean, std = gp.predict_distances(distances)
        chosen = int(upper_confidence_bound(mean, std, self.beta).argmax())
        child, parent = proposals[chosen]
        return child, parent.trial_id, child.history[-1]

    # --- state ----------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """keras-tuner's state and the random state: what was tried is derived from the trials."""
        state = super().get_state()
        version, internal, gauss = self._rng.getstate()
        state["morphism"] = {"rng": [version, list(internal), gauss]}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """The state, given after the trials it goes with (aiperf.search.resume.restore)."""
        super().set_state(state)
        self._memory = (
            SearchMemory()
        )  # derived from the trials; a state from elsewhere comes with others
        self._seeds_counted = (0, 0)
        morphism = state.get("morphism", {})
        # Every architecture proposed is a trial's; states stored by earlier versions also list their keys.
        # Parsed one at a time and let go (held as the trials' own JSON): the memory keeps only what
        # proposals need.
        specs = [
            t.hyperparameters.values[space.ARCHITECTURE]
            for t in self.trials.values()
            if t.hyperparameters.values.get(space.ARCHITECTURE)
        ]
        self._tried = TriedArchitectures(
            itertools.chain(
                [(self.seed_network, self.seed_network.to_json())],
                ((network_from_dict(json.loads(spec)), spec) for spec in specs),
            ),
            keys=morphism.get("tried", []),
        )
        if "rng" in morphism:
            version, internal, gauss = morphism["rng"]
            self._rng.setstate((version, tuple(internal), gauss))
