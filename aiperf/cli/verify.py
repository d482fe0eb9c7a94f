"""`aiperf verify`: recompute a run's score from its records (or a result package's from its event
log) and check every figure; exit 0 only if every check passes, 1 if any fails.

As a table with one line naming each failed check, or with --json the checks as JSON
(aiperf.cli.as_json, docs/json.md).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from aiperf.cli.common import JSON_OPTION, console, db_option, fail, open_existing
from aiperf.errors import UserError
from aiperf.urls import safe_url


def verify(
    run_id: int | None = typer.Argument(None, help="Run id, as `aiperf runs` lists them."),
    db: str = db_option(),
    package: str | None = typer.Option(
        None,
        "--package",
        help="Verify a result package (`aiperf package`) from its event log alone, "
        "without a database, instead of a run.",
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        help="Where the run's --out folder is now, for its kept weights (default: as the run "
        "was given it, relative to where it was started).",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Recompute a run's score from its records and check every figure; exit 0 only if all pass.

    With --package, a package's from its event log alone."""
    from aiperf.results.verify import verify_run
    from aiperf.store import RecordNotFound

    if (run_id is None) == (package is None):
        raise fail(
            "give a RUN_ID to verify from the database, or --package DIR to verify a result package"
        )
    if package is not None:
        _verify_package(Path(package), as_json)
        return
    assert run_id is not None  # one of the two was given, and it was not --package
    with open_existing(db) as store:
        try:
            checks = verify_run(store, run_id, out=out)
        except RecordNotFound:
            raise fail(
                f"run {run_id} is not in {safe_url(db)}; list runs with `aiperf runs --db {safe_url(db)}`"
            ) from None
        except ValueError as exc:
            raise fail(f"{exc}; only a scored run can be verified") from None
    _print_checks(
        f"verification of run {run_id} (recomputed from its records)",
        f"run {run_id}",
        checks,
        as_json,
    )


def _verify_package(package: Path, as_json: bool) -> None:
    """`aiperf verify --package`: a run's package from its event log alone, or a series'."""
    from aiperf.report.package import verify_package
    from aiperf.report.series_package import is_series_package

    if is_series_package(package):
        _verify_series(package, as_json)
        return
    try:
        logged, checks = verify_package(package)
    except UserError as exc:
        raise fail(str(exc)) from None
    run = "?" if logged is None else logged.run.id  # None: a log too big to read
    _print_checks(
        f"verification of run {run} (recomputed from the event log in {package})",
        f"package {package} (run {run})",
        checks,
        as_json,
    )


def _verify_series(folder: Path, as_json: bool) -> None:
    """`aiperf verify --package` on a series package: each run's checks, then the series'; exit 1
    when any failed."""
    from aiperf.report.series_package import verify_series_package

    try:
        result = verify_series_package(folder)
    except UserError as exc:
        raise fail(str(exc)) from None
    failed = result.failed
    if as_json:
        from aiperf.cli.as_json import checks_json, dumps

        print(
            dumps(
                {
                    "verified": not failed,
                    "failed": failed,
                    "series": result.series,
                    "runs": [
                        {
                            "folder": r.folder,
                            "run": None if r.logged is None else r.logged.run.id,
                            "verified": r.verified,
                            "checks": checks_json(r.checks),
                        }
                        for r in result.runs
                    ],
                    "series_checks": checks_json(result.checks),
                }
            )
        )
    else:
        for run in result.runs:
            title = f"verification of {folder / run.folder} (from its event log)"
            console.print(_checks_table(title, run.checks))
        console.print(_checks_table(f"series {result.series} in {folder}", result.checks))
        console.print(
            f"series package {folder} ({len(result.runs)} runs): "
            + (
                f"[bold red]FAILED[/] {', '.join(failed)}"
                if failed
                else "[green]verified[/]: every run's checks and the series' pass"
            )
        )
    if failed:
        raise typer.Exit(1)


def _checks_table(title: str, checks: list) -> Table:
    """Each check with pass or FAIL and its detail."""
    table = Table(title=title)
    for column in ("check", "result", "detail"):
        table.add_column(column)
    for check in checks:
        table.add_row(
            check.check, "[green]pass[/]" if check.passed else "[bold red]FAIL[/]", check.detail
        )
    return table


def _print_checks(title: str, what: str, checks: list, as_json: bool = False) -> None:
    """The checks as a table, then one line naming every check that failed (or, as JSON,
    `verified` and `checks`); exit 1 if any failed."""
    failed = [c.check for c in checks if not c.passed]
    if as_json:
        from aiperf.cli.as_json import checks_json, dumps

        print(dumps({"verified": not failed, "failed": failed, "checks": checks_json(checks)}))
        if failed:
            raise typer.Exit(1)
        return
    console.print(_checks_table(title, checks))
    console.print(
        f"{what}: "
        + (
            f"[bold red]FAILED[/] {', '.join(failed)}"
            if failed
            else f"[green]verified[/]: all {len(checks)} checks pass"
        )
    )
    if failed:
        raise typer.Exit(1)
