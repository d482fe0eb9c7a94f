"""`aiperf run`: read the command's options into one validated config, then run it (or a series).

Everything a user can get wrong (a bad profile, budget, worker count, --set or --cluster-opt, a
database URL, another local run on this machine) is caught here, before anything is written, and
is one line and exit status 2. The run itself is aiperf.cli.benchmark, a series aiperf.cli.series.
"""

from __future__ import annotations

import os

import typer

from aiperf.cli.benchmark import run_one
from aiperf.cli.common import fail
from aiperf.cli.exit_codes import EXIT_VALID, run_exit_code
from aiperf.cli.series import run_series
from aiperf.config import BenchmarkConfig, RunRequest
from aiperf.errors import UserError
from aiperf.urls import DEFAULT_DB_URL, database_url


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
                RunRequest(profile, budget, workers, db, seed, out, overrides=overrides)
            )
        from aiperf.lifecycle.preflight import check_before_recording

        check_before_recording(config)  # --out, the data, a running scheduler: before any record
        machine = _hold_machine_lock(
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
            run_series(config, repeat)
    finally:
        if machine is not None:
            os.close(machine)  # the run is over: the next local run may start


def _run_flow(config: BenchmarkConfig, resume: int | None) -> None:
    """One run: its score, then its exit status."""
    record = run_one(config, resume)
    code = run_exit_code(record)
    if code != EXIT_VALID:
        raise typer.Exit(code)


def _hold_machine_lock(cluster_kind: str, allow_concurrent: bool) -> int | None:
    """A local run holds this machine's local-run lock (a descriptor) while it runs, so a second local
    run (which would share the cores, and so measure the first) is refused; the lock dies with the
    process if it crashes. Job-queue runs share nothing and take none."""
    if allow_concurrent or cluster_kind != "local":
        return None
    from aiperf.lifecycle.locks import hold_local_run_lock

    return hold_local_run_lock()


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
