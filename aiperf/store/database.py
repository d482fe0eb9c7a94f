"""Opening a database by URL and bringing its schema up to date with Alembic.

A bad URL, a server that does not answer or a file that cannot be opened is the user's mistake,
reported in one line that names the URL (without its password) and the fix. Migrations are the
only way tables come into being, for SQLite and PostgreSQL alike.

Commands that write (runs, `aiperf stage`, `aiperf db upgrade`) open with `open_engine` and then
`upgrade`; commands that only read open with `open_existing_engine`, which creates nothing and
migrates nothing, so a mistyped path or an old database is reported instead of being "fixed".

A password written in a URL stays in this process: `withhold_password` gives the URL without it (what
configs, Prefect parameters, records and logs hold) and keeps the password for this process's own
connections to that URL. It is never put in the environment, so Dask workers, batch jobs and other
child processes never inherit it. A URL without a password connects as libpq does by itself
(PGPASSWORD, ~/.pgpass).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import cache, partial
from pathlib import Path
from typing import cast

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, DateTime, Engine, create_engine, event, func
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.sql.elements import ColumnElement

from aiperf import settings
from aiperf.errors import UserError
from aiperf.store.retry import retry_budget_s, retrying
from aiperf.urls import DEFAULT_DB_URL, safe_url, sqlite_file, with_withheld_password

# pg_advisory_xact_lock key held by a migration on PostgreSQL ("aiperf" in ASCII): one migrator at a time.
MIGRATION_LOCK_KEY = 0x616970657266


# --- the database's clock -----------------------------------------------------------------------


def clock(dialect: str, minus_s: float = 0.0) -> ColumnElement[datetime]:
    """The database server's time now (less `minus_s` seconds), in UTC, as an SQL expression.

    Whether a run is lost and who may take it over are judged on one clock, the database's, for
    the writer's heartbeat and the reader's comparison alike: two machines' clocks may disagree,
    the database has one. SQLite's `strftime(..., 'now')` is UTC with milliseconds, written as
    SQLAlchemy writes a datetime there (so stored values compare as text in time order);
    PostgreSQL's now() is a timestamptz, compared as an instant whatever the session's zone."""
    if dialect == "sqlite":
        shift = (f"-{minus_s:.3f} seconds",) if minus_s else ()
        return func.strftime("%Y-%m-%d %H:%M:%f", "now", *shift, type_=DateTime(timezone=True))
    now = func.now(type_=DateTime(timezone=True))
    return now - timedelta(seconds=minus_s) if minus_s else now


def migrations_dir() -> Path:
    """The Alembic scripts shipped inside the package, so an installed wheel migrates from any folder."""
    here = Path(__file__).resolve().parent / "migrations"
    if not (here / "env.py").is_file():  # pragma: no cover - broken install
        raise RuntimeError(f"Alembic migrations not found at {here}; reinstall aiperf")
    return here


# --- opening ------------------------------------------------------------------------------------


def open_engine(url: str) -> Engine:
    """An engine for a command that writes, connected once so a bad URL fails here and not mid-run.

    An SQLite file that does not exist yet is created (its folder must exist); `upgrade` then
    gives it the schema."""
    parsed = _parse_url(url)
    path = sqlite_file(parsed)
    if path is not None:
        folder = path.expanduser().resolve().parent
        if not folder.is_dir():
            raise UserError(
                f"database URL {safe_url(url)}: folder {folder} does not exist; create it "
                "or point --db elsewhere"
            )
    engine = _connect(parsed, url)
    if path is not None:
        _use_wal(engine)
    return engine


def _use_wal(engine: Engine) -> None:
    """Put an SQLite file in WAL mode (it persists in the file): readers never block the run's
    writer, nor it them. Only on writable opens: a read-only connection cannot change it."""

    def switch() -> None:
        with engine.connect() as connection:
            if connection.exec_driver_sql("PRAGMA journal_mode").scalar() != "wal":
                connection.exec_driver_sql("PRAGMA journal_mode=WAL")

    retrying(
        switch, retry_budget_s(), "switching SQLite to WAL"
    )  # another opener may hold the lock


def open_existing_engine(url: str) -> Engine:
    """An engine for a command that only reads: the database must already exist at head.

    Nothing is created or migrated, so a mistyped path cannot leave an empty database behind and
    an old database is never changed by a command that was only meant to look at it. An SQLite
    file is opened read-only."""
    parsed = _parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        parsed = _read_only_sqlite(parsed, url)
    engine = _connect(parsed, url)
    try:
        _require_head(engine, url)
    except UserError:
        engine.dispose()
        raise
    return engine


def _parse_url(url: str) -> URL:
    try:
        return with_withheld_password(make_url(url))
    except (ArgumentError, ValueError):
        raise UserError(
            f"database URL {safe_url(url)!r} is malformed; use e.g. {DEFAULT_DB_URL} or "
            "postgresql+psycopg://user@host:5432/aiperf (password in PGPASSWORD)"
        ) from None


def _read_only_sqlite(parsed: URL, url: str) -> URL:
    """The same SQLite database, opened so that nothing can create or write it.

    sqlite3 would create a missing file on connect, hence the check first; mode=ro then refuses
    writes (and a file that vanished since the check) at the SQLite level."""
    path = sqlite_file(parsed)
    if path is None:
        return parsed
    if str(parsed.query.get("uri", "")).lower() in ("true", "1"):  # the user's own SQLite URI
        return parsed.update_query_dict({"mode": "ro"})
    if not path.expanduser().is_file():
        raise UserError(
            f"database {safe_url(url)}: no such file {path}; check the path (runs and "
            "`aiperf db upgrade` create it)"
        )
    read_only = parsed.set(database=path.expanduser().resolve().as_uri())
    return read_only.update_query_dict({"mode": "ro", "uri": "true"})


def _connect(parsed: URL, url: str) -> Engine:
    """Create the engine and connect once; `url` is what the user typed, for the messages."""
    try:
        engine = create_engine(parsed, pool_pre_ping=True)
    except NoSuchModuleError:
        raise UserError(
            f"database URL {safe_url(url)}: unknown database kind {parsed.drivername!r}; "
            "use sqlite:/// or postgresql+psycopg://"
        ) from None
    except (ImportError, ModuleNotFoundError) as exc:
        raise UserError(
            f"database URL {safe_url(url)} needs the driver {exc.name}; "
            "install it with `pip install 'aiperf[postgres]'`"
        ) from None
    sqlite = engine.dialect.name == "sqlite"
    if sqlite:
        event.listen(
            engine, "connect", partial(_sqlite_pragmas, busy_timeout_ms=_busy_timeout_ms())
        )
    # SELECT 1 succeeds on any file; reading the schema version makes SQLite read the header.
    probe = "PRAGMA schema_version" if sqlite else "SELECT 1"
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(probe)
    except SQLAlchemyError as exc:
        engine.dispose()
        orig = getattr(exc, "orig", exc)
        reason = str(orig).strip().splitlines()[0]
        if getattr(orig, "sqlite_errorname", None) in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
            raise UserError(
                f"database {safe_url(url)} is not an SQLite database ({reason}); point --db "
                "at a database that aiperf wrote"
            ) from None
        raise UserError(
            f"cannot reach database {safe_url(url)}: {reason}; check the URL and that the "
            "server is running"
        ) from None
    return engine


def _sqlite_pragmas(
    dbapi_connection: sqlite3.Connection, _record: object, *, busy_timeout_ms: int
) -> None:
    """Foreign keys on, and a busy timeout so a statement waits for a concurrent writer's lock."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.close()


def _busy_timeout_ms() -> int:
    """$AIPERF_SQLITE_BUSY_TIMEOUT_S in milliseconds."""
    return round(settings.number(settings.SQLITE_BUSY_TIMEOUT_S) * 1000)


def _require_head(engine: Engine, url: str) -> None:
    """A reader understands exactly the head schema: anything else is one line saying what to do."""
    revision, head = current_revision(engine), head_revision()
    if revision == head:
        return
    shown = safe_url(url)
    if revision is None:
        raise UserError(
            f"database {shown} holds no aiperf records (it has no aiperf schema); record a "
            f"run into it, or create the schema with `aiperf db upgrade --db {shown}`"
        )
    if revision in _known_revisions():
        raise UserError(
            f"database {shown} is at schema revision {revision}; this aiperf needs {head}: "
            f"run `aiperf db upgrade --db {shown}`"
        )
    raise UserError(
        f"database {shown} is at schema revision {revision}, written by a newer aiperf (this "
        f"one knows revisions up to {head}); upgrade aiperf to read it"
    )


# --- migrations ---------------------------------------------------------------------------------


def _alembic_config(engine: Engine | None = None) -> AlembicConfig:
    """Alembic's configuration without alembic.ini (a wheel has none); env.py migrates `engine`."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(migrations_dir()))
    if engine is not None:
        config.attributes["engine"] = engine
    return config


@cache
def _script_directory() -> ScriptDirectory:
    """The migration scripts, read once: they do not change while aiperf runs."""
    return ScriptDirectory.from_config(_alembic_config())


def _known_revisions() -> set[str]:
    return {script.revision for script in _script_directory().walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision (None when it has no aiperf schema)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str:
    """The newest schema revision this aiperf knows."""
    head = _script_directory().get_current_head()
    assert head is not None
    return head


def upgrade(engine: Engine) -> None:
    """Apply every pending migration (a no-op on an up-to-date database).

    The check here only skips Alembic when nothing is pending. Concurrent migrators are safe:
    migration_transaction takes a lock first, and Alembic reads the revision again inside it, so
    the second migrator finds the work done."""
    revision = current_revision(engine)
    if revision == head_revision():
        return
    if revision is not None and revision not in _known_revisions():
        _require_head(engine, engine.url.render_as_string(hide_password=False))  # one line: newer
    command.upgrade(_alembic_config(engine), "head")


def downgrade(engine: Engine, revision: str) -> None:
    """Undo migrations down to `revision` (for developers and tests; users only go up)."""
    command.downgrade(_alembic_config(engine), revision)


@contextmanager
def migration_transaction(engine: Engine) -> Iterator[Connection]:
    """One connection and one transaction for a whole migration run (env.py's online path).

    On SQLite, batch mode rebuilds a table: create a new one, copy, DROP the old one, rename. With
    foreign keys on, dropping `runs` would cascade-delete every trial and epoch, so they are off
    while migrating and `PRAGMA foreign_key_check` must find nothing before the commit. PostgreSQL
    alters tables in place and keeps its constraints on; a transaction-scoped advisory lock makes a
    concurrent migrator wait, then find the work done."""
    with engine.connect() as connection:
        if connection.dialect.name != "sqlite":
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.exec_driver_sql(
                        f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"
                    )
                yield connection
            return
        with _sqlite_foreign_keys_off(connection), connection.begin():
            # The driver begins only before INSERT/UPDATE/DELETE, leaving DDL autocommitted; BEGIN
            # here makes the whole run one transaction. IMMEDIATE takes the write lock up front, so
            # a concurrent migrator waits (busy_timeout) and then finds the work done.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            yield connection
            _require_foreign_keys_hold(connection)


@contextmanager
def _sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """Foreign keys off and the driver's implicit BEGIN off, for the span of one transaction.

    PRAGMA foreign_keys is a no-op inside a transaction, so it is set before BEGIN and restored
    after COMMIT or ROLLBACK, and the connection goes back to the pool as it came."""
    raw = cast(sqlite3.Connection, connection.connection.driver_connection)  # pysqlite's own
    if raw.in_transaction:  # pragma: no cover - a pooled connection is always rolled back
        raise RuntimeError("a migration must start outside a transaction, or foreign keys stay on")
    enforced = raw.execute("PRAGMA foreign_keys").fetchone()[0]
    isolation = raw.isolation_level
    raw.execute("PRAGMA foreign_keys=OFF")
    raw.isolation_level = None
    try:
        yield
    finally:
        raw.isolation_level = isolation
        raw.execute(f"PRAGMA foreign_keys={'ON' if enforced else 'OFF'}")


def _require_foreign_keys_hold(connection: Connection) -> None:
    """Fail (and so roll back) a migration that left rows pointing at rows that are gone."""
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise UserError(
            f"migration rolled back, the database is unchanged: {len(broken)} row(s) would "
            f"break foreign keys (first: {table} row {rowid} -> {parent}); repair or delete "
            "the rows `PRAGMA foreign_key_check` lists, then migrate again"
        )
