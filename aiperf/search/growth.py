"""GrowthOracle: the LM track's architecture search, growing decoder-only transformers, as a
keras-tuner Oracle the flow drives (create_trial / update_trial / end_trial), as MorphismOracle
does for CNNs. What the two share (the first round of seeds, the random state, populate_space's
course) is in their base, aiperf/search/growing.py, so the flow, the records and resume treat both
alike; here is what is this oracle's own:

- A child: for every free worker after the first round, the candidates are the children one
  growth step (aiperf.arch.grow: deepen, widen_mlp, widen_heads, widen_model; grow.candidates,
  within the limits) from the few best-scoring trials that still have a child not tried (equal
  TransformerSpec.architecture_key: deepen at any position is one architecture, its position
  drawn once the child is chosen), up to `candidates` of them drawn at random; a Gaussian process
  over architectures (kernel exp(-grow.distance / length_scale)) predicts each one's quality and
  the upper confidence bound picks one. When no trial has such a child, the seed trains again,
  fresh.
- Speed: each trial's spec, grow.describe() vector and children are computed once and kept, and
  the scored trials are found incrementally (SearchMemory.scored), so a proposal's cost hardly
  grows with the trials (benchmarks/bench_growth_oracle.py).
- Quality follows the objective's direction: the LM track's val_loss is better when LOWER, so
  keras-tuner's trial.score (the raw loss) is negated before the parents are ranked and the GP is
  fitted; an objective to maximise is used as it is.
- Hyperparameters drawn for each proposal: learning rate (log-uniform), the batch as tokens (and
  the sequences per device it makes, batch_tokens // seq_len), dropout, and the warm-up and weight
  decay where the space searches them (aiperf.search.space names them). With `inherit`
  (search.inherit), a grown child continues its parent, as population-based training's "explore"
  does (Jaderberg et al. 2017): it trains from the parent's kept weights (the worker grows them,
  aiperf.arch.grow.grow_weights) with the parent's hyperparameters, the learning rate moved by a
  factor of 0.8 or 1.25 within the range and each other choice drawn again with probability 1/4.
  A fresh draw would swamp what the growth contributes: the GP sees only the architecture.

What was tried, and every trial's features for the GP, are derived from the trials (set_state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras_tuner as kt
import numpy as np

from aiperf.arch import grow
from aiperf.arch.morph import Morphism
from aiperf.arch.transformer import TransformerSpec
from aiperf.config.workload import windows_in
from aiperf.search import space
from aiperf.search.gp import ArchitectureGP, upper_confidence_bound
from aiperf.search.growing import IDLE, RUNNING, Growing, GrowingOracle, Trials
from aiperf.search.memory import best, training_set

__all__ = ["IDLE", "RUNNING", "WIDENINGS", "GrowthOracle"]
# The operators other than deepen: each gives a parent one or two children.
WIDENINGS = tuple(op for op in grow.OPERATORS if op != "deepen")


@dataclass(frozen=True)
class _Child:
    """One architecture a parent can grow into: its key, a spec of it, the operator."""

    key: str
    spec: TransformerSpec
    operator: str


class GrowthOracle(GrowingOracle[grow.Limits]):
    """Grows `seed_spec` within `limits`; `objective`'s direction says which scores are better."""

    STATE_KEY = "growth"

    def __init__(
        self,
        seed_spec: TransformerSpec,
        limits: grow.Limits,
        growing: Growing,
        inherit: bool = False,
    ) -> None:
        self.seed_spec, self.inherit = seed_spec, inherit
        hyperparameters = space.growth_hyperparameters(growing.search_space, seed_spec.seq_len)
        super().__init__(hyperparameters, limits, growing)
        # +1 where higher scores are better, -1 where lower are (val_loss): quality = sign x score.
        self._sign = -1.0 if self.objective.direction == "min" else 1.0

    def _forget(self) -> None:
        super()._forget()  # the memory serves only to find the scored trials (its scored())
        self._tried = {self.seed_spec.architecture_key()}
        self._specs: dict[str, TransformerSpec] = {}  # parsed once per trial: a spec is small
        self._features: dict[str, np.ndarray] = {}  # grow.describe() of each trial's spec
        self._grown: dict[str, list[_Child]] = {}  # each parent's children within the limits
        self._tried_seen = 0  # the first this many trials' architectures are in _tried

    def _restore(self, own: dict[str, Any]) -> None:
        """The architectures tried, rebuilt from the trials' specs."""
        self._catch_up()

    # --- proposals ------------------------------------------------------------------------------

    def _grow(
        self, scored: Trials, scores: np.ndarray, ranks: np.ndarray, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        proposal = self._propose(scored, self._sign * scores, ranks)
        if proposal is None:
            return None
        child, parent_id = proposal
        self._tried.add(child.architecture_key())
        if self.inherit:
            values = self._perturbed(self.trials[parent_id].hyperparameters.values)
        return {
            **values,
            space.ARCHITECTURE: child.to_json(),
            space.PARENT: parent_id,
            space.OPERATOR: Morphism.parse(child.history[-1]).operator,
        }

    def _catch_up(self) -> None:
        """Every trial's architecture in _tried: those added since the last call are looked at
        (trials are only ever added), so a trial put in by other means (resume) counts too."""
        trials = list(self.trials.values())
        for trial in trials[self._tried_seen :]:
            if trial.hyperparameters.values.get(space.ARCHITECTURE):
                self._tried.add(self._spec(trial).architecture_key())
        self._tried_seen = len(trials)

    def _seed_json(self) -> str:
        return self.seed_spec.to_json()

    def _sample_hyperparameters(self) -> dict[str, Any]:
        """One draw of every searched value, always in the same order (a resumed oracle's random
        state then gives the same draws)."""
        s, rng = self.search_space, self._rng
        values: dict[str, Any] = {space.LEARNING_RATE: self._learning_rate()}
        if s.batch_tokens is not None:
            tokens = rng.choice(s.batch_tokens)
            values[space.BATCH_TOKENS] = tokens
            values[space.BATCH_SIZE] = windows_in(tokens, self.seed_spec.seq_len)
        else:
            values[space.BATCH_SIZE] = rng.choice(s.batch_size)
        values[space.DROPOUT] = rng.choice(s.dropout)
        if s.warmup_epochs is not None:
            values[space.WARMUP_EPOCHS] = rng.choice(s.warmup_epochs)
        if s.weight_decay is not None:
            values[space.WEIGHT_DECAY] = rng.choice(s.weight_decay)
        return values

    def _perturbed(self, parent: dict[str, Any]) -> dict[str, Any]:
        """The parent's hyperparameters, perturbed within the space (population-based training's
        explore step): the learning rate times 0.8 or 1.25, kept within its range; each choice the
        parent's, or with probability 1/4 drawn again from the space. The batch stays whole: a
        batch in tokens moves with its sequences. Draws always in the same order (resume)."""
        s, rng = self.search_space, self._rng
        low, high = s.learning_rate
        rate = float(parent[space.LEARNING_RATE]) * rng.choice((0.8, 1.25))
        values: dict[str, Any] = {space.LEARNING_RATE: min(high, max(low, rate))}
        choices: list[tuple[str, list[Any] | None]] = [
            (
                space.BATCH_TOKENS if s.batch_tokens is not None else space.BATCH_SIZE,
                s.batch_tokens if s.batch_tokens is not None else s.batch_size,
            ),
            (space.DROPOUT, s.dropout),
            (space.WARMUP_EPOCHS, s.warmup_epochs),
            (space.WEIGHT_DECAY, s.weight_decay),
        ]
        for name, options in choices:
            if options is not None:
                redraw = rng.random() < 0.25
                values[name] = (
                    rng.choice(options) if redraw or name not in parent else parent[name]
                )
        if s.batch_tokens is not None:
            values[space.BATCH_SIZE] = windows_in(
                values[space.BATCH_TOKENS], self.seed_spec.seq_len
            )
        return values

    def _spec(self, trial: kt.engine.trial.Trial) -> TransformerSpec:
        spec = self._specs.get(trial.trial_id)
        if spec is None:
            spec = TransformerSpec.from_json(trial.hyperparameters.values[space.ARCHITECTURE])
            self._specs[trial.trial_id] = spec
        return spec

    def _described(self, trial: kt.engine.trial.Trial) -> np.ndarray:
        """grow.describe() of the trial's spec, computed once per trial (as SearchMemory keeps a
        CNN's), so a proposal's cost does not grow with the trials scored."""
        features = self._features.get(trial.trial_id)
        if features is None:
            features = grow.describe(self._spec(trial))
            self._features[trial.trial_id] = features
        return features

    def _propose(
        self, scored: list[kt.engine.trial.Trial], quality: np.ndarray, ranks: np.ndarray
    ) -> tuple[TransformerSpec, str] | None:
        """A child one growth step from one of the best trials (by `quality`, higher better), not
        tried before, chosen by GP-UCB; None when no trial has an untried child within the limits."""
        proposals = self._draw(self._parents(scored, quality))
        if not proposals:
            return None
        train = training_set(scored, quality, ranks)
        quality_of = {t.trial_id: self._sign * float(t.score) for t in train}
        features = [self._described(t) for t in train]
        gp = ArchitectureGP().fit_distances(
            grow.distance_matrix(features, features), [quality_of[t.trial_id] for t in train]
        )
        mean, std = gp.predict_distances(
            grow.distance_matrix([grow.describe(c.spec) for c, _ in proposals], features)
        )
        chosen = int(upper_confidence_bound(mean, std, self.beta).argmax())
        child, parent = proposals[chosen]
        spec = child.spec
        if child.operator == "deepen":  # every position gives this architecture: draw one
            grown = self._spec(parent)
            spec = grow.deepen(grown, self._rng.randrange(grown.layers + 1))
        return spec, parent.trial_id

    def _parents(
        self, scored: list[kt.engine.trial.Trial], quality: np.ndarray
    ) -> list[kt.engine.trial.Trial]:
        """The top_parents best trials that have a child within the limits not tried yet, best
        first: a long run whose best trials have reached the limits, or had every child tried,
        grows the next best rather than training the seed again. Which trials those are depends
        on the trials alone (what was tried is theirs), so a resumed oracle picks the same."""
        k = self.top_parents
        while True:
            parents = [
                scored[int(i)]
                for i in best(quality, k)
                if any(c.key not in self._tried for c in self._children(scored[int(i)]))
            ]
            if len(parents) >= self.top_parents or k >= len(scored):
                return parents[: self.top_parents]
            k *= 4

    def _children(self, trial: kt.engine.trial.Trial) -> list[_Child]:
        """The trial's children within the limits, one per architecture (deepen at any position is
        one architecture: it stands for them all), computed once per trial."""
        children = self._grown.get(trial.trial_id)
        if children is None:
            spec = self._spec(trial)
            grown = (
                [grow.deepen(spec, 0)] if grow.within(grow.deepen(spec, 0), self.limits) else []
            )
            grown += grow.candidates(spec, self.limits, WIDENINGS)
            children, keys = [], set()
            for child in grown:
                key = child.architecture_key()
                if key not in keys:
                    keys.add(key)
                    operator = Morphism.parse(child.history[-1]).operator
                    children.append(_Child(key, child, operator))
            self._grown[trial.trial_id] = children
        return children

    def _draw(
        self, parents: list[kt.engine.trial.Trial]
    ) -> list[tuple[_Child, kt.engine.trial.Trial]]:
        """The parents' untried children (each architecture once, from its best parent); up to
        `candidates` of them, drawn at random where there are more."""
        proposals: list[tuple[_Child, kt.engine.trial.Trial]] = []
        drawn: set[str] = set()
        for parent in parents:
            for child in self._children(parent):
                if child.key not in self._tried and child.key not in drawn:
                    drawn.add(child.key)
                    proposals.append((child, parent))
        if len(proposals) > self.candidates:
            proposals = self._rng.sample(proposals, self.candidates)
        return proposals
