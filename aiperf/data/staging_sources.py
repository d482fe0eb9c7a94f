"""The sharded kinds of staged data, one function each: scikit-learn's digits and generated
ImageNet-format shards (made from the seed), an ImageNet-layout image folder (checked and
converted on the workers) and TFRecord shards the user brought (checked in place). Each ends in
the manifest aiperf.data.staging_shards sums from fresh scans.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.manifest import MANIFEST_FILE, Manifest
from aiperf.data.problems import DataError
from aiperf.data.scan_cache import ScanCache
from aiperf.data.staging_npz import settings_key
from aiperf.data.staging_shards import (
    OnProgress,
    Origin,
    cached_or_read,
    collect,
    intact_shards,
    no_progress,
    run_tasks,
    scan_shards,
    sharded_manifest,
    source_name,
)

log = logging.getLogger(__name__)

# --- digits --------------------------------------------------------------------------------------


def stage_digits(config: DataConfig, seed: int, folder: Path) -> Manifest:
    from aiperf.data import digits

    name = f"digits-{config.train_samples}-{config.val_samples}-seed{seed}"
    out = folder / name
    classes = len(digits.CLASS_NAMES)
    scans = intact_shards(out, classes, 1, no_progress)
    if scans is None:
        out.mkdir(parents=True, exist_ok=True)
        entries = digits.write_shards(out, seed, config.train_samples, config.val_samples)
        scans = scan_shards(out, entries, classes, 1, no_progress)
    return sharded_manifest(
        config=config,
        name=name,
        origin=Origin(
            kind="digits",
            source="sklearn.datasets.load_digits",
            label_offset=1,
            preprocess="resize",
        ),
        out=out,
        class_names=digits.CLASS_NAMES,
        shards=scans,
    )


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
    scans = intact_shards(out, config.classes, IMAGENET_LABEL_OFFSET, progress)
    if scans is None:
        scans = _generate(config, seed, key, out, client, progress)
    return sharded_manifest(
        config=config,
        name=name,
        origin=Origin(
            kind="generated-imagenet",
            source=f"aiperf.data.generated, seed {seed}",
            label_offset=IMAGENET_LABEL_OFFSET,
            preprocess="imagenet",
        ),
        out=out,
        class_names=generated.class_names(config.classes),
        shards=scans,
    )


def _generate(
    config: DataConfig, seed: int, key: str, out: Path, client: Any | None, progress: OnProgress
) -> list[dict[str, Any]]:
    """Make the generated shards (those not made before) and scan them."""
    from aiperf.data import generated
    from aiperf.data.tfrecord import IMAGENET_LABEL_OFFSET

    out.mkdir(parents=True, exist_ok=True)
    tasks = generated.plan(out, key, seed, config)
    shards, _problems = collect(
        run_tasks(client, generated.generate_shard, tasks),
        config.train_samples + config.val_samples,
        lambda r: int(r["images"]),
        "generating JPEG shards",
        progress,
    )
    return scan_shards(out, shards, config.classes, IMAGENET_LABEL_OFFSET, progress)


# --- an ImageNet-layout image folder ------------------------------------------------------------


def stage_folder(
    config: DataConfig, folder: Path, client: Any | None, progress: OnProgress
) -> Manifest:
    from aiperf.data.folder import scan_folder
    from aiperf.data.tfrecord import ConvertTask, convert_shard

    assert config.source is not None
    layout = scan_folder(config.source)  # structural problems stop here, before any work
    name = source_name("folder", layout.root)
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
    shards, problems = collect(
        run_tasks(client, convert_shard, tasks),
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
    shards = scan_shards(out, shards, len(layout.class_names), 1, progress)
    return sharded_manifest(
        config=config,
        name=name,
        origin=Origin(
            kind="folder", source=str(layout.root), label_offset=1, preprocess="imagenet"
        ),
        out=out,
        class_names=layout.class_names,
        shards=shards,
    )


# --- TFRecord shards the user brought ---------------------------------------------------------


def user_shards(source: Path) -> dict[str, list[Path]]:
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


def check_user_shards(
    config: DataConfig, found: dict[str, list[Path]], out: Path, progress: OnProgress
) -> list[dict[str, Any]]:
    """Each shard's check (tfrecord.check_shard). A shard unchanged since it was checked (the
    folder's scan cache, aiperf.data.scan_cache) is not read again; the others are read and their
    images decoded on every core of this node, in processes of their own, so TensorFlow's decoder
    does not enter this one (staging_shards.on_every_core). Problems are a DataError."""
    from aiperf.data.tfrecord import CheckTask, check_shard

    assert config.source is not None
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
    cache = ScanCache(out)
    settings = {"read": "check", "classes": config.classes, "label_offset": config.label_offset}
    kept, todo, fresh = cached_or_read(cache, settings, check_shard, tasks, tensorflow=True)
    sizes = {Path(t.path).name: Path(t.path).stat().st_size for t in todo}
    checked, problems = collect(
        fresh, sum(sizes.values()), lambda r: sizes[r["name"]], "checking shards", progress
    )
    cache.save()
    log.info("%d shards checked, %d unchanged since they were checked", len(todo), len(kept))
    if problems:
        (out / MANIFEST_FILE).unlink(missing_ok=True)
        raise DataError(config.source, problems)
    return kept + checked


def stage_tfrecord(
    config: DataConfig, folder: Path, client: Any | None, progress: OnProgress
) -> Manifest:
    """Check the user's shards in place (no copy, unless stage_to asks for node-local ones), each
    once (check_user_shards). `client` is unused: a GPU node's one worker would check them on
    one core, and bring TensorFlow into the process that holds the GPUs. So the checks run where
    the run's flow runs, on that machine's cores: on a job queue (SLURM) whose flow runs on a login
    node, that is the login node's cores and its view of the files (docs/performance.md, staging);
    there, run `aiperf stage SOURCE --to OUT/data` in a job on a compute node first, and the run
    finds the shards checked (the folder's scan cache) and reads none again."""
    del client
    assert config.source is not None
    source = Path(config.source).expanduser().resolve()
    found = user_shards(source)
    name = source_name("tfrecord", source)
    out = folder / name
    shards = check_user_shards(config, found, out, progress)
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
    return sharded_manifest(
        config=config,
        name=name,
        origin=Origin(
            kind="tfrecord",
            source=str(source),
            label_offset=config.label_offset,
            preprocess="imagenet",
        ),
        out=out,
        class_names=class_names,
        shards=shards,
    )
