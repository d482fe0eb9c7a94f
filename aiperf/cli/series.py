"""`aiperf run --repeat N`: N runs of one config back to back as one series, then its figures.

Each run is aiperf.cli.benchmark.run_one; the series' exit status is the highest of its runs'
(aiperf.cli.exit_codes), and a run that crashes, is interrupted or is refused stops it there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from aiperf.cli.benchmark import run_one
from aiperf.cli.common import console, err
from aiperf.cli.exit_codes import EXIT_TAKEN_OVER, EXIT_VALID, run_exit_code

if TYPE_CHECKING:
    from aiperf.config import BenchmarkConfig
    from aiperf.store import RunRecord


def run_series(config: BenchmarkConfig, repeat: int, verbose: bool = False) -> None:
    """`repeat` runs of one config back to back, recorded as one series (a new uuid4 hex id, and
    each run's place in it), then the series' figures. A run that crashes, is interrupted or is
    refused stops the series with one line: the runs before it stay recorded."""
    import uuid

    series = uuid.uuid4().hex
    console.print(
        f"series {series}: {repeat} runs of {config.profile}, {config.budget_s:g} s each",
        highlight=False,
    )
    records: list[RunRecord] = []
    for index in range(1, repeat + 1):
        console.print(f"[bold]series run {index} of {repeat}[/]", highlight=False)
        try:
            records.append(run_one(config, None, series, index, verbose))
        except (typer.Exit, KeyboardInterrupt) as exc:
            code = exc.exit_code if isinstance(exc, typer.Exit) else 130
            why = {130: "interrupted", 2: "refused", EXIT_TAKEN_OVER: "taken over"}.get(
                code, "stopped"
            )
            _series_stopped(series, index, repeat, records, f"{why} (exit status {code})")
            raise typer.Exit(code) from None
        except Exception as exc:
            _series_stopped(
                series, index, repeat, records, f"crashed ({type(exc).__name__}: {exc})"
            )
            raise typer.Exit(1) from None
    _print_series(series, records)
    code = max(run_exit_code(r) for r in records)
    if code != EXIT_VALID:
        bad = [str(r.id) for r in records if run_exit_code(r) != EXIT_VALID]
        err.print(
            f"[bold red]series {series}:[/] run{'s' if len(bad) > 1 else ''} {', '.join(bad)} "
            f"of {repeat} not valid and verified (exit status {code})",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code)


def _series_stopped(
    series: str, index: int, repeat: int, records: list[RunRecord], why: str
) -> None:
    """One line: where the series stopped, why, and which of its runs finished before."""
    done = ", ".join(str(r.id) for r in records) or "none"
    err.print(
        f"[bold red]series {series} stopped:[/] run {index} of {repeat} {why}; runs finished "
        f"before it: {done} (`aiperf runs` lists every run)",
        highlight=False,
        soft_wrap=True,
    )


def _print_series(series: str, records: list[RunRecord]) -> None:
    """The series' OPS and regulated score: median, minimum, maximum, CV and the figure a ranking
    uses (by the ruleset's series rule), then whether it has the runs a ranked result needs."""
    from aiperf.report.tables import Col, FitTable
    from aiperf.results.series import MEASURES, enough_runs, series_rule, summarise_runs
    from aiperf.units import ops_rate, ops_span

    ruleset = records[0].ruleset or "its ruleset"
    rule = series_rule(records[0].ruleset)
    if not any(r.score for r in records):
        console.print(f"series {series}: no run has a score to summarise", highlight=False)
        return
    summaries = summarise_runs(records, rule)
    columns = (
        Col("figure", style="bold"),
        Col("median", "right"),
        Col("minimum", "right"),
        Col("maximum", "right"),
        Col("CV", "right"),
        Col("ranked", "right"),
        Col("mean's 95% interval", "right"),
    )
    rows = [
        [
            MEASURES[measure],
            *(ops_rate(v) for v in (s.median, s.minimum, s.maximum)),
            f"{100 * s.cv:.1f}%",
            ops_rate(s.ranked),
            ops_span(s.low, s.high),
        ]
        for measure, s in summaries.items()
    ]
    ids = ", ".join(str(r.id) for r in records)
    console.print(FitTable(columns, rows, title=f"series {series} (runs {ids})"))
    if rule is None:
        console.print(f"{ruleset} ranks single runs; ranked is the median", highlight=False)
    else:
        valid = sum(run_exit_code(r) == EXIT_VALID for r in records)
        enough = enough_runs(valid, rule)
        console.print(
            f"{ruleset}: a ranked closed result is {rule.describe()}; this series has {valid} "
            f"valid of {len(records)} ({'enough' if enough else 'too few to rank'})",
            highlight=False,
        )
