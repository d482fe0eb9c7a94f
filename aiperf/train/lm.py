"""What a language-model trial does differently from an image trial, for run_trial's one flow
(aiperf.train.trial) and verify's re-measure (aiperf.results.remeasure) to share.

A trial whose architecture is a transformer spec (aiperf.arch.transformer.is_transformer) builds
the decoder-only model the spec describes, feeds it windows of staged tokens (aiperf.data.tokens)
instead of images, and learns to predict each next token. Everything else (precision, jit, the
trial's devices, the optimizer and its schedule, the deadline, the epoch reports, the kept weights)
is the image trial's, so this module holds only the three parts that differ: the model (fresh; a
grown child's from its parent's kept weights is aiperf.train.kept.inherited_lm's), the feed, and
the loss with its metrics. Keeping them here, in one place, is what lets verify rebuild and
evaluate a kept LM exactly as its trial did.

The quality of an LM trial is its validation loss: the mean cross-entropy in nats per token
(every window has seq_len targets, so Keras' per-batch means weighted by sequences are means per
token). Its "accuracy" is next-token accuracy. Lower loss is better (aiperf.quality).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiperf.arch.transformer import TransformerSpec, build_transformer

if TYPE_CHECKING:
    from aiperf.data.feed import Feed


def spec_of(architecture: dict[str, Any], dropout: float = 0.0) -> TransformerSpec:
    """The trial's spec with the request's dropout: the search's dropout hyperparameter is the
    trial's, not the stored architecture's, as the image builder's dropout is."""
    return replace(TransformerSpec.from_dict(architecture), dropout=float(dropout))


def build_lm(
    architecture: dict[str, Any], *, dropout: float, seed: int, attention: str = "auto"
) -> Any:
    """A fresh model for the trial's spec, its weights drawn from the trial's seed, its attention
    computed by the run's kernel (train.attention, aiperf.train.attention). Called under the
    trial's dtype policy and device scope, as the image builder is."""
    return build_transformer(spec_of(architecture, dropout), seed=seed, attention=attention)


def open_lm_feed(
    data_path: str, architecture: dict[str, Any], *, batch_size: int, seed: int, devices: int = 1
) -> Feed:
    """The token windows of the spec's length from the staged tokens at `data_path`: int32 token
    ids the model embeds itself, so no pixels to scale on the device (Feed.pixels is false)."""
    from aiperf.data.tokens import open_token_feed

    seq_len = TransformerSpec.from_dict(architecture).seq_len
    return open_token_feed(
        data_path, batch_size=batch_size, seq_len=seq_len, seed=seed, devices=devices
    )


def lm_loss() -> Any:
    """Next-token cross-entropy over the float32 logits the model outputs (no softmax layer):
    its value is nats per token."""
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def lm_metrics() -> list[str]:
    """Next-token accuracy: Keras resolves "accuracy" to sparse categorical accuracy for integer
    targets of one rank less than the logits, and the argmax of logits is that of probabilities."""
    return ["accuracy"]
