"""Database URLs: which one a command opens, and how a password in one is kept out of sight.

One precedence for every command, flow and the `alembic` command line (`database_url`): the URL
given (--db, a flow's `db` parameter, alembic.ini's sqlalchemy.url), else $AIPERF_DB_URL, else
DEFAULT_DB_URL. `aiperf run` also lets a profile name its database: the environment wins over the
profile, the command line over both (aiperf.config.load_config).

A password written in a URL stays in this process: `withhold_password` gives the URL without it (what
configs, Prefect parameters, records and logs hold) and keeps the password for this process's own
connections to that URL. It is never put in the environment, so Dask workers, batch jobs and other
child processes never inherit it. A URL without a password connects as libpq does by itself
(PGPASSWORD, ~/.pgpass).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from aiperf import settings

DEFAULT_DB_URL = "sqlite:///aiperf.db"


def database_url(given: str | None = None) -> str:
    """The database a command opens: `given`, else $AIPERF_DB_URL, else DEFAULT_DB_URL."""
    return given or settings.text(settings.DB_URL) or DEFAULT_DB_URL


# user:password@ in a URL that does not parse (the parsed case is SQLAlchemy's own rendering).
_CREDENTIALS = re.compile(r"(://[^/@:]*:).*@")

# Passwords taken out of URLs by withhold_password, by the URL without them: this process only.
_withheld: dict[str, str] = {}


def safe_url(url: str) -> str:
    """The URL as it may be printed: never with its password, even when it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _CREDENTIALS.sub(r"\1***@", url)


def database_label(url: str) -> str:
    """A short file-name-safe name for a database, distinct per database: its file's stem (or its
    PostgreSQL name) and a hash of the URL without password (an SQLite path made absolute), so
    runs of different databases writing into one --out folder never share a file name."""
    bare, _ = split_password(url)
    try:
        parsed = make_url(bare)
    except (ArgumentError, ValueError):
        parsed = None
    path = None if parsed is None else sqlite_file(parsed)
    if path is not None:
        resolved = path.expanduser().resolve()
        name, identity = resolved.stem, f"sqlite:///{resolved}"
    else:
        name, identity = (parsed.database if parsed is not None else None) or "db", bare
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "db"
    return f"{stem[:32]}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"


def split_password(url: str) -> tuple[str, str | None]:
    """(the URL without its password, the password or None). A URL without a password, or one that
    does not parse (opening it reports that), comes back as it was given."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return url, None
    if parsed.password is None:
        return url, None
    return parsed._replace(password=None).render_as_string(hide_password=False), str(
        parsed.password
    )


def withhold_password(url: str) -> str:
    """The URL as it may be stored, passed as a Prefect parameter, logged or printed: without its
    password, which this process keeps for its own connections to that URL (a later one replaces
    it). A password in the URL wins over PGPASSWORD and ~/.pgpass for that URL, as in libpq;
    they still serve every URL given without one."""
    bare, password = split_password(url)
    if password is not None:
        _withheld[bare] = password
    return bare


def with_withheld_password(parsed: URL) -> URL:
    """The URL with the password `withhold_password` kept for it, if any."""
    if parsed.password is not None:
        return parsed
    password = _withheld.get(parsed.render_as_string(hide_password=False))
    return parsed if password is None else parsed.set(password=password)


def sqlite_file(parsed: URL) -> Path | None:
    """The file an SQLite URL names (None for another engine or an in-memory database)."""
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)
