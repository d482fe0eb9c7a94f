"""ImageNet-shaped data generated from the seed: JPEG-encoded TFRecord shards in ImageNet's format.

An accelerator's input pipeline is exercised without ImageNet: the shards hold what real ImageNet
shards hold (`image/encoded` JPEG bytes, `image/class/label` from 1, a synset-like class name,
the image's size; aiperf/data/tfrecord.py), so trials read them through the same pipeline, with the
same JPEG decode, random crop and flip (aiperf/data/pipeline.py). Sizes come from the data settings
(`train_samples`, `val_samples`, `image_size`, `classes`, `shard_images`).

Each image is stored at the side the evaluation crop expects (image_size / 0.875: 256 px for 224,
as ImageNet's "resize 256, crop 224"), so evaluation decodes whole images and training crops them.
A class is a colour (a point of a grid over the colour cube, the grid's cells shuffled by the seed)
carrying a grating of the class's own orientation and period; each image shifts the colour a
little, moves the grating's phase and adds pixel noise (`noise`), and a share of labels is
flipped (`label_noise`) so accuracy stays under 100%. The class survives the training crops (a
grating and a colour look the same in any part of the image), so networks learn it; making it
costs a few array operations and one JPEG encode per image.

Shards are made in parallel on the Dask workers, each from its own seeded generator, so the data
depends on the settings and the seed only, never on which worker made which shard. Like converted
shards, each is written under a temporary name, renamed when whole, and its checksum stored beside
it with a digest of what it was made from: a second staging of the same settings skips it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.pipeline import CENTRE_FRACTION
from aiperf.data.tfrecord import (
    IMAGENET_LABEL_OFFSET,
    done_before,
    example_bytes,
    shard_name,
    write_shard_with_record,
)

SPLITS = ("train", "validation")
LOW, HIGH = 48.0, 208.0  # the colour grid's range on 0..255: room for the grating and the noise
AMPLITUDE = 32.0  # the grating's, in grey levels; the noise's deviation is `noise` times it
JITTER = 0.25  # each image's colour shift, at most this share of the grid's spacing
PERIODS = (1 / 16, 1 / 8)  # a class's grating period, as a share of the image's side
JPEG_QUALITY = 90


def stored_side(image_size: int) -> int:
    """The side images are stored at: the evaluation crop (the centre 87.5%) is `image_size`."""
    return round(image_size / CENTRE_FRACTION)


def class_names(classes: int) -> list[str]:
    """Synset-like names, recognisably not WordNet's."""
    return [f"gen{c:05d}" for c in range(classes)]


@dataclass(frozen=True)
class Styles:
    """What each class looks like: its colour, and its grating's direction and period."""

    colours: np.ndarray  # (classes, channels), grey levels
    directions: np.ndarray  # (classes, 2): the grating's unit wave vector
    periods: np.ndarray  # (classes,), pixels
    spacing: float  # between neighbouring colours of the grid, grey levels


def class_styles(classes: int, channels: int, side: int, seed: int) -> Styles:
    """Distinct colours from a grid over the colour cube (its cells drawn without replacement),
    and a random orientation and period per class; the same for the same arguments anywhere."""
    rng = np.random.default_rng([seed, 0xC1A55])
    levels = max(2, int(np.ceil(classes ** (1 / channels) - 1e-9)))
    cells = rng.permutation(levels**channels)[:classes]
    digits = np.stack([(cells // levels**k) % levels for k in range(channels)], axis=1)
    spacing = (HIGH - LOW) / (levels - 1)
    angles = rng.uniform(0.0, np.pi, size=classes)
    return Styles(
        colours=(LOW + digits * spacing).astype(np.float32),
        directions=np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32),
        periods=(side * rng.uniform(*PERIODS, size=classes)).astype(np.float32),
        spacing=float(spacing),
    )


@dataclass(frozen=True)
class GenerateTask:
    """One shard of generated images, made on a Dask worker."""

    out: str
    key: str  # the dataset's settings and seed: a shard made from others is made again
    seed: int
    split: str
    index: int
    total: int
    labels: list[int]  # each image's class, from 0, before label noise
    side: int
    channels: int
    classes: int
    noise: float
    label_noise: float

    @property
    def name(self) -> str:
        return shard_name(self.split, self.index, self.total)


def image(
    styles: Styles, label: int, noise: float, rng: np.random.Generator, side: int
) -> np.ndarray:
    """One (side, side, channels) uint8 image of class `label`, drawn from `rng`.

    The grating is computed from one row and one column (cos(u + v) = cos u cos v - sin u sin v),
    and the noise is uniform, drawn as bytes with the standard deviation `noise` x AMPLITUDE: the
    image costs about what its JPEG encoding does."""
    channels = styles.colours.shape[1]
    colour = styles.colours[label] + rng.uniform(-JITTER, JITTER, channels) * styles.spacing
    dy, dx = styles.directions[label]
    step = np.float32(2 * np.pi / styles.periods[label])
    line = np.arange(side, dtype=np.float32) * step
    across, down = line * dx, line * dy + np.float32(rng.uniform(0.0, 2 * np.pi))
    wave = np.cos(down)[:, None] * np.cos(across)[None, :]
    wave -= np.sin(down)[:, None] * np.sin(across)[None, :]
    pixels = np.float32(AMPLITUDE) * wave[..., None] + colour.astype(np.float32)
    if noise > 0:
        grain = rng.integers(0, 256, (side, side, channels), dtype=np.uint8).astype(np.float32)
        half_range = (
            np.sqrt(3.0) * noise * AMPLITUDE
        )  # a uniform's deviation is half_range / sqrt 3
        pixels += (grain - np.float32(127.5)) * np.float32(half_range / 127.5)
    return np.clip(pixels, 0, 255, out=pixels).astype(np.uint8)


def generate_shard(task: GenerateTask) -> dict[str, Any]:
    """Make one shard (or find it made before from the same settings): its manifest entry, with
    `problems` (always none: generated images are good by construction) and `skipped`."""
    import tensorflow as tf

    path = Path(task.out) / task.name
    input_digest = hashlib.sha256(f"{task.key} {task.name} {task.labels}".encode()).hexdigest()
    done = done_before(path, input_digest)
    if done is not None:
        return {**done, "problems": [], "skipped": True}
    styles = class_styles(task.classes, task.channels, task.side, task.seed)
    rng = np.random.default_rng([task.seed, SPLITS.index(task.split), task.index])
    names = class_names(task.classes)
    stored: Counter[int] = Counter()
    records = []
    for number, label in enumerate(task.labels):
        pixels = image(styles, label, task.noise, rng, task.side)
        shown = int(rng.integers(task.classes)) if rng.random() < task.label_noise else label
        stored[shown] += 1
        encoded = tf.io.encode_jpeg(pixels, quality=JPEG_QUALITY).numpy()
        records.append(
            example_bytes(
                encoded,
                shown + IMAGENET_LABEL_OFFSET,
                names[shown],
                f"{task.split}/{task.name}-{number:05d}.JPEG",
                task.side,
                task.side,
                task.channels,
                "jpeg",
            )
        )
    return write_shard_with_record(path, records, task.name, task.split, input_digest, stored)


def plan(out: Path, key: str, seed: int, config: DataConfig) -> list[GenerateTask]:
    """The shards of both splits of the generated data `config` describes: every class equally
    often (to within one image), in an order shuffled by the seed, `config.shard_images` images
    or fewer a shard."""
    classes = config.classes
    tasks = []
    for number, (split, count) in enumerate(
        zip(SPLITS, (config.train_samples, config.val_samples), strict=True)
    ):
        labels = np.random.default_rng([seed, number]).permutation(count) % classes
        total = -(-count // config.shard_images)
        for index, share in enumerate(np.array_split(labels, total)):
            tasks.append(
                GenerateTask(
                    out=str(out),
                    key=key,
                    seed=seed,
                    split=split,
                    index=index,
                    total=total,
                    labels=[int(v) for v in share],
                    side=stored_side(config.image_size),
                    channels=config.channels,
                    classes=classes,
                    noise=config.noise,
                    label_noise=config.label_noise,
                )
            )
    return tasks
