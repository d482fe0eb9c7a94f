"""The Keras layers aiperf defines itself: only what Keras' own layers do not provide.

Kept below both the builders (aiperf.arch) and the operation counter (aiperf.ops), which may not
import each other: the builder puts these layers in a model, the counter prices them by class, and
a saved model loads them back by their registered names (`aiperf>PositionEmbedding`), without
aiperf.arch.

- `PositionEmbedding`: learned absolute positions added to a (batch, sequence, width) input, as
  GPT-2 has them. Keras 3 has token embeddings (`Embedding`, `ReversibleEmbedding` for a tied LM
  head) and norms (`LayerNormalization`, `RMSNormalization`) but no position layer.
"""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="aiperf")
class PositionEmbedding(keras.layers.Layer):
    """inputs + positions[:sequence]: one learned vector per position, up to `max_length`.

    The input's sequence may be shorter than `max_length` (the first positions are used); its last
    dimension is the width of the vectors. Costs one add per output element (docs/flops.md)."""

    def __init__(self, max_length: int, initializer: str = "glorot_uniform", **kwargs: Any):
        super().__init__(**kwargs)
        if max_length < 1:
            raise ValueError(f"max_length must be at least 1, got {max_length}")
        self.max_length = int(max_length)
        self.initializer = initializer

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        width = input_shape[-1]
        if width is None:
            raise ValueError("PositionEmbedding needs a known last dimension")
        self.positions = self.add_weight(
            name="positions",
            shape=(self.max_length, int(width)),
            initializer=self.initializer,
            trainable=True,
        )

    def call(self, inputs: Any) -> Any:
        length = keras.ops.shape(inputs)[-2]
        table = keras.ops.cast(self.positions[:length], inputs.dtype)
        return inputs + table

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "initializer": self.initializer,
        }
