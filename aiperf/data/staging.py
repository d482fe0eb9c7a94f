"""Stage a dataset where every worker can read it, and describe it in a manifest.

Staging writes one compressed-free .npz file named by the content's checksum; a second stage of
the same data finds the file and its checksum and does no work. Workers load the file once per
process (see load_staged).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from aiperf.config import DataConfig
from aiperf.data import synthetic
from aiperf.data.synthetic import ImageArrays


@dataclass(frozen=True)
class Manifest:
    """What was staged: enough to check a copy and to describe the data in the records."""

    name: str
    kind: str
    path: str
    sha256: str
    size_bytes: int
    image_shape: tuple[int, int, int]
    classes: int
    train_samples: int
    val_samples: int
    images_per_class: dict[str, int]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["image_shape"] = list(self.image_shape)
        return data


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def stage_synthetic(config: DataConfig, seed: int, folder: Path) -> Manifest:
    """Generate the profile's synthetic data into `folder` (once) and return its manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(json.dumps({"data": config.model_dump(), "seed": seed},
                                    sort_keys=True).encode()).hexdigest()[:16]
    name = f"synthetic-{config.image_size}px-{config.classes}c-{key}"
    path = folder / f"{name}.npz"
    meta_path = folder / f"{name}.json"
    if path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("sha256") == _sha256(path):
            return Manifest(**{**meta, "image_shape": tuple(meta["image_shape"])})
    arrays = synthetic.generate(config, seed)
    tmp = path.with_name(path.name + ".partial.npz")
    np.savez(tmp, x_train=arrays.x_train, y_train=arrays.y_train, x_val=arrays.x_val, y_val=arrays.y_val)
    os.replace(tmp, path)  # a crash never leaves a file that looks complete
    counts = np.bincount(arrays.y_train, minlength=config.classes)
    manifest = Manifest(name=name, kind="synthetic", path=str(path.resolve()), sha256=_sha256(path),
                        size_bytes=path.stat().st_size, image_shape=arrays.image_shape,
                        classes=config.classes, train_samples=len(arrays.y_train),
                        val_samples=len(arrays.y_val),
                        images_per_class={str(c): int(n) for c, n in enumerate(counts)})
    meta_path.write_text(json.dumps(manifest.to_dict(), indent=1))
    return manifest


@lru_cache(maxsize=2)
def load_staged(path: str) -> ImageArrays:
    """The staged arrays, read once per worker process and kept for its later trials."""
    with np.load(path) as data:
        return ImageArrays(data["x_train"], data["y_train"], data["x_val"], data["y_val"])
