"""What the morphism oracle remembers between proposals, so a proposal's cost stays flat however many
trials a run has scored.

- Each trial's network is described once (what the distances need), not at every proposal; only
  the networks in use (parents, the training set) are kept parsed.
- The Gaussian process trains on a bounded set of scored trials: the best ones (where the search
  grows from), the most recent ones (what it learnt last), and a fixed pseudo-random sample of the
  rest (so it still knows the regions it left): the trials of the rest whose ids hash lowest, so a
  trial once sampled stays until a lower one comes, and the set changes by about one trial per
  proposal. Up to TRAINING_SIZE trials, that is every scored trial, exactly as an unbounded GP
  would train.
- The edit distances among the training set are kept from one proposal to the next: a trial that
  joins adds one row; a pair is never computed twice while both stay in the set.
- The candidates' distances to the training set come from the parents' edit tables against it
  (distance.EditTables: a child is one edit from its parent), kept from one proposal to the next
  for the few best trials candidates are grown from.

Nothing here is part of the oracle's saved state: it is all derived from the trials, so a resumed
oracle rebuilds it and proposes exactly what the interrupted one would have.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections.abc import Sequence

import keras_tuner as kt
import numpy as np

from aiperf.arch.graph import Network
from aiperf.arch.spec import network_from_dict
from aiperf.search import space
from aiperf.search.distance import (
    ConvKinds,
    EditTables,
    conv_distance_matrix,
    conv_distances,
    describe,
    edit_from,
    padded,
    skip_difference_matrix,
)

COMPLETED = kt.engine.trial.TrialStatus.COMPLETED
FAILED = kt.engine.trial.TrialStatus.FAILED
BEST, RECENT, SPREAD = 32, 16, 16
TRAINING_SIZE = BEST + RECENT + SPREAD
NETWORKS_KEPT = 4 * TRAINING_SIZE


def ranking(scores: np.ndarray) -> np.ndarray:
    """Indices from the best score down; equal scores in the order given (as sorted() does)."""
    return np.argsort(-scores, kind="stable")


def smallest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k smallest values, ascending, equal values in the order given: the first k of
    a stable argsort, without sorting all of them (a proposal at 10,000 trials asks three times)."""
    if k >= len(values):
        return np.argsort(values, kind="stable")
    if k <= 0:
        return np.zeros(0, dtype=int)
    within = np.flatnonzero(values <= np.partition(values, k - 1)[k - 1])
    return within[np.argsort(values[within], kind="stable")[:k]]


def best(scores: np.ndarray, k: int) -> np.ndarray:
    """ranking(scores)[:k]."""
    return smallest(-scores, k)


def sample_rank(trial_id: str) -> int:
    """A trial's fixed place in the training set's sample: a hash of its id (not Python's hash(),
    which changes between processes: a resumed oracle must sample the same trials)."""
    return int.from_bytes(hashlib.blake2b(trial_id.encode(), digest_size=8).digest(), "big")


def training_set(
    scored: Sequence[kt.engine.trial.Trial],
    scores: np.ndarray | None = None,
    ranks: np.ndarray | None = None,
) -> list[kt.engine.trial.Trial]:
    """The scored trials the GP trains on, in the order given (the oracle's, creation order).
    `scores` and `ranks` (sample_rank of each) where the caller keeps them (SearchMemory.scored)."""
    if len(scored) <= TRAINING_SIZE:
        return list(scored)
    if scores is None or ranks is None:
        scores = np.array([t.score for t in scored], dtype=float)
        ranks = np.array([sample_rank(t.trial_id) for t in scored], dtype=np.uint64)
    chosen = np.zeros(len(scored), dtype=bool)
    chosen[best(scores, BEST)] = True
    chosen[-RECENT:] = True
    wanted = TRAINING_SIZE - int(
        chosen.sum()
    )  # SPREAD, or more where a recent trial is also a best one
    rest = np.flatnonzero(~chosen)
    chosen[rest[smallest(ranks[rest], wanted)]] = True
    return [scored[int(i)] for i in np.flatnonzero(chosen)]


class SearchMemory:
    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Forget everything: the state of a new memory."""
        self._networks: dict[str, Network] = {}  # in order of use, the latest last
        self._described: dict[str, tuple] = {}
        self._ids: list[str] = []  # the training set the distances below belong to
        self._distances = np.zeros((0, 0))
        self._kinds = ConvKinds()
        self._conv_ids: dict[str, np.ndarray] = {}
        self._tables = EditTables(self._kinds)
        # The scored trials (see scored()): what was seen of the oracle's trials, and what was not
        # scored yet; the scored ones in creation order, with their creation order, scores, ranks.
        self._seen = 0
        self._created: dict[str, int] = {}
        self._waiting: list[str] = []
        self._scored: list[kt.engine.trial.Trial] = []
        self._order: list[int] = []
        self._scores, self._ranks = np.zeros(0), np.zeros(0, dtype=np.uint64)

    def scored(
        self, trials: dict[str, kt.engine.trial.Trial]
    ) -> tuple[list, np.ndarray, np.ndarray]:
        """The oracle's scored trials (completed, with a finite score) in creation order, their
        scores and their sample_rank. Only trials not scored yet are looked at (the oracle's trials
        are only ever added; a failed one stays failed; keras-tuner sets a score once, as it ends the
        trial), so a proposal at 10,000 trials does not go through all of them."""
        ids = list(trials)
        if len(ids) < self._seen:  # not the trials this memory has seen: start again
            self._reset()
        for trial_id in ids[self._seen :]:
            self._created[trial_id] = len(self._created)
            self._waiting.append(trial_id)
        self._seen = len(ids)
        waiting, self._waiting = self._waiting, []
        for trial_id in waiting:
            trial = trials[trial_id]
            if (
                trial.status == COMPLETED
                and trial.score is not None
                and math.isfinite(trial.score)
            ):
                self._score(trial)
            elif trial.status != FAILED:
                self._waiting.append(trial_id)
        return self._scored, self._scores, self._ranks

    def _score(self, trial: kt.engine.trial.Trial) -> None:
        at = bisect.bisect(self._order, self._created[trial.trial_id])
        self._order.insert(at, self._created[trial.trial_id])
        self._scored.insert(at, trial)
        self._scores = np.insert(self._scores, at, trial.score)
        self._ranks = np.insert(self._ranks, at, np.uint64(sample_rank(trial.trial_id)))

    def network(self, trial: kt.engine.trial.Trial) -> Network:
        """The trial's network, parsed once while it is in use: the most recently used NETWORKS_KEPT
        are kept (the parents and the training set are fewer), not all of a run's (a parsed
        ResNet-50 child is about 150 KB, and a long run sees every trial join the training set)."""
        net = self._networks.pop(trial.trial_id, None)
        if net is None:
            net = network_from_dict(json.loads(trial.hyperparameters.values[space.ARCHITECTURE]))
        self._networks[trial.trial_id] = net
        if len(self._networks) > NETWORKS_KEPT:
            del self._networks[next(iter(self._networks))]
        return net

    def described(self, trial: kt.engine.trial.Trial) -> tuple:
        """describe() of the trial's network, kept for every trial described (a few KB each)."""
        if trial.trial_id not in self._described:
            self._described[trial.trial_id] = describe(self.network(trial))
        return self._described[trial.trial_id]

    def conv_ids(self, trial: kt.engine.trial.Trial) -> np.ndarray:
        if trial.trial_id not in self._conv_ids:
            self._conv_ids[trial.trial_id] = self._kinds.ids(self.described(trial)[0])
        return self._conv_ids[trial.trial_id]

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
            rows = self._distance_rows([trials[i] for i in new], trials)
            matrix[new, :] = rows
            matrix[:, new] = rows.T
        self._ids, self._distances = ids, matrix
        return matrix

    def _distance_rows(
        self, rows: Sequence[kt.engine.trial.Trial], cols: Sequence[kt.engine.trial.Trial]
    ) -> np.ndarray:
        """distance_matrix() of the trials' networks, on the convolution kinds indexed once per run."""
        a, a_lengths = padded([self.conv_ids(t) for t in rows])
        b, b_lengths = padded([self.conv_ids(t) for t in cols])
        return conv_distances(
            a, a_lengths, b, b_lengths, self._kinds.table
        ) + skip_difference_matrix(
            [self.described(t)[1] for t in rows], [self.described(t)[1] for t in cols]
        )

    def children_distances(
        self,
        children: Sequence[tuple[tuple, kt.engine.trial.Trial]],
        parents: Sequence[kt.engine.trial.Trial],
        trials: Sequence[kt.engine.trial.Trial],
    ) -> np.ndarray:
        """Edit distances from each child (described, with its parent trial, one of `parents`) to
        each trial (children x trials), equal to distance_matrix(). The convolutions' part comes
        from the parents' edit tables against `trials`, kept for the next proposal (a child more
        than one convolution away from its parent is computed directly); the skips' part is cheap."""
        self._tables.sync(
            {p.trial_id: self.conv_ids(p) for p in parents},
            {t.trial_id: self.conv_ids(t) for t in trials},
        )
        members = [t.trial_id for t in trials]
        result = np.empty((len(children), len(trials)))
        by_parent: dict[str, list[tuple[int, tuple]]] = {}
        for row, ((convs, _), parent) in enumerate(children):
            edit = edit_from(self.described(parent)[0], convs)
            if edit is None:
                result[row] = conv_distance_matrix(
                    [convs], [self.described(t)[0] for t in trials]
                )[0]
            else:
                kind, position, new = edit
                by_parent.setdefault(parent.trial_id, []).append(
                    (row, (kind, position, int(self._kinds.ids([new])[0]) if new else 0))
                )
        for parent_id, edits in by_parent.items():
            rows = [row for row, _ in edits]
            result[rows] = self._tables.distances(parent_id, [edit for _, edit in edits], members)
        return result + skip_difference_matrix(
            [skips for _, skips in (c for c, _ in children)],
            [self.described(t)[1] for t in trials],
        )
