"""What a staged dataset holds, computed from its content: the digest a ruleset pins it by, the
images found in both splits, and the classes missing from a split.

Synthetic data is digested from its arrays (`arrays_digest`); a sharded dataset from its shards'
checksums, which staging computes from the shard files (aiperf/data/shard_scan.py `scan_shard`).
One file written beside the data is trusted: the staged folder's scan cache (scans.json,
aiperf/data/scan_cache.py), which keeps each shard's checksum and image keys while the file
system's size, times and inode of the shard are unchanged, so a shard changed since a staging read
it is read again (who can write scans.json can make a run record another digest than its shards',
as who can write the database can). Every image of both splits is hashed (rate 1: the files are
read whole for their checksums anyway, so sampling would save little), eight bytes of BLAKE2b
over its encoded bytes (a shard's) or its array row (synthetic's): an image in both splits has
the same key in both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aiperf.rules import DataPin

KEY_BYTES = 8  # of each image's hash: a chance collision among ImageNet's pairs is about 1e-8
RATE = 1.0  # the share of images hashed: all of them
SHOWN = 3  # overlapping images named in the manifest


def image_key(data: bytes) -> bytes:
    """An image's key: the first KEY_BYTES of a hash of its bytes."""
    return hashlib.blake2b(data, digest_size=KEY_BYTES).digest()


def row_keys(x: np.ndarray) -> bytes:
    """The keys of an array's rows (images), packed one after the other."""
    return b"".join(image_key(np.ascontiguousarray(row).tobytes()) for row in x)


def arrays_digest(splits: Sequence[tuple[str, np.ndarray, np.ndarray]]) -> str:
    """One sha256 over (split, images, labels) in order: the same arrays give the same digest on
    any machine, however the .npz holding them was written (np.savez stamps zip times in it)."""
    digest = hashlib.sha256()
    for split, x, y in splits:
        x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
        y = np.ascontiguousarray(y, dtype=np.dtype("<i8"))
        digest.update(f"{split} {x.dtype.str} {x.shape} {y.shape}\n".encode())
        digest.update(x.tobytes())
        digest.update(y.tobytes())
    return digest.hexdigest()


def overlap(
    train: Sequence[tuple[str, bytes]], validation: Sequence[tuple[str, bytes]]
) -> dict[str, Any]:
    """The overlap check's record: images hashed, the rate, validation images also in training,
    and the first few named ("validation-00000-of-00004 record 7 = train-00003-of-00050 record 12").

    Each split is a list of (where, packed keys): a shard's name and its images' keys in order."""

    def flat(parts: Sequence[tuple[str, bytes]]) -> tuple[np.ndarray, list[tuple[str, int]]]:
        keys = np.frombuffer(b"".join(k for _w, k in parts), dtype=np.uint64)
        starts = [(where, len(k) // KEY_BYTES) for where, k in parts]
        return keys, starts

    def name(starts: list[tuple[str, int]], position: int) -> str:
        for where, count in starts:
            if position < count:
                return f"{where} record {position}"
            position -= count
        return f"record {position}"  # pragma: no cover - positions come from the same keys

    train_keys, train_where = flat(train)
    val_keys, val_where = flat(validation)
    found = np.nonzero(np.isin(val_keys, train_keys))[0]
    examples = []
    for position in found[:SHOWN]:
        first = int(np.nonzero(train_keys == val_keys[position])[0][0])
        examples.append(f"{name(val_where, int(position))} = {name(train_where, first)}")
    return {
        "images_hashed": int(len(train_keys) + len(val_keys)),
        "rate": RATE,
        "overlaps": int(len(found)),
        "examples": examples,
    }


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more


def content_problems(manifest: Mapping[str, Any]) -> list[str]:
    """Overlap and missing classes, as the manifest's fresh counts record them."""
    problems = []
    record = manifest.get("overlap")
    if not record:
        problems.append(
            "the dataset has no overlap check recorded (it was staged by an older aiperf; "
            "stage it again)"
        )
    elif record.get("overlaps"):
        problems.append(
            f"{record['overlaps']} validation images are also training images "
            f"({'; '.join(record.get('examples') or [])}): the splits must not share an image"
        )
    if manifest.get("format") == "tokens":  # token ids are no classes: a split lacks many
        return problems
    names = list(manifest.get("class_names") or [])
    for split, key in (("train", "images_per_class"), ("validation", "val_images_per_class")):
        counts = manifest.get(key) or {}
        missing = [c for c in names if not counts.get(c)] or (
            [] if len(counts) >= int(manifest.get("classes") or 0) else ["(unnamed)"]
        )
        if missing:
            problems.append(
                f"{len(missing)} of {manifest.get('classes')} classes have no {split} images "
                f"({_listed(missing)}): every class needs images in both splits"
            )
    return problems


def pin_problems(manifest: Mapping[str, Any], pin: DataPin) -> list[str]:
    """How the staged data differs from the ruleset's pin (empty: it is the pinned data)."""
    problems = []
    if manifest.get("kind") != pin.kind:
        problems.append(f"data.kind {manifest.get('kind')}, the ruleset pins {pin.kind}")
    samples = "windows" if pin.tokens else "images"  # the LM track's samples are token windows
    for field, label in (
        ("classes", "classes"),
        ("train_samples", f"train {samples}"),
        ("val_samples", f"validation {samples}"),
    ):
        if manifest.get(field) != getattr(pin, field):
            problems.append(
                f"{manifest.get(field)} {label}, the ruleset pins {getattr(pin, field)}"
            )
    if pin.sha256 and manifest.get("sha256") != pin.sha256:
        problems.append(
            f"content sha256 {str(manifest.get('sha256'))[:12]}, the ruleset pins "
            f"{pin.sha256[:12]} (the generated data was changed)"
        )
    if pin.source_sha256 and manifest.get("source_sha256") != pin.source_sha256:
        problems.append(
            f"{manifest.get('source') or 'the corpus'} has bytes of sha256 "
            f"{str(manifest.get('source_sha256') or '?')[:12]}, the ruleset pins "
            f"{pin.source_sha256[:12]} ({pin.name or pin.kind} as published)"
        )
    return problems


def closed_problems(manifest: Mapping[str, Any], pin: DataPin) -> list[str]:
    """Everything that keeps this data from a closed result: the pin, overlap, missing classes."""
    return pin_problems(manifest, pin) + content_problems(manifest)
