"""scikit-learn's digits as a small real image data set: 1,797 scanned handwritten digits, 8x8
grey, that ship inside the installed package (no download). A seeded split of them is written as
ImageNet-format TFRecord shards of lossless PNGs, so real-data runs take the same input pipeline
as ImageNet does; the pipeline upscales them to the profile's image size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aiperf.errors import UserError

CLASS_NAMES = [str(d) for d in range(10)]


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (n, 8, 8), labels int (n,)), grey levels 0..16 stretched to 0..255."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UserError(
            "data.kind digits needs scikit-learn; install it with `pip install scikit-learn`"
        ) from None
    digits = load_digits()
    images = np.clip(np.rint(digits.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return images, digits.target.astype(np.int64)


def split(
    seed: int, train_samples: int, val_samples: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A seeded, disjoint train/validation split."""
    images, labels = load_digits_arrays()
    order = np.random.default_rng(seed).permutation(len(labels))
    train, val = order[:train_samples], order[train_samples : train_samples + val_samples]
    return {"train": (images[train], labels[train]), "validation": (images[val], labels[val])}


def write_shards(out: Path, seed: int, train_samples: int, val_samples: int) -> list[dict]:
    """One shard per split; returns their entries (as convert_shard does, without problems)."""
    import tensorflow as tf

    from aiperf.data.manifest import sha256_file
    from aiperf.data.tfrecord import IMAGENET_LABEL_OFFSET, example_bytes, shard_name, write_shard

    entries = []
    for name, (images, labels) in split(seed, train_samples, val_samples).items():
        records = []
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            png = tf.io.encode_png(image[:, :, None]).numpy()
            records.append(
                example_bytes(
                    png,
                    int(label) + IMAGENET_LABEL_OFFSET,
                    CLASS_NAMES[label],
                    f"digits/{name}/{i}.png",
                    8,
                    8,
                    1,
                    "png",
                )
            )
        path = out / shard_name(name, 0, 1)
        write_shard(path, records)
        counts = np.bincount(labels, minlength=10)
        entries.append(
            {
                "name": path.name,
                "split": name,
                "file": path.name,
                "images": len(records),
                "size_bytes": path.stat().st_size,
                "sha256": sha256_file(path),
                "per_class": {str(c): int(n) for c, n in enumerate(counts)},
            }
        )
    return entries
