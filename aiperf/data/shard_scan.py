"""Reading a TFRecord shard without TensorFlow: its framing, its records' CRCs, and the three
features of an ImageNet-format tf.train.Example staging needs (the encoded image, the label, the
synset).

Staging reads every shard a run uses (its sha256, its images per class, each image's key for the
overlap check). It does so in the process that stages, on every core it has, and that process must
not import TensorFlow: on a GPU node, the process beside it that holds the GPUs through JAX would
otherwise share the node with TensorFlow's runtime for nothing, and TensorFlow is no part of the
GPU node's Python. The format is small enough to read here: a record is its length (8 bytes, little
endian), the masked CRC32C of those 8 bytes (4), the data, and the masked CRC32C of the data (4);
an Example is a protobuf map from feature name to a list of bytes, floats or int64s.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import google_crc32c

from aiperf.data.images import MAX_IMAGE_BYTES
from aiperf.data.pins import image_key

ENCODED, LABEL, SYNSET = "image/encoded", "image/class/label", "image/class/synset"
# A record is one image and its features: one larger than this is a corrupt or hostile shard,
# refused before its bytes are read.
MAX_RECORD_BYTES = MAX_IMAGE_BYTES + (1 << 20)
_WANTED = {ENCODED.encode(): ENCODED, LABEL.encode(): LABEL, SYNSET.encode(): SYNSET}
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """TFRecord's checksum of `data`: its CRC32C, rotated right by 15 bits, plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class HashingReader:
    """A shard's bytes, read once: its sha256 grows as its records are read."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def read(self, n: int) -> bytes:
        data: bytes = self.handle.read(n)
        self.digest.update(data)
        self.size += len(data)
        return data

    def rest(self) -> None:
        for _chunk in iter(lambda: self.read(1 << 20), b""):
            pass


def records(reader: HashingReader) -> Iterator[bytes]:
    """The records of a TFRecord file, each one's two CRCs checked as TensorFlow checks them.
    ValueError names the first thing wrong (a truncated file, a record whose bytes changed)."""
    while True:
        head = reader.read(12)
        if not head:
            return
        if len(head) < 12:
            raise ValueError("it ends inside a record's header")
        if masked_crc(head[:8]) != struct.unpack("<I", head[8:])[0]:
            raise ValueError("a record's length fails its CRC")
        (length,) = struct.unpack("<Q", head[:8])
        if length > MAX_RECORD_BYTES:
            raise ValueError(
                f"a record says it holds {length} bytes, more than {MAX_RECORD_BYTES}"
            )
        data = reader.read(length)
        tail = reader.read(4)
        if len(data) < length or len(tail) < 4:
            raise ValueError("it ends inside a record")
        if masked_crc(data) != struct.unpack("<I", tail)[0]:
            raise ValueError("a record's data fails its CRC")
        yield data


def _varint(buf: memoryview, at: int) -> tuple[int, int]:
    """A protobuf varint at `at`: (its value, where the next field starts)."""
    if at < len(buf) and buf[at] < 0x80:  # most are one byte: keys, small lengths
        return buf[at], at + 1
    value, shift = 0, 0
    while True:
        if at >= len(buf) or shift > 63:
            raise ValueError("a varint runs past its message")
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """A protobuf message's fields in order: (number, wire type, int value or memoryview)."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 2:
            length, at = _varint(buf, at)
            if at + length > len(buf):
                raise ValueError("a field runs past its message")
            value, at = buf[at : at + length], at + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = buf[at : at + size], at + size
        else:
            raise ValueError(f"wire type {wire} is not in an Example")
        yield number, wire, value


def _first_value(feature: memoryview, name: str) -> Any:
    """The first value of a Feature: bytes of a BytesList (1), an int of an Int64List (3)."""
    for kind, _wire, values in _fields(feature):
        for number, wire, value in _fields(values):
            if number != 1:
                continue
            if kind == 1 and wire == 2:
                return value
            if kind == 3 and wire == 0:
                return value - (1 << 64) if value >= 1 << 63 else value
            if kind == 3 and wire == 2:  # packed int64s
                first, _at = _varint(value, 0)
                return first - (1 << 64) if first >= 1 << 63 else first
    raise ValueError(f"{name} holds no value")


def example_features(record: bytes) -> dict[str, Any]:
    """image/encoded (a memoryview), image/class/label (an int) and image/class/synset (bytes, or
    absent) of a serialised tf.train.Example; ValueError if it is no such Example."""
    found: dict[str, Any] = {}
    for number, wire, features in _fields(memoryview(record)):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(features):
            if entry_number != 1 or entry_wire != 2:
                continue
            key, value = b"", None
            for part, _wire, content in _fields(entry):
                if part == 1:
                    key = bytes(content)
                elif part == 2:
                    value = content
            name = _WANTED.get(key)
            if name is not None and value is not None:
                found[name] = _first_value(value, name)
    if ENCODED not in found or LABEL not in found:
        raise ValueError("it lacks image/encoded or image/class/label")
    if not isinstance(found[LABEL], int) or isinstance(found[ENCODED], int):
        raise ValueError("a feature has the wrong type")
    if SYNSET in found:
        found[SYNSET] = bytes(found[SYNSET])
    return found


@dataclass(frozen=True)
class ScanTask:
    """One shard to read: its checksum, labels and image keys."""

    path: str
    name: str
    split: str
    file: str  # as the manifest names it (relative to the staged folder, or absolute)
    label_offset: int
    classes: int


def scan_shard(task: ScanTask, keep: list[tuple[int, bytes, int]] | None = None) -> dict[str, Any]:
    """Read a shard once: its sha256 and size, each record's label (images per class, from 0) and
    the key of each record's encoded image (aiperf.data.pins.image_key), packed in `keys`; each
    label's first synset in `synsets`. What a manifest records of a shard comes from here (or from
    the scan cache, aiperf.data.scan_cache, while the file is unchanged), never from a sidecar.
    `keep` (a list) receives (record index, encoded image, label from 0) of each good record, for
    a check that decodes them (aiperf.data.tfrecord.check_shard)."""
    per_class: Counter[int] = Counter()
    keys: list[bytes] = []
    synsets: dict[str, str] = {}
    problems: list[str] = []
    with open(Path(task.path), "rb") as handle:
        reader = HashingReader(handle)
        index = -1
        try:
            for index, record in enumerate(records(reader)):
                try:
                    feature = example_features(record)
                except ValueError:  # not a protobuf, or a feature missing
                    problems.append(
                        f"{task.name} record {index} is not an ImageNet-format example (it "
                        f"needs {ENCODED} and {LABEL})"
                    )
                    continue
                label = feature[LABEL] - task.label_offset
                if not 0 <= label < task.classes:
                    low = task.label_offset
                    problems.append(
                        f"{task.name} record {index} has label {label + low}, outside "
                        f"{low}..{low + task.classes - 1} (data.classes {task.classes}, "
                        f"data.label_offset {low}); fix the shard or those settings"
                    )
                    continue
                per_class[label] += 1
                keys.append(image_key(feature[ENCODED]))
                if keep is not None:
                    keep.append((index, bytes(feature[ENCODED]), label))
                synsets.setdefault(str(label), feature.get(SYNSET, b"").decode(errors="replace"))
        except ValueError as exc:
            problems.append(
                f"{task.name} is corrupt or truncated after record {index + 1} ({exc}); re-copy it"
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
        "synsets": dict(sorted(synsets.items(), key=lambda item: int(item[0]))),
        "keys": b"".join(keys),
        "problems": problems,
    }
