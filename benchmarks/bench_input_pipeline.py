"""Can the input pipeline feed training? Decoded and augmented images per second for 224x224
JPEGs, against what a training step consumes, on this machine.

The score counts trained samples, so a pipeline slower than the model would cap the score at the
pipeline's rate and measure JPEG decoding, not AI work. This script:

1. writes an ImageNet-layout folder of 224x224 JPEGs (smooth random scenes with edges and noise,
   quality 90, about the size of real photos at that resolution) and stages it as TFRecord shards;
2. measures the training pipeline (decode the distorted-bounding-box crop, resize to 224, flip,
   batch, prefetch) and the evaluation pipeline (centre crop, resize) in images per second, with
   the pipeline's thread pool capped at 1 core and at every core;
3. measures what training consumes: ResNet-50 (weights=None, 224x224, 1000 classes) and the
   search's seed model, resnet-mini, at 224 px, training on batches already in memory;
4. trains ResNet-50 fed by the pipeline, to see whether feeding slows training down.

Run: python benchmarks/bench_input_pipeline.py [--images 512] [--batch 32] [--seconds 8]
     [--train-seconds 30] [--rounds 2] [--skip-resnet50]
Prints a table; exits 1 if the pipeline on every core is slower than ResNet-50's training step.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SIZE = 224


def write_jpegs(root: Path, images: int, classes: int, seed: int = 0) -> int:
    """ImageNet-layout JPEGs, SIZE x SIZE; returns the total bytes written."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    total = 0
    for i in range(images):
        split = "val" if (i // classes) % 8 == 0 else "train"  # every class in both splits
        folder = root / split / f"class{i % classes:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        coarse = rng.uniform(0, 255, (8, 8, 3))
        scene = np.kron(coarse, np.ones((SIZE // 8, SIZE // 8, 1)))  # blocks: hard edges
        yy, xx = np.mgrid[0:SIZE, 0:SIZE]
        scene += 40 * np.sin(xx / rng.uniform(3, 20) + yy / rng.uniform(3, 20))[..., None]
        scene += rng.normal(0, 12, scene.shape)  # texture, as in photos
        path = folder / f"img{i:05d}.jpg"
        Image.fromarray(np.clip(scene, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=90)
        total += path.stat().st_size
    return total


def pipeline_rate(
    path: str, training: bool, batch: int, threads: int | None, seconds: float
) -> float:
    from aiperf.data.pipeline import BatchShape, ReadOptions, make_dataset

    split = "train" if training else "validation"
    # cache=False: every image is read and decoded each time, as from a data set too big to cache.
    ds = make_dataset(
        path,
        split,
        BatchShape(batch_size=batch, image_size=SIZE, channels=3),
        training=training,
        seed=0,
        read=ReadOptions(threads=threads, repeat=True, cache=False),
    )
    it = iter(ds)
    for _ in range(3):  # warm up: caches filled, autotuning started
        next(it)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        x, _y = next(it)
        count += int(x.shape[0])
    return count / (time.perf_counter() - start)


def train_rate(model, batch: int, seconds: float, dataset=None) -> float:
    """Images per second of one model.fit call of about `seconds`, on in-memory batches or fed by
    `dataset` (one long call: no per-call start-up in the figure)."""
    import tensorflow as tf

    if dataset is None:
        x = tf.random.uniform((batch, SIZE, SIZE, 3), -1, 1)
        y = tf.random.uniform((batch,), 0, model.output_shape[-1], dtype=tf.int32)
        dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
    start = time.perf_counter()
    model.fit(
        dataset, steps_per_epoch=2, epochs=1, verbose=0, shuffle=False
    )  # warm up (and compile)
    estimate = 2 * batch / (time.perf_counter() - start)
    steps = max(2, int(seconds * estimate / batch))
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    return steps * batch / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument(
        "--train-seconds", type=float, default=30.0, help="per training measurement"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating ResNet-50 rounds (best of each kept)"
    )
    parser.add_argument(
        "--skip-resnet50", action="store_true", help="skip the (slow) ResNet-50 measurements"
    )
    args = parser.parse_args()

    import keras

    from aiperf.config import DataConfig, machine_cores
    from aiperf.data.staging import stage

    cores = machine_cores()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "images"
        start = time.perf_counter()
        size = write_jpegs(root, args.images, args.classes)
        rows.append(
            (
                "JPEGs written",
                f"{args.images} of {SIZE}x{SIZE}, mean {size / args.images / 1024:.1f} KB "
                f"({time.perf_counter() - start:.1f} s)",
            )
        )
        start = time.perf_counter()
        manifest = stage(
            DataConfig(kind="folder", source=str(root), image_size=SIZE, shard_images=64),
            0,
            Path(tmp) / "staged",
        )
        rows.append(
            (
                "staged (check + convert, 1 process)",
                f"{args.images / (time.perf_counter() - start):.0f} images/s",
            )
        )

        rates = {}
        for training in (True, False):
            for threads in (1, cores):
                rate = pipeline_rate(manifest.path, training, args.batch, threads, args.seconds)
                rates[(training, threads)] = rate
                what = "train (crop, resize, flip)" if training else "eval (centre crop, resize)"
                rows.append(
                    (
                        f"pipeline {what}, {threads} core{'s' if threads > 1 else ''}",
                        f"{rate:.0f} images/s",
                    )
                )

        keras.utils.set_random_seed(0)
        from aiperf.arch.seeds import build_seed

        mini = build_seed("resnet-mini", (SIZE, SIZE, 3), 1000)
        mini.compile(keras.optimizers.SGD(0.01, momentum=0.9), "sparse_categorical_crossentropy")
        mini_rate = train_rate(mini, args.batch, args.train_seconds)
        rows.append(
            (
                f"train resnet-mini {SIZE}px, in-memory batches, {cores} cores",
                f"{mini_rate:.0f} images/s",
            )
        )
        verdict = 0
        best = rates[(True, cores)]
        if not args.skip_resnet50:
            r50 = keras.applications.ResNet50(
                weights=None, input_shape=(SIZE, SIZE, 3), classes=1000
            )
            r50.compile(
                keras.optimizers.SGD(0.01, momentum=0.9), "sparse_categorical_crossentropy"
            )
            from aiperf.data.normalise import on_device
            from aiperf.data.pipeline import BatchShape, ReadOptions, make_dataset

            fed = make_dataset(
                manifest.path,
                "train",
                BatchShape(batch_size=args.batch, image_size=SIZE, channels=3),
                training=True,
                seed=0,
                read=ReadOptions(repeat=True),
            )
            # Alternate in-memory and fed rounds and keep each one's best: other load on the machine
            # then slows both alike instead of deciding the comparison.
            memory, piped = [], []
            r50_pixels = on_device(r50, pixels=True)  # the pipeline yields uint8, as in a trial
            for _ in range(args.rounds):
                memory.append(train_rate(r50, args.batch, args.train_seconds))
                piped.append(train_rate(r50_pixels, args.batch, args.train_seconds, dataset=fed))
            r50_rate, fed_rate = max(memory), max(piped)
            rows.append(
                (
                    f"train ResNet-50 {SIZE}px, in-memory batches, {cores} cores",
                    f"{r50_rate:.1f} images/s (rounds: {', '.join(f'{r:.1f}' for r in memory)})",
                )
            )
            rows.append(
                (
                    f"train ResNet-50 fed by the pipeline, {cores} cores",
                    f"{fed_rate:.1f} images/s "
                    f"({100 * (fed_rate / r50_rate - 1):+.0f}% vs in-memory; rounds: "
                    f"{', '.join(f'{r:.1f}' for r in piped)})",
                )
            )
            rows.append(
                ("pipeline / ResNet-50 consumption (every core)", f"{best / r50_rate:.1f}x")
            )
            rows.append(
                (
                    "share of one core the pipeline needs for ResNet-50",
                    f"{100 * r50_rate / rates[(True, 1)]:.1f}%",
                )
            )
            verdict = 0 if best >= r50_rate else 1
        rows.append(
            ("pipeline / resnet-mini consumption (every core)", f"{best / mini_rate:.1f}x")
        )
        rows.append(
            (
                "one core of the pipeline feeds",
                f"{rates[(True, 1)]:.0f} images/s: an H200 at 5,626 "
                f"ResNet-50 images/s needs {5626 / rates[(True, 1)]:.0f} such cores",
            )
        )

    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return verdict


if __name__ == "__main__":
    sys.exit(main())
