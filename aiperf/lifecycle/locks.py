"""File locks (flock) that die with their process, so a crashed run never blocks the next one.

Two uses: staging a dataset into an `--out` folder (a second run waits, then finds the data
staged), and one local run per machine and user (`aiperf run` refuses a second one that would
share, and so measure, the same cores, unless `--allow-concurrent`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiperf.errors import UserError

LOCAL_RUN_LOCK_ENV = "AIPERF_RUN_LOCK"


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Wait for, then hold, the exclusive lock on `path` (created if missing) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def try_hold(path: Path) -> int | None:
    """An open descriptor holding `path`'s exclusive lock until it is closed or this process ends,
    or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def local_run_lock_path() -> Path:
    """Where local runs of this user take their lock: AIPERF_RUN_LOCK, else
    $XDG_CACHE_HOME/aiperf/local-run.lock (~/.cache by default): the user's own folder, which no
    other user can create or replace."""
    explicit = os.environ.get(LOCAL_RUN_LOCK_ENV)
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "aiperf" / "local-run.lock"


def claim_local_run() -> int:
    """Hold this machine's local-run lock for the rest of the process (the descriptor returned),
    or fail in one line when another local run holds it."""
    path = local_run_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = try_hold(path)
    if fd is None:
        raise UserError(
            f"another local aiperf run is running on this machine (it holds {path}); wait for it "
            "to finish, or pass --allow-concurrent to run both (each then measures the other's load)"
        )
    return fd
