"""`aiperf ...`: run the benchmark, look at runs, manage the database, count operations.

A user's mistake (a bad profile, budget, worker count or database URL, a run that is not there) is
one line on stderr and exit status 2, never a traceback; and it is caught before anything is
written. Commands that only read (runs, show, history, compare, report) never create or migrate a
database.

The CLI is where the library meets Prefect: `aiperf run` validates the config once, then runs the
benchmark flow, which it loads by its entrypoint as a Prefect deployment does (prefect.yaml), so
nothing in aiperf/ imports flows/.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.live import Live
from rich.table import Table

from aiperf.cli.common import (
    JSON_OPTION,
    Typer,
    console,
    db_option,
    err,
    fail,
    open_existing,
)
from aiperf.cli.data import stage
from aiperf.cli.flops import flops
from aiperf.cli.history import compare, history, report
from aiperf.cli.results import app as results_app
from aiperf.cli.rules import rules
from aiperf.config import BenchmarkConfig
from aiperf.errors import UserError
from aiperf.urls import DEFAULT_DB_URL, database_url, safe_url

if TYPE_CHECKING:
    from aiperf.store import RunRecord

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
db_app = Typer(
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Manage the database's schema (migrations).",
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


# `aiperf run`'s exit status, so a script or a scheduler can tell a result it may publish from one
# it may not without reading the output (README "Command line", docs/rules.md "Validity"). Besides
# these: 1 is a crash (a traceback), 2 a user's mistake (one line, nothing recorded), 130 a run
# interrupted by SIGINT or SIGTERM.
EXIT_VALID = 0  # scored, valid by its rules, and every check of its verification passed
EXIT_INVALID = 3  # scored and verified, but it breaks a validity rule (too short, simulated, ...)
EXIT_VERIFICATION_FAILED = 4  # a check of its verification failed (or it was never verified)
# Another process (`aiperf recover`, `run --resume`) took the run over while this one had stopped
# beating: this process stopped without another write, and the run goes on being the other's. Not
# 2: nothing in the command was wrong, and a script must not fix and run again what runs elsewhere.
EXIT_TAKEN_OVER = 5

# The benchmark flow by module path: flows/benchmark.py of the checkout, installed as aiperf_flows (see
# pyproject.toml), so it loads from an editable install or a wheel in any folder.
BENCHMARK_FLOW = "aiperf_flows.benchmark:benchmark_config"


def _live_view():
    """A live line: elapsed of budget, trials done and running, current OPS."""
    from aiperf.lifecycle.live import LiveFigures
    from aiperf.units import format_ops

    def render(p: LiveFigures) -> Table:
        table = Table.grid(padding=(0, 2))
        accuracy = "-" if p.best_val_accuracy is None else f"{p.best_val_accuracy:.3f}"
        table.add_row(
            f"[bold]elapsed[/] {p.elapsed_s:6.1f} s of {p.budget_s:g} s",
            f"[bold]trials[/] {p.trials_done} done, {p.trials_running} running",
            f"[bold]OPS[/] {format_ops(p.ops_per_s)}OPS",
            f"[bold]best val acc[/] {accuracy}",
        )
        return table

    return render


@app.command(short_help="Run the benchmark for a fixed budget and print its score.")
def run(
    profile: str = typer.Option(
        "quick", "--profile", "-p", help="Profile name or a YAML profile file."
    ),
    budget: str | None = typer.Option(
        None, "--budget", "-b", help="Wall-clock budget, e.g. 90s, 3m, 1h."
    ),
    workers: str | None = typer.Option(
        None, "--workers", "-w", help="Worker count, or 'auto' (one per core)."
    ),
    db: str | None = typer.Option(
        None,
        "--db",
        help=f"Database URL (default: $AIPERF_DB_URL, else the profile's, else {DEFAULT_DB_URL}).",
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seed for data, search and weights."),
    out: str | None = typer.Option(None, "--out", help="Folder for staged data and search state."),
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        help="Where workers run: local, slurm, pbs, lsf or sge (job defaults: aiperf/cluster/jobqueue.yaml), "
        "or scheduler (a running Dask scheduler: --cluster-opt address=tls://HOST:PORT).",
    ),
    cluster_opt: list[str] | None = typer.Option(
        None,
        "--cluster-opt",
        help="A job setting KEY=VALUE, repeatable: queue, account, walltime, cores, memory, "
        "gpus, workers_per_job, prologue (one shell line each), interface; for "
        "--cluster scheduler address, tls_ca_file, tls_cert, tls_key.",
    ),
    adaptive: bool = typer.Option(
        False,
        "--adaptive",
        help="Scale jobs between 1 and --workers with demand "
        "(default: a fixed number of workers).",
    ),
    settings: list[str] | None = typer.Option(
        None,
        "--set",
        help="Override a profile setting KEY=VALUE (dotted key, YAML value), repeatable: "
        "e.g. --set data.source=/data/imagenet --set train.epochs=[2,4].",
    ),
    allow_concurrent: bool = typer.Option(
        False,
        "--allow-concurrent",
        help="Run even while another local run is running on this machine "
        "(the two then measure each other's load).",
    ),
    resume: int | None = typer.Option(
        None,
        "--resume",
        help="Continue a lost or interrupted run (its own config, seed and remaining "
        "budget); give only --db with it.",
    ),
    repeat: int = typer.Option(
        1,
        "--repeat",
        min=1,
        help="Run the config N times back to back as one series (a series id on each run), "
        "then print the median, minimum, maximum and CV of OPS and the regulated score.",
    ),
) -> None:
    """Run the benchmark for a fixed wall-clock budget on every worker and print its score.

    Exit status: 0 valid and verified; 3 invalid by its rules; 4 its verification failed; 2 a
    mistake in the command (nothing recorded); 1 a crash; 130 interrupted. With --repeat, 0 only
    when every run of the series is valid and verified, else the highest of its runs' statuses
    (4 before 3); a crash or an interrupt stops the series there."""
    from aiperf.config import load_config

    machine: int | None = None  # the local-run lock, held while this run (or series) runs
    try:
        if resume is not None:
            if repeat != 1:
                raise UserError(
                    "--repeat starts a series of new runs and --resume continues one run; give "
                    "one of them"
                )
            _only_db_with_resume(
                profile != "quick",
                budget,
                workers,
                seed,
                out,
                cluster,
                cluster_opt,
                adaptive,
                settings,
            )
            from aiperf.lifecycle.recovery import resume_config

            config = resume_config(database_url(db), resume)
        else:
            overrides = {
                **_setting_overrides(settings or []),
                **_cluster_overrides(cluster, cluster_opt or [], adaptive),
            }
            config = load_config(
                profile,
                budget=budget,
                workers=workers,
                db=db,
                seed=seed,
                out=out,
                overrides=overrides,
            )
        from aiperf.lifecycle.preflight import check_before_recording

        check_before_recording(config)  # --out, the data, a running scheduler: before any record
        machine = _claim_machine(
            config.cluster.kind, allow_concurrent
        )  # refused before anything is written
        from aiperf.store import Store

        Store.open(config.db).close()  # a bad database URL fails here, before the flow starts
    except UserError as exc:
        if machine is not None:
            os.close(machine)
        raise fail(str(exc)) from None
    try:
        if repeat == 1:
            _run_flow(config, resume)
        else:
            _run_series(config, repeat)
    finally:
        if machine is not None:
            os.close(machine)  # the run is over: the next local run may start


def _run_flow(config: BenchmarkConfig, resume: int | None) -> None:
    """One run: its score, then its exit status."""
    record = _run_one(config, resume)
    code = run_exit_code(record)
    if code != EXIT_VALID:
        raise typer.Exit(code)


def _run_series(config: BenchmarkConfig, repeat: int) -> None:
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
            records.append(_run_one(config, None, series, index))
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
    from aiperf.units import ops_rate

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
    )
    rows = [
        [
            MEASURES[measure],
            *(ops_rate(v) for v in (s.median, s.minimum, s.maximum)),
            f"{100 * s.cv:.1f}%",
            ops_rate(s.ranked),
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


def _run_one(
    config: BenchmarkConfig,
    resume: int | None,
    series: str | None = None,
    series_index: int | None = None,
) -> RunRecord:
    """The benchmark flow with a live line on the terminal, then the score, and the line saying
    why a result is not valid; the run's record. A mistake or an interrupt is typer.Exit."""
    from prefect.flows import Flow, load_flow_from_entrypoint

    from aiperf.lifecycle import live
    from aiperf.lifecycle.run import ResultNotValid

    benchmark: Flow[..., dict[str, Any]] = load_flow_from_entrypoint(
        BENCHMARK_FLOW, use_placeholder_flow=False
    )
    render = _live_view()
    with Live(console=console, refresh_per_second=1, transient=False) as display:
        live.set_display(lambda figures: display.update(render(figures)))
        try:
            result = benchmark(
                config=config, resume=resume, series=series, series_index=series_index
            )
        except ResultNotValid as exc:  # scored; its exit status and reason are printed below
            result = exc.outcome
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
    record = _load_run(result["run_id"], config.db)
    _print_score(record)
    code = run_exit_code(record)
    if code != EXIT_VALID:
        err.print(
            f"[bold red]run {record.id}:[/] {_why_not_valid(record)} (exit status {code})",
            highlight=False,
            soft_wrap=True,
        )
    return record


def run_exit_code(record: RunRecord) -> int:
    """0 only for a valid result whose every check passed; 4 when its verification failed (or
    never ran), whatever the rules say, since then not even its verdict can be trusted; else 3."""
    if record.score is None or record.verified is not True:
        return EXIT_VERIFICATION_FAILED
    return EXIT_VALID if record.score.valid else EXIT_INVALID


def _why_not_valid(record: RunRecord) -> str:
    """One line: the checks that failed, or the rules the result breaks."""
    if record.score is None or record.verification is None:
        return "the result was not verified, so it is not valid"
    failed = [c.check for c in record.verification if not c.passed]
    if failed:
        return (
            f"verification FAILED ({', '.join(failed)}), so the result is invalid; "
            f"`aiperf verify {record.id}` shows each check"
        )
    return "the result is invalid: " + "; ".join(record.score.reasons)


def _claim_machine(cluster_kind: str, allow_concurrent: bool) -> int | None:
    """A local run holds this machine's local-run lock (a descriptor) while it runs, so a second local
    run (which would share the cores, and so measure the first) is refused; the lock dies with the
    process if it crashes. Job-queue runs share nothing and take none."""
    if allow_concurrent or cluster_kind != "local":
        return None
    from aiperf.lifecycle.locks import claim_local_run

    return claim_local_run()


def _only_db_with_resume(*given: object) -> None:
    """--resume continues a run with its own config: any other run option is an error, not ignored."""
    if any(bool(option) for option in given):
        raise UserError(
            "--resume continues a run with its own config, seed and remaining budget; give only "
            "--resume RUN_ID and --db URL"
        )


def _setting_overrides(settings: list[str]) -> dict:
    """--set KEY=VALUE pairs as dotted config overrides; values are read as YAML (numbers, lists)."""
    import yaml

    overrides = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(
                f"--set {item!r} is not KEY=VALUE; write e.g. --set data.source=/data/imagenet"
            )
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise UserError(f"--set {item!r}: the value is not valid YAML") from None
    return overrides


def _cluster_overrides(kind: str | None, options: list[str], adaptive: bool) -> dict:
    """--cluster, --cluster-opt KEY=VALUE and --adaptive as config overrides of the `cluster` section."""
    import yaml

    from aiperf.config import ClusterConfig

    settable = sorted(set(ClusterConfig.model_fields) - {"kind", "adaptive"})
    overrides: dict = {}
    if kind is not None:
        overrides["cluster.kind"] = kind
    if adaptive:
        overrides["cluster.adaptive"] = True
    for option in options:
        key, sep, text = option.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in settable:
            raise UserError(
                f"--cluster-opt {option!r}: give KEY=VALUE with KEY one of {', '.join(settable)}"
            )
        if key == "prologue":
            overrides.setdefault("cluster.prologue", []).append(text)
            continue
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        # Walltimes (01:00:00) and memory (8GB) stay text; counts become numbers.
        overrides[f"cluster.{key}"] = (
            text if key in ("walltime", "memory", "queue", "account", "interface") else value
        )
    return overrides


def _load_run(run_id: int, db: str) -> RunRecord:
    """The run with its score and trials, or a one-line error naming how to find run ids."""
    from aiperf.store import RecordNotFound

    with open_existing(db) as store:
        try:
            return store.get_run(run_id)
        except RecordNotFound:
            raise fail(
                f"run {run_id} is not in {safe_url(db)}; list runs with `aiperf runs --db {safe_url(db)}`"
            ) from None


def _print_score(record: RunRecord) -> None:
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


@app.command()
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
        Col("val acc", "right", rank=1),
        Col("valid"),
    )
    rows = [_run_row(r) for r in records]
    console.print(FitTable(columns, rows, title=f"runs in {safe_url(db)}"))


def _run_row(r: RunRecord) -> list[str]:
    """One run's cells for `aiperf runs`; "-" for the figures of a run without a score. Valid is
    yes only when its verification passed too (aiperf.results.score.validity_label)."""
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
        f"{s.best_val_accuracy:.4f}" if s and s.best_val_accuracy is not None else "-",
        validity_label(s.valid, r.verified, bool(for_review(r))) if s else "-",
    ]


@app.command(short_help="Print one run's score, its workers' time and its trials.")
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
    record = _load_run(run_id, db)
    if as_json:
        from aiperf.cli.as_json import dumps, run_json

        print(dumps(run_json(record, with_trials=True)))
        return
    from aiperf.report.trials import phase_table, search_tree, time_table, trial_table

    _print_score(record)
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


@app.command()
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
    _print_score(record)


@app.command()
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
        from aiperf.report.package import verify_package
        from aiperf.report.series_package import is_series_package

        if is_series_package(Path(package)):
            _verify_series(Path(package), as_json)
            return
        try:
            logged, checks = verify_package(Path(package))
        except UserError as exc:
            raise fail(str(exc)) from None
        run = "?" if logged is None else logged.run.id  # None: a log too big to read
        _print_checks(
            f"verification of run {run} (recomputed from the event log in {package})",
            f"package {package} (run {run})",
            checks,
            as_json,
        )
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


@app.command(short_help="Write one folder a reviewer can check without the database.")
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
    from aiperf.report.package import write_package
    from aiperf.store import RecordNotFound

    if (run_id is None) == (series is None):
        raise fail("give a RUN_ID to package one run, or --series SERIES_ID to package a series")
    if series is not None:
        _package_series(series, Path(to), db, log)
        return
    assert run_id is not None  # one of the two was given, and it was not --series

    with open_existing(db) as store:
        try:
            folder = write_package(
                store,
                run_id,
                Path(to),
                Path(log) if log else None,
                submitter=submitter,
                status=status,
            )
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


@db_app.command("upgrade")
def db_upgrade(db: str = db_option()) -> None:
    """Create the database if needed and apply pending migrations.

    Runs do this themselves; use it to prepare a shared database, or to bring an older one up to
    date for the read-only commands."""
    from aiperf.store import database

    try:
        engine = database.open_engine(db)
    except UserError as exc:
        raise fail(str(exc)) from None
    try:
        before = database.current_revision(engine)
        database.upgrade(engine)
        after = database.current_revision(engine)
    finally:
        engine.dispose()
    change = "already at" if before == after else f"upgraded from {before or 'empty'} to"
    console.print(f"{safe_url(db)}: {change} revision {after}")


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
