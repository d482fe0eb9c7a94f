"""Is `synthetic-text` learnable, and does a longer context pay? Counted models say so.

Stages the language of `data.kind: synthetic-text` (aiperf/data/text_synthetic.py) from a seed,
timing it, then fits interpolated n-gram count models (aiperf.data.tokens.ngram_token_nats) on the
training split and scores them on the validation split, in nats per token: the unigram model (the
entropy of the byte frequencies), the bigram, and longer contexts up to six tokens. Each order
lower than the last is structure a model that sees further back can use. Then the tokens no
n-gram can predict: the four letters of a document's key after each paragraph (`#KEY`), drawn at
random per document, cost an n-gram about ln 26 nats each, where a model that attends back to the
document's header copies them for almost nothing. The machine is printed with the figures.

With `--models`, the LM track's seed (lm-tiny) and children of it made by the search's growth
operators (deeper, a wider MLP, a wider model, both), built by aiperf's builder
(aiperf.arch.transformer.build_transformer), each train from fresh weights for the same number of
steps on aiperf's token feed (aiperf.data.tokens) and report their validation loss in the same nats
per token, and on the key letters. docs/performance.md, "The LM track", has the figures.

With `--recipes`, the seed lm-tiny trains three times from the same fresh weights on the same
batches, the same steps at the same peak rate (--rate; several give a row each): with the LM
profiles' recipe of aiperf-rules-1.7 (Adam, weight decay 1e-4 as an L2 term on the gradient, a
constant rate), with 1.8's (AdamW, decoupled weight decay 0.1 on the matrices, beta_2 0.95,
gradients clipped to a global norm of 1, a tenth of the steps warming up, then cosine), and with
1.8's at a constant rate after its warm-up, each built by aiperf.train.recipe as a trial builds
it; the validation loss is read four times and the best is printed.

Each loss is shown with its regulation factor under aiperf-rules-1.5/1.6 (ln V - loss) and under 1.7
(ln((ln V - H) / (loss - H)), aiperf.quality.loss_factor), H the validation split's entropy floor
computed from the generator (aiperf/data/text_entropy.py), and whether it meets a loss ceiling
(--ceiling, lm-quick's in aiperf-rules-1.7 by default).

    .venv/bin/python benchmarks/bench_text_learnable.py [--seed 0] [--train-tokens 2000000]
        [--models --steps 400 --seq-len 64 --batch 32] [--ceiling 2.25]
        [--recipes --rate 0.003 0.01 --train-tokens 262144 --val-tokens 32768]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.data.text_entropy import entropy
from aiperf.data.text_synthetic import VOCAB_SIZE
from aiperf.data.tokens import load_tokens, ngram_token_nats, open_token_feed, windows
from aiperf.quality import loss_factor, loss_gain
from aiperf.rules import load_ruleset
from aiperf.system.fingerprint import cpu_model

ORDERS = (1, 2, 3, 4, 5, 6)


def factors(loss: float, floor: float, ceiling: float) -> str:
    """A loss's regulation factor under the old rule and the new, and whether it is valid."""
    old, new = loss_gain(loss, VOCAB_SIZE), loss_factor(loss, VOCAB_SIZE, floor)
    valid = "valid" if loss <= ceiling else f"INVALID (> {ceiling:g})"
    return f"factor old {old:.3f}, new {new:.3f}, {valid}"


def machine() -> str:
    """The CPU model and core count, as the run's fingerprint reads them."""
    return f"{cpu_model()}, {os.cpu_count()} CPUs"


def key_positions(validation: np.ndarray, start: int) -> np.ndarray:
    """Positions (in validation[start:]) of the key letters that follow " #" in a trailer."""
    marks = np.nonzero((validation[:-1] == ord(" ")) & (validation[1:] == ord("#")))[0] + 2
    letters = (marks[:, None] + np.arange(4)[None, :]).ravel()
    letters = letters[letters < len(validation)]
    return letters[letters >= start] - start


def models(seq_len: int) -> list[tuple[str, object]]:
    """The LM track's seed (lm-tiny at this sequence length) and children the search's growth
    operators make of it (aiperf/arch/grow.py), each as aiperf's builder builds it."""
    from aiperf.arch import grow
    from aiperf.arch.transformer import transformer_seed

    seed = transformer_seed("lm-tiny", seq_len=seq_len)
    deeper = grow.deepen(grow.deepen(seed, seed.layers), seed.layers + 1)
    wider = grow.widen_model(seed, 2)
    return [
        ("seed lm-tiny", seed),
        ("deepen x2", deeper),
        ("widen_mlp", grow.widen_mlp(seed, 2)),
        ("widen_model", wider),
        ("deepen x2 + widen_model", grow.widen_model(deeper, 2)),
    ]


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


def train_models(  # noqa: PLR0913
    path: str, steps: int, seq_len: int, batch: int, seed: int, regulation: tuple[float, float]
) -> None:
    """Each of `models` trained `steps` steps on the feed, then its validation loss, printed."""
    import keras

    feed = open_token_feed(path, batch_size=batch, seq_len=seq_len, seed=seed)
    print(
        f"transformers, {steps} steps of {batch} x {seq_len} tokens (Adam 3e-3), validation "
        f"over {feed.val_samples} sequences:"
    )
    from aiperf.arch.transformer import build_transformer

    for name, spec in models(seq_len):
        keras.utils.set_random_seed(seed)
        model = build_transformer(spec, seed=seed)  # type: ignore[arg-type]
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
            f"  {name:<24} {spec.layers} blocks, width {spec.d_model:>3}, MLP {spec.mlp_width:>4} "  # type: ignore[attr-defined]
            f"({model.count_params():>7} parameters): "  # type: ignore[attr-defined]
            f"{loss:.3f} nats/token, {key_nats(model, path, seq_len):.3f} on the key letters "
            f"after '#' ({time.perf_counter() - began:.0f} s); {factors(loss, *regulation)}"
        )


# The LM profiles' recipes, as aiperf.train.recipe.optimizer's arguments and the schedule's
# (aiperf-rules-1.8.yaml: each profile's `recipe_before` and `recipe`; 1.7's largest searched decay).
RECIPES: dict[str, dict[str, Any]] = {
    "1.7 Adam + L2": dict(
        optimizer="adam", weight_decay=1e-4, beta_2=0.999, clip_norm=None, schedule="constant",
        warmup=0.0,
    ),
    "1.8 AdamW": dict(
        optimizer="adamw", weight_decay=0.1, beta_2=0.95, clip_norm=1.0, schedule="cosine",
        warmup=0.1,
    ),
    # 1.8's optimizer with 1.7's constant rate (after the same warm-up): what the cosine does
    "1.8, constant": dict(
        optimizer="adamw", weight_decay=0.1, beta_2=0.95, clip_norm=1.0, schedule="constant",
        warmup=0.1,
    ),
}  # fmt: skip


def train_recipes(  # noqa: PLR0913
    path: str, steps: int, seq_len: int, batch: int, seed: int, rates: list[float]
) -> None:
    """The seed trained with each of RECIPES at each rate: its best of four validation losses."""
    import keras

    from aiperf.arch.transformer import build_transformer, transformer_seed
    from aiperf.train import recipe

    print(f"lm-tiny, {steps} steps of {batch} x {seq_len} tokens, best of 4 validation losses:")
    print("  recipe          rate    best val loss (nats/token)   loss at each quarter")
    for rate in rates:
        for name, how in RECIPES.items():
            # a feed of its own: every recipe trains on the same batches in the same order
            feed = open_token_feed(path, batch_size=batch, seq_len=seq_len, seed=seed)
            keras.utils.set_random_seed(seed)
            model = build_transformer(transformer_seed("lm-tiny", seq_len=seq_len), seed=seed)
            schedule = recipe.learning_rate(
                rate, str(how["schedule"]), epochs=1, steps_per_epoch=steps,
                warmup_epochs=float(how["warmup"]),
            )  # fmt: skip
            options = {k: how[k] for k in ("weight_decay", "beta_2", "clip_norm")}
            model.compile(
                recipe.optimizer(str(how["optimizer"]), schedule, momentum=0.9, **options),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            losses = []
            for _ in range(4):
                model.fit(
                    feed.epochs["x"], steps_per_epoch=steps // 4, epochs=1, shuffle=False,
                    verbose=0,
                )  # fmt: skip
                losses.append(float(model.evaluate(**feed.val, verbose=0)))
            shown = ", ".join(f"{loss:.3f}" for loss in losses)
            print(f"  {name:<15} {rate:<7g} {min(losses):.3f}                        {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-tokens", type=int, default=2_000_000)
    parser.add_argument("--val-tokens", type=int, default=200_000)
    parser.add_argument("--models", action="store_true", help="train two small transformers")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--recipes", action="store_true", help="lm-tiny with 1.7's recipe and with 1.8's"
    )
    parser.add_argument("--rate", type=float, nargs="+", default=[0.003], help="with --recipes")
    quick = load_ruleset("aiperf-rules-1.7").for_profile("lm-quick").loss_ceiling
    parser.add_argument("--ceiling", type=float, default=quick, help="nats/token")
    args = parser.parse_args()
    floor, counted_on = entropy(args.seed, "validation", args.val_tokens)
    print(f"entropy floor H of the validation split: {floor:.4f} nats/token ({counted_on} tokens)")
    regulation = (floor, float(args.ceiling))
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
            train_models(
                manifest.path, args.steps, args.seq_len, args.batch, args.seed, regulation
            )
        if args.recipes:
            train_recipes(
                manifest.path, args.steps, args.seq_len, args.batch, args.seed, args.rate
            )
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
        loss = float(nats[order].mean())
        print(f"  {name:>8}: {loss:.3f}; {factors(loss, *regulation)}")
    keys = key_positions(validation, max(ORDERS) - 1)
    print(
        f"  key letters after '#' ({len(keys)} tokens): {max(ORDERS)}-gram "
        f"{nats[max(ORDERS)][keys].mean():.3f} nats each (ln 26 = {np.log(26):.3f}); copying "
        "them from the document's header costs a model that attends back almost nothing"
    )


if __name__ == "__main__":
    main()
