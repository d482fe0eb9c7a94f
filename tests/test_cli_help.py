"""Every command's --help as a user reads it (issue 26 item 7): a boolean flag shows as a flag
(`--json`), never as an option taking a value (`--json <bool>`), and `aiperf --help` gives each
command a one-line summary. Rendered in process by typer's runner, every command and group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from aiperf.cli.main import app


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _help(path: tuple[str, ...], columns: int = 100) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "aiperf")
def test_every_commands_help_shows_flags_as_flags(path):
    text = _help(path)
    assert "--help" in text
    assert "<bool>" not in text, "\n".join(line for line in text.splitlines() if "<bool>" in line)


def test_options_that_take_a_value_still_show_its_type():
    assert len(COMMANDS) > 10  # aiperf, db, db upgrade and the commands: the walk found them
    runs = _help(("runs",))
    assert "<int" in next(line for line in runs.splitlines() if "--limit" in line)
    assert "<str>" not in next(line for line in runs.splitlines() if "--json" in line)


def test_each_command_has_a_one_line_summary_at_80_columns():
    text = _help((), columns=80)
    listed = text[text.index("Commands") :].splitlines()[1:]
    names = {path[0] for path in COMMANDS if len(path) == 1}
    rows = [line.strip("│ ").split(" ", 1)[0] for line in listed if line.startswith("│")]
    assert sorted(rows) == sorted(names), "a summary went on to a second line:\n" + "\n".join(
        listed
    )


def test_aiperf_help_lists_the_commands_in_their_order():
    """`aiperf --help` reads as a user meets the commands: a run and what looks at runs, then the
    tools, then the groups; aiperf/cli/main.py registers them in this order (issue 34 moved each
    command to a module of its own and kept it)."""
    text = _help(())
    listed = text[text.index("Commands") :].splitlines()[1:]
    rows = [line.strip("│ ").split(" ", 1)[0] for line in listed if line.startswith("│")]
    assert rows == [
        "run",
        "runs",
        "show",
        "recover",
        "verify",
        "package",
        "flops",
        "stage",
        "history",
        "compare",
        "report",
        "rules",
        "db",
        "results",
    ]
