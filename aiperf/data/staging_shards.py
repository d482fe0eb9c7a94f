"""What every sharded kind of staged data shares (digits, generated, folder, tfrecord): running
shard tasks on the Dask workers (or here), or on every core of this node (on_every_core),
collecting their results with progress, scanning the shards changed since the folder's scan cache
last saw them (aiperf.data.scan_cache), checking an earlier staging is intact, and summing the
scans into the manifest.
The kinds themselves are aiperf.data.staging_sources; the entry point is aiperf.data.staging.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from aiperf.config import DataConfig
from aiperf.data.manifest import (
    MANIFEST_FILE,
    Manifest,
    dataset_digest,
    read_manifest,
    shard_path,
    write_json_atomic,
)
from aiperf.data.problems import DataError
from aiperf.data.scan_cache import CACHE_FILE, ScanCache, read_noting_identity
from aiperf.data.shard_scan import ScanTask, scan_shard

log = logging.getLogger(__name__)

PROCESS_BYTES = 256 << 20  # of shards to read, for each process that reads them
# Processes that import TensorFlow (the decode checks): each holds ~0.5 GB and takes seconds to
# start, and its decodes run on threads of their own (CheckTask.threads), so a few processes with
# the cores shared among them use the node as well as one per core would.
MAX_TENSORFLOW_PROCESSES = 8

# done, total, what: long work reports here (a Rich bar in the CLI, log lines in the flow).
OnProgress = Callable[[int, int, str], None]  # (done, total, what is being done)


def no_progress(_done: int, _total: int, _what: str) -> None:
    pass


def _image_shape(config: DataConfig) -> tuple[int, int, int]:
    return (config.image_size, config.image_size, config.channels)


@dataclasses.dataclass(frozen=True)
class Origin:
    """What a sharded kind of staged data says of itself in its manifest: its kind, where it came
    from (`source`), the offset of its stored labels (a stored label less `label_offset` is the
    class's index), and how the input pipeline prepares its images (`preprocess`: "imagenet" or
    "resize", aiperf.data.pipeline.preprocess)."""

    kind: str
    source: str | None
    label_offset: int
    preprocess: str


def sharded_manifest(
    *,
    config: DataConfig,
    name: str,
    origin: Origin,
    out: Path,
    class_names: list[str],
    shards: list[dict[str, Any]],
) -> Manifest:
    """Sum the shard entries into the manifest, write manifest.json last, drop stale files.

    `shards` are scans (shard_scan.scan_shard, tfrecord.check_shard): checksums, per-class counts
    and image keys read from the shard files, now or (scan cache) while unchanged since."""
    from aiperf.data.pins import overlap

    shards = sorted(shards, key=lambda s: (s["split"] != "train", s["name"]))
    checked = overlap(
        [(s["name"], s["keys"]) for s in shards if s["split"] == "train"],
        [(s["name"], s["keys"]) for s in shards if s["split"] == "validation"],
    )
    per_split = _per_class(shards, class_names)
    entries = [
        {k: s[k] for k in ("split", "name", "file", "images", "size_bytes", "sha256")}
        for s in shards
    ]
    manifest = Manifest(
        name=name,
        kind=origin.kind,
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
        source=origin.source,
        class_names=class_names,
        label_offset=origin.label_offset,
        preprocess=origin.preprocess,
        shards=entries,
        overlap=checked,
    )
    write_json_atomic(out / MANIFEST_FILE, manifest.to_dict())
    _drop_stale(out, entries)
    return manifest


def _per_class(shards: list[dict[str, Any]], class_names: list[str]) -> dict[str, dict[str, int]]:
    """Images per class name in each split, summed over the shards' scans."""
    per_split: dict[str, dict[str, int]] = {"train": {}, "validation": {}}
    for shard in shards:
        counts = per_split[shard["split"]]
        for label, n in shard["per_class"].items():
            cname = class_names[int(label)]
            counts[cname] = counts.get(cname, 0) + n
    return per_split


def _drop_stale(out: Path, entries: list[dict[str, Any]]) -> None:
    """Delete the files in `out` that are no part of this staging: shards of an earlier plan
    (another shard size) and leftovers; the manifest, checks, scan cache and shards stay."""
    keep = (
        {MANIFEST_FILE, "checks", CACHE_FILE}
        | {s["file"] for s in entries}
        | {s["file"] + ".json" for s in entries}
    )
    for stale in out.iterdir():
        if stale.name not in keep and stale.is_file():
            stale.unlink(missing_ok=True)


def run_tasks(client: Any | None, fn: Callable[[Any], dict], tasks: list[Any]) -> Iterator[dict]:
    """Each task's result as it finishes: on the Dask workers, or here in order."""
    if client is None:
        for task in tasks:
            yield fn(task)
        return
    from distributed import as_completed

    futures = client.map(fn, tasks, pure=False)
    for future in as_completed(futures, loop=client.loop):
        yield future.result()


def collect(
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


def node_cores() -> int:
    """The cores this process may run on: every core of the node, unless it is pinned."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan_workers(cores: int, tasks: int, size: int, *, tensorflow: bool) -> tuple[int, int]:
    """How many processes read `tasks` files of `size` bytes in all on `cores` cores, and how many
    threads each task may use (a CheckTask's decode threads): one process per PROCESS_BYTES, at
    most one per core and task, at most MAX_TENSORFLOW_PROCESSES for TensorFlow work, and the cores
    shared among them, so the node runs about one thread per core rather than cores x cores."""
    processes = max(1, min(cores, tasks, 1 + size // PROCESS_BYTES))
    if tensorflow:
        processes = min(processes, MAX_TENSORFLOW_PROCESSES)
    return processes, max(1, cores // processes)


def on_every_core(
    fn: Callable[[Any], Any], tasks: list[Any], *, tensorflow: bool = False
) -> Iterator[Any]:
    """Each task's result as it finishes, the tasks (each reading the file at its `path`) spread
    over this node's cores (plan_workers; a task with a `threads` field gets its share of them).
    Reading a record is Python that holds the GIL, about half of a scan, so threads would use two
    cores at most: large reads run in fresh 'spawn' processes (never forked: this process has
    threads), as a process costs about a second to start. Work that imports TensorFlow
    (`tensorflow`: the decode checks) runs in such processes, so TensorFlow does not enter this
    one, except where processes cannot be: in a daemonic process (a Dask worker's, which may have
    no children) every task runs here on threads, TensorFlow included. Threads here too where
    processes gain nothing: small reads, and TensorFlow work in a process that has TensorFlow
    already (a test's)."""
    if not tasks:
        return
    cores = node_cores()
    size = sum(os.path.getsize(task.path) for task in tasks)
    processes, _ = plan_workers(cores, len(tasks), size, tensorflow=tensorflow)
    spawn = "tensorflow" not in sys.modules if tensorflow else processes > 1
    if spawn and multiprocessing.current_process().daemon:
        log.warning("staging in a daemonic process: it reads the shards itself, on threads")
        spawn = False
    workers = processes if spawn else min(cores, len(tasks))
    share = max(1, cores // workers)
    tasks = [
        dataclasses.replace(task, threads=share) if hasattr(task, "threads") else task
        for task in tasks
    ]
    pool: Executor = (
        ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        if spawn
        else ThreadPoolExecutor(workers, thread_name_prefix="aiperf-staging")
    )
    with pool:
        futures = [pool.submit(fn, task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()


def cached_or_read(
    cache: ScanCache,
    settings: dict[str, Any],
    fn: Callable[[Any], dict],
    tasks: list[Any],
    *,
    tensorflow: bool = False,
) -> tuple[list[dict], list[Any], Iterator[dict]]:
    """The kept results of the tasks whose files are unchanged (each merged with its task's name,
    split and file), the tasks left to read, and their results as they are read on every core
    (each good one kept in `cache`; save it when they are all read)."""
    kept, todo = [], []
    for task in tasks:
        hit = cache.get(task.path, settings)
        if hit is None:
            todo.append(task)
        else:
            where = {k: getattr(task, k) for k in ("name", "split", "file") if hasattr(task, k)}
            kept.append({**hit, **where, "problems": [], "skipped": True})

    def read() -> Iterator[dict]:
        noted = functools.partial(read_noting_identity, fn)
        for path, identity, read_ns, result in on_every_core(noted, todo, tensorflow=tensorflow):
            if not result["problems"]:
                cache.put(path, settings, identity, read_ns, result)
            yield result

    return kept, todo, read()


def scan_shards(
    out: Path,
    shards: list[dict[str, Any]],
    classes: int,
    label_offset: int,
    progress: OnProgress,
) -> list[dict[str, Any]]:
    """Every shard's checksum, per-class counts and image keys (shard_scan.scan_shard): read on
    every core of this node, without TensorFlow, for the shards changed since the folder's scan
    cache (aiperf.data.scan_cache) last saw them; kept there for the unchanged. A shard that
    cannot be read is a DataError."""
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
    cache = ScanCache(out)
    settings = {"read": "scan", "classes": classes, "label_offset": label_offset}
    kept, todo, fresh = cached_or_read(cache, settings, scan_shard, tasks)
    scans, problems = collect(fresh, len(todo), lambda _r: 1, "hashing images", progress)
    cache.save()
    log.info("%d shards read, %d unchanged since they were read", len(todo), len(kept))
    if problems:
        raise DataError(str(out), sorted(problems))
    return kept + scans


def source_name(prefix: str, source: Path) -> str:
    return (
        f"{prefix}-{source.name or 'root'}-{hashlib.sha256(str(source).encode()).hexdigest()[:10]}"
    )


def intact_shards(
    out: Path, classes: int, label_offset: int, progress: OnProgress
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
        scans = scan_shards(out, listed, classes, label_offset, progress)
    except DataError:
        return None
    by_name = {s["name"]: s["sha256"] for s in listed}
    if any(by_name.get(s["name"]) != s["sha256"] for s in scans):
        return None
    return scans
