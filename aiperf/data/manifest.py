"""The manifest: what a staged dataset holds, enough to check every copy of it and to describe it
in the records (the `datasets` table keeps it as JSON).

A staged TFRecord dataset is a folder with its shards and a `manifest.json` written last, after
every shard is complete; a folder without `manifest.json` is unfinished and is never read.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class Manifest:
    """What was staged. `path` is what trials read: an .npz file (synthetic) or a folder of
    TFRecord shards holding manifest.json (folder, tfrecord, digits)."""

    name: str
    kind: str
    path: str
    # One digest for the whole dataset, computed from what staging read: the arrays' content
    # (synthetic: pins.arrays_digest), or the shards' names and checksums (dataset_digest).
    sha256: str
    size_bytes: int
    image_shape: tuple[int, int, int]  # what models see, after the input pipeline
    classes: int
    train_samples: int
    val_samples: int
    images_per_class: dict[str, int]  # training images per class name
    val_images_per_class: dict[str, int] = field(default_factory=dict)
    format: str = "npz"  # npz | tfrecord
    source: str | None = None  # the user's folder or shards, as given
    class_names: list[str] = field(
        default_factory=list
    )  # label i (after label_offset) is class_names[i]
    label_offset: int = 0  # stored label of the first class (1 in ImageNet-format shards)
    preprocess: str = "none"  # imagenet (random crop + flip; centre crop) | resize | none (arrays)
    shards: list[dict[str, Any]] = field(
        default_factory=list
    )  # split, name, file, images, size_bytes, sha256
    stage_to: str | None = None  # node-local copy on every worker, when asked for
    copies: dict[str, str] = field(
        default_factory=dict
    )  # one per node: the worker that made it -> "host:path"
    # The overlap check (aiperf.data.pins.overlap): images_hashed, rate, overlaps, examples. None
    # in manifests of an older aiperf, which never compared the splits.
    overlap: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["image_shape"] = list(self.image_shape)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["image_shape"] = tuple(values["image_shape"])
        return cls(**values)


def sha256_file(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dataset_digest(shards: list[dict[str, Any]]) -> str:
    """One checksum for a sharded dataset: the shards' names and checksums, in order."""
    digest = hashlib.sha256()
    for shard in sorted(shards, key=lambda s: s["name"]):
        digest.update(f"{shard['name']} {shard['sha256']}\n".encode())
    return digest.hexdigest()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temporary name, then rename: a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest.json of a staged folder, the .json beside a staged synthetic .npz, or the file itself."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_FILE
    elif path.suffix == ".npz":
        path = path.with_suffix(".json")
    return json.loads(path.read_text())


def shard_path(folder: str | Path, shard: dict[str, Any]) -> str:
    """Where a shard lies: its `file` is relative to the staged folder unless absolute."""
    return str(Path(folder) / shard["file"])
