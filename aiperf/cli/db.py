"""`aiperf db upgrade`: create a database and bring its schema up to date (Alembic migrations).

Registered in aiperf/cli/main.py as the group `aiperf db`. Runs migrate their database themselves;
this prepares a shared one, or upgrades an older one for the commands that only read.
"""

from __future__ import annotations

from aiperf.cli.common import Typer, console, db_option, fail
from aiperf.errors import UserError
from aiperf.urls import safe_url

app = Typer(
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Manage the database's schema (migrations).",
)


@app.command("upgrade")
def db_upgrade(db: str = db_option()) -> None:
    """Create the database if needed and apply pending migrations.

    Runs do this themselves; use it to prepare a shared database, or to bring an older one up to
    date for the read-only commands."""
    from aiperf.store import database

    try:
        engine = database.open_engine(db)
    except UserError as exc:
        raise fail(str(exc)) from None
    try:
        before = database.current_revision(engine)
        database.upgrade(engine)
        after = database.current_revision(engine)
    finally:
        engine.dispose()
    change = "already at" if before == after else f"upgraded from {before or 'empty'} to"
    console.print(f"{safe_url(db)}: {change} revision {after}")
