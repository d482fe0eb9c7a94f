"""Node-local copies: at scale every worker reads the shards from its own disk, not from the shared
file system. Each worker copies the staged files to the same path on its node (`stage_to`), checks
every checksum there, and skips files already present with the right checksum.

Staging copies onto every worker the cluster has; a worker that joins later (adaptive scaling, a
job replaced at the end of its walltime) makes its copy when its first trial opens the data
(`local_copy`), so trials always read node-local shards.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

from aiperf.data.manifest import (
    MANIFEST_FILE,
    read_manifest,
    sha256_file,
    shard_path,
    write_json_atomic,
)


def copy_verified(
    files: list[dict[str, Any]], dest: str, manifest: dict[str, Any] | None
) -> dict[str, Any]:
    """Runs on a worker: copy each {src, file, sha256, size_bytes} into dest, verify, then write
    the copy's manifest.json (last, so a half-made copy is never read)."""
    target_dir = Path(dest)
    target_dir.mkdir(parents=True, exist_ok=True)
    copied = skipped = 0
    for entry in files:
        target = target_dir / entry["file"]
        if (
            target.is_file()
            and target.stat().st_size == entry["size_bytes"]
            and sha256_file(target) == entry["sha256"]
        ):
            skipped += 1
            continue
        tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            shutil.copyfile(entry["src"], tmp)
            found = sha256_file(tmp)
            if found != entry["sha256"]:
                raise OSError(
                    f"the copy of {entry['src']} in {target_dir} on {socket.gethostname()} has "
                    f"checksum {found[:12]}, not {entry['sha256'][:12]}; check the disk and stage again"
                )
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        copied += 1
    if manifest is not None:
        write_json_atomic(target_dir / MANIFEST_FILE, manifest)
    return {
        "host": socket.gethostname(),
        "path": str(target_dir),
        "copied": copied,
        "skipped": skipped,
    }


def place_everywhere(
    files: list[dict[str, Any]], dest: str, manifest: dict[str, Any] | None, client: Any | None
) -> dict[str, dict[str, Any]]:
    """Copy on every worker of the Dask client (or here, without one): worker -> what it did."""
    if client is None:
        return {"local": copy_verified(files, dest, manifest)}
    return client.run(copy_verified, files, dest, manifest)


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
    marker = Path(dest) / MANIFEST_FILE
    if marker.is_file() and read_manifest(dest).get("sha256") == manifest["sha256"]:
        return dest
    copy_verified(files, dest, local)
    return dest
