"""`enwik8`: the first 100,000,000 bytes of English Wikipedia's XML dump of 2006-03-03 (Mahoney's
Large Text Compression Benchmark and the Hutter Prize), the LM track's real corpus.

The user brings it as distributed, `enwik8.zip` (one member, `enwik8`), or unzipped. Bytes are
tokens (ids 0..255, the vocabulary of synthetic-text and text); enwik8 is UTF-8, so DOC_END (0xFF)
never occurs in it, and none is added: the corpus is one document. The split is the standard one
of every result on enwik8 since Al-Rfou et al. (2018) and Transformer-XL (Dai et al. 2019): the
first 90,000,000 bytes train, the next 5,000,000 validation, the last 5,000,000 test. The
benchmark trains on the first and is judged on the second; the test bytes are never read into a
split. A smaller file in the same format (the stand-in, `write_standin`) is split in the same
proportions (90 %, 5 %, 5 %), which on enwik8 itself are exactly those byte counts.

The pin is the sha256 of the 100,000,000 bytes (the zip's own digest changes when a mirror repacks
it; its member's does not), `ENWIK8_SHA256`; Mahoney publishes the same bytes' MD5, `ENWIK8_MD5`,
which staging records beside it (docs/rules.md, "The enwik8 profile"). The overlap check's unit is
the wiki page (`<page>` ... `</page>`): a page split by a boundary is a part on each side.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiperf.data.pins import image_key
from aiperf.data.problems import DataError

ENWIK8_BYTES = 100_000_000
ENWIK8_SHA256 = "2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8"
ENWIK8_MD5 = "a1fa5ffddb56f4953e226637dabbb36a"  # as Mahoney's enwik8 page publishes it
MEMBER = "enwik8"  # the one file inside enwik8.zip
HEADER = b"<mediawiki "  # how the dump, and so enwik8, begins
TRAIN_SHARE, VALID_SHARE = 90, 5  # percent of the bytes; the last 5 % (test) is never staged
PAGE = b"<page>"


@dataclass(frozen=True)
class Corpus:
    """enwik8's (or a stand-in's) two splits as tokens, and what they came from."""

    path: Path
    train: np.ndarray  # uint16 tokens: the first 90 % of the bytes
    validation: np.ndarray  # the next 5 %
    keys: dict[str, bytes]  # split -> its pages' keys (pins.image_key), packed
    sha256: str  # of all the bytes (zip: its member's), the pin
    md5: str
    size: int  # bytes in the corpus, the test split's included


def split_bounds(size: int) -> tuple[int, int]:
    """(end of train, end of validation) in a corpus of `size` bytes: 90 % and 95 % of it."""
    return size * TRAIN_SHARE // 100, size * (TRAIN_SHARE + VALID_SHARE) // 100


def check_source(source: str | Path) -> Path:
    """The file the user named, once it is a file; a missing one is one line (DataError)."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise DataError(
            str(source),
            [f"{path} is not a file; give enwik8.zip as distributed, or the unzipped enwik8"],
        )
    return path.resolve()


def read_bytes(source: str | Path) -> tuple[Path, bytes]:
    """enwik8's bytes from the zip (its member `enwik8`) or the unzipped file; anything else, a
    zip without that member or a file that is not a MediaWiki dump, is one line (DataError)."""
    path = check_source(source)
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                if MEMBER not in names:
                    raise DataError(
                        str(path),
                        [
                            f"the zip holds {', '.join(names[:3]) or 'no file'}, not {MEMBER}; "
                            "give enwik8.zip as distributed"
                        ],
                    )
                data = archive.read(MEMBER)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise DataError(str(path), [f"the zip cannot be read ({exc})"]) from None
    else:
        data = path.read_bytes()
    if not data.startswith(HEADER):
        raise DataError(
            str(path),
            [
                f"it does not begin as enwik8 does ({HEADER.decode().strip()}...): give "
                "enwik8.zip or enwik8 as distributed, or a stand-in written by "
                "aiperf.data.enwik8.write_standin"
            ],
        )
    return path, data


def read_corpus(source: str | Path, seq_len: int) -> Corpus:
    """Read, digest and split the corpus; a split without one window of seq_len (+1) is one line."""
    path, data = read_bytes(source)
    train_end, valid_end = split_bounds(len(data))
    tokens = np.frombuffer(data, dtype=np.uint8)
    train, validation = tokens[:train_end], tokens[train_end:valid_end]
    for split, part in (("train", train), ("validation", validation)):
        if len(part) < seq_len + 1:
            raise DataError(
                str(path),
                [
                    f"its {split} split ({len(part)} of {len(data)} bytes) holds no sequence of "
                    f"data.seq_len {seq_len} (+1): bring more bytes, or lower data.seq_len"
                ],
            )
    return Corpus(
        path=path,
        train=train.astype(np.uint16),
        validation=validation.astype(np.uint16),
        keys={
            "train": page_keys(data[:train_end]),
            "validation": page_keys(data[train_end:valid_end]),
        },
        sha256=hashlib.sha256(data).hexdigest(),
        md5=hashlib.md5(data, usedforsecurity=False).hexdigest(),
        size=len(data),
    )


def page_keys(data: bytes) -> bytes:
    """The keys of a split's pages (each from one `<page>` to the next), packed: a page in both
    splits would have one key in both."""
    starts = [0]
    at = data.find(PAGE, 1)
    while at != -1:
        starts.append(at)
        at = data.find(PAGE, at + 1)
    ends = [*starts[1:], len(data)]
    return b"".join(image_key(data[a:b]) for a, b in zip(starts, ends, strict=True) if b > a)


# --- the stand-in -------------------------------------------------------------------------------

WORDS = (
    "the of and in to a is was for on as by with from that at his an are which it be this were "
    "first also has or had its new one after but their two who other been into all time city "
    "such later when most during world where made being there used known between under while "
    "state may many some only three year since then over these both team part people war"
).split()


def standin_bytes(size: int, seed: int = 0) -> bytes:
    """`size` bytes in enwik8's format (a MediaWiki XML dump's header, then pages of wiki text
    drawn from the seed), cut at `size` as enwik8 is cut at 100,000,000 bytes."""
    rng = np.random.default_rng(seed)
    parts = [
        b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.3/" version="0.3" '
        b'xml:lang="en">\n  <siteinfo>\n    <sitename>Wikipedia</sitename>\n  </siteinfo>\n'
    ]
    total, page = len(parts[0]), 0
    while total < size:
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(40, 400)))]
        title = " ".join(words[:2]).title()
        link = f"[[{words[2]}]]"
        body = f"'''{title}''' is {' '.join(words[3:])} {link}.\n\n== History ==\n"
        text = (
            f"  <page>\n    <title>{title} {page}</title>\n    <id>{page + 1}</id>\n"
            f"    <revision>\n      <id>{page + 100}</id>\n"
            f'      <text xml:space="preserve">{body}</text>\n    </revision>\n  </page>\n'
        ).encode()
        parts.append(text)
        total += len(text)
        page += 1
    return b"".join(parts)[:size]


def write_standin(path: str | Path, size: int, seed: int = 0, *, zipped: bool = True) -> Path:
    """Write a stand-in of `size` bytes to `path`: zipped as enwik8.zip is (one member named
    enwik8), or as the bare file. Its digest is not the pin, so a run on it is open."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = standin_bytes(size, seed)
    if zipped:
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MEMBER, data)
    else:
        path.write_bytes(data)
    return path


def main(argv: list[str] | None = None) -> None:
    """`python -m aiperf.data.enwik8 PATH [--bytes N] [--seed S] [--unzipped]`: write a stand-in
    to try the enwik8 profile with (`--set data.source=PATH`), printing its path."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--bytes", type=int, default=1 << 20, help="its size (default 1 MiB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--unzipped", action="store_true", help="the bare file, not a zip")
    args = parser.parse_args(argv)
    if args.bytes < len(HEADER):
        parser.error(f"--bytes must be at least {len(HEADER)}")
    print(write_standin(args.path, args.bytes, args.seed, zipped=not args.unzipped))


if __name__ == "__main__":
    main()
