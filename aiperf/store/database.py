"""Opening a database by URL and bringing its schema up to date with Alembic.

A bad URL, a server that does not answer or a file that cannot be opened is the user's mistake,
reported in one line that names the URL (without its password) and the fix. Migrations are the
only way tables come into being, for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from aiperf.errors import UserError

DEFAULT_URL = "sqlite:///aiperf.db"


def migrations_dir() -> Path:
    """migrations/ at the repository root (the package is installed editable from there)."""
    here = Path(__file__).resolve().parents[2] / "migrations"
    if not (here / "env.py").is_file():  # pragma: no cover - broken install
        raise RuntimeError(f"Alembic migrations not found at {here}; install aiperf with `pip install -e .`")
    return here


def safe_url(url: str) -> str:
    """The URL as it may be printed: never with its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def open_engine(url: str) -> Engine:
    """An engine that has been connected once, so a bad URL fails here and not mid-run."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"database URL {url!r} is malformed; use e.g. sqlite:///aiperf.db or "
                        "postgresql+psycopg://user:password@host:5432/aiperf") from None
    if parsed.drivername.startswith("sqlite") and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise UserError(f"database URL {safe_url(url)}: folder {folder} does not exist; create it "
                            "or point --db elsewhere")
    try:
        engine = create_engine(parsed, pool_pre_ping=True)
    except NoSuchModuleError:
        raise UserError(f"database URL {safe_url(url)}: unknown database kind {parsed.drivername!r}; "
                        "use sqlite:/// or postgresql+psycopg://") from None
    except (ImportError, ModuleNotFoundError) as exc:
        raise UserError(f"database URL {safe_url(url)} needs the driver {exc.name}; "
                        "install it with `pip install 'aiperf[postgres]'`") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except (OperationalError, SQLAlchemyError) as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise UserError(f"cannot reach database {safe_url(url)}: {reason}; check the URL and that the "
                        "server is running") from None
    return engine


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    """Foreign keys on, and a busy timeout so a reader never fails a concurrent run's write."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _alembic_config(engine: Engine) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["engine"] = engine
    return config


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str:
    script = ScriptDirectory.from_config(_alembic_config(create_engine("sqlite://")))
    head = script.get_current_head()
    assert head is not None
    return head


def upgrade(engine: Engine) -> None:
    """Apply every pending migration (a no-op on an up-to-date database)."""
    if current_revision(engine) == head_revision():
        return
    command.upgrade(_alembic_config(engine), "head")
