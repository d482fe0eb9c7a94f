"""A Gaussian process over architectures with an edit-distance kernel, and the UCB acquisition.

k(a, b) = exp(-d(a, b) / length_scale), d the edit distance (distance.py). Scores are
standardised before fitting; a little noise on the diagonal keeps the kernel matrix usable (an
exponentiated edit distance is not always positive definite, so jitter grows until Cholesky
succeeds, as Auto-Keras does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aiperf.search.distance import describe, distance_matrix


def _described(networks: Sequence) -> list:
    return [n if isinstance(n, tuple) else describe(n) for n in networks]


class ArchitectureGP:
    """Fit on networks (or their describe()) and scores; or, when the caller keeps the edit distances
    itself (the morphism oracle does, so each pair is computed once per run), on distances."""

    def __init__(self, length_scale: float = 2.0, noise: float = 1e-2) -> None:
        self.length_scale, self.noise = length_scale, noise
        self._train: list = []

    def fit(self, networks: Sequence, scores: Sequence[float]) -> ArchitectureGP:
        self._train = _described(networks)
        return self.fit_distances(distance_matrix(self._train, self._train), scores)

    def predict(self, networks: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation, in the scores' units."""
        return self.predict_distances(distance_matrix(_described(networks), self._train))

    def fit_distances(
        self, train_distances: np.ndarray, scores: Sequence[float]
    ) -> ArchitectureGP:
        """Fit on the edit distances among the training networks (n x n) and their scores."""
        y = np.asarray(scores, dtype=float)
        self._mean, self._std = float(y.mean()), float(y.std()) or 1.0
        k = np.exp(-np.asarray(train_distances, dtype=float) / self.length_scale)
        jitter = self.noise
        while True:
            try:
                self._chol = np.linalg.cholesky(k + jitter * np.eye(len(k)))
                break
            except np.linalg.LinAlgError:
                jitter *= 10
        self._alpha = np.linalg.solve(
            self._chol.T, np.linalg.solve(self._chol, (y - self._mean) / self._std)
        )
        return self

    def predict_distances(self, distances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation from the candidates' distances to the training
        networks (candidates x n), in the scores' units."""
        k_star = np.exp(-np.asarray(distances, dtype=float) / self.length_scale)
        mean = k_star @ self._alpha
        v = np.linalg.solve(self._chol, k_star.T)
        variance = np.clip(1.0 - np.sum(v * v, axis=0), 1e-12, None)
        return self._mean + self._std * mean, self._std * np.sqrt(variance)


def upper_confidence_bound(mean: np.ndarray, std: np.ndarray, beta: float) -> np.ndarray:
    return mean + beta * std
