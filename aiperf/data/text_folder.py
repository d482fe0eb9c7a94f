"""`text`: a folder of UTF-8 files, tokenised to bytes and split into train and validation.

A language model of the LM track can train on the user's own text without a tokenizer to fit or
ship: each byte of the files' UTF-8 is a token (ids 0..255, VOCAB_SIZE), and each file ends with
DOC_END (0xFF), a byte UTF-8 never holds, so a model sees where one document stops.

The split is at file level, by the seed: the files are put in an order drawn from the seed, and
each in turn goes to validation if the validation files then hold no more than `val_fraction` of
the bytes (where no file is that small, the smallest goes: one file at least each way). Whole
files, not a share of each file's bytes, so no document is seen in both splits (its later half
would be predicted from its earlier half learned in training); a folder needs two files or more,
and each split one whole sequence (aiperf.data.staging_tokens). Every file is read and decoded
each time the folder is staged: a file that is not UTF-8 is named in one line
(aiperf.data.problems.DataError, a UserError), every bad one at once, as is a folder without text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiperf.data.pins import image_key
from aiperf.data.problems import DataError
from aiperf.data.text_synthetic import DOC_END


@dataclass(frozen=True)
class TextSplit:
    """A folder's text as two token streams, and what they came from."""

    root: Path
    train: np.ndarray  # uint16 tokens, every train file's bytes then DOC_END, in the seed's order
    validation: np.ndarray
    files: dict[str, list[str]]  # split -> the files (relative paths) in stream order
    keys: dict[str, list[bytes]]  # split -> each file's content key (pins.image_key), in order
    inputs: str  # sha256 of the files' names and contents, the seed and the fraction


def text_files(source: str | Path) -> tuple[Path, list[Path]]:
    """The folder and its files (every regular file below it, hidden ones left out), sorted; a
    missing folder, a name that is not UTF-8 or a folder without files is one line."""
    root = Path(source).expanduser()
    if not root.is_dir():
        raise DataError(
            str(source), [f"folder {root} does not exist; give a folder of UTF-8 text files"]
        )
    root = root.resolve()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    from aiperf.data.folder import shown_name

    bad = [p for p in files if str(p) != str(p).encode("utf-8", "replace").decode()]
    if bad:
        raise DataError(
            str(root),
            [
                f"{shown_name(str(p.relative_to(root)))} has a name that is not UTF-8; rename it"
                for p in bad
            ],
        )
    if not files:
        raise DataError(str(root), [f"{root} holds no files; give a folder of UTF-8 text files"])
    return root, files


def read_text(source: str | Path, seed: int, val_fraction: float) -> TextSplit:
    """Read and check every file, split them by the seed, and make the two token streams."""
    root, files = text_files(source)
    contents: dict[str, bytes] = {}
    problems = []
    for path in files:
        rel = str(path.relative_to(root))
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(
                f"{rel} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                "convert it or remove it"
            )
            continue
        if data:  # an empty file holds no token
            contents[rel] = data
    if problems:
        raise DataError(str(root), problems)
    if len(contents) < 2:
        raise DataError(
            str(root),
            [
                f"{root} holds {len(contents)} non-empty text file"
                f"{'' if len(contents) == 1 else 's'}; the train/validation split is by file, "
                "so give two or more"
            ],
        )
    names = sorted(contents)
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    total = sum(len(contents[n]) for n in names)
    held_out: list[str] = []
    taken = 0
    for name in order:  # in the seed's order, each file that still fits in the fraction
        if taken + len(contents[name]) <= val_fraction * total:
            held_out.append(name)
            taken += len(contents[name])
    if not held_out:  # every file is larger than the fraction: the smallest (first in order)
        held_out = [min(order, key=lambda n: len(contents[n]))]
    split_files = {"train": [n for n in order if n not in held_out], "validation": held_out}
    end = bytes([DOC_END])
    streams = {
        split: np.frombuffer(b"".join(contents[n] + end for n in chosen), dtype=np.uint8).astype(
            np.uint16
        )
        for split, chosen in split_files.items()
    }
    digest = hashlib.sha256(f"text seed {seed} val_fraction {val_fraction!r}\n".encode())
    for name in names:
        digest.update(f"{name} {hashlib.sha256(contents[name]).hexdigest()}\n".encode())
    return TextSplit(
        root=root,
        train=streams["train"],
        validation=streams["validation"],
        files=split_files,
        keys={s: [image_key(contents[n]) for n in chosen] for s, chosen in split_files.items()},
        inputs=digest.hexdigest(),
    )
