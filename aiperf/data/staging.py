"""Stage a dataset where every worker can read it, and describe it in a manifest.

One entry point, `stage(config.data, seed, folder, client=...)`, for every kind of data:

- synthetic: generated from the seed into one .npz named by its settings;
- digits: scikit-learn's digits, split by the seed, written as TFRecord shards;
- folder: an ImageNet-layout image folder, checked, then converted to TFRecord shards in
  parallel on the Dask workers (each shard's images are decode-checked where they are written);
- tfrecord: ImageNet-format shards the user brought, each read and checked on the workers;
- generated-imagenet: JPEG-encoded TFRecord shards in ImageNet's format, generated from the seed
  in parallel on the Dask workers (aiperf/data/generated.py);
- synthetic-text, text and enwik8: uint16 token shards for language models
  (aiperf/data/staging_tokens.py).

Work already done is skipped: a shard whose inputs and checksum match its stored record is not
rewritten, a user shard with a known checksum is not decoded again, and a shard unchanged since a
staging read it (its size, times and inode in the folder's scans.json, aiperf.data.scan_cache) is
not read again. Shards are read without TensorFlow (aiperf.data.shard_scan) on every core of the
node that stages; a user's images are decoded in processes of their own. With `data.stage_to`, each
node then gets one copy of the shards at that node-local path, checksums verified there, shared by
its workers, and the trials read that copy. The staged folder's manifest.json is written last;
without it a staged folder is unfinished and never read.

This module is the entry point and the node-local copies; the kinds live in staging_npz (synthetic)
and staging_sources (the sharded ones), on what they share in staging_shards.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiperf.config import TOKEN_KINDS, DataConfig
from aiperf.data.manifest import MANIFEST_FILE, Manifest, sha256_file, write_json_atomic
from aiperf.data.staging_npz import stage_synthetic
from aiperf.data.staging_shards import OnProgress, no_progress
from aiperf.data.staging_sources import (
    stage_digits,
    stage_folder,
    stage_generated,
    stage_tfrecord,
    user_shards,
)
from aiperf.data.staging_tokens import stage_tokens
from aiperf.paths import held

__all__ = ["Manifest", "OnProgress", "preflight", "stage"]


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
    progress = on_progress or no_progress
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
    elif config.kind in TOKEN_KINDS:
        manifest = stage_tokens(config, seed, folder)
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
        user_shards(Path(config.source or "").expanduser())
    elif config.kind == "text":
        from aiperf.data.text_folder import text_files

        text_files(config.source or "")
    elif config.kind == "enwik8":
        from aiperf.data.enwik8 import check_source

        check_source(config.source or "")
    elif config.kind == "digits":
        from aiperf.data.digits import load_digits_arrays

        load_digits_arrays()


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
