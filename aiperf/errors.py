"""The one exception type for a user's mistake, and the one for a disk the run's files do not fit.

The CLI prints a UserError as a single line and exits non-zero; anything else is a bug and keeps
its traceback. Raise it with a message that names the bad thing and says how to fix it.

A full disk is no bug of aiperf's either: the folder the user chose (--out, data.stage_to) is too
small. `DiskFull` is a UserError, so it too reaches the user as one line, naming the folder, what
is free there and the fix; `disk_full` turns the operating system's "no space left" into it.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# "No space left on device", and a user's quota exhausted: both mean the files do not fit there.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class UserError(Exception):
    """Bad input from the user: a config value, a dataset file, a database URL."""


class DiskFull(UserError):
    """The files of a run (staged data, node-local copies, weights, logs) do not fit where the user
    put them."""


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of `path`, or of the nearest folder above it that exists
    (None where none can be asked)."""
    where = Path(path).expanduser().absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        return shutil.disk_usage(where).free
    except OSError:
        return None


def _size(count: int | None) -> str:
    if count is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000  # type: ignore[assignment]
    raise AssertionError("unreachable")


def not_enough_space(path: str | Path, needed: int, what: str, setting: str) -> DiskFull | None:
    """A DiskFull when `needed` bytes of `what` do not fit in the free space of `path`'s disk."""
    free = free_bytes(path)
    if free is None or free >= needed:
        return None
    return DiskFull(
        f"{setting} {path}: {what} needs {_size(needed)} and its disk has {_size(free)} free; "
        f"free space there, or point {setting} at a larger disk"
    )


def disk_full(exc: BaseException, path: str | Path, setting: str) -> DiskFull | None:
    """`exc` as a DiskFull naming `path` (the folder the user chose with `setting`) when it, or an
    exception it was raised from, is the operating system's "no space left" (or quota); else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DiskFull):
            return seen
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return DiskFull(
                f"{setting} {path}: its disk is full ({_size(free_bytes(path))} free, "
                f"{seen.strerror or 'no space left'}); free space there, or point {setting} at "
                "a larger disk"
            )
        seen = seen.__cause__ or seen.__context__
    return None
