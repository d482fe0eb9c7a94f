"""Synthetic data staged as one .npz: generated from the seed (aiperf.data.synthetic) into a file
named by its settings, its manifest made from the arrays themselves, and the staged arrays read
once per worker. Apart from the sharded kinds (aiperf.data.staging_shards) because nothing here is
sharded, spread over workers or read as TFRecords.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from aiperf.config import DataConfig
from aiperf.data import synthetic
from aiperf.data.manifest import Manifest, write_json_atomic
from aiperf.data.problems import DataError
from aiperf.data.synthetic import ImageArrays


def settings_key(config: DataConfig, seed: int) -> str:
    """Generated data's identity: its settings (all but where it is copied) and the seed."""
    return hashlib.sha256(
        json.dumps(
            {"data": config.model_dump(exclude={"stage_to"}), "seed": seed}, sort_keys=True
        ).encode()
    ).hexdigest()[:16]


def stage_synthetic(config: DataConfig, seed: int, folder: Path) -> Manifest:
    """Generate the profile's synthetic data into `folder` (once) and return its manifest.

    A cached .npz is used again, but never on the word of the .json beside it: its arrays are
    loaded and digested, each image hashed, and the manifest (its sha256 the content digest, the
    classes in each split, the overlap check) is made from what the file holds."""
    folder.mkdir(parents=True, exist_ok=True)
    key = settings_key(config, seed)
    name = f"synthetic-{config.image_size}px-{config.classes}c-{key}"
    path = folder / f"{name}.npz"
    meta_path = folder / f"{name}.json"
    arrays = _cached_arrays(path)
    if arrays is None:
        arrays = synthetic.generate(config, seed)
        tmp = path.with_name(path.name + ".partial.npz")
        try:
            np.savez(
                tmp,
                x_train=arrays.x_train,
                y_train=arrays.y_train,
                x_val=arrays.x_val,
                y_val=arrays.y_val,
            )
            os.replace(tmp, path)  # a crash never leaves a file that looks complete
        finally:
            tmp.unlink(missing_ok=True)  # a full disk keeps no half-written file
    manifest = arrays_manifest(arrays, name, path, config.classes)
    write_json_atomic(meta_path, manifest.to_dict())  # for people; staging never reads it
    return manifest


def _cached_arrays(path: Path) -> ImageArrays | None:
    """The arrays of an earlier staging's .npz, or None when there is none or it does not load."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return ImageArrays(data["x_train"], data["y_train"], data["x_val"], data["y_val"])
    except (OSError, ValueError, KeyError):  # unreadable or not ours: made again
        return None


def arrays_manifest(arrays: ImageArrays, name: str, path: Path, classes: int) -> Manifest:
    """The manifest of synthetic arrays, every figure computed from the arrays themselves."""
    from aiperf.data.pins import arrays_digest, overlap, row_keys

    labels = (arrays.y_train, arrays.y_val)
    if any(len(y) and (int(y.min()) < 0 or int(y.max()) >= classes) for y in labels):
        raise DataError(str(path), [f"{path.name} holds labels outside 0..{classes - 1}"])
    counts = np.bincount(arrays.y_train, minlength=classes)
    val_counts = np.bincount(arrays.y_val, minlength=classes)
    return Manifest(
        name=name,
        kind="synthetic",
        path=str(path.resolve()),
        sha256=arrays_digest(
            [("train", arrays.x_train, arrays.y_train), ("validation", arrays.x_val, arrays.y_val)]
        ),
        size_bytes=path.stat().st_size,
        image_shape=arrays.image_shape,
        classes=classes,
        train_samples=len(arrays.y_train),
        val_samples=len(arrays.y_val),
        images_per_class={str(c): int(n) for c, n in enumerate(counts)},
        val_images_per_class={str(c): int(n) for c, n in enumerate(val_counts)},
        class_names=[str(c) for c in range(classes)],
        overlap=overlap(
            [("train", row_keys(arrays.x_train))], [("validation", row_keys(arrays.x_val))]
        ),
    )


@lru_cache(maxsize=2)
def load_staged(path: str) -> ImageArrays:
    """The staged arrays, read once per worker process and kept for its later trials."""
    with np.load(path) as data:
        return ImageArrays(data["x_train"], data["y_train"], data["x_val"], data["y_val"])
