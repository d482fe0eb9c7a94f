"""Node-local copies: at scale every worker reads the shards from its own disk, not from the shared
file system. Each worker copies the staged files to the same path on its node (`stage_to`), checks
every checksum there, and skips files already present with the right checksum.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

from aiperf.data.manifest import MANIFEST_FILE, sha256_file, write_json_atomic


def copy_verified(files: list[dict[str, Any]], dest: str, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """Runs on a worker: copy each {src, file, sha256, size_bytes} into dest, verify, then write
    the copy's manifest.json (last, so a half-made copy is never read)."""
    target_dir = Path(dest)
    target_dir.mkdir(parents=True, exist_ok=True)
    copied = skipped = 0
    for entry in files:
        target = target_dir / entry["file"]
        if target.is_file() and target.stat().st_size == entry["size_bytes"] \
                and sha256_file(target) == entry["sha256"]:
            skipped += 1
            continue
        tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            shutil.copyfile(entry["src"], tmp)
            found = sha256_file(tmp)
            if found != entry["sha256"]:
                raise OSError(f"the copy of {entry['src']} in {target_dir} on {socket.gethostname()} has "
                              f"checksum {found[:12]}, not {entry['sha256'][:12]}; check the disk and stage again")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        copied += 1
    if manifest is not None:
        write_json_atomic(target_dir / MANIFEST_FILE, manifest)
    return {"host": socket.gethostname(), "path": str(target_dir), "copied": copied, "skipped": skipped}


def place_everywhere(files: list[dict[str, Any]], dest: str, manifest: dict[str, Any] | None,
                     client: Any | None) -> dict[str, dict[str, Any]]:
    """Copy on every worker of the Dask client (or here, without one): worker -> what it did."""
    if client is None:
        return {"local": copy_verified(files, dest, manifest)}
    return client.run(copy_verified, files, dest, manifest)
