"""What every `aiperf` command shares: the consoles, the one-line error, opening the store.

A user's mistake ends a command with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from aiperf import settings
from aiperf.errors import UserError
from aiperf.urls import DEFAULT_DB_URL, database_url

if TYPE_CHECKING:
    from aiperf.store import Store

console = Console()
err = Console(stderr=True)


def db_option(help: str = "Database URL.") -> Any:
    """--db for every command, resolved by aiperf.urls.database_url: the URL given, else
    $AIPERF_DB_URL (where a password can live outside the command line, which other users see in
    `ps`), else DEFAULT_DB_URL. Help names the variable, never its value."""
    return typer.Option(
        None,
        "--db",
        callback=database_url,
        help=f"{help} Default: ${settings.DB_URL.name}, else {DEFAULT_DB_URL}.",
        show_default=False,
    )


# --json on every read command: stable keys for scripts (aiperf.cli.as_json, docs/json.md).
JSON_OPTION: Any = typer.Option(
    False, "--json", help="Print JSON (stable keys, docs/json.md) instead of a table."
)


def fail(message: str) -> typer.Exit:
    """Print the error line; `raise fail(...)` ends the command with status 2."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def open_store(db: str) -> Store:
    """For commands that write: the Store at `db`, created if need be, with migrations applied; or a
    one-line error about the URL."""
    from aiperf.store import Store

    try:
        return Store.open(db)
    except UserError as exc:
        raise fail(str(exc)) from None


def open_existing(db: str) -> Store:
    """For commands that only read: the Store at `db` as it is (nothing created, nothing migrated),
    or a one-line error: no such database, not a database, or a schema to upgrade first."""
    from aiperf.store import Store

    try:
        return Store.open_existing(db)
    except UserError as exc:
        raise fail(str(exc)) from None
