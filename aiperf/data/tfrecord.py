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
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf.data.images import MAX_IMAGE_BYTES, check_image, image_format
from aiperf.data.manifest import sha256_file, write_json_atomic
from aiperf.data.pins import image_key

ENCODED, LABEL, SYNSET = "image/encoded", "image/class/label", "image/class/synset"
SPLITS = ("train", "validation")
IMAGENET_LABEL_OFFSET = 1
# A record is one image and its features: one larger than this is a corrupt or hostile shard,
# refused before its bytes are read.
MAX_RECORD_BYTES = MAX_IMAGE_BYTES + (1 << 20)


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


class _HashingReader:
    """A shard's bytes, read once: its sha256 grows as its records are read."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def read(self, n: int) -> bytes:
        data: bytes = self.handle.read(n)
        self.digest.update(data)
        self.size += len(data)
        return data

    def rest(self) -> None:
        for _chunk in iter(lambda: self.read(1 << 20), b""):
            pass


def _records(reader: _HashingReader) -> Iterator[bytes]:
    """The records of a TFRecord file: an 8-byte length, its 4-byte CRC, the data, its CRC. The
    CRCs are not checked here (the shard's sha256 is; TensorFlow checks them when it reads)."""
    while True:
        head = reader.read(12)
        if not head:
            return
        if len(head) < 12:
            raise ValueError("it ends inside a record's header")
        (length,) = struct.unpack("<Q", head[:8])
        if length > MAX_RECORD_BYTES:
            raise ValueError(
                f"a record says it holds {length} bytes, more than {MAX_RECORD_BYTES}"
            )
        data = reader.read(length)
        if len(data) < length or len(reader.read(4)) < 4:
            raise ValueError("it ends inside a record")
        yield data


@dataclass(frozen=True)
class ScanTask:
    """One shard to read afresh: its checksum, labels and image keys (run on a Dask worker)."""

    path: str
    name: str
    split: str
    file: str  # as the manifest names it (relative to the staged folder, or absolute)
    label_offset: int
    classes: int


def scan_shard(task: ScanTask) -> dict[str, Any]:
    """Read a shard once: its sha256 and size, each record's label (images per class, from 0) and
    the key of each record's encoded image (aiperf.data.pins.image_key), packed in `keys`. What a
    manifest records of a shard comes from here each time a run uses it, never from a sidecar."""
    import tensorflow as tf

    path = Path(task.path)
    per_class: Counter[int] = Counter()
    keys: list[bytes] = []
    problems: list[str] = []
    with open(path, "rb") as handle:
        reader = _HashingReader(handle)
        try:
            for index, record in enumerate(_records(reader)):
                try:
                    feature = tf.train.Example.FromString(record).features.feature
                    encoded = feature[ENCODED].bytes_list.value[0]
                    label = int(feature[LABEL].int64_list.value[0]) - task.label_offset
                except Exception:  # a protobuf DecodeError or a missing feature
                    problems.append(
                        f"{task.name} record {index} is not an ImageNet-format example"
                    )
                    continue
                if not 0 <= label < task.classes:
                    low = task.label_offset
                    problems.append(
                        f"{task.name} record {index} has label {label + low}, outside "
                        f"{low}..{low + task.classes - 1} (data.classes {task.classes}, "
                        f"data.label_offset {low}); fix the shard or those settings"
                    )
                    continue
                per_class[label] += 1
                keys.append(image_key(encoded))
        except ValueError as exc:
            read = sum(per_class.values()) + len(problems)
            problems.append(
                f"{task.name} is corrupt or truncated after record {read} ({exc}); re-copy it"
            )
        reader.rest()
    return {
        "name": task.name,
        "split": task.split,
        "file": task.file,
        "images": sum(per_class.values()),
        "size_bytes": reader.size,
        "sha256": reader.digest.hexdigest(),
        "per_class": {str(k): v for k, v in sorted(per_class.items())},
        "keys": b"".join(keys),
        "problems": problems,
    }


def _decode_checks(images: list[tuple[str, bytes, int, str]]) -> list[str | None]:
    """Each image's decode check (aiperf.data.images.check_image), in order, on every core this
    worker owns: the decode is TensorFlow's and lets go of the GIL, so threads scale with the
    cores. A node whose one worker owns all its cores (a node of GPUs, one trial across them)
    checks a shard on all of them, not on one (ImageNet's 1.3 M images took ~46 min on one)."""
    from concurrent.futures import ThreadPoolExecutor

    from aiperf import settings

    cores = settings.count(settings.WORKER_CORES) or os.cpu_count() or 1
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


def check_shard(task: CheckTask) -> dict[str, Any]:
    """Read every record of a user's shard: it parses, its image decodes, its label is in range.

    A shard already checked with the same checksum is not decoded again."""
    import tensorflow as tf

    path = Path(task.path)
    # Read afresh every time: the checksum, the labels and the image keys the manifest records.
    scan = scan_shard(
        ScanTask(str(path), path.name, task.split, str(path), task.label_offset, task.classes)
    )
    if scan["problems"]:
        return {
            "name": path.name,
            "split": task.split,
            "problems": scan["problems"],
            "skipped": False,
        }
    checksum = scan["sha256"]
    record_file = Path(task.checks) / f"{path.name}.json"
    if record_file.is_file():
        info = json.loads(record_file.read_text())
        if (
            info.get("sha256") == checksum
            and info.get("classes") == task.classes
            and info.get("label_offset") == task.label_offset
        ):
            fresh = {k: scan[k] for k in ("images", "size_bytes", "per_class", "keys")}
            return {**info, **fresh, "problems": [], "skipped": True}
    spec = {
        ENCODED: tf.io.FixedLenFeature([], tf.string),
        LABEL: tf.io.FixedLenFeature([], tf.int64),
        SYNSET: tf.io.FixedLenFeature([], tf.string, default_value=""),
    }
    low, high = task.label_offset, task.label_offset + task.classes - 1
    problems: list[str] = []
    per_class: Counter[int] = Counter()
    synsets: dict[int, str] = {}
    images: list[tuple[str, bytes, int, str]] = []  # where, encoded, label from 0, synset
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
            synset = parsed[SYNSET].numpy().decode(errors="replace")
            images.append((where, parsed[ENCODED].numpy(), label - task.label_offset, synset))
    except tf.errors.DataLossError:
        problems.append(
            f"{path.name} is corrupt or truncated after record {index + 1}; re-copy it"
        )
    for (_where, _encoded, label, synset), problem in zip(
        images, _decode_checks(images), strict=True
    ):
        if problem:
            problems.append(problem)
            continue
        per_class[label] += 1
        synsets.setdefault(label, synset)
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
    return {**info, "keys": scan["keys"], "problems": [], "skipped": False}
