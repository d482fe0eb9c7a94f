"""`aiperf package`: write one folder a reviewer can check without the database, for a run or a
whole series (aiperf.report.package, aiperf.report.series_package); `aiperf verify --package`
checks it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from aiperf.cli.common import console, db_option, fail, open_existing
from aiperf.errors import UserError
from aiperf.urls import safe_url


def package(
    run_id: int | None = typer.Argument(None, help="A scored run, as `aiperf runs` lists them."),
    to: str = typer.Option(..., "--to", help="A new (or empty) folder for the package."),
    series: str | None = typer.Option(
        None,
        "--series",
        help="Package a whole series of repeated runs (`aiperf run --repeat`) instead of RUN_ID: "
        "one run package per run in TO/run-<id>/, and TO/series.json.",
    ),
    db: str = db_option(),
    log: str | None = typer.Option(
        None,
        "--log",
        help="The run's event log, if it is not in the run's folder under its --out "
        "(relative to where the run was started).",
    ),
    submitter: str | None = typer.Option(
        None,
        "--submitter",
        help="Who submits the result, for MLPerf's system description (over the run's "
        "system.submitter and the site file).",
    ),
    status: str | None = typer.Option(
        None,
        "--status",
        help="The system's availability: available, cloud, preview or rdi (over the run's "
        "system.status; rdi when none says).",
    ),
) -> None:
    """Write one folder a reviewer can take away, checkable without the database.

    The event log, the system description, the effective config and its ruleset, the
    verification, the HTML report and a README; `aiperf verify --package DIR` checks it. With
    --series, each run's package and the series' summary (series.json)."""
    if (run_id is None) == (series is None):
        raise fail("give a RUN_ID to package one run, or --series SERIES_ID to package a series")
    if series is not None:
        _package_series(series, Path(to), db, log)
        return
    assert run_id is not None  # one of the two was given, and it was not --series
    _package_run(run_id, Path(to), db, Path(log) if log else None, submitter, status)


def _package_run(
    run_id: int, to: Path, db: str, log: Path | None, submitter: str | None, status: str | None
) -> None:
    """`aiperf package RUN_ID`: the run's package."""
    from aiperf.report.package import write_package
    from aiperf.store import RecordNotFound

    with open_existing(db) as store:
        try:
            folder = write_package(store, run_id, to, log, submitter=submitter, status=status)
        except RecordNotFound:
            raise fail(
                f"run {run_id} is not in {safe_url(db)}; list runs with `aiperf runs --db {safe_url(db)}`"
            ) from None
        except UserError as exc:
            raise fail(str(exc)) from None
    console.print(
        f"run {run_id}: package written to {folder} (check it with `aiperf verify --package {folder}`)"
    )


def _package_series(series: str, to: Path, db: str, log: str | None) -> None:
    """`aiperf package --series`: every run of the series, and series.json."""
    from aiperf.report.series_package import write_series_package

    if log is not None:
        raise fail("--log names one run's event log; a series is packaged from its runs' folders")
    with open_existing(db) as store:
        try:
            folder = write_series_package(store, series, to)
        except UserError as exc:
            raise fail(str(exc)) from None
    console.print(
        f"series {series}: package written to {folder} (check it with "
        f"`aiperf verify --package {folder}`)"
    )
