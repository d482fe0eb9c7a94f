"""`aiperf run`: read the command's options into one validated config, then run it (or a series).

Everything a user can get wrong (a bad profile, budget, worker count, --set or --cluster-opt, a
database URL, another local run on this machine) is caught here, before anything is written, and
is one line and exit status 2. The run itself is aiperf.cli.benchmark, a series aiperf.cli.series.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from aiperf.cli.benchmark import run_one
from aiperf.cli.common import fail
from aiperf.cli.console_log import quiet_at_exit
from aiperf.cli.exit_codes import EXIT_VALID, run_exit_code
from aiperf.cli.series import run_series
from aiperf.config import BenchmarkConfig, RunRequest, load_config
from aiperf.errors import UserError
from aiperf.urls import DEFAULT_DB_URL, database_url

Profile = Annotated[
    str, typer.Option("--profile", "-p", help="Profile name or a YAML profile file.")
]
Budget = Annotated[
    str | None, typer.Option("--budget", "-b", help="Wall-clock budget, e.g. 90s, 3m, 1h.")
]
Workers = Annotated[
    str | None,
    typer.Option("--workers", "-w", help="Worker count, or 'auto' (one per core)."),
]
Db = Annotated[
    str | None,
    typer.Option(
        "--db",
        help=f"Database URL (default: $AIPERF_DB_URL, else the profile's, else {DEFAULT_DB_URL}).",
    ),
]
Seed = Annotated[int | None, typer.Option("--seed", help="Seed for data, search and weights.")]
Out = Annotated[str | None, typer.Option("--out", help="Folder for staged data and search state.")]
Cluster = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Where workers run: local, slurm, pbs, lsf or sge (job defaults: aiperf/cluster/jobqueue.yaml), "
        "or scheduler (a running Dask scheduler: --cluster-opt address=tls://HOST:PORT).",
    ),
]
ClusterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--cluster-opt",
        help="A job setting KEY=VALUE, repeatable: queue, account, walltime, cores, memory, "
        "gpus, workers_per_job, prologue (one shell line each), interface; for "
        "--cluster scheduler address, tls_ca_file, tls_cert, tls_key.",
    ),
]
Adaptive = Annotated[
    bool,
    typer.Option(
        "--adaptive",
        help="Scale jobs between 1 and --workers with demand "
        "(default: a fixed number of workers).",
    ),
]
Settings = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a profile setting KEY=VALUE (dotted key, YAML value), repeatable: "
        "e.g. --set data.source=/data/imagenet --set train.epochs=[2,4].",
    ),
]
AllowConcurrent = Annotated[
    bool,
    typer.Option(
        "--allow-concurrent",
        help="Run even while another local run is running on this machine "
        "(the two then measure each other's load).",
    ),
]
Resume = Annotated[
    int | None,
    typer.Option(
        "--resume",
        help="Continue a lost or interrupted run (its own config, seed and remaining "
        "budget); give only --db with it.",
    ),
]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Show what the libraries write during the run (Prefect's log, TensorFlow's, Dask's) "
        "on the console, instead of in the log file named at the end.",
    ),
]
Repeat = Annotated[
    int,
    typer.Option(
        "--repeat",
        min=1,
        help="Run the config N times back to back as one series (a series id on each run), "
        "then print the median, minimum, maximum and CV of OPS and the regulated score.",
    ),
]


def run(
    profile: Profile = "quick",
    budget: Budget = None,
    workers: Workers = None,
    db: Db = None,
    seed: Seed = None,
    out: Out = None,
    cluster: Cluster = None,
    cluster_opt: ClusterOpt = None,
    adaptive: Adaptive = False,
    settings: Settings = None,
    allow_concurrent: AllowConcurrent = False,
    resume: Resume = None,
    repeat: Repeat = 1,
    verbose: Verbose = False,
) -> None:
    """Run the benchmark for a fixed wall-clock budget on every worker and print its score.

    Exit status: 0 valid and verified; 3 invalid by its rules; 4 its verification failed; 2 a
    mistake in the command (nothing recorded); 1 a crash; 130 interrupted. With --repeat, 0 only
    when every run of the series is valid and verified, else the highest of its runs' statuses
    (4 before 3); a crash or an interrupt stops the series there."""
    machine: int | None = None  # the local-run lock, held while this run (or series) runs
    try:
        if resume is not None:
            _only_db_with_resume(
                repeat != 1,
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
            request = RunRequest(profile, budget, workers, db, seed, out, overrides=overrides)
            config = load_config(request)
        machine = _checked_before_recording(config, allow_concurrent)
    except UserError as exc:
        raise fail(str(exc)) from None
    try:
        if repeat == 1:
            _run_flow(config, resume, verbose)
        else:
            run_series(config, repeat, verbose)
    finally:
        if machine is not None:
            os.close(machine)  # the run is over: the next local run may start
        if not verbose:
            quiet_at_exit()


def _checked_before_recording(config: BenchmarkConfig, allow_concurrent: bool) -> int | None:
    """What can be checked before anything is written (--out, the data, a running scheduler,
    another local run on this machine, the database URL); the local-run lock, held from here."""
    from aiperf.lifecycle.preflight import check_before_recording
    from aiperf.store import Store

    check_before_recording(config)
    machine = _hold_machine_lock(config.cluster.kind, allow_concurrent)
    try:
        Store.open(config.db).close()  # a bad database URL fails here, before the flow starts
    except UserError:
        if machine is not None:
            os.close(machine)
        raise
    return machine


def _run_flow(config: BenchmarkConfig, resume: int | None, verbose: bool) -> None:
    """One run: its score, then its exit status."""
    record = run_one(config, resume, verbose=verbose)
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


def _only_db_with_resume(repeated: bool, *given: object) -> None:
    """--resume continues a run with its own config: any other run option is an error, not ignored."""
    if repeated:
        raise UserError(
            "--repeat starts a series of new runs and --resume continues one run; give one of them"
        )
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
