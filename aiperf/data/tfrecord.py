"""TFRecord shards in the usual ImageNet format, and the two shard jobs: convert a share of an image
folder into one shard (on a Dask worker), and check one shard a user brought (in a process of its
own on the staging node: staging_shards.on_every_core). Reading a shard is aiperf.data.shard_scan,
without TensorFlow.

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

from aiperf.data.images import MAX_IMAGE_BYTES, check_image, image_format
from aiperf.data.manifest import sha256_file, write_json_atomic
from aiperf.data.shard_scan import ENCODED, LABEL, SYNSET, ScanTask, scan_shard

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


def _read_image_file(path: Path, rel: str) -> bytes:
    """An image file's bytes; b"" for anything but a regular file of at most MAX_IMAGE_BYTES (the
    folder was checked when it was scanned: this only keeps a file swapped since from hanging a
    worker on a FIFO or filling its memory; check_image then names the empty file)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_IMAGE_BYTES:
            return b""
        with open(path, "rb") as handle:
            return handle.read(MAX_IMAGE_BYTES + 1)
    except OSError:
        return b""


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
        data = _read_image_file(root / rel, rel)
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


def _decode_checks(images: list[tuple[str, bytes]], threads: int = 0) -> list[str | None]:
    """Each image's decode check (aiperf.data.images.check_image), in order, on `threads` threads
    (0: every core this worker owns): the decode is TensorFlow's and lets go of the GIL, so
    threads scale with the cores (ImageNet's 1.3 M images took ~46 min on one)."""
    from concurrent.futures import ThreadPoolExecutor

    from aiperf import settings

    cores = threads or settings.count(settings.WORKER_CORES) or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=max(1, min(cores, len(images)))) as pool:
        return list(pool.map(lambda image: check_image(image[0], image[1])[0], images))


@dataclass(frozen=True)
class CheckTask:
    """One shard a user brought, to check in place."""

    path: str
    split: str
    classes: int
    label_offset: int
    checks: str  # folder for the record of shards already checked
    threads: int = 0  # for its decode checks (0: the cores this worker owns)


def check_shard(task: CheckTask) -> dict[str, Any]:
    """Read every record of a user's shard: it parses, its image decodes, its label is in range.

    The shard is read once, without TensorFlow (shard_scan.scan_shard); its images are decoded with
    TensorFlow's decoder, the input pipeline's, so staging runs this in processes of its own
    (staging_shards.on_every_core). A shard already checked with the same checksum is not decoded
    again."""
    path = Path(task.path)
    images: list[tuple[int, bytes, int]] = []  # record index, encoded, label from 0
    scan = scan_shard(
        ScanTask(str(path), path.name, task.split, str(path), task.label_offset, task.classes),
        keep=images,
    )
    if not scan["problems"] and not scan["images"]:
        scan["problems"].append(f"{path.name} holds no records; remove it")
    if scan["problems"]:
        return {"name": path.name, "split": task.split, "problems": scan["problems"]}
    fresh = {k: scan[k] for k in ("images", "size_bytes", "per_class", "keys", "synsets")}
    record_file = Path(task.checks) / f"{path.name}.json"
    if record_file.is_file():
        info = json.loads(record_file.read_text())
        if (
            info.get("sha256") == scan["sha256"]
            and info.get("classes") == task.classes
            and info.get("label_offset") == task.label_offset
        ):
            return {**info, **fresh, "problems": [], "skipped": True}
    checks = [(f"{path.name} record {index}", encoded) for index, encoded, _label in images]
    problems = [p for p in _decode_checks(checks, task.threads) if p]
    if problems:
        return {"name": path.name, "split": task.split, "problems": problems}
    info = {
        "name": path.name,
        "split": task.split,
        "file": str(path),
        "images": scan["images"],
        "size_bytes": scan["size_bytes"],
        "sha256": scan["sha256"],
        "classes": task.classes,
        "label_offset": task.label_offset,
        "per_class": scan["per_class"],
        "synsets": scan["synsets"],
    }
    write_json_atomic(record_file, info)
    return {**info, "keys": scan["keys"], "problems": [], "skipped": False}
