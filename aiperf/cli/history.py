"""`aiperf history`, `aiperf compare` and `aiperf report`: the Typer side of aiperf.history.query and
aiperf.report.html. Registered in aiperf/cli/main.py; every figure comes from the SQL views."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from aiperf.cli.common import JSON_OPTION, console, db_option, fail, open_existing
from aiperf.errors import UserError
from aiperf.paths import report_path
from aiperf.urls import safe_url

if TYPE_CHECKING:
    from aiperf.store import RunScoreRow


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def history(
    system: str | None = typer.Option(
        None, "--system", "-s", help="System id, hostname or fingerprint prefix."
    ),
    profile: str | None = typer.Option(None, "--profile", "-p", help="Only runs of this profile."),
    db: str = db_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Scored runs over time, oldest first, with each run's change from the previous one."""
    from aiperf.history.query import history as read_history
    from aiperf.history.query import sparkline, workloads
    from aiperf.report.tables import Col, FitTable
    from aiperf.units import format_ops

    with open_existing(db) as store:
        try:
            rows = read_history(store, system=system, profile=profile)
        except UserError as exc:
            raise fail(str(exc)) from None
    if as_json:
        from aiperf.cli.as_json import dumps, history_json

        print(dumps(history_json(rows)))
        return
    scope = " ".join(
        filter(
            None, [f"system {system}" if system else "", f"profile {profile}" if profile else ""]
        )
    )
    columns = (
        Col("run", "right"),
        Col("created (UTC)"),
        Col("system", wrap=True),
        Col("profile", rank=1),
        Col("division", rank=6),
        Col("config", rank=5),
        Col("workers", "right", rank=7),
        Col("budget", "right", rank=8),
        Col("OPS", "right"),
        Col("change", "right"),
        Col("regulated", "right", rank=4),
        Col("MFU", "right", rank=3),
        Col("quality", "right", rank=2),
        Col("valid"),
    )
    title = f"aiperf history{' of ' + scope if scope else ''}"
    console.print(FitTable(columns, [_history_row(r) for r in rows], title=title))
    if not rows:
        console.print("no scored runs yet; run `aiperf run` first")
        return
    # One trend per workload: runs of another division or config are never put on one line.
    for (profile, division, config), group in workloads(rows).items():
        ops = [r.ops for r in group]
        console.print(
            f"trend of OPS, {profile} {division or '-'} {(config or '-')[:8]}, oldest to newest: "
            f"{sparkline(ops)}\n  first {format_ops(ops[0])}OPS, last {format_ops(ops[-1])}OPS, "
            f"best {format_ops(max(ops))}OPS"
        )


def _history_row(r: RunScoreRow) -> list[str]:
    """One scored run's cells for `aiperf history`; valid is yes only when verified too."""
    from aiperf import quality
    from aiperf.report.phases import percent
    from aiperf.results.score import validity_label
    from aiperf.units import format_ops

    return [
        str(r.run_id),
        r.created_at.strftime("%Y-%m-%d %H:%M"),
        f"{r.system_id} {r.hostname}",
        r.profile,
        r.division or "-",
        (r.config_hash or "-")[:8],
        str(r.workers),
        f"{r.budget_s:g} s",
        f"{format_ops(r.ops)}OPS",
        _pct(r.ops_change_pct),
        f"{format_ops(r.regulated_score)}OPS",
        percent(r.mfu),
        quality.shown(r.best_val_accuracy, r.best_val_loss),
        validity_label(r.valid, r.verified),
    ]


def compare(
    run_a: int = typer.Argument(..., help="The reference run."),
    run_b: int = typer.Argument(..., help="The run compared with it."),
    db: str = db_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Two runs side by side, with B's percent difference from A."""
    from aiperf.history.query import compare as compare_runs
    from aiperf.report.tables import Col, FitTable
    from aiperf.results.score import validity_label
    from aiperf.units import flop_rate, operations, ops_rate

    with open_existing(db) as store:
        try:
            pair = compare_runs(store, run_a, run_b)
        except UserError as exc:
            raise fail(str(exc)) from None
    if as_json:
        from aiperf.cli.as_json import compare_json, dumps

        print(dumps(compare_json(pair)))
        return

    def show(value: float | None, unit: str) -> str:
        if value is None:
            return "-"
        shown = {"OPS": ops_rate, "FLOP/s": flop_rate, "ops": operations}.get(unit)
        if shown is not None:  # one unit style (aiperf.units): 18.3 GOPS, 1.23 GFLOP/s
            return shown(value)
        if unit == "s":
            return f"{value:.1f} s"
        return f"{value:.4f}" if not float(value).is_integer() else f"{value:g}"

    rows = [
        [
            "system",
            f"{pair.a.system_id} {pair.a.hostname}",
            f"{pair.b.system_id} {pair.b.hostname}",
            "",
        ],
        ["profile", pair.a.profile, pair.b.profile, ""],
        [
            "valid",
            validity_label(pair.a.valid, pair.a.verified),
            validity_label(pair.b.valid, pair.b.verified),
            "",
        ],
    ]
    rows += [
        [f.figure, show(f.a, f.unit), show(f.b, f.unit), _pct(f.change_pct)] for f in pair.figures
    ]
    columns = (
        Col("figure", style="bold"),
        Col(f"run {run_a}", wrap=True),
        Col(f"run {run_b}", wrap=True),
        Col("difference", "right"),
    )
    console.print(FitTable(columns, rows, title=f"run {run_a} vs run {run_b}"))


def report(
    run_id: int = typer.Argument(..., help="Run id, as `aiperf runs` lists them."),
    db: str = db_option(),
    output: Path | None = typer.Option(
        None,
        "--to",
        "-o",
        help="HTML file (default aiperf-report-DATABASE-RUN.html: reports of two databases "
        "never overwrite each other).",
    ),
) -> None:
    """Write one self-contained HTML page about a run: score over time, trials, workers, history."""
    from aiperf.report.html import write_report
    from aiperf.store import RecordNotFound

    with open_existing(db) as store:
        try:
            path = write_report(store, run_id, output or Path(report_path(".", db, run_id).name))
        except RecordNotFound as exc:
            raise fail(f"{exc}; list runs with `aiperf runs --db {safe_url(db)}`") from None
        except UserError as exc:
            raise fail(str(exc)) from None
    console.print(f"wrote {path}")
