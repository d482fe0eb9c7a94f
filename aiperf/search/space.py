"""The searched space: keras-tuner hyperparameters, and how their values become a model and
its training. Each hyperparameter here changes either the built model (and so its operation
count) or the training; tests/test_search_space.py holds that to account.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import keras_tuner as kt

from aiperf.arch.spec import ArchSpec, StageSpec
from aiperf.config import SpaceConfig

# Names of the searched values, used by the oracle, the trial records and the tests.
STAGES = "stages"
BLOCKS_PER_STAGE = "blocks_per_stage"
BASE_FILTERS = "base_filters"
KERNEL_SIZE = "kernel_size"
LEARNING_RATE = "learning_rate"
BATCH_SIZE = "batch_size"


def hyperparameters(space: SpaceConfig) -> kt.HyperParameters:
    hp = kt.HyperParameters()
    hp.Choice(STAGES, space.stages)
    hp.Choice(BLOCKS_PER_STAGE, space.blocks_per_stage)
    hp.Choice(BASE_FILTERS, space.base_filters)
    hp.Choice(KERNEL_SIZE, space.kernel_size)
    low, high = space.learning_rate
    hp.Float(LEARNING_RATE, low, high, sampling="log" if low < high else "linear")
    hp.Choice(BATCH_SIZE, space.batch_size)
    return hp


@dataclass(frozen=True)
class TrainingHParams:
    """The searched values that shape training rather than the network."""

    learning_rate: float
    batch_size: int


def architecture(values: dict[str, Any], input_shape: tuple[int, int, int], num_classes: int) -> ArchSpec:
    """A ResNet of `stages` stages, doubling filters and halving resolution after the first."""
    base = int(values[BASE_FILTERS])
    stages = tuple(
        StageSpec(blocks=int(values[BLOCKS_PER_STAGE]), filters=base * 2**i, stride=1 if i == 0 else 2)
        for i in range(int(values[STAGES]))
    )
    return ArchSpec(input_shape=tuple(input_shape), num_classes=num_classes, stages=stages,
                    stem_filters=base, kernel_size=int(values[KERNEL_SIZE]), name="resnet-searched")


def training(values: dict[str, Any]) -> TrainingHParams:
    return TrainingHParams(learning_rate=float(values[LEARNING_RATE]), batch_size=int(values[BATCH_SIZE]))


def random_architecture(seed: int, input_shape: tuple[int, int, int] = (32, 32, 3), num_classes: int = 10,
                        space: SpaceConfig | None = None) -> ArchSpec:
    """One architecture drawn from the space: for tests and the operation-counter checks."""
    space = space or SpaceConfig()
    rng = random.Random(seed)
    values = {
        STAGES: rng.choice(space.stages),
        BLOCKS_PER_STAGE: rng.choice(space.blocks_per_stage),
        BASE_FILTERS: rng.choice(space.base_filters),
        KERNEL_SIZE: rng.choice(space.kernel_size),
    }
    return architecture(values, input_shape, num_classes)
