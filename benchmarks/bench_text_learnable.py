"""Is `synthetic-text` learnable, and does a longer context pay? Counted models say so.

Stages the language of `data.kind: synthetic-text` (aiperf/data/text_synthetic.py) from a seed,
timing it, then fits interpolated n-gram count models (aiperf.data.tokens.ngram_token_nats) on the
training split and scores them on the validation split, in nats per token: the unigram model (the
entropy of the byte frequencies), the bigram, and longer contexts up to six tokens. Each order
lower than the last is structure a model that sees further back can use. Then the tokens no
n-gram can predict: the four letters of a document's key after each paragraph (`#KEY`), drawn at
random per document, cost an n-gram about ln 26 nats each, where a model that attends back to the
document's header copies them for almost nothing. The machine is printed with the figures.

With `--models`, two small decoder-only transformers built here from Keras' own layers (a stand-in
for the LM track's builder, not it) train for the same number of steps on aiperf's token feed
(aiperf.data.tokens) and report their validation loss in the same nats per token: the seed-sized
one (1 block, width 32) and a deeper, wider one (2 blocks, width 64), each with its nats on the
key letters. Measured on a 2-core AMD EPYC VM, 3000 steps of 16 x 128 tokens: 1.120 and 0.946
nats/token overall (the 6-gram: 1.007), but about 3.3 on the key letters for both: in minutes on
a CPU neither has learnt to copy the key yet, so that structure is still there to be learnt.

    .venv/bin/python benchmarks/bench_text_learnable.py [--seed 0] [--train-tokens 2000000]
        [--models --steps 400 --seq-len 64 --batch 32]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.data.tokens import load_tokens, ngram_token_nats, open_token_feed, windows

ORDERS = (1, 2, 3, 4, 5, 6)
MODELS = ((1, 32), (2, 64))  # (blocks, width): the seed's size, and deeper and wider


def machine() -> str:
    """The CPU model and core count, from lscpu where there is one."""
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        info = dict(line.split(":", 1) for line in lines.splitlines() if ":" in line)
        model = info.get("Model name", platform.processor()).strip()
        return f"{model}, {info.get('CPU(s)', '?').strip()} CPUs"
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine()


def key_positions(validation: np.ndarray, start: int) -> np.ndarray:
    """Positions (in validation[start:]) of the key letters that follow " #" in a trailer."""
    marks = np.nonzero((validation[:-1] == ord(" ")) & (validation[1:] == ord("#")))[0] + 2
    letters = (marks[:, None] + np.arange(4)[None, :]).ravel()
    letters = letters[letters < len(validation)]
    return letters[letters >= start] - start


def tiny_gpt(blocks: int, width: int, seq_len: int) -> object:
    """A pre-norm decoder-only transformer of Keras' layers: token and learned position
    embeddings, causal self-attention and a 4x GELU MLP per block, a final norm, an LM head."""
    import keras

    from aiperf.layers import PositionEmbedding

    tokens = keras.Input((seq_len,), dtype="int32")
    x = PositionEmbedding(seq_len)(keras.layers.Embedding(256, width)(tokens))
    for _ in range(blocks):
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.MultiHeadAttention(max(1, width // 16), 16)(h, h, use_causal_mask=True)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.Dense(4 * width, activation="gelu")(h)
        x = keras.layers.Add()([x, keras.layers.Dense(width)(h)])
    logits = keras.layers.Dense(256)(keras.layers.LayerNormalization()(x))
    return keras.Model(tokens, logits)


def key_nats(model: object, path: str, seq_len: int) -> float:
    """A model's mean nats on the key letters after '#' in the validation windows."""
    validation = load_tokens(path, "validation")
    x, y = windows(validation, seq_len)
    flat = key_positions(validation, 0) - 1  # a target at stream index t is window position t - 1
    flat = flat[(flat >= 0) & (flat < x.size)]
    rows, cols = flat // seq_len, flat % seq_len
    picked = np.unique(rows)
    logits = model.predict(x[picked], batch_size=256, verbose=0)  # type: ignore[attr-defined]
    logits = logits - logits.max(axis=-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    at = np.searchsorted(picked, rows)
    return float(-logp[at, cols, y[rows, cols]].mean())


def train_models(path: str, steps: int, seq_len: int, batch: int, seed: int) -> None:
    """Each of MODELS trained `steps` steps on the feed, then its validation loss, printed."""
    import keras

    feed = open_token_feed(path, batch_size=batch, seq_len=seq_len, seed=seed)
    print(
        f"transformers, {steps} steps of {batch} x {seq_len} tokens (Adam 3e-3), validation "
        f"over {feed.val_samples} sequences:"
    )
    for blocks, width in MODELS:
        keras.utils.set_random_seed(seed)
        model = tiny_gpt(blocks, width, seq_len)
        model.compile(  # type: ignore[attr-defined]
            keras.optimizers.Adam(3e-3),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        began = time.perf_counter()
        model.fit(  # type: ignore[attr-defined]
            feed.epochs["x"], steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0
        )
        loss = model.evaluate(**feed.val, verbose=0)  # type: ignore[attr-defined]
        print(
            f"  {blocks} block(s), width {width:>3} ({model.count_params():>7} parameters): "  # type: ignore[attr-defined]
            f"{loss:.3f} nats/token, {key_nats(model, path, seq_len):.3f} on the key letters "
            f"after '#' ({time.perf_counter() - began:.0f} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-tokens", type=int, default=2_000_000)
    parser.add_argument("--val-tokens", type=int, default=200_000)
    parser.add_argument("--models", action="store_true", help="train two small transformers")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    config = DataConfig(
        kind="synthetic-text",
        train_tokens=args.train_tokens,
        val_tokens=args.val_tokens,
        seq_len=args.seq_len,
    )
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        manifest = stage(config, args.seed, Path(tmp))
        staged = time.perf_counter() - began
        train = load_tokens(manifest.path, "train")
        validation = load_tokens(manifest.path, "validation")
        if args.models:
            train_models(manifest.path, args.steps, args.seq_len, args.batch, args.seed)
    began = time.perf_counter()
    nats = ngram_token_nats(train, validation, ORDERS)
    counted = time.perf_counter() - began
    print(f"machine: {machine()}")
    print(
        f"synthetic-text seed {args.seed}: {len(train)} train / {len(validation)} validation "
        f"tokens staged in {staged:.2f} s (sha256 {manifest.sha256[:12]})"
    )
    print(f"validation nats per token of n-gram models fitted on train ({counted:.1f} s):")
    for order in ORDERS:
        name = {1: "unigram", 2: "bigram"}.get(order, f"{order}-gram")
        print(f"  {name:>8}: {nats[order].mean():.3f}")
    keys = key_positions(validation, max(ORDERS) - 1)
    print(
        f"  key letters after '#' ({len(keys)} tokens): {max(ORDERS)}-gram "
        f"{nats[max(ORDERS)][keys].mean():.3f} nats each (ln 26 = {np.log(26):.3f}); copying "
        "them from the document's header costs a model that attends back almost nothing"
    )


if __name__ == "__main__":
    main()
