"""A Gaussian process over architectures with an edit-distance kernel, and the UCB acquisition.

k(a, b) = exp(-d(a, b) / length_scale), d the edit distance (distance.py). Scores are
standardised before fitting; a little noise on the diagonal keeps the kernel matrix usable (an
exponentiated edit distance is not always positive definite, so jitter grows until Cholesky
succeeds, as Auto-Keras does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aiperf.search.distance import distance


class ArchitectureGP:
    def __init__(self, length_scale: float = 2.0, noise: float = 1e-2) -> None:
        self.length_scale, self.noise = length_scale, noise
        self._train: list = []

    def _kernel(self, rows: Sequence, cols: Sequence) -> np.ndarray:
        d = np.array([[distance(a, b) for b in cols] for a in rows], dtype=float)
        return np.exp(-d / self.length_scale)

    def fit(self, networks: Sequence, scores: Sequence[float]) -> ArchitectureGP:
        y = np.asarray(scores, dtype=float)
        self._mean, self._std = float(y.mean()), float(y.std()) or 1.0
        self._train = list(networks)
        k = self._kernel(self._train, self._train)
        jitter = self.noise
        while True:
            try:
                self._chol = np.linalg.cholesky(k + jitter * np.eye(len(k)))
                break
            except np.linalg.LinAlgError:
                jitter *= 10
        self._alpha = np.linalg.solve(self._chol.T, np.linalg.solve(self._chol, (y - self._mean) / self._std))
        return self

    def predict(self, networks: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation, in the scores' units."""
        k_star = self._kernel(networks, self._train)
        mean = k_star @ self._alpha
        v = np.linalg.solve(self._chol, k_star.T)
        variance = np.clip(1.0 - np.sum(v * v, axis=0), 1e-12, None)
        return self._mean + self._std * mean, self._std * np.sqrt(variance)


def upper_confidence_bound(mean: np.ndarray, std: np.ndarray, beta: float) -> np.ndarray:
    return mean + beta * std
