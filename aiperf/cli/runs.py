"""`aiperf runs | show | recover`: list the recorded runs, print one, score a lost one.

runs and show only read (nothing created, nothing migrated); recover closes and scores a run from
what it recorded. load_run and print_score are shared with `aiperf run` (aiperf.cli.benchmark),
which prints a finished run's score the way `aiperf show` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from aiperf.cli.common import JSON_OPTION, console, db_option, fail, open_existing
from aiperf.errors import UserError
from aiperf.urls import safe_url

if TYPE_CHECKING:
    from aiperf.store import RunRecord


def load_run(run_id: int, db: str) -> RunRecord:
    """The run with its score and trials, or a one-line error naming how to find run ids."""
    from aiperf.store import RecordNotFound

    with open_existing(db) as store:
        try:
            return store.get_run(run_id)
        except RecordNotFound:
            raise fail(
                f"run {run_id} is not in {safe_url(db)}; list runs with `aiperf runs --db {safe_url(db)}`"
            ) from None


def print_score(record: RunRecord) -> None:
    from aiperf.report.summary import score_rows, title
    from aiperf.report.tables import Col, FitTable

    run_id = record.id
    score = record.score
    if score is None:
        console.print(
            f"run {run_id} ({record.status}) has no score"
            + (f": {record.message}" if record.message else "")
        )
        return
    columns = (Col("figure", style="bold"), Col("value", wrap=True))
    rows = [[row["figure"], row["value"]] for row in score_rows(record)]
    # The result in one line above its figures, as the HTML report's title says it.
    console.print(FitTable(columns, rows, title=title(record), show_header=False))


def runs(
    db: str = db_option(),
    limit: int = typer.Option(50, "--limit", min=1),
    as_json: bool = JSON_OPTION,
) -> None:
    """List runs, newest first.

    A narrow terminal leaves out the regulated score, budget and workers first (`aiperf show RUN`
    has them all)."""
    from aiperf.report.tables import Col, FitTable

    with open_existing(db) as store:
        records = store.list_runs(limit)
    if as_json:
        from aiperf.cli.as_json import dumps, run_json

        print(dumps([run_json(r) for r in records]))
        return
    columns = (
        Col("run", "right"),
        Col("created (UTC)"),
        Col("profile"),
        Col("workers", "right", rank=2),
        Col("budget", "right", rank=3),
        Col("status"),
        Col("OPS", "right"),
        Col("regulated", "right", rank=4),
        Col("quality", "right", rank=1),
        Col("valid"),
    )
    rows = [_run_row(r) for r in records]
    console.print(FitTable(columns, rows, title=f"runs in {safe_url(db)}"))


def _run_row(r: RunRecord) -> list[str]:
    """One run's cells for `aiperf runs`; "-" for the figures of a run without a score. Valid is
    yes only when its verification passed too (aiperf.results.score.validity_label)."""
    from aiperf import quality
    from aiperf.report.summary import for_review
    from aiperf.results.score import validity_label
    from aiperf.units import format_ops

    s = r.score
    return [
        str(r.id),
        r.created_at.strftime("%Y-%m-%d %H:%M"),
        r.profile,
        str(r.workers),
        f"{r.budget_s:g} s",
        str(r.status),
        f"{format_ops(s.ops)}OPS" if s else "-",
        f"{format_ops(s.regulated_score)}OPS" if s else "-",
        quality.shown(s.best_val_accuracy, s.best_val_loss) if s else "-",
        validity_label(s.valid, r.verified, bool(for_review(r))) if s else "-",
    ]


def show(
    run_id: int = typer.Argument(..., help="Run id, as `aiperf runs` lists them."),
    db: str = db_option(),
    tree: bool = typer.Option(
        False, "--tree", help="Draw the search tree: parent to child, by morphism."
    ),
    phases: bool = typer.Option(
        False, "--phases", help="List each trial's phases (build ... report) in seconds."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Print one run's score, where its workers' time went, and its trials.

    With --tree, how the search grew them; with --phases, each trial's phases."""
    record = load_run(run_id, db)
    if as_json:
        from aiperf.cli.as_json import dumps, run_json

        print(dumps(run_json(record, with_trials=True)))
        return
    from aiperf.report.trials import phase_table, search_tree, time_table, trial_table

    print_score(record)
    _print_state(record)
    spent = time_table(record)
    if spent is not None:
        console.print()  # tables without boxes: a blank line between sections
        console.print(spent)
    console.print()
    console.print(
        search_tree(record) if tree else phase_table(record) if phases else trial_table(record)
    )


def _print_state(record: RunRecord) -> None:
    """A lost run says so and what to do; a window of several segments shows each, and the gaps
    between them that its score does not count."""
    from aiperf.store import window_gaps

    if record.status == "lost":
        last = (
            record.heartbeat_at.strftime("%Y-%m-%d %H:%M:%S") if record.heartbeat_at else "never"
        )
        console.print(
            f"run {record.id} is [bold red]lost[/]: its process stopped (last heartbeat {last} UTC); "
            f"`aiperf recover {record.id}` scores it, `aiperf run --resume {record.id}` continues it"
        )
    if len(record.windows) > 1:
        gaps = window_gaps(record.windows)
        for window in record.windows:
            length = "open" if window.length_s is None else f"{window.length_s:.1f} s"
            gap = (
                f", then a gap of {gaps[window.segment]:.1f} s (not counted)"
                if window.segment < len(gaps)
                else ""
            )
            console.print(
                f"window segment {window.segment}: {window.started_at:%H:%M:%S} UTC, {length}{gap}"
            )


def recover(
    run_id: int = typer.Argument(
        ..., help="A lost or interrupted run, as `aiperf runs` lists them."
    ),
    db: str = db_option(),
) -> None:
    """Close a lost or interrupted run and score it from what it recorded.

    Its running trials become interrupted, its window ends at its last recorded epoch, and the
    score is invalid ("recovered after a crash"). The run can still be resumed afterwards
    (`aiperf run --resume`)."""
    from aiperf.lifecycle.recovery import recover as recover_run

    try:
        record = recover_run(db, run_id)
    except UserError as exc:
        raise fail(str(exc)) from None
    print_score(record)
