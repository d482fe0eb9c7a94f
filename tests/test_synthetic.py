"""Synthetic data: the same for the same seed, different for another, and clutter makes it harder."""

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.synthetic import generate

SMALL = DataConfig(image_size=16, train_samples=64, val_samples=32, noise=0.5)


def test_same_seed_same_data_other_seed_other_data():
    a, b, c = generate(SMALL, 1), generate(SMALL, 1), generate(SMALL, 2)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_val, b.y_val)
    assert not np.array_equal(a.x_train, c.x_train)
    assert a.image_shape == (16, 16, 3) and set(a.y_train) <= set(range(SMALL.classes))


def test_clutter_adds_class_unrelated_structure():
    plain = generate(SMALL, 1)
    cluttered = generate(SMALL.model_copy(update={"clutter": 1.0}), 1)
    assert np.array_equal(plain.y_train, cluttered.y_train), "labels do not change"

    # The class signal is the per-class mean image; clutter lowers its share of each image's variance.
    def class_share(x, y):
        means = np.stack([x[y == k].mean(axis=0) for k in np.unique(y)])
        return means.var() / x.var()

    assert class_share(cluttered.x_train, cluttered.y_train) < class_share(
        plain.x_train, plain.y_train
    )
