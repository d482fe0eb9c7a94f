"""What every `aiperf` command shares: the app class, the consoles, the one-line error, opening
the store.

A user's mistake ends a command with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup, TyperOption

from aiperf import settings
from aiperf.errors import UserError
from aiperf.urls import DEFAULT_DB_URL, database_url

if TYPE_CHECKING:
    from aiperf.store import Store

console = Console()
err = Console(stderr=True)


class _FlagsAsFlags:
    """Help that shows a boolean flag as a flag (`--json`), not as an option taking a value
    (`--json <bool>`): typer 0.29's rich help prints every option's type, a flag's included, while
    its plain help leaves a flag's out. An empty metavar is the type column's text; a flag reads
    none, so nothing else changes."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
        return params


class FlagsCommand(_FlagsAsFlags, TyperCommand):
    """A command whose help shows its boolean flags as flags, and whose line in `aiperf --help` is
    its summary: the first sentence of its help up to a `;` or `:` (the rest, an exit status or a
    list, is in its own --help), so the command list stays one line a command."""

    def __init__(self, name: str | None, **kwargs: Any) -> None:
        if kwargs.get("short_help") is None and kwargs.get("help"):
            kwargs["short_help"] = summary(kwargs["help"])
        super().__init__(name, **kwargs)


def summary(help: str) -> str:
    """A command's one-line summary: its help's first paragraph, up to its first `; ` or `: `."""
    first = " ".join(inspect.cleandoc(help).split("\n\n")[0].split())
    cut = re.split(r"[;:] ", first, maxsplit=1)
    return cut[0] if len(cut) == 1 else cut[0].rstrip(".") + "."


class FlagsGroup(_FlagsAsFlags, TyperGroup):
    """A group (`aiperf`, `aiperf db`) whose help shows its boolean flags as flags."""


class Typer(typer.Typer):
    """typer.Typer whose every command and group shows boolean flags as flags (FlagsCommand,
    FlagsGroup), so a command added later needs nothing of its own."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", FlagsGroup)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, **kwargs: Any) -> Callable[[Any], Any]:
        kwargs.setdefault("cls", FlagsCommand)
        return super().command(name, **kwargs)


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
    """Print the error line; `raise fail(...)` ends the command with status 2. The message is
    printed as written: its brackets ("pip install '.[cuda]'") are not Rich markup."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
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
