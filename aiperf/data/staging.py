"""Stage a dataset where every worker can read it, and describe it in a manifest.

One entry point, `stage(config.data, seed, folder, client=...)`, for every kind of data:

- synthetic: generated from the seed into one .npz named by its settings;
- digits: scikit-learn's digits, split by the seed, written as TFRecord shards;
- folder: an ImageNet-layout image folder, checked, then converted to TFRecord shards in
  parallel on the Dask workers (each shard's images are decode-checked where they are written);
- tfrecord: ImageNet-format shards the user brought, each read and checked on the workers;
- generated-imagenet: JPEG-encoded TFRecord shards in ImageNet's format, generated from the seed
  in parallel on the Dask workers (aiperf/data/generated.py).

Work already done is skipped: a shard whose inputs and checksum match its stored record is not
rewritten, a user shard with a known checksum is not decoded again. With `data.stage_to`, each
node then gets one copy of the shards at that node-local path, checksums verified there, shared by
its workers, and the trials read that copy. The staged folder's manifest.json is written last;
without it a staged folder is unfinished and never read.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.config import DataConfig
from aiperf.data import synthetic
from aiperf.data.manifest import (
    MANIFEST_FILE,
    Manifest,
    dataset_digest,
    read_manifest,
    sha256_file,
    shard_path,
    write_json_atomic,
)
from aiperf.data.problems import DataError
from aiperf.data.synthetic import ImageArrays
from aiperf.paths import held

__all__ = ["Manifest", "stage", "stage_synthetic", "load_staged"]

# done, total, what: long work reports here (a Rich bar in the CLI, log lines in the flow).
OnProgress = Callable[[int, int, str], None]  # (done, total, what is being done)


def _no_progress(_done: int, _total: int, _what: str) -> None:
    pass


def stage(
    config: DataConfig,
    seed: int,
    folder: Path,
    *,
    client: Any | None = None,
    on_progress: OnProgress | None = None,
) -> Manifest:
    """Validate, convert or generate the data into `folder` (once), place it, return its manifest.

    `client` is a dask.distributed Client: shard work is spread over its workers and node-local
    copies are made on each of them. Without one, everything runs in this process."""
    progress = on_progress or _no_progress
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # Runs staging into one folder at once take turns: the second finds the data staged, and no
    # two write the same temporary file or shard.
    with held(folder / ".staging.lock"):
        return _stage(config, seed, folder, client, progress)


def _stage(
    config: DataConfig, seed: int, folder: Path, client: Any | None, progress: OnProgress
) -> Manifest:
    """`stage`, with the folder's staging lock held."""
    if config.kind == "synthetic":
        manifest = stage_synthetic(config, seed, folder)
    elif config.kind == "digits":
        manifest = stage_digits(config, seed, folder)
    elif config.kind == "folder":
        manifest = stage_folder(config, folder, client, progress)
    elif config.kind == "generated-imagenet":
        manifest = stage_generated(config, seed, folder, client, progress)
    else:
        manifest = stage_tfrecord(config, folder, client, progress)
    if config.stage_to:
        manifest = place(manifest, config.stage_to, client, progress)
    elif (
        manifest.format == "tfrecord" and manifest.stage_to
    ):  # an earlier run's node-local setting
        manifest = replace(manifest, stage_to=None, copies={})
        write_json_atomic(Path(manifest.path) / MANIFEST_FILE, manifest.to_dict())
    return manifest


def preflight(config: DataConfig) -> None:
    """The cheap checks, before any worker starts or anything is recorded: the source exists and
    has the right shape (folders and classes, or shard names), and digits can be loaded. Images
    are decoded later, by the workers that convert them."""
    if config.kind == "folder":
        from aiperf.data.folder import scan_folder

        scan_folder(config.source or "")
    elif config.kind == "tfrecord":
        _user_shards(Path(config.source or "").expanduser())
    elif config.kind == "digits":
        from aiperf.data.digits import load_digits_arrays

        load_digits_arrays()


# --- synthetic ---------------------------------------------------------------------------------


def settings_key(config: DataConfig, seed: int) -> str:
    """Generated data's identity: its settings (all but where it is copied) and the seed."""
    return hashlib.sha256(
        json.dumps(
            {"data": config.model_dump(exclude={"stage_to"}), "seed": seed}, sort_keys=True
        ).encode()
    ).hexdigest()[:16]


def stage_synthetic(config: DataConfig, seed: int, folder: Path) -> Manifest:
    """Generate the profile's synthetic data into `folder` (once) and return its manifest.

    A cached .npz is used again, but never on the word of the .json beside it: its arrays are
    loaded and digested, each image hashed, and the manifest (its sha256 the content digest, the
    classes in each split, the overlap check) is made from what the file holds."""
    folder.mkdir(parents=True, exist_ok=True)
    key = settings_key(config, seed)
    name = f"synthetic-{config.image_size}px-{config.classes}c-{key}"
    path = folder / f"{name}.npz"
    meta_path = folder / f"{name}.json"
    arrays = _cached_arrays(path)
    if arrays is None:
        arrays = synthetic.generate(config, seed)
        tmp = path.with_name(path.name + ".partial.npz")
        try:
            np.savez(
                tmp,
                x_train=arrays.x_train,
                y_train=arrays.y_train,
                x_val=arrays.x_val,
                y_val=arrays.y_val,
            )
            os.replace(tmp, path)  # a crash never leaves a file that looks complete
        finally:
            tmp.unlink(missing_ok=True)  # a full disk keeps no half-written file
    manifest = arrays_manifest(arrays, name, path, config.classes)
    write_json_atomic(meta_path, manifest.to_dict())  # for people; staging never reads it
    return manifest


def _cached_arrays(path: Path) -> ImageArrays | None:
    """The arrays of an earlier staging's .npz, or None when there is none or it does not load."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return ImageArrays(data["x_train"], data["y_train"], data["x_val"], data["y_val"])
    except (OSError, ValueError, KeyError):  # unreadable or not ours: made again
        return None


def arrays_manifest(arrays: ImageArrays, name: str, path: Path, classes: int) -> Manifest:
    """The manifest of synthetic arrays, every figure computed from the arrays themselves."""
    from aiperf.data.pins import arrays_digest, overlap, row_keys

    labels = (arrays.y_train, arrays.y_val)
    if any(len(y) and (int(y.min()) < 0 or int(y.max()) >= classes) for y in labels):
        raise DataError(str(path), [f"{path.name} holds labels outside 0..{classes - 1}"])
    counts = np.bincount(arrays.y_train, minlength=classes)
    val_counts = np.bincount(arrays.y_val, minlength=classes)
    return Manifest(
        name=name,
        kind="synthetic",
        path=str(path.resolve()),
        sha256=arrays_digest(
            [("train", arrays.x_train, arrays.y_train), ("validation", arrays.x_val, arrays.y_val)]
        ),
        size_bytes=path.stat().st_size,
        image_shape=arrays.image_shape,
        classes=classes,
        train_samples=len(arrays.y_train),
        val_samples=len(arrays.y_val),
        images_per_class={str(c): int(n) for c, n in enumerate(counts)},
        val_images_per_class={str(c): int(n) for c, n in enumerate(val_counts)},
        class_names=[str(c) for c in range(classes)],
        overlap=overlap(
            [("train", row_keys(arrays.x_train))], [("validation", row_keys(arrays.x_val))]
        ),
    )


@lru_cache(maxsize=2)
def load_staged(path: str) -> ImageArrays:
    """The staged arrays, read once per worker process and kept for its later trials."""
    with np.load(path) as data:
        return ImageArrays(data["x_train"], data["y_train"], data["x_val"], data["y_val"])


# --- sharded data: shared by digits, folder and tfrecord -----------------------------------------


def _image_shape(config: DataConfig) -> tuple[int, int, int]:
    return (config.image_size, config.image_size, config.channels)


def _sharded_manifest(
    *,
    config: DataConfig,
    name: str,
    kind: str,
    out: Path,
    source: str | None,
    class_names: list[str],
    shards: list[dict[str, Any]],
    label_offset: int,
    preprocess: str,
) -> Manifest:
    """Sum the shard entries into the manifest, write manifest.json last, drop stale files.

    `shards` are fresh scans (tfrecord.scan_shard): checksums, per-class counts and image keys read
    from the shard files now, so the dataset digest is recomputed, never copied from a sidecar."""
    from aiperf.data.pins import overlap

    shards = sorted(shards, key=lambda s: (s["split"] != "train", s["name"]))
    checked = overlap(
        [(s["name"], s["keys"]) for s in shards if s["split"] == "train"],
        [(s["name"], s["keys"]) for s in shards if s["split"] == "validation"],
    )
    per_split: dict[str, dict[str, int]] = {"train": {}, "validation": {}}
    for shard in shards:
        counts = per_split[shard["split"]]
        for label, n in shard["per_class"].items():
            cname = class_names[int(label)]
            counts[cname] = counts.get(cname, 0) + n
    entries = [
        {k: s[k] for k in ("split", "name", "file", "images", "size_bytes", "sha256")}
        for s in shards
    ]
    manifest = Manifest(
        name=name,
        kind=kind,
        path=str(out.resolve()),
        sha256=dataset_digest(entries),
        size_bytes=sum(s["size_bytes"] for s in entries),
        image_shape=_image_shape(config),
        classes=len(class_names),
        train_samples=sum(s["images"] for s in entries if s["split"] == "train"),
        val_samples=sum(s["images"] for s in entries if s["split"] == "validation"),
        images_per_class={c: per_split["train"].get(c, 0) for c in class_names},
        val_images_per_class={c: per_split["validation"].get(c, 0) for c in class_names},
        format="tfrecord",
        source=source,
        class_names=class_names,
        label_offset=label_offset,
        preprocess=preprocess,
        shards=entries,
        overlap=checked,
    )
    write_json_atomic(out / MANIFEST_FILE, manifest.to_dict())
    keep = (
        {MANIFEST_FILE, "checks"}
        | {s["file"] for s in entries}
        | {s["file"] + ".json" for s in entries}
    )
    for stale in out.iterdir():  # shards of an earlier plan (another shard size) and leftovers
        if stale.name not in keep and stale.is_file():
            stale.unlink(missing_ok=True)
    return manifest


def _run(client: Any | None, fn: Callable[[Any], dict], tasks: list[Any]) -> Iterator[dict]:
    """Each task's result as it finishes: on the Dask workers, or here in order."""
    if client is None:
        for task in tasks:
            yield fn(task)
        return
    from distributed import as_completed

    futures = client.map(fn, tasks, pure=False)
    for future in as_completed(futures, loop=client.loop):
        yield future.result()


def _collect(
    results: Iterable[dict],
    total: int,
    weight: Callable[[dict], int],
    what: str,
    progress: OnProgress,
) -> tuple[list[dict], list[str]]:
    done, shards, problems = 0, [], []
    progress(0, total, what)
    for result in results:
        done += weight(result)
        progress(done, total, what)
        if result["problems"]:
            problems.extend(result["problems"])
        else:
            shards.append(result)
    return shards, problems


def _scan(
    out: Path,
    shards: list[dict[str, Any]],
    classes: int,
    label_offset: int,
    client: Any | None,
    progress: OnProgress,
) -> list[dict[str, Any]]:
    """Read every shard afresh on the workers (tfrecord.scan_shard): their checksums, per-class
    counts and image keys. A shard that cannot be read is a DataError."""
    from aiperf.data.tfrecord import ScanTask, scan_shard

    tasks = [
        ScanTask(
            path=shard_path(out, s),
            name=s["name"],
            split=s["split"],
            file=s["file"],
            label_offset=label_offset,
            classes=classes,
        )
        for s in shards
    ]
    scans, problems = _collect(
        _run(client, scan_shard, tasks), len(tasks), lambda _r: 1, "hashing images", progress
    )
    if problems:
        raise DataError(str(out), sorted(problems))
    return scans


def _name(prefix: str, source: Path) -> str:
    return (
        f"{prefix}-{source.name or 'root'}-{hashlib.sha256(str(source).encode()).hexdigest()[:10]}"
    )


# --- digits --------------------------------------------------------------------------------------


def stage_digits(config: DataConfig, seed: int, folder: Path) -> Manifest:
    from aiperf.data import digits

    name = f"digits-{config.train_samples}-{config.val_samples}-seed{seed}"
    out = folder / name
    classes = len(digits.CLASS_NAMES)
    scans = _intact(out, classes, 1, None, _no_progress)
    if scans is None:
        out.mkdir(parents=True, exist_ok=True)
        entries = digits.write_shards(out, seed, config.train_samples, config.val_samples)
        scans = _scan(out, entries, classes, 1, None, _no_progress)
    return _sharded_manifest(
        config=config,
        name=name,
        kind="digits",
        out=out,
        source="sklearn.datasets.load_digits",
        class_names=digits.CLASS_NAMES,
        shards=scans,
        label_offset=1,
        preprocess="resize",
    )


def _intact(
    out: Path, classes: int, label_offset: int, client: Any | None, progress: OnProgress
) -> list[dict[str, Any]] | None:
    """Fresh scans of a finished staging's shards, when every one is there with the checksum its
    manifest.json lists (None: stage it again). The manifest only says which shards to read and
    whether they changed; what is recorded comes from the scans."""
    if not (out / MANIFEST_FILE).is_file():
        return None
    try:
        listed = read_manifest(out)["shards"]
    except (ValueError, KeyError, TypeError):
        return None
    if not all(Path(shard_path(out, s)).is_file() for s in listed):
        return None
    try:
        scans = _scan(out, listed, classes, label_offset, client, progress)
    except DataError:
        return None
    by_name = {s["name"]: s["sha256"] for s in listed}
    if any(by_name.get(s["name"]) != s["sha256"] for s in scans):
        return None
    return scans


# --- generated, ImageNet-shaped -----------------------------------------------------------------


def stage_generated(
    config: DataConfig, seed: int, folder: Path, client: Any | None, progress: OnProgress
) -> Manifest:
    """JPEG-encoded ImageNet-format shards generated from the settings and the seed, made on the
    workers (aiperf/data/generated.py), kept in a folder named by both: a later staging of the
    same settings and seed finds them, checks their checksums and makes only what is missing."""
    from aiperf.data import generated
    from aiperf.data.tfrecord import IMAGENET_LABEL_OFFSET

    key = settings_key(config, seed)
    name = f"generated-imagenet-{config.image_size}px-{config.classes}c-{key}"
    out = folder / name
    scans = _intact(out, config.classes, IMAGENET_LABEL_OFFSET, client, progress)
    if scans is None:
        scans = _generate(config, seed, key, out, client, progress)
    return _sharded_manifest(
        config=config,
        name=name,
        kind="generated-imagenet",
        out=out,
        source=f"aiperf.data.generated, seed {seed}",
        class_names=generated.class_names(config.classes),
        shards=scans,
        label_offset=IMAGENET_LABEL_OFFSET,
        preprocess="imagenet",
    )


def _generate(
    config: DataConfig, seed: int, key: str, out: Path, client: Any | None, progress: OnProgress
) -> list[dict[str, Any]]:
    """Make the generated shards (those not made before) and scan them."""
    from aiperf.data import generated
    from aiperf.data.tfrecord import IMAGENET_LABEL_OFFSET

    out.mkdir(parents=True, exist_ok=True)
    tasks = generated.plan(
        out,
        key,
        seed,
        train_samples=config.train_samples,
        val_samples=config.val_samples,
        image_size=config.image_size,
        channels=config.channels,
        classes=config.classes,
        shard_images=config.shard_images,
        noise=config.noise,
        label_noise=config.label_noise,
    )
    shards, _problems = _collect(
        _run(client, generated.generate_shard, tasks),
        config.train_samples + config.val_samples,
        lambda r: int(r["images"]),
        "generating JPEG shards",
        progress,
    )
    return _scan(out, shards, config.classes, IMAGENET_LABEL_OFFSET, client, progress)


# --- an ImageNet-layout image folder ------------------------------------------------------------


def stage_folder(
    config: DataConfig, folder: Path, client: Any | None, progress: OnProgress
) -> Manifest:
    from aiperf.data.folder import scan_folder
    from aiperf.data.tfrecord import ConvertTask, convert_shard

    assert config.source is not None
    layout = scan_folder(config.source)  # structural problems stop here, before any work
    name = _name("folder", layout.root)
    out = folder / name
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for split, files in layout.files.items():
        # A fixed shuffle spreads every class over the shards; the plan depends only on the files.
        order = np.random.default_rng(0).permutation(len(files))
        shuffled = [files[i] for i in order]
        total = -(-len(shuffled) // config.shard_images)
        size = -(-len(shuffled) // total)
        for index in range(total):
            tasks.append(
                ConvertTask(
                    root=str(layout.root),
                    out=str(out),
                    split=split,
                    index=index,
                    total=total,
                    files=shuffled[index * size : (index + 1) * size],
                    class_names=layout.class_names,
                )
            )
    sizes = {t.name: len(t.files) for t in tasks}
    shards, problems = _collect(
        _run(client, convert_shard, tasks),
        sum(sizes.values()),
        lambda r: sizes[r["name"]],
        "checking and converting images",
        progress,
    )
    if problems:
        (out / MANIFEST_FILE).unlink(
            missing_ok=True
        )  # what is staged no longer matches the source
        raise DataError(config.source, sorted(problems))
    shards = _scan(out, shards, len(layout.class_names), 1, client, progress)
    return _sharded_manifest(
        config=config,
        name=name,
        kind="folder",
        out=out,
        source=str(layout.root),
        class_names=layout.class_names,
        shards=shards,
        label_offset=1,
        preprocess="imagenet",
    )


# --- TFRecord shards the user brought ---------------------------------------------------------


def _user_shards(source: Path) -> dict[str, list[Path]]:
    if not source.is_dir():
        raise DataError(
            str(source),
            [
                f"folder {source} does not exist; give the folder that holds the "
                "train-*-of-* and validation-*-of-* TFRecord shards"
            ],
        )
    from aiperf.data.folder import shown_name

    # Regular files only (is_file follows links; a FIFO or device is never opened), named in UTF-8.
    files = [p for p in sorted(source.iterdir()) if p.is_file() and not p.name.startswith(".")]
    bad = [p.name for p in files if p.name != p.name.encode("utf-8", "replace").decode()]
    if bad:
        raise DataError(
            str(source),
            [f"{shown_name(name)} has a name that is not UTF-8; rename it" for name in bad],
        )
    found = {
        "train": [p for p in files if p.name.startswith("train-")],
        "validation": [p for p in files if p.name.startswith(("validation-", "val-"))],
    }
    missing = [split for split, paths in found.items() if not paths]
    if missing:
        raise DataError(
            str(source),
            [
                f"{source} has no {split}-* shards (ImageNet shards are named "
                f"train-00000-of-01024 and validation-00000-of-00128)"
                for split in missing
            ],
        )
    return found


def stage_tfrecord(
    config: DataConfig, folder: Path, client: Any | None, progress: OnProgress
) -> Manifest:
    """Check the user's shards in place (no copy, unless stage_to asks for node-local ones)."""
    from aiperf.data.tfrecord import CheckTask, check_shard

    assert config.source is not None
    source = Path(config.source).expanduser().resolve()
    found = _user_shards(source)
    name = _name("tfrecord", source)
    out = folder / name
    (out / "checks").mkdir(parents=True, exist_ok=True)
    tasks = [
        CheckTask(
            path=str(p),
            split=split,
            classes=config.classes,
            label_offset=config.label_offset,
            checks=str(out / "checks"),
        )
        for split, paths in found.items()
        for p in paths
    ]
    sizes = {t.path: Path(t.path).stat().st_size for t in tasks}
    shards, problems = _collect(
        _run(client, check_shard, tasks),
        sum(sizes.values()),
        lambda r: sizes[str(source / r["name"])],
        "checking shards",
        progress,
    )
    if problems:
        (out / MANIFEST_FILE).unlink(missing_ok=True)
        raise DataError(config.source, problems)
    synsets: dict[str, str] = {}
    for shard in shards:
        for label, synset in shard.get("synsets", {}).items():
            synsets.setdefault(label, synset)
    class_names = [synsets.get(str(i)) or str(i) for i in range(config.classes)]
    if len(set(class_names)) != len(class_names):
        class_names = [str(i) for i in range(config.classes)]
    train_labels = {label for s in shards if s["split"] == "train" for label in s["per_class"]}
    val_labels = {label for s in shards if s["split"] == "validation" for label in s["per_class"]}
    if val_labels - train_labels:
        raise DataError(
            config.source,
            [
                f"validation shards hold classes that no train shard holds (labels "
                f"{', '.join(sorted(val_labels - train_labels, key=int)[:10])}, from 0)"
            ],
        )
    return _sharded_manifest(
        config=config,
        name=name,
        kind="tfrecord",
        out=out,
        source=str(source),
        class_names=class_names,
        shards=shards,
        label_offset=config.label_offset,
        preprocess="imagenet",
    )


# --- node-local copies --------------------------------------------------------------------------


def place(manifest: Manifest, stage_to: str, client: Any | None, progress: OnProgress) -> Manifest:
    """Copy the staged files to `stage_to/<name>` on every node, checksums verified there: one
    copy per node, shared by its workers (placement.node_copy). `copies` names each node's copy
    by the worker that made it: worker -> "host:path".

    Sharded data keeps its shared path in the manifest, which now names `stage_to`: trials open
    the node-local copy (a worker that joins later makes its node's; see placement.local_copy).
    An .npz (synthetic data) is small: its path becomes the node-local copy."""
    from aiperf.data.placement import copy_plan, place_on_nodes

    token = uuid.uuid4().hex  # this staging: a node's copy is verified once in it
    what = f"copying to {stage_to} on every node"
    if manifest.format == "npz":
        dest = str(Path(stage_to) / manifest.name)
        files = [
            {
                "src": manifest.path,
                "file": Path(manifest.path).name,
                "sha256": sha256_file(
                    manifest.path
                ),  # the file's; manifest.sha256 is its content's
                "size_bytes": manifest.size_bytes,
            }
        ]
        progress(0, len(files), what)
        done = place_on_nodes(files, dest, None, client, token, manifest.sha256)
        progress(len(files), len(files), what)
        return replace(
            manifest,
            path=str(Path(dest) / Path(manifest.path).name),
            stage_to=stage_to,
            copies=_node_copies(done),
        )
    shared = replace(manifest, stage_to=stage_to)
    write_json_atomic(Path(manifest.path) / MANIFEST_FILE, shared.to_dict())
    dest, files, local = copy_plan(manifest.path, shared.to_dict())
    progress(0, len(files), what)
    done = place_on_nodes(files, dest, local, client, token, manifest.sha256)
    progress(len(files), len(files), what)
    return replace(shared, copies=_node_copies(done))


def _node_copies(done: dict[str, dict[str, Any]]) -> dict[str, str]:
    """worker -> "host:path" for the worker that made (and verified) each node's copy."""
    return {str(worker): f"{r['host']}:{r['path']}" for worker, r in done.items() if r["made"]}
