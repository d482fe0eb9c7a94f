"""Node-local copies: at scale every worker reads the shards from its own disk, not from the shared
file system. Each node gets one copy of the staged files at the same path (`stage_to`), checksums
verified there, shared by every worker of that node.

Staging asks every worker of the cluster for its node's copy. The workers of one node take turns
on a file lock beside the copy (flock, local to the node, and released if its holder dies): the
first to hold it in a staging copies and verifies every checksum (re-copying any file whose
checksum does not match), then records that staging's token in the copy's marker; the others
find the token there and reuse the copy without reading it again. One copy per node, verified
once per staging, whatever the number of workers per node (one per GPU, or per core).

A worker that joins later (adaptive scaling, a job replaced at the end of its walltime) makes its
node's copy when its first trial opens the data (`local_copy`), under the same lock, so trials
always read node-local shards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from aiperf.cluster.broadcast import on_every_worker
from aiperf.data.manifest import (
    MANIFEST_FILE,
    read_manifest,
    sha256_file,
    shard_path,
    write_json_atomic,
)
from aiperf.errors import not_enough_space
from aiperf.paths import held

LOCK_FILE = ".copy.lock"  # in the copy's folder: the workers of a node take turns on it
MARKER_FILE = ".verified"  # in the copy's folder: the staging that last verified it
COPY_ATTEMPTS = 2  # a copy whose checksum does not match is copied once more before it fails


def copy_verified(
    files: list[dict[str, Any]], dest: str, manifest: dict[str, Any] | None
) -> dict[str, Any]:
    """Copy each {src, file, sha256, size_bytes} into dest, verify, then write the copy's
    manifest.json (last, so a half-made copy is never read). A file already there with the right
    checksum is kept; one with another is copied again. Call it with the node's lock held."""
    target_dir = Path(dest)
    target_dir.mkdir(parents=True, exist_ok=True)
    missing = [
        entry
        for entry in files
        if not (
            (target_dir / entry["file"]).is_file()
            and (target_dir / entry["file"]).stat().st_size == entry["size_bytes"]
            and sha256_file(target_dir / entry["file"]) == entry["sha256"]
        )
    ]
    # Before the first byte: a node whose disk cannot hold the copy is named, not filled.
    needed = sum(int(entry["size_bytes"]) for entry in missing)
    where = f"the node-local copy on {socket.gethostname()}"
    problem = not_enough_space(target_dir, needed, where, "data.stage_to")
    if problem is not None:
        raise problem
    for entry in missing:
        _copy_checked(entry, target_dir / entry["file"])
    copied, skipped = len(missing), len(files) - len(missing)
    if manifest is not None:
        write_json_atomic(target_dir / MANIFEST_FILE, manifest)
    return {
        "host": socket.gethostname(),
        "path": str(target_dir),
        "copied": copied,
        "skipped": skipped,
    }


def _copy_checked(entry: dict[str, Any], target: Path) -> None:
    """One file into place through a temporary name, its checksum checked before the rename. A
    mismatch (a flaky read of the shared file system) is copied again; a second one fails."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        for attempt in range(1, COPY_ATTEMPTS + 1):
            shutil.copyfile(entry["src"], tmp)
            found = sha256_file(tmp)
            if found == entry["sha256"]:
                os.replace(tmp, target)
                return
            if attempt == COPY_ATTEMPTS:
                raise OSError(
                    f"the copy of {entry['src']} in {target.parent} on {socket.gethostname()} has "
                    f"checksum {found[:12]}, not {entry['sha256'][:12]}, {attempt} times; check "
                    "the disk and stage again"
                )
    finally:
        tmp.unlink(missing_ok=True)


def _marker(dest: Path) -> dict[str, Any]:
    try:
        return json.loads((dest / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return {}


def node_copy(
    files: list[dict[str, Any]],
    dest: str,
    manifest: dict[str, Any] | None,
    token: str,
    digest: str,
) -> dict[str, Any]:
    """Runs on a worker: its node's copy for the staging `token` of the dataset `digest`. The first
    worker of the node to hold the lock in this staging copies and verifies (`made` True); the others
    find the staging's token in the marker and reuse that copy (`made` False)."""
    folder = Path(dest)
    folder.mkdir(parents=True, exist_ok=True)
    with held(folder / LOCK_FILE):
        marker = _marker(folder)
        if marker.get("token") == token and marker.get("sha256") == digest:
            return {
                "host": socket.gethostname(),
                "path": str(folder),
                "copied": 0,
                "skipped": len(files),
                "made": False,
            }
        (folder / MARKER_FILE).unlink(missing_ok=True)  # not verified until every file is
        done = copy_verified(files, dest, manifest)
        write_json_atomic(folder / MARKER_FILE, {"token": token, "sha256": digest})
    return {**done, "made": True}


def place_on_nodes(
    files: list[dict[str, Any]],
    dest: str,
    manifest: dict[str, Any] | None,
    client: Any | None,
    token: str,
    digest: str,
) -> dict[str, dict[str, Any]]:
    """Every worker of the Dask client (or this process, without one) gets its node's copy:
    worker -> what it did. Exactly one worker per node has `made` True."""
    if client is None:
        return {"local": node_copy(files, dest, manifest, token, digest)}
    return on_every_worker(client, node_copy, files, dest, manifest, token, digest)


def copy_plan(
    shared: str, manifest: dict[str, Any]
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(node-local folder, files to copy, the copy's manifest) for a staged folder with stage_to."""
    dest = str(Path(manifest["stage_to"]) / manifest["name"])
    files = [
        {
            "src": shard_path(shared, s),
            "file": s["name"],
            "sha256": s["sha256"],
            "size_bytes": s["size_bytes"],
        }
        for s in manifest["shards"]
    ]
    local = {
        **manifest,
        "path": dest,
        "shards": [{**s, "file": s["name"]} for s in manifest["shards"]],
    }
    return dest, files, local


def local_copy(shared: str) -> str:
    """The folder a trial reads: the node-local copy when the staging asked for one (made now,
    checksums verified, if this node lacks it or holds an older one), else the shared folder."""
    manifest = read_manifest(shared)
    if not manifest.get("stage_to"):
        return shared
    dest, files, local = copy_plan(shared, manifest)
    folder = Path(dest)

    def current() -> bool:
        marker = folder / MANIFEST_FILE
        return marker.is_file() and read_manifest(dest).get("sha256") == manifest["sha256"]

    if current():  # the staging made it: no lock to wait for
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    with held(folder / LOCK_FILE):  # another worker of this node may be making it now
        if not current():
            copy_verified(files, dest, local)
    return dest
