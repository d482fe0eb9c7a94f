"""GrowingOracle: what aiperf's two architecture-growing oracles share, as keras-tuner puts an
algorithm's shared logic in a base Oracle and each algorithm in a file of its own.

MorphismOracle (morphism.py: CNNs, network morphisms) and GrowthOracle (growth.py: the LM track's
decoder-only transformers) run the same search, so the flow, the records and resume treat both
alike:

- First round: the seed architecture on every worker (`first_round` of them), each trial with its
  own hyperparameters (and, through the trial number, its own weight seed).
- Later: for every free worker, the subclass grows a child of a well-scoring trial (`_grow`),
  chosen by GP-UCB among up to `candidates` drawn from the `top_parents` best; where it has none
  within the limits, the seed trains again, fresh. While the first round trains and nothing has a
  score, the oracle answers IDLE without drawing anything, so how often the flow asks does not
  change what comes next (a resumed run proposes the same).
- Everything the oracle decides is in the trial's values (architecture JSON, parent trial,
  operator, hyperparameters); its own state is its random state, in get_state() under the
  subclass's STATE_KEY, which the orchestrator stores with every proposal. What was tried is
  derived from the trials (set_state), so a resumed oracle proposes exactly what the interrupted
  one would have.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import keras_tuner as kt
import numpy as np

from aiperf.config import SpaceConfig
from aiperf.search import space
from aiperf.search.memory import SearchMemory

Trials = list[kt.engine.trial.Trial]  # a search's trials, in creation order
RUNNING = kt.engine.trial.TrialStatus.RUNNING
IDLE = kt.engine.trial.TrialStatus.IDLE
# The subclass's limits on what it grows (aiperf.arch.morph.Limits, aiperf.arch.grow.Limits).
LimitsT = TypeVar("LimitsT")


@dataclass(frozen=True)
class Growing:
    """What every growing oracle is given besides its seed and limits: the searched values'
    space, the first round's size (one seed per worker), the objective, the seed of its draws,
    and its acquisition (candidates scored per proposal, UCB's beta, parents considered)."""

    search_space: SpaceConfig
    first_round: int
    objective: kt.Objective
    seed: int
    max_trials: int
    candidates: int = 24
    beta: float = 2.0
    top_parents: int = 5


class GrowingOracle(kt.Oracle, Generic[LimitsT]):
    """The first round, the seed's values, the seed count and the random state; subclasses say
    how a child is grown (`_grow`), which values are drawn (`_sample_hyperparameters`), what the
    seed is (`_seed_json`) and what they derive from the trials (`_forget`, `_restore`)."""

    # The key of the subclass's own part of get_state().
    STATE_KEY: ClassVar[str]

    def __init__(
        self, hyperparameters: kt.HyperParameters, limits: LimitsT, growing: Growing
    ) -> None:
        super().__init__(
            objective=growing.objective,
            max_trials=growing.max_trials,
            hyperparameters=hyperparameters,
            seed=growing.seed,
            max_consecutive_failed_trials=growing.max_trials,
        )
        self.search_space, self.first_round = growing.search_space, growing.first_round
        self.limits = limits
        self.candidates, self.beta = growing.candidates, growing.beta
        self.top_parents = growing.top_parents
        self._rng = random.Random(growing.seed)
        self._forget()

    # --- what subclasses say --------------------------------------------------------------------

    def _seed_json(self) -> str:
        """The seed architecture's JSON, as a trial's values carry it."""
        raise NotImplementedError

    def _sample_hyperparameters(self) -> dict[str, Any]:
        """One draw of every searched value from self._rng, always in the same order (a resumed
        oracle's random state then gives the same draws)."""
        raise NotImplementedError

    def _grow(
        self, scored: Trials, scores: np.ndarray, ranks: np.ndarray, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A child's values (`values`, the hyperparameters just drawn, or others, with the
        architecture, parent and operator), grown from the scored trials (creation order, their
        raw scores, their memory.sample_rank); None when none can grow within the limits."""
        raise NotImplementedError

    def _catch_up(self) -> None:
        """Look at the trials added since the last proposal, before the scored ones are found:
        nothing here; a subclass that keeps something per trial extends it."""

    def _forget(self) -> None:
        """What is derived from the trials, empty: a fresh oracle's, or one about to be restored.
        Subclasses extend it with their own; the constructor calls it, so a subclass sets what
        its part reads (its seed) before calling the base's constructor."""
        self._memory = SearchMemory()  # what the trials give, kept between proposals
        self._seeds_counted = (0, 0)  # (seed trials, among the first this many trials)

    def _restore(self, own: dict[str, Any]) -> None:
        """Derive again from the trials what _forget() emptied; `own` is the stored state's part
        under STATE_KEY."""

    # --- proposals ------------------------------------------------------------------------------

    def populate_space(self, trial_id: str) -> dict[str, Any]:
        """keras-tuner's question at create_trial: the next trial's values, or IDLE. The course is
        the same for both algorithms; only the child differs (`_grow`)."""
        seeds = self._seeds()
        self._catch_up()
        scored, scores, ranks = self._memory.scored(self.trials)
        if seeds >= self.first_round and not scored and self.ongoing_trials:
            # The first round is still training: nothing to grow yet, and nothing random is drawn.
            return {"status": IDLE}
        values = self._sample_hyperparameters()
        if seeds < self.first_round:
            values = self._first_round(values)
        if seeds < self.first_round or not scored:
            # The first round, or a first round that failed: the seed again, with other
            # hyperparameters and weights (the orchestrator stops a run where nothing trains).
            return {"status": RUNNING, "values": {**values, **self._seed_values()}}
        child = self._grow(scored, scores, ranks, values)
        if child is None:  # the limits leave no room to grow: train the seed again, fresh
            return {"status": RUNNING, "values": {**values, **self._seed_values()}}
        return {"status": RUNNING, "values": child}

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

    def _learning_rate(self) -> float:
        """A learning rate drawn log-uniformly over the space's range: a search over rates that
        differ by orders of magnitude spends as many draws on each order."""
        low, high = self.search_space.learning_rate
        return math.exp(self._rng.uniform(math.log(low), math.log(high)))

    def _first_round(self, values: dict[str, Any]) -> dict[str, Any]:
        """A first-round seed's hyperparameters from the ones drawn (drawn all the same, so the
        random state moves as it always did); a subclass pins what its first round holds fixed."""
        return values

    def _seed_values(self) -> dict[str, Any]:
        """A seed trial's architecture, parent and operator."""
        return {
            space.ARCHITECTURE: self._seed_json(),
            space.PARENT: None,
            space.OPERATOR: space.SEED_OPERATOR,
        }

    # --- state ----------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """keras-tuner's state and the random state: what was tried is derived from the trials."""
        state = super().get_state()
        version, internal, gauss = self._rng.getstate()
        state[self.STATE_KEY] = {"rng": [version, list(internal), gauss]}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """The state, given after the trials it goes with (aiperf.search.resume.restore): what is
        derived from the trials is derived again, and the random state is the stored one."""
        super().set_state(state)
        self._forget()
        own = state.get(self.STATE_KEY, {})
        self._restore(own)
        if "rng" in own:
            version, internal, gauss = own["rng"]
            self._rng.setstate((version, tuple(internal), gauss))
