"""One benchmark run from the command line: the flow with a live line, then its score and status.

The CLI is where the library meets Prefect: the benchmark flow is loaded by its entrypoint, as a
Prefect deployment loads it (prefect.yaml), so nothing in aiperf/ imports flows/. Used by
`aiperf run` (aiperf.cli.run) for one run and by `aiperf run --repeat` (aiperf.cli.series) for each
run of a series.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.live import Live
from rich.table import Table

from aiperf.cli.common import console, err, fail
from aiperf.cli.exit_codes import EXIT_TAKEN_OVER, EXIT_VALID, run_exit_code, why_not_valid
from aiperf.cli.runs import load_run, print_score
from aiperf.errors import UserError

if TYPE_CHECKING:
    from aiperf.config import BenchmarkConfig
    from aiperf.store import RunRecord


# The benchmark flow by module path: flows/benchmark.py of the checkout, installed as aiperf_flows (see
# pyproject.toml), so it loads from an editable install or a wheel in any folder.
BENCHMARK_FLOW = "aiperf_flows.benchmark:benchmark_config"


def _live_view():
    """A live line: elapsed of budget, trials done and running, current OPS."""
    from aiperf import quality
    from aiperf.lifecycle.live import LiveFigures
    from aiperf.units import format_ops

    def render(p: LiveFigures) -> Table:
        table = Table.grid(padding=(0, 2))
        best = "-" if p.best_quality is None else f"{p.best_quality:.3f}"
        table.add_row(
            f"[bold]elapsed[/] {p.elapsed_s:6.1f} s of {p.budget_s:g} s",
            f"[bold]trials[/] {p.trials_done} done, {p.trials_running} running",
            f"[bold]OPS[/] {format_ops(p.ops_per_s)}OPS",
            f"[bold]best {quality.label(p.quality)}[/] {best}",
        )
        return table

    return render


def run_one(
    config: BenchmarkConfig,
    resume: int | None,
    series: str | None = None,
    series_index: int | None = None,
    verbose: bool = False,
) -> RunRecord:
    """The benchmark flow with a live line on the terminal, then the score, and the line saying
    why a result is not valid; the run's record. A mistake or an interrupt is typer.Exit. What the
    libraries write while the flow runs goes to a log file named at the end (aiperf.cli.
    console_log), unless `verbose`."""
    from aiperf.cli.console_log import console_log_path

    log = None if verbose else console_log_path(config.out)
    try:
        result = _flow_with_live_line(config, resume, series, series_index, log)
    except BaseException:
        _name_the_log(log)
        raise
    record = load_run(result["run_id"], config.db)
    print_score(record)
    _name_the_log(log)
    code = run_exit_code(record)
    if code != EXIT_VALID:
        err.print(
            f"[bold red]run {record.id}:[/] {why_not_valid(record)} (exit status {code})",
            highlight=False,
            soft_wrap=True,
        )
    return record


def _flow_with_live_line(
    config: BenchmarkConfig,
    resume: int | None,
    series: str | None,
    series_index: int | None,
    log: Path | None,
) -> dict[str, Any]:
    """The flow's outcome, its live line on the console and, with `log`, the libraries' output in
    that file; a mistake or an interrupt said in one line, as typer.Exit."""
    from prefect.flows import Flow, load_flow_from_entrypoint

    from aiperf.cli.console_log import stderr_to, warnings_to
    from aiperf.lifecycle import live
    from aiperf.lifecycle.run import ResultNotValid

    benchmark: Flow[..., dict[str, Any]] = load_flow_from_entrypoint(
        BENCHMARK_FLOW, use_placeholder_flow=False
    )
    render = _live_view()
    # Rich's own redirection of stderr would bring the libraries' lines back above the live line.
    with Live(
        console=console, refresh_per_second=1, transient=False, redirect_stderr=log is None
    ) as display:
        live.set_display(lambda figures: display.update(render(figures)))
        say = None if log is None else _warning_above(display)
        try:
            with stderr_to(log), warnings_to(say):
                return benchmark(
                    config=config, resume=resume, series=series, series_index=series_index
                )
        except ResultNotValid as exc:  # scored; its exit status and reason are printed below
            return exc.outcome
        except UserError as exc:
            from aiperf.store import RunTakenOver

            if isinstance(exc, RunTakenOver):
                err.print(f"[bold red]stopped:[/] {exc}", highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_TAKEN_OVER) from None
            raise fail(str(exc)) from None
        except KeyboardInterrupt as exc:  # SIGTERM or Ctrl-C: the run is recorded interrupted
            err.print(
                f"[bold red]interrupted:[/] {exc or 'stopped'}; the run's epochs are recorded: "
                "`aiperf runs` lists it, `aiperf recover RUN_ID` scores it, "
                "`aiperf run --resume RUN_ID` continues it",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
        finally:
            live.set_display(None)


def _warning_above(display: Live) -> Callable[[str], None]:
    """One of aiperf's warnings on the console, above the live line, in one line."""

    def say(line: str) -> None:
        display.console.print(line, style="yellow", highlight=False, soft_wrap=True, markup=False)

    return say


def _name_the_log(log: Path | None) -> None:
    """Where the libraries' output of the run went (nothing when it went to the console)."""
    if log is not None and log.exists():
        console.print(f"log: {log}", highlight=False, soft_wrap=True)
