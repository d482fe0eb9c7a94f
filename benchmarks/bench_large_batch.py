"""Does the large-batch recipe reach the small batch's accuracy in the same epochs? (issue 48, part 5)

aiperf-rules-1.6 trains the imagenet profile with LARS and MLPerf's ResNet reference schedule at a
node's global batch (aiperf/train/lars.py, docs/rules.md). ImageNet at a global batch of 8,000 does
not run here; this is the same question at a scale a 2-vCPU machine answers in minutes: a learnable
synthetic image set (aiperf.data.synthetic, the quick profile's kind), the resnet-mini seed
(aiperf.arch), the same epochs for every row, and a global batch 16x the small one:

- small:  batch B, SGD with momentum 0.9 at 0.1 x B / 256 (Goyal et al.'s rate), cosine decay;
- lars:   batch 16 B, LARS (eta 0.001, momentum 0.9, BN and biases excluded) at the reference's
          base rate, linear warm-up from 0 then polynomial decay of power 2 (the 1.6 recipe);
- sgd:    batch 16 B, SGD at 16x the small rate (linear scaling) with a warm-up from a tenth of
          it, cosine decay (the 1.4 recipe): the comparison row.

Every row has the same L2 weight decay (5e-5 by default, kernels only) and label smoothing 0.1 as
the imagenet profile, the same data and the same seeds (the model's initial weights and the data
order). The figure is the best validation accuracy over the epochs (the search's objective), and
the final epoch's; the table gives the mean and range over the seeds, and the verdict states the
margin: the large-batch recipe passes when its mean best accuracy is within --margin of the small
batch's.

    .venv/bin/python benchmarks/bench_large_batch.py [--seeds 0,1,2] [--epochs 10] [--batch 32]
        [--train 4096] [--image 16] [--noise 1] [--clutter 1] [--rows small,lars,sgd]
        [--lars-rate 10] [--warmup 2] [--margin 0.01]

It trains on Keras' JAX backend with jit (the GPU node's); --backend tensorflow works too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROWS = ("small", "lars", "sgd")
SCALE = 16  # the large global batch over the small one


@dataclass(frozen=True)
class Outcome:
    best: float  # best validation accuracy of any epoch
    last: float  # the final epoch's
    seconds: float


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32, help="the small batch")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--lars-rate", type=float, default=10.0, help="the reference's: 10")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up epochs at 16x")
    parser.add_argument("--weight-decay", type=float, default=5e-5)
    parser.add_argument("--train", type=int, default=4096, help="training images")
    parser.add_argument("--image", type=int, default=16, help="image side, pixels")
    parser.add_argument("--noise", type=float, default=1.0, help="pixel noise (quick's: 1)")
    parser.add_argument("--clutter", type=float, default=1.0, help="clutter (quick's: 1)")
    parser.add_argument("--margin", type=float, default=0.01)
    parser.add_argument("--backend", default="jax", choices=("jax", "tensorflow"))
    return parser.parse_args()


def dataset(args: argparse.Namespace):
    """The quick profile's kind of data (class patterns under clutter, noise and 5% flipped
    labels), at --train images, generated from seed 0: the same for every row and seed."""
    from aiperf.config import DataConfig
    from aiperf.data.synthetic import generate

    config = DataConfig(
        kind="synthetic",
        image_size=args.image,
        channels=3,
        classes=10,
        train_samples=args.train,
        val_samples=2048,
        noise=args.noise,
        clutter=args.clutter,
        label_noise=0.05,
    )
    return generate(config, seed=0)


def recipe_of(row: str, args: argparse.Namespace) -> dict:
    """The batch, optimizer, rate, schedule and warm-up of a row (see the module doc)."""
    small_rate = 0.1 * args.batch / 256
    if row == "small":
        return dict(batch=args.batch, optimizer="sgd", rate=small_rate, schedule="cosine", warm=0)
    if row == "lars":
        return dict(
            batch=SCALE * args.batch,
            optimizer="lars",
            rate=args.lars_rate,
            schedule="polynomial",
            warm=args.warmup,
        )
    return dict(
        batch=SCALE * args.batch,
        optimizer="sgd",
        rate=SCALE * small_rate,
        schedule="cosine",
        warm=args.warmup,
    )


def train(row: str, seed: int, data, args: argparse.Namespace) -> Outcome:
    """One row at one seed, through aiperf's own recipe (aiperf.train.recipe), as a trial builds
    its optimizer, schedule and loss."""
    import keras

    from aiperf.arch import build_model
    from aiperf.arch.seeds import resnet_mini
    from aiperf.train import recipe

    r = recipe_of(row, args)
    keras.utils.set_random_seed(seed)
    model = build_model(resnet_mini(data.image_shape, 10))
    steps = len(data.y_train) // r["batch"]
    rate = recipe.learning_rate(
        r["rate"],
        r["schedule"],
        epochs=args.epochs,
        steps_per_epoch=steps,
        warmup_epochs=r["warm"],
    )
    optimizer = recipe.optimizer(
        r["optimizer"], rate, momentum=0.9, weight_decay=args.weight_decay
    )
    model.compile(
        optimizer=optimizer, loss=recipe.loss(0.1), metrics=["accuracy"], jit_compile=True
    )
    start = time.perf_counter()
    history = model.fit(
        data.x_train[: steps * r["batch"]],
        data.y_train[: steps * r["batch"]],
        batch_size=r["batch"],
        epochs=args.epochs,
        validation_data=(data.x_val, data.y_val),
        shuffle=True,
        verbose=0,
    )
    accuracies = history.history["val_accuracy"]
    return Outcome(max(accuracies), accuracies[-1], time.perf_counter() - start)


def describe(row: str, args: argparse.Namespace) -> str:
    r = recipe_of(row, args)
    warm = f", warm-up {r['warm']:g} ep" if r["warm"] else ""
    return f"{r['optimizer'].upper()} {r['rate']:g}, {r['schedule']}{warm}"


def table(results: dict[str, list[Outcome]], args: argparse.Namespace) -> str:
    """The rows, their mean and range over the seeds, and the verdict at the stated margin."""

    def span(values: list[float]) -> str:
        return f"{statistics.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    lines = [
        f"{len(args.seeds.split(','))} seeds, {args.epochs} epochs, {args.train} images "
        f"{args.image}x{args.image} (noise {args.noise:g}, clutter {args.clutter:g}), resnet-mini, "
        f"backend {args.backend}",
        "| row | global batch | recipe | best val accuracy | final val accuracy | s / run |",
        "| --- | ---: | --- | --- | --- | ---: |",
    ]
    for row, outcomes in results.items():
        batch = recipe_of(row, args)["batch"]
        lines.append(
            f"| {row} | {batch} | {describe(row, args)} | {span([o.best for o in outcomes])} "
            f"| {span([o.last for o in outcomes])} "
            f"| {statistics.mean(o.seconds for o in outcomes):.0f} |"
        )
    if "small" in results and "lars" in results:
        small = statistics.mean(o.best for o in results["small"])
        large = statistics.mean(o.best for o in results["lars"])
        verdict = "within" if large >= small - args.margin else "NOT within"
        lines.append(
            f"LARS at {SCALE}x the batch: mean best accuracy {large:.3f}, the small batch's "
            f"{small:.3f} ({large - small:+.3f}): {verdict} the margin (at most {args.margin:.3f} "
            "below)"
        )
    return "\n".join(lines)


def main() -> None:
    args = arguments()
    os.environ.setdefault("KERAS_BACKEND", args.backend)
    data = dataset(args)
    results: dict[str, list[Outcome]] = {}
    for row in args.rows.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            outcome = train(row, seed, data, args)
            results.setdefault(row, []).append(outcome)
            print(
                f"{row} seed {seed}: best {outcome.best:.3f}, final {outcome.last:.3f}, "
                f"{outcome.seconds:.0f} s",
                flush=True,
            )
    print(table(results, args))


if __name__ == "__main__":
    main()
