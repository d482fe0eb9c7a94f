"""TFRecord shards in the usual ImageNet format, and the two shard jobs that run on Dask workers:
convert a share of an image folder into one shard, and check one shard a user brought.

The format is the one TensorFlow's ImageNet tools write (build_imagenet_data.py): a tf.train.Example
per image with `image/encoded` (the original JPEG or PNG bytes, never re-encoded),
`image/class/label` (1-based: 0 is reserved for "background"), `image/class/synset`,
`image/height`, `image/width`, `image/channels`, `image/format` and `image/filename`. Shards are
named `train-00000-of-01024` and `validation-00000-of-00128`.

A shard is written under a temporary name and renamed only when every image in it decoded, then
its checksum is stored beside it (`<shard>.json`, with a digest of its inputs): a crash or a bad
image never leaves a shard that looks complete, and a second staging of the same inputs skips it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf.data.images import check_image, image_format
from aiperf.data.manifest import sha256_file, write_json_atomic

ENCODED, LABEL, SYNSET = "image/encoded", "image/class/label", "image/class/synset"
SPLITS = ("train", "validation")
IMAGENET_LABEL_OFFSET = 1


def shard_name(split: str, index: int, total: int) -> str:
    return f"{split}-{index:05d}-of-{total:05d}"


def example_bytes(
    encoded: bytes,
    label: int,
    synset: str,
    filename: str,
    height: int,
    width: int,
    channels: int,
    fmt: str,
) -> bytes:
    import tensorflow as tf

    def b(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def i(value: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    features = {
        ENCODED: b(encoded),
        LABEL: i(label),
        SYNSET: b(synset.encode()),
        "image/filename": b(filename.encode()),
        "image/format": b(fmt.upper().encode()),
        "image/colorspace": b(b"RGB" if channels == 3 else b"L"),
        "image/height": i(height),
        "image/width": i(width),
        "image/channels": i(channels),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    # Deterministic: the features are a protobuf map, whose order otherwise varies between
    # processes, so the same images would give shards of other checksums on another worker.
    return example.SerializeToString(deterministic=True)


def write_shard(path: Path, records: Iterable[bytes]) -> None:
    """All records or no file: written to a temporary name, flushed, then renamed."""
    import tensorflow as tf

    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for record in records:
                writer.write(record)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sidecar(path: Path) -> Path:
    """Where a shard's checksum and the digest of its inputs are kept: beside it."""
    return path.with_name(path.name + ".json")


def done_before(path: Path, input_digest: str) -> dict[str, Any] | None:
    """The stored result of an identical earlier conversion whose shard is still intact."""
    stored = sidecar(path)
    if not (path.is_file() and stored.is_file()):
        return None
    try:
        info = json.loads(stored.read_text())
    except ValueError:
        return None
    if info.get("input_digest") != input_digest or info.get("size_bytes") != path.stat().st_size:
        return None
    return info if sha256_file(path) == info.get("sha256") else None


@dataclass(frozen=True)
class ConvertTask:
    """One shard's share of an image folder."""

    root: str
    out: str
    split: str
    index: int
    total: int
    files: list[tuple[str, int]]  # (path under root, label from 0)
    class_names: list[str]

    @property
    def name(self) -> str:
        return shard_name(self.split, self.index, self.total)


def convert_shard(task: ConvertTask) -> dict[str, Any]:
    """Decode-check every image of the share and write the shard; skip it if done before.

    Returns the shard's entry for the manifest plus `problems` (one message per bad file; a share
    with problems writes no shard) and `skipped`."""
    root, path = Path(task.root), Path(task.out) / task.name
    contents: list[tuple[str, int, bytes]] = []
    digest = hashlib.sha256()
    for rel, label in task.files:
        data = (root / rel).read_bytes()
        contents.append((rel, label, data))
        digest.update(f"{rel}\0{label}\0{len(data)}\0".encode())
        digest.update(data)
    input_digest = digest.hexdigest()
    done = done_before(path, input_digest)
    if done is not None:
        return {**done, "problems": [], "skipped": True}

    problems: list[str] = []
    records: list[bytes] = []
    for rel, label, data in contents:
        problem, (height, width, channels) = check_image(rel, data)
        if problem:
            problems.append(problem)
            continue
        records.append(
            example_bytes(
                data,
                label + IMAGENET_LABEL_OFFSET,
                task.class_names[label],
                rel,
                height,
                width,
                channels,
                image_format(data) or "jpeg",
            )
        )
    if problems:
        return {"name": task.name, "split": task.split, "problems": problems, "skipped": False}
    per_class = Counter(label for _r, label, _d in contents)
    return write_shard_with_record(path, records, task.name, task.split, input_digest, per_class)


def write_shard_with_record(
    path: Path,
    records: list[bytes],
    name: str,
    split: str,
    input_digest: str,
    per_class: Counter[int],
) -> dict[str, Any]:
    """Write a shard, then its sidecar record (checksum, the digest of what it was made from, images
    per class): a shard without a sidecar is unfinished and is made again. Returns the record as a
    converted shard's result."""
    write_shard(path, records)
    info = {
        "name": name,
        "split": split,
        "file": name,
        "images": len(records),
        "size_bytes": path.stat().st_size,
        "sha256": sha256_file(path),
        "input_digest": input_digest,
        "per_class": {str(k): v for k, v in sorted(per_class.items())},
    }
    write_json_atomic(sidecar(path), info)
    return {**info, "problems": [], "skipped": False}


@dataclass(frozen=True)
class CheckTask:
    """One shard a user brought, to check in place."""

    path: str
    split: str
    classes: int
    label_offset: int
    checks: str  # folder for the record of shards already checked


def check_shard(task: CheckTask) -> dict[str, Any]:
    """Read every record of a user's shard: it parses, its image decodes, its label is in range.

    A shard already checked with the same checksum is not decoded again."""
    import tensorflow as tf

    path = Path(task.path)
    checksum = sha256_file(path)
    record_file = Path(task.checks) / f"{path.name}.json"
    if record_file.is_file():
        info = json.loads(record_file.read_text())
        if (
            info.get("sha256") == checksum
            and info.get("classes") == task.classes
            and info.get("label_offset") == task.label_offset
        ):
            return {**info, "problems": [], "skipped": True}
    spec = {
        ENCODED: tf.io.FixedLenFeature([], tf.string),
        LABEL: tf.io.FixedLenFeature([], tf.int64),
        SYNSET: tf.io.FixedLenFeature([], tf.string, default_value=""),
    }
    low, high = task.label_offset, task.label_offset + task.classes - 1
    problems: list[str] = []
    per_class: Counter[int] = Counter()
    synsets: dict[int, str] = {}
    index = -1
    try:
        for index, record in enumerate(tf.data.TFRecordDataset(str(path))):
            where = f"{path.name} record {index}"
            try:
                parsed = tf.io.parse_single_example(record, spec)
            except tf.errors.InvalidArgumentError:
                problems.append(
                    f"{where} is not an ImageNet-format example (it needs {ENCODED} and {LABEL})"
                )
                continue
            label = int(parsed[LABEL])
            if not low <= label <= high:
                problems.append(
                    f"{where} has label {label}, outside {low}..{high} (data.classes "
                    f"{task.classes}, data.label_offset {task.label_offset}); fix the shard or "
                    "those settings"
                )
                continue
            problem, _shape = check_image(where, parsed[ENCODED].numpy())
            if problem:
                problems.append(problem)
                continue
            per_class[label - task.label_offset] += 1
            synsets.setdefault(
                label - task.label_offset, parsed[SYNSET].numpy().decode(errors="replace")
            )
    except tf.errors.DataLossError:
        problems.append(
            f"{path.name} is corrupt or truncated after record {index + 1}; re-copy it"
        )
    if index < 0 and not problems:
        problems.append(f"{path.name} holds no records; remove it")
    if problems:
        return {"name": path.name, "split": task.split, "problems": problems, "skipped": False}
    info = {
        "name": path.name,
        "split": task.split,
        "file": str(path),
        "images": sum(per_class.values()),
        "size_bytes": path.stat().st_size,
        "sha256": checksum,
        "classes": task.classes,
        "label_offset": task.label_offset,
        "per_class": {str(k): v for k, v in sorted(per_class.items())},
        "synsets": {str(k): v for k, v in sorted(synsets.items())},
    }
    write_json_atomic(record_file, info)
    return {**info, "problems": [], "skipped": False}
