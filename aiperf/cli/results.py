"""`aiperf results import | list | page`: the Typer side of aiperf.ranking, registered in
aiperf/cli/main.py. Import writes (its database is created and migrated if need be); list and page
only read."""

from __future__ import annotations

from pathlib import Path

import typer

from aiperf.cli.common import (
    JSON_OPTION,
    Typer,
    console,
    db_option,
    err,
    fail,
    open_existing,
    open_store,
)
from aiperf.errors import UserError

app = Typer(
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Rank machines: import verified result packages, list and page the ranking.",
)

DIVISION_OPTION = typer.Option(None, "--division", help="Only this division: closed or open.")
RULESET_OPTION = typer.Option(None, "--ruleset", help="Only this ruleset, e.g. aiperf-rules-1.3.")
PROFILE_OPTION = typer.Option(None, "--profile", "-p", help="Only this profile's workloads.")


@app.command("import")
def import_(
    packages: list[Path] = typer.Argument(
        ...,
        help="Result packages (`aiperf package RUN --to DIR`) or series packages (`aiperf "
        "package --series ID --to DIR`).",
    ),
    db: str = db_option(),
) -> None:
    """Check each package as `aiperf verify --package` does and add it to the results list.

    Each package imports on its own; one that fails a check, or was imported already, is refused.
    A series package imports whole or not at all. Exit 0 when every package imported, else 1."""
    from aiperf.ranking.importing import import_packages

    with open_store(db) as store:
        try:
            outcomes = import_packages(store, packages)
        except UserError as exc:
            raise fail(str(exc)) from None
    for outcome in outcomes:
        if outcome.imported:
            console.print(outcome.message, highlight=False, soft_wrap=True)
        else:
            err.print(f"[bold red]refused:[/] {outcome.message}", highlight=False, soft_wrap=True)
    if not all(o.imported for o in outcomes):
        raise typer.Exit(1)


def _ranked(
    db: str, division: str | None, ruleset: str | None, profile: str | None, by: str = "ops"
):
    from aiperf.ranking.standings import BY, rank
    from aiperf.store.results_models import list_results

    if division is not None and division not in ("closed", "open"):
        raise fail(f"--division {division!r}: give closed or open")
    if by not in BY:
        raise fail(f"--by {by!r}: give {' or '.join(BY)}")
    with open_existing(db) as store:
        results = list_results(store)
    return rank(results, division=division, ruleset=ruleset, profile=profile, by=by)


@app.command("list")
def list_(
    division: str | None = DIVISION_OPTION,
    ruleset: str | None = RULESET_OPTION,
    profile: str | None = PROFILE_OPTION,
    db: str = db_option(),
    as_json: bool = JSON_OPTION,
    as_csv: bool = typer.Option(
        False, "--csv", help="CSV, one line per system, MLPerf result summarizer's columns first."
    ),
    to: Path | None = typer.Option(None, "--to", help="Write the CSV or JSON to this file."),
    by: str = typer.Option(
        "ops",
        "--by",
        help="ops, or ops-per-watt: by operations per joule, each energy level and meter kind "
        "a group of its own, and the results without a metered window listed unranked.",
    ),
) -> None:
    """Print the ranked list, one row per system and workload; each group is ranked from 1.

    Only qualified results get a rank: valid, verified and, in the closed division, a series of
    as many runs as the ruleset asks. The others are listed below the ranked rows of their group
    with rank "-" (--json: null; --csv: empty) and the reason ("invalid: too short",
    "unverified", "closed: 1 of 5 runs"). Results of different divisions, rulesets or workloads
    are never ranked together."""
    from aiperf.ranking.standings import groups_json, to_csv

    if as_json and as_csv:
        raise fail("give --json or --csv, not both")
    if to is not None and not (as_json or as_csv):
        raise fail("--to writes the --csv or --json output; give one of them")
    groups = _ranked(db, division, ruleset, profile, by)
    if as_json or as_csv:
        from aiperf.cli.as_json import dumps

        text = to_csv(groups) if as_csv else dumps(groups_json(groups)) + "\n"
        if to is None:
            print(text, end="")
            return
        if not to.parent.is_dir():
            raise fail(f"--to {to}: folder {to.parent} does not exist; create it first")
        to.write_text(text, encoding="utf-8")
        console.print(f"wrote {to}")
        return
    _print_groups(groups, by)


def _efficiency(value: float | None) -> str:
    from aiperf.units import si

    return "-" if value is None else si(value, "OPS/W")


def _ranked_by(by: str, rule: str) -> str:
    """The line under a group that says what it is ranked by."""
    if by == "ops-per-watt":
        return (
            "ranked by OPS/W (operations per joule; a series' median), within one energy level "
            "and meter kind"
        )
    return f"ranked by OPS of {rule}; =N: tied, their 95% intervals overlap"


def _print_groups(groups, by: str = "ops") -> None:
    from aiperf.ranking.page import plus_minus, spread
    from aiperf.report.phases import percent
    from aiperf.report.tables import Col, FitTable
    from aiperf.units import ops_rate

    if not groups:
        console.print("no results yet; import packages with `aiperf results import PACKAGE...`")
        return
    columns = (
        Col("rank", "right"),
        Col("system", wrap=True),
        Col("submitter", wrap=True, rank=7),
        Col("nodes", "right", rank=5),
        Col("accelerators", wrap=True),
        Col("OPS", "right"),
        Col("95%", "right", rank=1),
        Col("regulated", "right", rank=3),
        Col("MFU", "right", rank=4),
        Col("runs", "right"),
        Col("spread", wrap=True, rank=2),
        Col("date", rank=6),
        *([Col("OPS/W", "right")] if by == "ops-per-watt" else []),
    )
    for i, g in enumerate(groups):
        if i:
            console.print()
        rule = "single runs" if g.rule is None else g.rule.describe()
        rows = [
            [
                s.rank_text,
                s.system,
                s.submitter or "-",
                str(s.nodes),
                s.accelerators_text(),
                ops_rate(s.ops.ranked),
                plus_minus(s.ops_interval, s.ops.ranked),
                ops_rate(s.regulated_score.ranked),
                percent(s.mfu),
                str(s.runs),
                spread(s, full=False),
                s.date.strftime("%Y-%m-%d"),
                *([_efficiency(s.ops_per_watt)] if by == "ops-per-watt" else []),
            ]
            for s in g.standings
        ]
        console.print(FitTable(columns, rows, title=g.key.heading()), soft_wrap=False)
        console.print(_ranked_by(by, rule), highlight=False)
        # Why a row has no rank: a line under its group, not a column that would crowd out the
        # figures at 80 columns.
        for s in g.standings:
            if s.rank is None:
                console.print(f"not ranked: {s.system} ({s.reason})", highlight=False)
    console.print(
        "every result passed every check of `aiperf verify --package` when imported",
        highlight=False,
    )


@app.command("page")
def page(
    division: str | None = DIVISION_OPTION,
    ruleset: str | None = RULESET_OPTION,
    profile: str | None = PROFILE_OPTION,
    db: str = db_option(),
    to: Path = typer.Option(
        Path("aiperf-results.html"), "--to", "-o", help="The HTML file to write."
    ),
) -> None:
    """Write the ranked list as one self-contained HTML page, with OPS against accelerators."""
    from aiperf.ranking.page import write_page

    groups = _ranked(db, division, ruleset, profile)
    try:
        path = write_page(groups, to)
    except UserError as exc:
        raise fail(str(exc)) from None
    console.print(f"wrote {path}")
