"""Retrying a database transaction through transient faults, with exponential backoff.

A run lasts hours; a PostgreSQL restart, a dropped connection or another process holding SQLite's
write lock for a moment must not fail it. Such a fault ends one transaction, which then runs again
from the start (the Store's writes are idempotent, so a retry never records anything twice), for
up to `AIPERF_DB_RETRY_S` seconds (default 120). Anything else (a constraint, a missing table, a
bad value) is a real error and is raised at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

from aiperf import settings

log = logging.getLogger("aiperf.store")

T = TypeVar("T")

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 5.0

# PostgreSQL SQLSTATEs that say "try again": the server shutting down or starting (57P01-57P03),
# a serialization failure or deadlock (40001, 40P01). Class 08 (connection exceptions) is added below.
_TRANSIENT_SQLSTATES = {"57P01", "57P02", "57P03", "40001", "40P01"}


def retry_budget_s() -> float:
    """How long a transaction is retried: $AIPERF_DB_RETRY_S (0: never)."""
    return settings.number(settings.DB_RETRY_S)


def is_transient(exc: BaseException) -> bool:
    """A fault that goes away by itself: a lost connection, a server restarting, a locked SQLite file."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError):
        return False
    orig = exc.orig
    sqlite_error = getattr(orig, "sqlite_errorname", None)
    if sqlite_error is not None:
        return sqlite_error.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    sqlstate = getattr(orig, "sqlstate", None)
    # No SQLSTATE: the driver failed to reach the server (refused, reset, closed), not the server saying no.
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES


def retrying(work: Callable[[], T], budget_s: float, what: str = "database transaction") -> T:
    """work(), run again after each transient fault with a doubling pause (0.05 s up to 5 s), until
    it succeeds or `budget_s` has passed; then the last fault is raised."""
    deadline = time.monotonic() + budget_s
    delay = FIRST_DELAY_S
    while True:
        try:
            return work()
        except DBAPIError as exc:
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            log.warning("%s failed (%s); retrying in %.2f s", what, _reason(exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)


def _reason(exc: DBAPIError) -> str:
    """The driver's first line: never the SQL or its parameters."""
    lines = str(exc.orig).strip().splitlines()
    return lines[0] if lines else type(exc.orig).__name__
