"""Is `synthetic-text` learnable, and does a longer context pay? Counted models say so.

Stages the language of `data.kind: synthetic-text` (aiperf/data/text_synthetic.py) from a seed,
timing it, then fits interpolated n-gram count models (aiperf.data.tokens.ngram_token_nats) on the
training split and scores them on the validation split, in nats per token: the unigram model (the
entropy of the byte frequencies), the bigram, and longer contexts up to six tokens. Each order
lower than the last is structure a model that sees further back can use. Then the tokens no
n-gram can predict: the four letters of a document's key after each paragraph (`#KEY`), drawn at
random per document, cost an n-gram about ln 26 nats each, where a model that attends back to the
document's header copies them for almost nothing. The machine is printed with the figures.

    .venv/bin/python benchmarks/bench_text_learnable.py [--seed 0] [--train-tokens 2000000]
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
from aiperf.data.tokens import load_tokens, ngram_token_nats

ORDERS = (1, 2, 3, 4, 5, 6)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-tokens", type=int, default=2_000_000)
    parser.add_argument("--val-tokens", type=int, default=200_000)
    args = parser.parse_args()
    config = DataConfig(
        kind="synthetic-text", train_tokens=args.train_tokens, val_tokens=args.val_tokens
    )
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        manifest = stage(config, args.seed, Path(tmp))
        staged = time.perf_counter() - began
        train = load_tokens(manifest.path, "train")
        validation = load_tokens(manifest.path, "validation")
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
