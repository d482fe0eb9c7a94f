"""The Keras layers aiperf defines itself: only what Keras' own layers do not provide.

Beside the builders that put them in a model (aiperf.arch.transformer); the operation counter
(aiperf.ops.transformer_costs), which sits above aiperf.arch, prices them by class; a saved model loads them
back by their registered names (`aiperf>PositionEmbedding`, not by this module's path: a model
saved when this module was aiperf/layers.py loads the same) once this module is imported.

- `PositionEmbedding`: learned absolute positions added to a (batch, sequence, width) input, as
  GPT-2 has them. Keras 3 has token embeddings (`Embedding`, `ReversibleEmbedding` for a tied LM
  head) and norms (`LayerNormalization`, `RMSNormalization`) but no position layer.
- `causal_self_attention`: Keras' MultiHeadAttention whose attention kernel is chosen, not guessed:
  "fused" (the backend's flash kernel: cuDNN's on an NVIDIA GPU under JAX, which never holds the
  T x T scores), "unfused" (the scores materialised, then softmax, then a product with the values)
  or "auto" (Keras decides per call, silently falling back). The same layer, weights and arithmetic;
  only which kernel runs it differs.
"""

from __future__ import annotations

from typing import Any

import keras

# Which kernel computes a causal self-attention (aiperf.train.attention chooses one per run).
FUSED, UNFUSED, AUTO = "fused", "unfused", "auto"
ATTENTION_KERNELS = (AUTO, FUSED, UNFUSED)
# What Keras' dot_product_attention is told for each: True demands the flash kernel (an error where
# it cannot run, never a silent fallback), False the plain one, None lets the backend guess.
_FLASH = {FUSED: True, UNFUSED: False, AUTO: None}
# cuDNN's flash attention takes heads of a multiple of 8 wide, up to 128 on every GPU it runs on
# (Ampere and later; 256 from Hopper). A wider head under "fused" is left to Keras ("auto").
FUSED_HEAD_MULTIPLE = 8
FUSED_HEAD_MAX = 128


def fused_head_fits(key_dim: int) -> bool:
    """Whether a head of `key_dim` fits cuDNN's flash kernel on every GPU that has one."""
    return key_dim % FUSED_HEAD_MULTIPLE == 0 and key_dim <= FUSED_HEAD_MAX


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


def causal_self_attention(
    num_heads: int, key_dim: int, *, attention: str = AUTO, name: str | None = None
) -> keras.layers.MultiHeadAttention:
    """Keras' MultiHeadAttention whose kernel is `attention` (ATTENTION_KERNELS), for a decoder to
    call as `layer(x, x, use_causal_mask=True)`.

    Called so (no other mask, no dropout), MultiHeadAttention hands the projected heads to
    `keras.ops.dot_product_attention(..., is_causal=True, flash_attention=layer._flash_attention)`;
    only that last value is set here. Its constructor cannot be told "unfused": it keeps
    `flash_attention or keras.config.is_flash_attention_enabled()`, so False becomes None (guess)
    unless flash attention is off for the whole process; hence the attribute is set after it.

    The layer stays Keras' own class, not a subclass: a weights file names a layer's weights by its
    class (layers/multi_head_attention/query_dense/...), so kept weights of earlier runs load, the
    operation rule (aiperf.ops.transformer_costs) prices it, and a saved model (whose config has no kernel:
    it is where the model runs, not what it is) loads anywhere as "auto"."""
    if attention not in ATTENTION_KERNELS:
        raise ValueError(
            f"attention must be one of {', '.join(ATTENTION_KERNELS)}, got {attention!r}"
        )
    layer = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, name=name)
    layer._flash_attention = _FLASH[attention]  # read by MultiHeadAttention._compute_attention
    return layer
