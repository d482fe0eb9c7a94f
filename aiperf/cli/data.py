"""`aiperf stage SOURCE --to DIR`: check a dataset, convert it to TFRecord shards on Dask workers,
optionally copy the shards to node-local storage on every worker, and print its manifest.

Registered by aiperf/cli/main.py with `app.command("stage")(stage)`. A run whose profile names the
same source and whose `--out` holds DIR as its `data/` folder reuses the shards (same checksums:
nothing is converted again) and records the manifest with the run. Bad data is one line on
stderr naming the files, and exit status 2.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from aiperf.cli.common import db_option
from aiperf.errors import UserError

KINDS = ("folder", "tfrecord", "digits", "text", "synthetic-text", "enwik8")
# token shards for language models (aiperf.data.tokens)
TOKEN_KINDS = ("text", "synthetic-text", "enwik8")


def guess_kind(source: str) -> str:
    """digits by name; one file is enwik8 (zipped or not: the one kind that is a file); a folder
    with train/ is an image folder; one with train-* files, shards."""
    if source in ("digits", "synthetic-text"):
        return source
    path = Path(source).expanduser()
    if path.is_file():
        return "enwik8"
    if (
        path.is_dir()
        and not (path / "train").is_dir()
        and any(p.name.startswith("train-") for p in path.iterdir())
    ):
        return "tfrecord"
    return "folder"


@dataclass(frozen=True)
class DataOptions:
    """What `aiperf stage` was told of the data, beside its source (None: the config's default)."""

    kind: str | None
    stage_to: str | None
    classes: int | None
    label_offset: int | None
    shard_images: int
    image_size: int
    channels: int
    seq_len: int = 128


def _config(source: str, given: DataOptions) -> Any:
    """The data section `aiperf stage` stages: the options given, for the kind of data it is."""
    from pydantic import ValidationError

    from aiperf.config import DataConfig

    kind = given.kind or guess_kind(source)
    if kind not in KINDS:
        raise UserError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    values: dict[str, Any] = {"kind": kind, "stage_to": given.stage_to}
    if kind in TOKEN_KINDS:
        values["seq_len"] = given.seq_len
    else:
        values.update(
            shard_images=given.shard_images, image_size=given.image_size, channels=given.channels
        )
    if kind == "digits":
        values.update(channels=1, train_samples=1437, val_samples=360)
    elif kind != "synthetic-text":
        values["source"] = source
    if given.classes is not None:
        values["classes"] = given.classes
    if given.label_offset is not None:
        values["label_offset"] = given.label_offset
    try:
        return DataConfig.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserError(
            f"{'.'.join(str(p) for p in err['loc']) or 'data'}: {err['msg']}"
        ) from None


SourceOption = Annotated[
    str,
    typer.Argument(
        help="An image folder (ROOT/train/<class>/*, ROOT/val/<class>/*), a folder "
        "of ImageNet-format TFRecord shards, 'digits' (scikit-learn's digits), a folder of "
        "UTF-8 text files (--kind text), 'synthetic-text', or enwik8.zip (or the unzipped "
        "enwik8, or a stand-in in its format).",
    ),
]
ToOption = Annotated[
    str,
    typer.Option(
        "--to",
        help="Folder the staged shards and manifest go to "
        "(a run with --out X stages into X/data).",
    ),
]
KindOption = Annotated[
    str | None,
    typer.Option(
        "--kind",
        help="folder, tfrecord, digits, text, synthetic-text or enwik8; guessed from SOURCE "
        "(a folder of text files needs --kind text; a file is enwik8).",
    ),
]
StageToOption = Annotated[
    str | None,
    typer.Option(
        "--stage-to",
        help="Node-local folder every worker copies the shards to, checksums verified there.",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        min=1,
        help="Dask workers that convert shards (default: one per core).",
    ),
]
ClassesOption = Annotated[
    int | None,
    typer.Option("--classes", help="tfrecord: number of classes (labels must be in range)."),
]
LabelOffsetOption = Annotated[
    int | None,
    typer.Option(
        "--label-offset",
        help="tfrecord: label of the first class (1 in ImageNet shards, the default).",
    ),
]
ShardImagesOption = Annotated[
    int, typer.Option("--shard-images", min=1, help="folder: images per shard.")
]
ImageSizeOption = Annotated[
    int, typer.Option("--image-size", min=8, help="Size the input pipeline crops to.")
]
ChannelsOption = Annotated[int, typer.Option("--channels", min=1, max=4)]
SeqLenOption = Annotated[
    int,
    typer.Option(
        "--seq-len", min=2, help="text, synthetic-text, enwik8: tokens a model reads at once."
    ),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed", help="digits, text: seed of the train/val split; synthetic-text: the text's."
    ),
]
AsJsonOption = Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")]


def stage(
    source: SourceOption,
    to: ToOption = "aiperf-out/data",
    kind: KindOption = None,
    stage_to: StageToOption = None,
    workers: WorkersOption = None,
    classes: ClassesOption = None,
    label_offset: LabelOffsetOption = None,
    shard_images: ShardImagesOption = 1024,
    image_size: ImageSizeOption = 224,
    channels: ChannelsOption = 3,
    seq_len: SeqLenOption = 128,
    seed: SeedOption = 0,
    as_json: AsJsonOption = False,
    db: str = db_option("Database URL the manifest is recorded in."),
) -> None:
    """Check a dataset, convert it to TFRecord shards and record it in the database.

    The shards are written on Dask workers, with a manifest beside them."""
    from aiperf.cli.common import err, fail, open_store

    with open_store(db) as store:  # a bad database URL fails before any work
        try:
            given = DataOptions(
                kind, stage_to, classes, label_offset, shard_images, image_size, channels, seq_len
            )
            config = _config(source, given)
            manifest = _stage_with_progress(config, seed, Path(to), workers, err)
            store.record_dataset(None, manifest.to_dict())
        except UserError as exc:
            raise fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(manifest.to_dict(), indent=1))
        return
    _print_manifest(manifest)
    _print_next_step(manifest, Path(to))


def _print_next_step(manifest: Any, to: Path) -> None:
    """How to run on what was staged, reusing its shards."""
    out = f" --out {to.parent}" if to.name == "data" else ""
    if manifest.kind == "enwik8":
        Console().print(
            f"run on it with `aiperf run --profile enwik8 --set data.source={manifest.source}"
            f"{out}`, which reuses these shards",
            highlight=False,
        )
    if manifest.kind in ("folder", "tfrecord"):
        Console().print(
            f"run on it with a profile whose data section says kind: {manifest.kind}, source: "
            f"{manifest.source}; `aiperf run{out}` then reuses these shards",
            highlight=False,
        )


def _stage_with_progress(config, seed: int, to: Path, workers: int | None, err: Console):
    from aiperf.config import machine_cores
    from aiperf.data.staging import preflight
    from aiperf.data.staging import stage as stage_data

    preflight(config)  # structural problems first, before any worker starts
    # Digits and token data are staged in this process; the rest on Dask workers.
    needs_workers = config.kind not in ("digits", *TOKEN_KINDS) or config.stage_to
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=False) as bar:
        tasks: dict[str, Any] = {}

        def update(done: int, total: int, what: str) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        if not needs_workers:
            return stage_data(config, seed, to, on_progress=update)
        # Staging workers only decode and copy; TensorFlow's oneDNN start-up notice stays quiet.
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from distributed import Client

        from aiperf.cluster import local_cluster

        count = min(workers or machine_cores(), machine_cores())
        starting = bar.add_task(f"starting {count} Dask workers", total=None)
        with local_cluster(count) as cluster, Client(cluster) as client:
            bar.remove_task(starting)
            return stage_data(config, seed, to, client=client, on_progress=update)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _counts(manifest) -> list[tuple[str, str]]:
    """The manifest's size rows: images and classes, or tokens, sequences and the vocabulary."""
    if manifest.kind in TOKEN_KINDS:
        rows = [
            ("vocabulary", str(manifest.vocab_size)),
            ("sequence", f"{manifest.seq_len} tokens"),
            ("train", f"{manifest.train_tokens:,} tokens, {manifest.train_samples:,} sequences"),
            ("val", f"{manifest.val_tokens:,} tokens, {manifest.val_samples:,} sequences"),
        ]
        if manifest.kind == "enwik8":
            from aiperf.data.enwik8 import ENWIK8_SHA256

            published = manifest.source_sha256 == ENWIK8_SHA256
            rows.append(
                (
                    "bytes' sha256",
                    f"{manifest.source_sha256} ("
                    + (
                        "enwik8 as published"
                        if published
                        else "not enwik8's: only an open run takes it"
                    )
                    + ")",
                )
            )
        return rows
    return [
        ("classes", str(manifest.classes)),
        ("train images", str(manifest.train_samples)),
        ("val images", str(manifest.val_samples)),
    ]


def _print_manifest(manifest) -> None:
    console = Console()
    table = Table(title=f"staged {manifest.name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    rows = [
        ("kind", manifest.kind),
        ("path", manifest.path),
        ("source", manifest.source or "-"),
        *_counts(manifest),
        ("shards", f"{len(manifest.shards)} ({_size(manifest.size_bytes)})"),
        ("sha256", manifest.sha256),
    ]
    counts = manifest.images_per_class
    if counts:
        low, high = min(counts.values()), max(counts.values())
        rows.append(("train images per class", f"{low}..{high}"))
    for worker, where in manifest.copies.items():
        rows.append((f"copy on {worker}", where))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
