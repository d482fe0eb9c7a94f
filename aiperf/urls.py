"""Database URLs: which one a command opens, and how the secrets in one are kept out of sight.

One precedence for every command, flow and the `alembic` command line (`database_url`): the URL
given (--db, a flow's `db` parameter, alembic.ini's sqlalchemy.url), else $AIPERF_DB_URL, else
DEFAULT_DB_URL. `aiperf run` also lets a profile name its database: the environment wins over the
profile, the command line over both (aiperf.config.load_config).

This module is the one home of that policy. A URL's secrets are its password and the query
parameters libpq takes a secret from (`SECRET_QUERY_KEYS`: password, passfile, sslpassword):

- shown (`safe_url`): every secret as ***;
- stored (`withhold_password`: configs, Prefect parameters, records, logs): the URL without its
  secrets, which this process keeps for its own connections to that URL;
- a URL that does not parse and looks as if it holds a secret (user:password@, or one of those
  query keys) is refused in one line (`split_password`), never stored: nothing could take its
  secret out reliably, and it could not be opened anyway.

The environment: $AIPERF_DB_URL (a URL that may hold a password) and libpq's PGPASSWORD and
PGPASSFILE (`SECRET_ENVIRONMENT`) never reach a worker or a batch job. While a run's cluster lives
(`secrets_kept_from_children`, aiperf.cluster.start) they are out of this process's environment,
which every child process copies; this process still reads them (`environment_value`) and its own
connections take them as libpq would (`with_withheld_password`: a password in the URL first, then
PGPASSWORD, then the password file).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote_plus

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from aiperf import settings
from aiperf.errors import UserError

DEFAULT_DB_URL = "sqlite:///aiperf.db"

# Query parameters libpq reads a secret from: the password, the password file, the SSL key's password.
SECRET_QUERY_KEYS = ("password", "passfile", "sslpassword")
# Variables that hand a database secret to every process started with them: aiperf's URL and libpq's.
SECRET_ENVIRONMENT = (settings.DB_URL.name, "PGPASSWORD", "PGPASSFILE")
_LIBPQ_ENVIRONMENT = {"PGPASSWORD": "password", "PGPASSFILE": "passfile"}  # libpq's own defaults

_MASK = "***"
# user:password@ in a URL that does not parse (the parsed case is SQLAlchemy's own rendering).
_CREDENTIALS = re.compile(r"(://[^/@:]*:).*@")
# A secret query key in a URL that does not parse, its name decoded.
_SECRET_QUERY = re.compile(r"[?&;](" + "|".join(SECRET_QUERY_KEYS) + r")\s*=", re.IGNORECASE)

# The URLs withhold_password was given, by the URL without their secrets: this process only.
_withheld: dict[str, str] = {}

# SECRET_ENVIRONMENT taken out of os.environ while a cluster lives, and how many clusters do.
_kept: dict[str, str] = {}
_keepers = 0
_kept_lock = threading.Lock()


def environment_value(name: str) -> str | None:
    """A variable of SECRET_ENVIRONMENT as this process was given it, even while it is kept out of
    the environment its children inherit (`secrets_kept_from_children`)."""
    value = os.environ.get(name, "").strip()
    return value or _kept.get(name) or None


def database_url(given: str | None = None) -> str:
    """The database a command opens: `given`, else $AIPERF_DB_URL, else DEFAULT_DB_URL."""
    return given or environment_value(settings.DB_URL.name) or DEFAULT_DB_URL


def _secret_keys(parsed: URL) -> list[str]:
    return [key for key in parsed.query if key.lower() in SECRET_QUERY_KEYS]


def _looks_secret(url: str) -> bool:
    """Whether a URL that does not parse seems to hold a password or a secret query parameter."""
    return bool(_CREDENTIALS.search(url) or _SECRET_QUERY.search(unquote_plus(url)))


def safe_url(url: str) -> str:
    """The URL as it may be printed: its password and secret query values as ***, and of a URL that
    does not parse, its password and its whole query."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        shown = _CREDENTIALS.sub(rf"\1{_MASK}@", url)
        return shown.split("?", 1)[0] + (f"?{_MASK}" if "?" in shown else "")
    secrets = _secret_keys(parsed)
    if secrets:
        parsed = parsed.update_query_dict(dict.fromkeys(secrets, _MASK))
    return parsed.render_as_string(hide_password=True).replace("%2A%2A%2A", _MASK)


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
    """(the URL without its secrets, the secret taken: its password, else the first secret query
    value; None when it holds none). A URL that does not parse comes back as it was given (opening
    it reports that), unless it looks as if it holds a secret: that is refused in one line, since
    no secret could be taken out of it reliably and it would be stored as given."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        if _looks_secret(url):
            raise UserError(
                f"database URL {safe_url(url)!r} is malformed and holds a password; fix the URL "
                "and keep its password in PGPASSWORD or ~/.pgpass"
            ) from None
        return url, None
    secrets = _secret_keys(parsed)
    if parsed.password is None and not secrets:
        return url, None
    taken = parsed.password if parsed.password is not None else parsed.query[secrets[0]]
    bare = parsed._replace(password=None).difference_update_query(secrets)
    return bare.render_as_string(hide_password=False), str(
        taken if isinstance(taken, str) else taken[0]
    )


def withhold_password(url: str) -> str:
    """The URL as it may be stored, passed as a Prefect parameter, logged or printed: without its
    secrets (password, SECRET_QUERY_KEYS), which this process keeps for its own connections to that
    URL (a later one replaces them). A password in the URL wins over PGPASSWORD and ~/.pgpass for
    that URL, as in libpq; they still serve every URL given without one."""
    bare, secret = split_password(url)
    if secret is not None:
        _withheld[bare] = url
    return bare


def with_withheld_password(parsed: URL) -> URL:
    """The URL this process connects with: with the secrets `withhold_password` kept for it, if
    any, and for PostgreSQL with PGPASSWORD and PGPASSFILE where it names none, as libpq itself
    would take them (here, so that a connection never needs them in the environment)."""
    if parsed.password is None and not _secret_keys(parsed):
        original = _withheld.get(parsed.render_as_string(hide_password=False))
        if original is not None:
            parsed = make_url(original)
    if parsed.get_backend_name() != "postgresql":
        return parsed
    named = {key.lower() for key in parsed.query}
    if parsed.password is not None:
        named.add("password")
    defaults = {
        key: value
        for variable, key in _LIBPQ_ENVIRONMENT.items()
        if key not in named and (value := environment_value(variable))
    }
    return parsed.update_query_dict(defaults) if defaults else parsed


@contextmanager
def secrets_kept_from_children() -> Iterator[None]:
    """While it lasts, SECRET_ENVIRONMENT is out of this process's environment, which every child
    process copies as it starts (a LocalCluster's worker processes, a batch system's submit command
    and so its jobs); this process still reads it through `environment_value`. Nested and
    concurrent uses share one removal: the variables come back when the last one ends."""
    global _keepers
    with _kept_lock:
        if _keepers == 0:
            for name in SECRET_ENVIRONMENT:
                value = os.environ.pop(name, None)
                if value is not None:
                    _kept[name] = value
        _keepers += 1
    try:
        yield
    finally:
        with _kept_lock:
            _keepers -= 1
            if _keepers == 0:
                for name, value in _kept.items():
                    os.environ.setdefault(name, value)
                _kept.clear()


def sqlite_file(parsed: URL) -> Path | None:
    """The file an SQLite URL names (None for another engine or an in-memory database)."""
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)
