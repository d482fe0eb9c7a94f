"""Token shards: the token kinds (`synthetic-text`, `text`, `enwik8`) staged, checked and described the
way the image kinds are, so a ruleset pins them, `verify` re-digests them and `data.stage_to`
copies them to every node with no code of their own.

A staged token dataset is a folder of uint16 .npy shards (SHARD_TOKENS tokens each, named
train-00000-of-00002.npy and validation-00000-of-00001.npy) and a manifest.json written last, after
every shard is complete. Its digest is aiperf.data.manifest.dataset_digest over the shards' names
and checksums, as for TFRecord shards. Staging is skipped when the folder already holds the same
inputs (`TokenManifest.inputs`: the generator's settings and seed, or the text files' contents,
seed and fraction) and every shard checks out (`check_tokens`: checksum, dtype, count, every id
below the vocabulary); otherwise the shards are written again, each through a temporary name.
The manifest's samples are sequences: a pass over a split of T tokens holds (T - 1) // seq_len
windows (inputs and their targets one token on; aiperf.data.tokens).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.manifest import (
    MANIFEST_FILE,
    Manifest,
    dataset_digest,
    read_manifest,
    sha256_file,
    shard_path,
    write_json_atomic,
)
from aiperf.data.pins import image_key, overlap
from aiperf.data.problems import DataError
from aiperf.data.text_synthetic import DOC_END, GENERATOR, VOCAB_SIZE

FORMAT = "tokens"
SHARD_TOKENS = 1 << 20  # 2 MiB of uint16 per shard
TOKEN_DTYPE = np.dtype("<u2")
SPLITS = ("train", "validation")


@dataclass(frozen=True)
class TokenManifest(Manifest):
    """A token dataset's manifest: the image manifest's fields (classes is the vocabulary,
    samples are sequences, image_shape is (seq_len, 1, 1)) and the token counts."""

    vocab_size: int = VOCAB_SIZE
    seq_len: int = 0
    train_tokens: int = 0
    val_tokens: int = 0
    inputs: str = ""  # what was staged from, digested: staging is skipped when it is the same
    # enwik8: the sha256 and MD5 of the corpus's bytes (a zip's member's), which the ruleset pins
    source_sha256: str = ""
    source_md5: str = ""


def sequences(tokens: int, seq_len: int) -> int:
    """Windows of seq_len inputs (and seq_len targets, one token on) in a split of `tokens`."""
    return max(0, (tokens - 1) // seq_len)


def stage_tokens(config: DataConfig, seed: int, folder: Path) -> TokenManifest:
    """Stage `synthetic-text`, `text` or `enwik8` into `folder` (once) and return its manifest."""
    if config.kind == "enwik8":
        return _stage_enwik8(config, folder)
    if config.kind == "synthetic-text":
        settings = {
            "generator": GENERATOR,
            "seed": seed,
            "train_tokens": config.train_tokens,
            "val_tokens": config.val_tokens,
        }
        inputs = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
        out = folder / f"synthetic-text-{inputs[:16]}"
        if _intact(out, inputs):
            return _manifest(out, config.seq_len)
        from aiperf.data import text_synthetic

        streams = {
            "train": text_synthetic.stream(seed, "train", config.train_tokens),
            "validation": text_synthetic.stream(seed, "validation", config.val_tokens),
        }
        where = {s: [(f"{s} documents", _document_keys(streams[s]))] for s in SPLITS}
        source = f"aiperf.data.text_synthetic {GENERATOR}, seed {seed}"
        return _write(out, "synthetic-text", source, inputs, streams, where, config.seq_len)
    from aiperf.data.staging_shards import source_name
    from aiperf.data.text_folder import read_text

    assert config.source is not None
    text = read_text(config.source, seed, config.val_fraction)  # every file checked, each time
    for split, stream in (("train", text.train), ("validation", text.validation)):
        if sequences(len(stream), config.seq_len) == 0:
            raise DataError(
                str(text.root),
                [
                    f"the {split} files ({', '.join(text.files[split][:3])}) hold {len(stream)} "
                    f"tokens, not one sequence of data.seq_len {config.seq_len} (+1): add text, "
                    "or lower data.seq_len"
                    + (" or raise data.val_fraction" if split != "train" else "")
                ],
            )
    out = folder / source_name("text", text.root)
    if _intact(out, text.inputs):
        return _manifest(out, config.seq_len)
    streams = {"train": text.train, "validation": text.validation}
    where = {s: list(zip(text.files[s], text.keys[s], strict=True)) for s in SPLITS}
    return _write(out, "text", str(text.root), text.inputs, streams, where, config.seq_len)


def _stage_enwik8(config: DataConfig, folder: Path) -> TokenManifest:
    """enwik8 (or a stand-in) split 90/5/5 by bytes; its train and validation splits staged."""
    from aiperf.data.enwik8 import read_corpus
    from aiperf.data.staging_shards import source_name

    assert config.source is not None
    corpus = read_corpus(config.source, config.seq_len)  # read and digested each time
    inputs = hashlib.sha256(f"enwik8 90/5/5 {corpus.sha256}".encode()).hexdigest()
    out = folder / source_name("enwik8", corpus.path)
    if _intact(out, inputs):
        return _manifest(out, config.seq_len)
    streams = {"train": corpus.train, "validation": corpus.validation}
    where = {s: [(f"{s} pages", corpus.keys[s])] for s in SPLITS}
    digests = (corpus.sha256, corpus.md5)
    return _write(out, "enwik8", str(corpus.path), inputs, streams, where, config.seq_len, digests)


def _document_keys(stream: np.ndarray) -> bytes:
    """Each document's key (pins.image_key of its tokens), packed: the overlap check's unit."""
    ends = np.nonzero(stream == DOC_END)[0]
    raw = stream.astype(TOKEN_DTYPE).tobytes()
    starts = np.concatenate([[0], ends + 1])
    stops = np.concatenate([ends + 1, [len(stream)]])
    return b"".join(
        image_key(raw[2 * a : 2 * b]) for a, b in zip(starts, stops, strict=True) if b > a
    )


def _write(
    out: Path,
    kind: str,
    source: str,
    inputs: str,
    streams: dict[str, np.ndarray],
    where: dict[str, list[tuple[str, bytes]]],
    seq_len: int,
    digests: tuple[str, str] = ("", ""),
) -> TokenManifest:
    """Write each split's shards, then the manifest (last); drop files of an earlier staging.
    `digests`: the source's sha256 and MD5, where a ruleset pins the source (enwik8)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)  # unfinished until the new one is written
    shards = []
    for split in SPLITS:
        data = np.ascontiguousarray(streams[split], dtype=TOKEN_DTYPE)
        total = max(1, -(-len(data) // SHARD_TOKENS))
        for index in range(total):
            name = f"{split}-{index:05d}-of-{total:05d}.npy"
            part = data[index * SHARD_TOKENS : (index + 1) * SHARD_TOKENS]
            tmp = out / f".{name}.{os.getpid()}.tmp"
            try:
                with open(tmp, "wb") as handle:
                    np.save(handle, part, allow_pickle=False)
                os.replace(tmp, out / name)
            finally:
                tmp.unlink(missing_ok=True)  # a full disk keeps no half-written shard
            shards.append(
                {
                    "split": split,
                    "name": name,
                    "file": name,
                    "tokens": len(part),
                    "size_bytes": (out / name).stat().st_size,
                    "sha256": sha256_file(out / name),
                }
            )
    record = overlap(where["train"], where["validation"])
    manifest = _from_shards(out, kind, source, inputs, shards, record, seq_len, digests)
    write_json_atomic(out / MANIFEST_FILE, manifest.to_dict())
    keep = {MANIFEST_FILE} | {s["file"] for s in shards}
    for stale in out.iterdir():
        if stale.name not in keep and stale.is_file() and not stale.name.startswith("."):
            stale.unlink(missing_ok=True)
    return manifest


def _from_shards(
    out: Path,
    kind: str,
    source: str,
    inputs: str,
    shards: list[dict[str, Any]],
    record: dict[str, Any] | None,
    seq_len: int,
    digests: tuple[str, str] = ("", ""),
) -> TokenManifest:
    """The manifest, every count summed from the shard entries."""
    train = sum(int(s["tokens"]) for s in shards if s["split"] == "train")
    val = sum(int(s["tokens"]) for s in shards if s["split"] == "validation")
    return TokenManifest(
        name=out.name,
        kind=kind,
        path=str(out.resolve()),
        sha256=dataset_digest(shards),
        size_bytes=sum(int(s["size_bytes"]) for s in shards),
        image_shape=(seq_len, 1, 1),
        classes=VOCAB_SIZE,
        train_samples=sequences(train, seq_len),
        val_samples=sequences(val, seq_len),
        images_per_class={},
        format=FORMAT,
        source=source,
        shards=shards,
        overlap=record,
        vocab_size=VOCAB_SIZE,
        seq_len=seq_len,
        train_tokens=train,
        val_tokens=val,
        inputs=inputs,
        source_sha256=digests[0],
        source_md5=digests[1],
    )


def check_tokens(folder: str | Path) -> list[str]:
    """Everything wrong with a staged token folder (empty: it is intact): the manifest readable,
    every shard there with its checksum, a 1-D uint16 array of the count listed, every id below
    the vocabulary, and the manifest's totals, sequences and digest what the shards sum to."""
    folder = Path(folder)
    try:
        data = read_manifest(folder)
        shards = list(data["shards"])
        vocab, seq_len = int(data["vocab_size"]), int(data["seq_len"])
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{folder} holds no readable token manifest ({MANIFEST_FILE}); stage it again"]
    problems = []
    for shard in shards:
        path = Path(shard_path(folder, shard))
        if not path.is_file():
            problems.append(f"{shard['name']} is missing")
            continue
        if sha256_file(path) != shard["sha256"]:
            problems.append(f"{shard['name']} has changed (its sha256 is not the manifest's)")
            continue
        try:
            tokens = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            problems.append(f"{shard['name']} is not a .npy array ({exc})")
            continue
        if tokens.dtype != TOKEN_DTYPE or tokens.ndim != 1:
            problems.append(f"{shard['name']} holds {tokens.dtype} {tokens.shape}, not uint16 1-D")
        elif len(tokens) != int(shard["tokens"]):
            problems.append(
                f"{shard['name']} holds {len(tokens)} tokens, listed {shard['tokens']}"
            )
        elif len(tokens) and int(tokens.max()) >= vocab:
            problems.append(f"{shard['name']} holds token {int(tokens.max())}, >= vocab {vocab}")
    for split, field in (("train", "train_tokens"), ("validation", "val_tokens")):
        listed = sum(int(s["tokens"]) for s in shards if s["split"] == split)
        if listed != data.get(field):
            problems.append(f"{field} {data.get(field)}, but the {split} shards list {listed}")
        samples = "train_samples" if split == "train" else "val_samples"
        if data.get(samples) != sequences(listed, seq_len):
            problems.append(
                f"{samples} {data.get(samples)}, but {listed} tokens hold "
                f"{sequences(listed, seq_len)} sequences of {seq_len}"
            )
    if data.get("sha256") != dataset_digest(shards):
        problems.append("the manifest's sha256 is not its shards' digest")
    return problems


def validate_tokens(folder: str | Path) -> TokenManifest:
    """A staged token folder's manifest once every check passes; DataError (one line) if not."""
    problems = check_tokens(folder)
    if problems:
        raise DataError(str(folder), problems)
    manifest = TokenManifest.from_dict(read_manifest(folder))
    assert isinstance(manifest, TokenManifest)  # from_dict makes its own class
    return manifest


def _intact(out: Path, inputs: str) -> bool:
    """Whether `out` is a finished staging of these very inputs whose shards all check out."""
    if not (out / MANIFEST_FILE).is_file():
        return False
    try:
        if read_manifest(out).get("inputs") != inputs:
            return False
    except (OSError, ValueError):
        return False
    return not check_tokens(out)


def _manifest(out: Path, seq_len: int) -> TokenManifest:
    """The manifest of intact shards for this seq_len (the sequences depend on it; the shards
    do not), written back when it changed."""
    data = read_manifest(out)
    manifest = _from_shards(
        out,
        data["kind"],
        data["source"],
        data["inputs"],
        data["shards"],
        data.get("overlap"),
        seq_len,
        (data.get("source_sha256", ""), data.get("source_md5", "")),
    )
    if manifest.to_dict() != data:
        write_json_atomic(out / MANIFEST_FILE, manifest.to_dict())
    return manifest
