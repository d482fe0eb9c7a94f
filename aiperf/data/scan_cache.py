"""What staging read of each shard, kept so the next run reads only the shards that changed.

Staging reads every shard a run uses (aiperf.data.shard_scan: its sha256, images per class, image
keys; for a user's shards, every image decoded once). ImageNet is ~140 GB: read again before every
run, that is many minutes on the user's clock. So each result is kept in `scans.json` in the staged
folder, keyed by the shard's absolute path and what the file system says of it: size, mtime_ns,
ctime_ns and inode. Any write to the file moves its mtime and ctime (and a tool that puts the mtime
back still moves the ctime, which no user can set), so a changed or replaced shard misses and is
read again; the digest the ruleset pins (the shards' sha256, aiperf.data.manifest.dataset_digest)
is then the fresh one.

Two more guards. A result is trusted only if the file's mtime was at least RACY_NS older than the
read that made it: a write within the same clock tick as that read (file systems stamp times
coarsely) could otherwise leave size and times as they were ("racy git"); such a shard is read
again next time, by then no longer racy. And the file is a cache, never a record: written
atomically, and one that does not parse (or is of another version) is ignored with one warning.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiperf.data.manifest import write_json_atomic

log = logging.getLogger(__name__)

CACHE_FILE = "scans.json"
VERSION = 1
RACY_NS = 2_000_000_000  # coarser than any file system's time stamps and a little clock skew


def file_identity(path: str) -> dict[str, int]:
    """What the file system says of a file that changes whenever its bytes do."""
    st = os.stat(path)
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "ino": st.st_ino,
    }


class ScanCache:
    """The scans.json of one staged folder: shard path -> its identity, the settings it was read
    with, when it was read, and the result."""

    def __init__(self, folder: Path) -> None:
        self.file = Path(folder) / CACHE_FILE
        self.entries: dict[str, Any] = self._load()
        self.used: set[str] = set()
        self.changed = False

    def _load(self) -> dict[str, Any]:
        if not self.file.is_file():
            return {}
        try:
            data = json.loads(self.file.read_text())
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')}, not {VERSION}")
            entries = data["shards"]
            if not isinstance(entries, dict):
                raise ValueError("no shards")
            return entries
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "%s is not a scan cache (%s): ignored; every shard is read", self.file, exc
            )
            return {}

    def get(self, path: str, settings: dict[str, Any]) -> dict[str, Any] | None:
        """The kept result for `path` read with `settings`, if the file is as it was then."""
        key = str(Path(path).resolve())
        self.used.add(key)
        entry = self.entries.get(key)
        try:
            identity = file_identity(path)
            trusted = (
                entry is not None
                and entry["identity"] == identity
                and entry["settings"] == settings
                and identity["mtime_ns"] + RACY_NS <= entry["read_ns"]
            )
            if not trusted or entry is None:
                return None
            result = dict(entry["result"])
            result["keys"] = base64.b64decode(result["keys"])
        except (OSError, KeyError, TypeError, ValueError):
            return None
        return result

    def put(
        self,
        path: str,
        settings: dict[str, Any],
        identity: dict[str, int],
        read_ns: int,
        result: dict[str, Any],
    ) -> None:
        """Keep a good result: `identity` taken before the read began at `read_ns`."""
        kept = {k: v for k, v in result.items() if k not in ("problems", "skipped")}
        kept["keys"] = base64.b64encode(result["keys"]).decode()
        key = str(Path(path).resolve())
        self.used.add(key)
        self.changed = True
        self.entries[key] = {
            "identity": identity,
            "settings": settings,
            "read_ns": read_ns,
            "result": kept,
        }

    def save(self) -> None:
        """Write the entries of the shards this staging used (others are of older stagings), when
        any changed: ImageNet's is tens of MB (its image keys and per-class counts)."""
        kept = {k: v for k, v in self.entries.items() if k in self.used}
        if self.changed or kept.keys() != self.entries.keys():
            write_json_atomic(self.file, {"version": VERSION, "shards": kept})


def read_noting_identity(
    fn: Callable[[Any], dict[str, Any]], task: Any
) -> tuple[str, dict[str, int], int, dict[str, Any]]:
    """`fn(task)` for a task with a `path`: (the path, the file's identity and the time taken just
    before it is read (what ScanCache.put keeps), the result). Runs where the read runs."""
    identity, read_ns = file_identity(task.path), time.time_ns()
    return task.path, identity, read_ns, fn(task)
