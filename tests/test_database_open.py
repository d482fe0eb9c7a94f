"""open_existing_engine, for commands that only read: it opens a database that exists at the
current schema, and otherwise says in one line what is wrong, creating and changing nothing."""

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from aiperf.errors import UserError
from aiperf.store import database
from aiperf.store.database import open_existing_engine


def _refused(url: str, *fragments: str) -> str:
    """The one-line UserError open_existing_engine raises for `url`, holding every fragment."""
    with pytest.raises(UserError) as caught:
        open_existing_engine(url)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    return message


def _listing(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b""
        for p in folder.rglob("*")
    }


def _created(url: str) -> sa.Engine:
    """A database as a writing command leaves it: opened, migrated to head."""
    engine = database.open_engine(url)
    database.upgrade(engine)
    return engine


# --- SQLite paths: nothing is created -----------------------------------------------------------


def test_missing_file_creates_no_file_or_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(
        "sqlite:///typo/nothere.db",
        "sqlite:///typo/nothere.db",
        "no such file typo/nothere.db",
        "check the path",
        "aiperf db upgrade",
    )
    _refused(f"sqlite:///{tmp_path / 'nothere.db'}", "no such file")
    assert _listing(tmp_path) == {}


def test_text_file_is_not_an_sqlite_database(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("these are notes, not a database\n" * 40)
    before = _listing(tmp_path)
    _refused(f"sqlite:///{text}", str(text), "is not an SQLite database")
    assert _listing(tmp_path) == before


def test_sqlite_database_without_aiperf_schema_is_left_alone(tmp_path):
    path = tmp_path / "other.db"
    with sa.create_engine(f"sqlite:///{path}").begin() as c:
        c.exec_driver_sql("CREATE TABLE notes (id INTEGER)")
    before = _listing(tmp_path)
    _refused(f"sqlite:///{path}", "holds no aiperf records", "aiperf db upgrade")
    assert _listing(tmp_path) == before


def test_malformed_url_and_unreachable_server():
    _refused("not a url", "is malformed")
    message = _refused(
        "postgresql+psycopg://aiperf:secret@127.0.0.1:1/aiperf", "cannot reach database"
    )
    assert "secret" not in message, "passwords are never printed"


# --- both engines ------------------------------------------------------------------------------


def test_no_aiperf_schema(db_url):
    database.open_engine(db_url).dispose()  # an empty database (on SQLite, an empty file)
    _refused(
        db_url,
        database.safe_url(db_url),
        "holds no aiperf records",
        f"aiperf db upgrade --db {database.safe_url(db_url)}",
    )


def test_older_schema_is_reported_not_migrated(db_url):
    engine = _created(db_url)
    database.downgrade(engine, "0003")
    _refused(
        db_url,
        "is at schema revision 0003",
        f"this aiperf needs {database.head_revision()}",
        f"run `aiperf db upgrade --db {database.safe_url(db_url)}`",
    )
    assert database.current_revision(engine) == "0003"
    engine.dispose()


def test_newer_schema_is_reported(db_url):
    engine = _created(db_url)
    with engine.begin() as c:
        c.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    engine.dispose()
    _refused(db_url, "schema revision 9999", "written by a newer aiperf")


def test_current_database_opens_and_reads(db_url):
    writer = _created(db_url)
    with writer.begin() as c:
        c.exec_driver_sql(
            "INSERT INTO systems (fingerprint, hostname, cpu_model, cpu_cores, memory_bytes, "
            "gpus, platform, python_version, keras_version, keras_backend, first_seen_at) "
            "VALUES ('f', 'h', 'c', 1, 1, '{}', 'p', '3', '3', 'jax', '2026-11-29 12:00:00')"
        )
    writer.dispose()
    reader = open_existing_engine(db_url)
    try:
        with reader.connect() as c:
            assert c.exec_driver_sql("SELECT hostname FROM systems").scalars().all() == ["h"]
        if reader.dialect.name == "sqlite":
            with pytest.raises(OperationalError, match="readonly"), reader.begin() as c:
                c.exec_driver_sql("DELETE FROM systems")
            with reader.connect() as c:
                assert c.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    finally:
        reader.dispose()
