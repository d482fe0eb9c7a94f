"""What a language-model trial feeds `model.fit` and `model.evaluate` from staged token shards
(aiperf/data/staging_tokens.py), and the n-gram baselines its loss is read against.

A split's shards are one stream of token ids. A sample is a window of seq_len inputs and the
seq_len targets one token on (the next token of each input); windows start every seq_len tokens,
so every token of a split but its first is a target exactly once per pass and a pass over T tokens
holds (T - 1) // seq_len sequences (staging_tokens.sequences: the manifest's counts). Windows do
not overlap or slide: a pass is a pass over the data, and the counts are exact. Training takes the
windows in a new order each pass, drawn from the seed, and drops the last partial batch (as the
image feed does: every step has the same shape); evaluation takes the validation windows once, in
order, its last batch maybe short.

On TensorFlow the batches come from a tf.data pipeline of our own with the autotuner off, as
aiperf.data.feed.array_dataset's do and for the same reason; it holds the stream once as uint16
and gathers each batch's windows, so memory is two bytes a token whatever the sequence length.
Other backends get int32 arrays that Keras slices itself (shuffled each epoch by Keras, the
windows past the last whole batch left out), as aiperf.data.feed gives them image arrays.

`ngram_nats` measures what a split holds to learn: the cross-entropy, in nats per token, of
interpolated (Witten-Bell) n-gram count models fitted on the training split and scored on the
validation split. Decreasing with n, it shows the structure a longer context can use; a model's
validation loss above the bigram's has learnt less than counting pairs does.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.data.feed import Feed, evaluated, untuned
from aiperf.data.manifest import read_manifest, shard_path
from aiperf.data.staging_tokens import sequences


@lru_cache(maxsize=4)
def _load(folder: str, split: str, digest: str) -> np.ndarray:
    manifest = read_manifest(folder)
    shards = sorted(
        (s for s in manifest["shards"] if s["split"] == split), key=lambda s: str(s["name"])
    )
    parts = [np.load(shard_path(folder, s), allow_pickle=False) for s in shards]
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
    stream.flags.writeable = False  # shared by the trials of this process
    return stream


def load_tokens(folder: str | Path, split: str) -> np.ndarray:
    """A split's token stream (uint16), read once per process for each staging of the folder."""
    folder = str(folder)
    return _load(folder, split, str(read_manifest(folder)["sha256"]))


def windows(stream: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window of a stream as (inputs, targets) int32 arrays of shape (sequences, seq_len)."""
    n = sequences(len(stream), seq_len)
    inputs = stream[: n * seq_len].reshape(n, seq_len).astype(np.int32)
    targets = stream[1 : n * seq_len + 1].reshape(n, seq_len).astype(np.int32)
    return inputs, targets


def token_batches(
    folder: str | Path,
    split: str,
    batch_size: int,
    seq_len: int,
    seed: int | None = None,
    *,
    passes: bool = False,
) -> Any:
    """A split's (inputs, targets) batches as a tf.data pipeline, int32 of shape (batch, seq_len).

    With `seed` (training): the windows in a new order each pass, reproducible from the seed, and
    whole batches only; without it (evaluation): every window once, in order, the last batch maybe
    short. `passes`: pass after pass in one iterator, for one `fit` over all a trial's epochs."""
    import tensorflow as tf

    stream = load_tokens(folder, split)
    count = sequences(len(stream), seq_len)
    indices = tf.data.Dataset.range(count)
    if seed is not None:
        indices = indices.shuffle(count, seed=seed, reshuffle_each_iteration=True)
    tokens = tf.data.Dataset.from_tensors(tf.constant(stream)).repeat()  # uint16, once
    offsets = tf.range(seq_len + 1, dtype=tf.int64)

    def gather(picked: Any, data: Any) -> tuple[Any, Any]:
        rows = tf.cast(tf.gather(data, picked[:, None] * seq_len + offsets[None, :]), tf.int32)
        return rows[:, :-1], rows[:, 1:]

    batches = tf.data.Dataset.zip(
        (indices.batch(batch_size, drop_remainder=seed is not None), tokens)
    ).map(gather)
    if passes:
        batches = batches.repeat().prefetch(2)
    return untuned(batches)


def open_token_feed(
    folder: str | Path, *, batch_size: int, seq_len: int, seed: int, devices: int = 1
) -> Feed:
    """The fit and evaluate arguments of a trial on staged tokens, with its exact counts: a pass
    trains (sequences // batch) * batch windows and evaluates every validation window. A trial
    data-parallel over `devices` on JAX or torch evaluates the largest multiple of `devices`
    windows, as an image trial does (aiperf.data.feed.evaluated; the counts say so)."""
    import keras

    from aiperf.data.placement import local_copy

    folder = local_copy(str(folder))  # node-local shards, when the staging asked for them
    train_count = sequences(len(load_tokens(folder, "train")), seq_len)
    val_count = sequences(len(load_tokens(folder, "validation")), seq_len)
    whole = train_count // batch_size * batch_size
    if whole == 0:
        raise ValueError(
            f"batch size {batch_size} is larger than the {train_count} training sequences of "
            f"{seq_len} tokens in {Path(folder).name}; use a smaller search.space.batch_size"
        )
    if keras.backend.backend() != "tensorflow":
        x, y = windows(load_tokens(folder, "train"), seq_len)
        x_val, y_val = windows(load_tokens(folder, "validation"), seq_len)
        val_count = evaluated(val_count, devices)  # DataParallel splits every batch evenly
        x_val, y_val = x_val[:val_count], y_val[:val_count]
        # Whole batches, as from tf.data: the windows past the last whole batch are left out.
        train = {"x": x[:whole], "y": y[:whole], "batch_size": batch_size, "shuffle": True}
        return Feed(
            train=train,
            epochs=train,  # Keras slices the arrays itself: no pipeline to keep
            val={"x": x_val, "y": y_val, "batch_size": batch_size},
            train_samples=whole,
            val_samples=val_count,
            kind="arrays",
        )
    return Feed(
        train={"x": token_batches(folder, "train", batch_size, seq_len, seed), "shuffle": False},
        epochs={
            "x": token_batches(folder, "train", batch_size, seq_len, seed, passes=True),
            "steps_per_epoch": whole // batch_size,
            "shuffle": False,
        },
        val={"x": token_batches(folder, "validation", batch_size, seq_len)},
        train_samples=whole,
        val_samples=val_count,
    )


# --- n-gram baselines -------------------------------------------------------------------------


def _contexts(stream: np.ndarray, length: int, start: int) -> np.ndarray:
    """For each position from `start`: the `length` tokens before it packed in one int64."""
    key = np.zeros(len(stream) - start, dtype=np.int64)
    for back in range(1, length + 1):
        key = key * 256 + stream[start - back : len(stream) - back].astype(np.int64)
    return key


def ngram_nats(train: np.ndarray, validation: np.ndarray, orders: tuple[int, ...]) -> list[float]:
    """Validation cross-entropy (nats per token) of n-gram models fitted on `train`, one per
    order in `orders` (1: unigram, 2: bigram, ...): the means of `ngram_token_nats`."""
    each = ngram_token_nats(train, validation, orders)
    return [float(each[order].mean()) for order in orders]


def ngram_token_nats(
    train: np.ndarray, validation: np.ndarray, orders: tuple[int, ...]
) -> dict[int, np.ndarray]:
    """Each validation token's nats under n-gram models fitted on `train`, per order in
    `orders`, each interpolated down to add-one unigrams (Witten-Bell) and scored on the same
    positions: validation[max(orders) - 1:]. Token ids must be below 256; orders up to 7 (the
    context is packed into an int64)."""
    top = max(orders)
    if not 1 <= top <= 7:
        raise ValueError("orders must be 1..7")
    start = top - 1
    train = np.asarray(train, dtype=np.int64)
    validation = np.asarray(validation, dtype=np.int64)
    targets = validation[start:]
    unigram = np.bincount(train, minlength=256)[:256] + 1.0
    p = (unigram / unigram.sum())[targets]
    nats = {1: -np.log(p)}
    for order in range(2, top + 1):
        length = order - 1
        keys = _contexts(train, length, length) * 256 + train[length:]
        pairs, pair_counts = np.unique(keys, return_counts=True)
        contexts, first, kinds = np.unique(pairs // 256, return_index=True, return_counts=True)
        context_counts = np.add.reduceat(pair_counts, first)
        query = _contexts(validation, length, start)
        c_hw = _lookup(pairs, pair_counts, query * 256 + targets)
        c_h = _lookup(contexts, context_counts, query)
        t_h = _lookup(contexts, kinds, query)
        seen = c_h > 0
        p = np.where(seen, (c_hw + t_h * p) / np.maximum(c_h + t_h, 1), p)
        nats[order] = -np.log(p)
    return {order: nats[order] for order in orders}


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[keys == q] for each q of `query`, 0 where the key is absent (keys sorted)."""
    at = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return np.where(keys[at] == query, values[at], 0).astype(np.float64)
