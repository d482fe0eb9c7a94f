"""The searched hyperparameters, and how a trial's values become a network and its training.

Each value changes the built model or its training (tests/test_search_space.py holds that to
account): learning rate and batch size shape training; dropout puts a Dropout layer of that rate
before the head; kernel size sets the kernel of the convolutions a deepen adds (morphism oracle)
or of every block convolution (keras-tuner's oracles, which also search the ResNet family).
The LM track's growth oracle (aiperf.search.growth) proposes a transformer spec instead of a
network, and searches the batch as tokens, the warm-up and the weight decay too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import keras_tuner as kt

from aiperf.arch.graph import Network, image_shape
from aiperf.arch.spec import ArchSpec, StageSpec, network_from_dict
from aiperf.arch.transformer import TransformerSpec, is_transformer
from aiperf.config import SpaceConfig

# Names of the searched values, used by the oracles, the trial records and the tests.
STAGES = "stages"
BLOCKS_PER_STAGE = "blocks_per_stage"
BASE_FILTERS = "base_filters"
KERNEL_SIZE = "kernel_size"
LEARNING_RATE = "learning_rate"
BATCH_SIZE = "batch_size"
DROPOUT = "dropout"
# Set by the morphism oracle: the proposed network, its parent trial and the edit between them.
ARCHITECTURE = "architecture"
PARENT = "parent"
OPERATOR = "operator"
SEED_OPERATOR = "seed"
# Set by the growth oracle (the LM track): the batch as tokens a device steps on (BATCH_SIZE is
# then these // seq_len sequences), and the trial's warm-up and weight decay where searched.
BATCH_TOKENS = "batch_tokens"
WARMUP_EPOCHS = "warmup_epochs"
WEIGHT_DECAY = "weight_decay"
# Set by keras-tuner's Hyperband: epochs for this trial.
HYPERBAND_EPOCHS = "tuner/epochs"


def _training(hp: kt.HyperParameters, space: SpaceConfig) -> None:
    low, high = space.learning_rate
    hp.Float(LEARNING_RATE, low, high, sampling="log" if low < high else "linear")
    hp.Choice(BATCH_SIZE, space.batch_size)
    hp.Choice(KERNEL_SIZE, space.kernel_size)
    hp.Choice(DROPOUT, space.dropout)


def morphism_hyperparameters(space: SpaceConfig) -> kt.HyperParameters:
    """What the morphism oracle searches beside the architecture."""
    hp = kt.HyperParameters()
    _training(hp, space)
    return hp


def growth_hyperparameters(space: SpaceConfig, seq_len: int) -> kt.HyperParameters:
    """What the growth oracle searches beside the architecture (declared so keras-tuner knows
    them; the oracle draws them itself)."""
    hp = kt.HyperParameters()
    low, high = space.learning_rate
    hp.Float(LEARNING_RATE, low, high, sampling="log" if low < high else "linear")
    hp.Choice(BATCH_SIZE, space.batch_sequences(seq_len))  # sequences per device
    hp.Choice(DROPOUT, sorted(set(space.dropout)))
    if space.batch_tokens is not None:
        hp.Choice(BATCH_TOKENS, sorted(set(space.batch_tokens)))
    if space.warmup_epochs is not None:
        hp.Choice(WARMUP_EPOCHS, sorted(set(space.warmup_epochs)))
    if space.weight_decay is not None:
        hp.Choice(WEIGHT_DECAY, sorted(set(space.weight_decay)))
    return hp


def family_hyperparameters(space: SpaceConfig) -> kt.HyperParameters:
    """What keras-tuner's own oracles search: a ResNet family member and its training."""
    hp = kt.HyperParameters()
    hp.Choice(STAGES, space.stages)
    hp.Choice(BLOCKS_PER_STAGE, space.blocks_per_stage)
    hp.Choice(BASE_FILTERS, space.base_filters)
    _training(hp, space)
    return hp


def architecture(
    values: dict[str, Any], input_shape: tuple[int, int, int], num_classes: int
) -> ArchSpec:
    """A ResNet of `stages` stages, doubling filters and halving resolution after the first."""
    base = int(values[BASE_FILTERS])
    stages = tuple(
        StageSpec(
            blocks=int(values[BLOCKS_PER_STAGE]), filters=base * 2**i, stride=1 if i == 0 else 2
        )
        for i in range(int(values[STAGES]))
    )
    return ArchSpec(
        input_shape=image_shape(input_shape),
        num_classes=num_classes,
        stages=stages,
        stem_filters=base,
        kernel_size=int(values[KERNEL_SIZE]),
        name="resnet-searched",
    )


@dataclass(frozen=True)
class Proposal:
    """One trial as the orchestrator runs it, decoded from the oracle's values.

    `architecture` is what is recorded and sent to the worker: the CNN's network.to_dict(), or a
    transformer spec's to_dict() (its vocabulary and sequence length are the run's already).
    `network` is the CNN's graph, None for a transformer. warmup_epochs and weight_decay are the
    trial's where the growth oracle searched them; None: the profile's train settings apply."""

    architecture: dict[str, Any]
    network: Network | None
    learning_rate: float
    batch_size: int
    dropout: float
    parent_key: str | None
    operator: str | None
    epochs: int | None  # set by Hyperband; otherwise the profile's schedule decides
    warmup_epochs: float | None = None
    weight_decay: float | None = None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def decode(
    values: dict[str, Any], input_shape: tuple[int, int, int], num_classes: int
) -> Proposal:
    network: Network | None = None
    if ARCHITECTURE in values:
        data = json.loads(values[ARCHITECTURE])
        if is_transformer(data):
            # Validated by parsing; the spec was made for this run's vocabulary and sequence length.
            recorded = TransformerSpec.from_dict(data).to_dict()
        else:
            network = network_from_dict(data).with_io(input_shape, num_classes)
    else:
        network = architecture(values, input_shape, num_classes).to_network()
    if network is not None:
        recorded = network.to_dict()
    epochs = values.get(HYPERBAND_EPOCHS)
    return Proposal(
        architecture=recorded,
        network=network,
        learning_rate=float(values[LEARNING_RATE]),
        batch_size=int(values[BATCH_SIZE]),
        dropout=float(values.get(DROPOUT, 0.0)),
        parent_key=values.get(PARENT),
        operator=values.get(OPERATOR),
        epochs=int(epochs) if epochs else None,
        warmup_epochs=_optional_float(values.get(WARMUP_EPOCHS)),
        weight_decay=_optional_float(values.get(WEIGHT_DECAY)),
    )
