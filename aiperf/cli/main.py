"""`aiperf ...`: the app: its options, every command registered in the order `aiperf --help` lists
them, and `main()`, the entry point ([project.scripts] in pyproject.toml, `python -m aiperf`).

Each command lives in a module of its own: run (aiperf.cli.run, with series and benchmark), runs,
show and recover (runs), verify, package, db, flops, stage, history, compare and report (history),
rules, and the results group. Exit statuses are aiperf.cli.exit_codes.

A user's mistake (a bad profile, budget, worker count or database URL, a run that is not there) is
one line on stderr and exit status 2, never a traceback; and it is caught before anything is
written. Commands that only read (runs, show, history, compare, report) never create or migrate a
database.
"""

from __future__ import annotations

import os
import sys

import typer

from aiperf.cli.common import Typer, console, err
from aiperf.cli.data import stage
from aiperf.cli.db import app as db_app
from aiperf.cli.flops import flops
from aiperf.cli.history import compare, history, report
from aiperf.cli.package import package
from aiperf.cli.results import app as results_app
from aiperf.cli.rules import rules
from aiperf.cli.run import run
from aiperf.cli.runs import recover, runs, show
from aiperf.cli.verify import verify
from aiperf.errors import UserError

# Offline and quiet by default; a user's own settings win.
for _key, _value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}.items():
    os.environ.setdefault(_key, _value)

# A traceback never shows local variables: they can hold a database URL with its password.
app = Typer(
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="aiperf: an AutoML benchmark for AI machines, scored in operations per second.",
)
app.add_typer(db_app, name="db")


def _print_version(asked: bool) -> None:
    if asked:
        from aiperf import __version__

        console.print(f"aiperf {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print aiperf's version and exit.",
    ),
) -> None:
    """aiperf: an AutoML benchmark for AI machines, scored in operations per second."""


app.command(short_help="Run the benchmark for a fixed budget and print its score.")(run)
app.command()(runs)
app.command(short_help="Print one run's score, its workers' time and its trials.")(show)
app.command()(recover)
app.command()(verify)
app.command(short_help="Write one folder a reviewer can check without the database.")(package)
app.command("flops", short_help="Count a model's operations per sample, layer by layer.")(flops)
app.command("stage", short_help="Check a dataset, shard it as TFRecords and record it.")(stage)
app.command("history", short_help="Scored runs over time, with each run's change from the last.")(
    history
)
app.command("compare")(compare)
app.command("report")(report)
app.command("rules", short_help="What a closed result of PROFILE requires, by its ruleset.")(rules)
app.add_typer(
    results_app, name="results", short_help="Rank machines from verified result packages."
)


def main() -> None:
    from aiperf.store import RecordNotFound

    try:
        app()
    except (UserError, RecordNotFound) as exc:
        from rich.markup import escape  # a message's brackets are its text, not markup

        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
