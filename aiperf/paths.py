"""Where a run's files go, and the file locks that guard the shared ones.

Everything a run writes lives under its --out folder, named for its database and run id so that
run 1 of two databases sharing one --out never share a file:

    <out>/run-<database>-<run>/events.log         the run's event log (and the oracle's files)
    <out>/run-<database>-<run>/weights/           the best trial's weights (verify evaluates them)
    <out>/reports/aiperf-report-<database>-<run>.html

Locks are flock(2) locks, which die with their process, so a crashed run never blocks the next
one: one guards staging a dataset into an --out folder (a second run waits, then finds it staged),
another keeps one local run per machine and user.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiperf import settings
from aiperf.urls import database_label

EVENT_LOG = "events.log"  # the event log's file name, in the run's folder and in a package
RUN_FOLDER_PREFIX = "run-"
REPORTS_FOLDER = "reports"
REPORT_PREFIX, REPORT_SUFFIX = "aiperf-report-", ".html"


def run_folder(out: str, db: str, run_id: int) -> Path:
    """<out>/run-<database>-<run>: the run's own files."""
    return Path(out) / f"{RUN_FOLDER_PREFIX}{database_label(db)}-{run_id}"


def event_log_path(out: str, db: str, run_id: int) -> Path:
    return run_folder(out, db, run_id) / EVENT_LOG


WEIGHTS_FOLDER = "weights"  # the trials' kept weights, in the run's folder and in a package


def weights_file(number: int) -> str:
    """A trial's weights file, relative to the run's folder: weights/trial-<number>.weights.h5
    (Keras' weights-only format, which names its extension)."""
    return f"{WEIGHTS_FOLDER}/trial-{number}.weights.h5"


def weights_path(out: str, db: str, run_id: int, number: int) -> Path:
    """Where trial `number` writes the weights of its best complete epoch."""
    return run_folder(out, db, run_id) / weights_file(number)


def report_path(out: str, db: str, run_id: int) -> Path:
    """<out>/reports/aiperf-report-<database>-<run>.html."""
    name = f"{REPORT_PREFIX}{database_label(db)}-{run_id}{REPORT_SUFFIX}"
    return Path(out) / REPORTS_FOLDER / name


def is_published(folder: str, name: str) -> bool:
    """Whether a file `name` in a folder named `folder` is one a run publishes for people to read:
    its HTML report (report_path) or its event log (event_log_path). What `make serve` hands out."""
    if folder == REPORTS_FOLDER:
        return name.startswith(REPORT_PREFIX) and name.endswith(REPORT_SUFFIX)
    return folder.startswith(RUN_FOLDER_PREFIX) and name == EVENT_LOG


def local_run_lock_path() -> Path:
    """Where local runs of this user take their lock: $AIPERF_RUN_LOCK, else
    $XDG_CACHE_HOME/aiperf/local-run.lock (~/.cache by default): the user's own folder, which no
    other user can create or replace."""
    explicit = settings.text(settings.RUN_LOCK)
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "aiperf" / "local-run.lock"


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
