"""The Store's core: its engine, its sessions, and the retry every transaction runs under.

Under both of the Store's roles (aiperf.store.repository): what a run writes
(aiperf.store.run_writes) and what readers read (aiperf.store.reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import wraps
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from aiperf.store import database
from aiperf.store.conversion import utc
from aiperf.store.records import RecordNotFound
from aiperf.store.retry import retry_budget_s, retrying

T = TypeVar("T")
P = ParamSpec("P")
S = TypeVar("S", bound="StoreBase")


def retried(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """A Store method whose one transaction runs again after a transient database fault
    (aiperf.store.retry). Only for methods that are idempotent as they stand: a second run of
    them changes nothing the first one committed."""

    @wraps(method)
    def run_retried(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return retrying(lambda: method(self, *args, **kwargs), self.retry_s, method.__name__)

    return run_retried


class StoreBase:
    """The engine, its sessions and the retry budget every part of the Store shares."""

    def __init__(self, engine: Engine, *, retry_s: float | None = None) -> None:
        """`retry_s`: how long a transaction is retried through transient faults (default
        AIPERF_DB_RETRY_S, else 120 s; 0 never retries)."""
        self.engine = engine
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> Self:
        """For commands that write: connect (creating an SQLite file; a bad URL is a UserError) and
        apply pending migrations."""
        engine = database.open_engine(url)
        if migrate:
            database.upgrade(engine)
        return cls(engine)

    @classmethod
    def open_existing(cls, url: str) -> Self:
        """For commands that only read: the database must exist at the current schema; nothing is
        created or migrated (a missing file, a non-database or an old schema is a UserError)."""
        return cls(database.open_existing_engine(url))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def _insert_once(self, work: Callable[[Session, bool], T]) -> T:
        """Run an inserting transaction, retried through transient faults, so that it inserts once.

        A fault while committing may come after the commit took effect (its acknowledgement lost),
        so `work(session, maybe_committed)` is told whether an earlier attempt reached the commit:
        then it looks for the row that attempt wrote before inserting again."""
        maybe_committed = False

        def attempt() -> T:
            nonlocal maybe_committed
            with self._sessions.begin() as session:
                result = work(session, maybe_committed)
                maybe_committed = True  # the commit happens as the block exits
            return result

        return retrying(attempt, self.retry_s, getattr(work, "__name__", "insert"))

    @staticmethod
    def _get(session: Session, model: type, key: int, what: str) -> Any:
        row = session.get(model, key)
        if row is None:
            raise RecordNotFound(f"{what} {key} is not in the database")
        return row

    def _clock(self, minus_s: float = 0.0) -> Any:
        """The database's time now (less `minus_s`), as SQL (aiperf.store.database.clock)."""
        return database.clock(self.engine.dialect.name, minus_s)

    def _database_now(self, s: Session) -> datetime:
        """The database's time now, which a reader judges a heartbeat's age by (not its own)."""
        moment = s.scalar(select(self._clock()))
        assert moment is not None  # a clock always answers
        return utc(moment)
