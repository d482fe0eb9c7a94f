"""Synthetic image classification data that a network can learn, generated from a seed.

Each class has a smooth random pattern; a sample is its class pattern, randomly scaled and
shifted, plus a smooth random pattern of its own ("clutter", unrelated to the class) and pixel
noise, and a share of labels is flipped. Models must learn to tell the class pattern from the
clutter to beat chance, so better architectures and longer training score higher; the flipped
labels keep accuracy measurably below 100% (so the regulated score, which takes
ln(1 - accuracy), stays finite and meaningful).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from aiperf.config import DataConfig


@dataclass(frozen=True)
class ImageArrays:
    x_train: np.ndarray  # (n, h, w, c) float32
    y_train: np.ndarray  # (n,) int32
    x_val: np.ndarray
    y_val: np.ndarray

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(d) for d in self.x_train.shape[1:])  # type: ignore[return-value]


def _class_patterns(
    rng: np.random.Generator, classes: int, size: int, channels: int
) -> np.ndarray:
    """Low-frequency patterns: a coarse random grid upsampled to the image size."""
    coarse = 4
    grid = rng.standard_normal((classes, coarse, coarse, channels)).astype(np.float32)
    reps = -(-size // coarse)
    patterns = np.repeat(np.repeat(grid, reps, axis=1), reps, axis=2)[:, :size, :size, :]
    # A 3x3 box blur softens the block edges, so the patterns are smooth rather than tiled.
    padded = np.pad(patterns, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    # A sum of nine arrays is an array (sum() only returns its start value 0 for no terms).
    total = cast(
        np.ndarray,
        sum(padded[:, i : i + size, j : j + size, :] for i in range(3) for j in range(3)),
    )
    smooth = total / 9.0
    smooth -= smooth.mean(axis=(1, 2, 3), keepdims=True)
    smooth /= smooth.std(axis=(1, 2, 3), keepdims=True) + 1e-6
    return smooth.astype(np.float32)


def _samples(
    rng: np.random.Generator, patterns: np.ndarray, n: int, noise: float, label_noise: float
) -> tuple[np.ndarray, np.ndarray]:
    classes = patterns.shape[0]
    labels = rng.integers(0, classes, size=n)
    scale = rng.uniform(0.7, 1.3, size=(n, 1, 1, 1)).astype(np.float32)
    images = patterns[labels] * scale
    shifts = rng.integers(-2, 3, size=(n, 2))
    for i, (dy, dx) in enumerate(shifts):
        images[i] = np.roll(images[i], (int(dy), int(dx)), axis=(0, 1))
    images += noise * rng.standard_normal(images.shape).astype(np.float32)
    flip = rng.random(n) < label_noise
    labels[flip] = rng.integers(0, classes, size=int(flip.sum()))
    return images.astype(np.float32), labels.astype(np.int32)


def generate(config: DataConfig, seed: int) -> ImageArrays:
    """The same arrays for the same config and seed, on any machine."""
    rng = np.random.default_rng(seed)
    patterns = _class_patterns(rng, config.classes, config.image_size, config.channels)
    x_train, y_train = _samples(
        rng, patterns, config.train_samples, config.noise, config.label_noise
    )
    x_val, y_val = _samples(rng, patterns, config.val_samples, config.noise, config.label_noise)
    if config.clutter > 0:
        for x in (x_train, x_val):
            x += config.clutter * _class_patterns(rng, len(x), config.image_size, config.channels)
    return ImageArrays(x_train, y_train, x_val, y_val)
