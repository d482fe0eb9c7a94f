"""MorphismOracle: network-morphism architecture search with hyperparameter search, as a
keras-tuner Oracle the flow drives (create_trial / update_trial / end_trial). What it shares with
the LM track's GrowthOracle (the first round, seeds, the random state, populate_space's course) is
in their base, aiperf/search/growing.py; here is what is its own:

- A child: candidates are drawn as one random morphism (deepen, widen, skip) of a well-scoring
  parent; a Gaussian process over architectures with an edit-distance kernel predicts each
  candidate's score and the upper confidence bound picks one (AIPerf and Auto-Keras do the same).
  Architectures already tried are not proposed again.
- Hyperparameters (learning rate, batch size, kernel size of added convolutions, dropout) are
  drawn from the space for each proposal; the first round's seeds train at the smallest batch,
  bare Keras's (`_first_round`).

Which architectures were tried is derived from the trials (set_state).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import keras_tuner as kt
import numpy as np

from aiperf.arch.graph import Network
from aiperf.arch.morph import Limits, random_morphism
from aiperf.arch.spec import network_from_dict
from aiperf.search import space
from aiperf.search.distance import describe
from aiperf.search.gp import ArchitectureGP, upper_confidence_bound
from aiperf.search.growing import IDLE, RUNNING, Growing, GrowingOracle, Trials
from aiperf.search.memory import best, training_set
from aiperf.search.tried import TriedArchitectures

__all__ = ["IDLE", "RUNNING", "MorphismOracle"]


class MorphismOracle(GrowingOracle[Limits]):
    """Grows `seed_network` by network morphisms within `limits`, ranking scores as given
    (higher is better: the CNN track's val_accuracy)."""

    STATE_KEY = "morphism"

    def __init__(self, seed_network: Network, limits: Limits, growing: Growing) -> None:
        self.seed_network = seed_network
        super().__init__(space.morphism_hyperparameters(growing.search_space), limits, growing)

    def _forget(self) -> None:
        super()._forget()  # the memory keeps parsed networks and edit distances between proposals
        self._tried = TriedArchitectures([(self.seed_network, self.seed_network.to_json())])

    def _restore(self, own: dict[str, Any]) -> None:
        """Every architecture proposed is a trial's. Parsed one at a time and let go (held as the
        trials' own JSON): the memory keeps only what proposals need."""
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
        )

    # --- proposals ------------------------------------------------------------------------------

    def _seed_json(self) -> str:
        return self.seed_network.to_json()

    def _sample_hyperparameters(self) -> dict[str, Any]:
        s, rng = self.search_space, self._rng
        return {
            space.LEARNING_RATE: self._learning_rate(),
            space.BATCH_SIZE: rng.choice(s.batch_size),
            space.KERNEL_SIZE: rng.choice(s.kernel_size),
            space.DROPOUT: rng.choice(s.dropout),
        }

    def _first_round(self, values: dict[str, Any]) -> dict[str, Any]:
        """The first round trains at the space's smallest batch, the one each worker's bare Keras
        reference trains at (aiperf.lifecycle.reference): the seed trials then compare with it
        like for like, every one of them (aiperf.results.overhead). At a drawn batch, a run of two
        workers compared one seed trial or none, and its ratio moved by a quarter from run to
        run (issue 52). Their learning rates and dropout stay drawn."""
        return {**values, space.BATCH_SIZE: min(self.search_space.batch_size)}

    def _grow(
        self, scored: Trials, scores: np.ndarray, ranks: np.ndarray, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        proposal = self._propose(scored, scores, ranks, int(values[space.KERNEL_SIZE]))
        if proposal is None:
            return None
        child, parent_id, operator = proposal
        spec = child.to_json()
        self._tried.add(child, spec)
        return {
            **values,
            space.ARCHITECTURE: spec,
            space.PARENT: parent_id,
            space.OPERATOR: operator,
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
