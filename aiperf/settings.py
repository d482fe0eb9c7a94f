"""Every AIPERF_* environment variable, declared once with its default and meaning.

The rest of aiperf names a variable by its constant here and reads it through `text`, `number`
or `count`, so a name is spelt in one place, a bad value is one line naming the variable and the
fix, and the README's table can be checked against `VARIABLES`.

Three kinds, by who sets them:
- user: settings of the command that reads them (a database, timeouts, a lock file, ...);
- worker: what aiperf itself puts in its workers' and batch jobs' environment, for the trial to read;
- infra: read by the scripts in infra/ and by the tests (local services, the Prefect server).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from aiperf.errors import UserError

Kind = Literal["user", "worker", "infra"]


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # as it would be written in the environment; "" when there is none
    meaning: str
    kind: Kind = "user"

    def raw(self) -> str:
        """The value in this process's environment, stripped ("" when unset)."""
        return os.environ.get(self.name, "").strip()


# --- user settings -------------------------------------------------------------------------------
DB_URL = Variable(
    "AIPERF_DB_URL",
    "",
    "database URL when --db is not given (a password can live here rather than on the command "
    "line, which other users see in `ps`); default sqlite:///aiperf.db",
)
HEARTBEAT_TIMEOUT = Variable(
    "AIPERF_HEARTBEAT_TIMEOUT",
    "60",
    "seconds without a heartbeat, on the database's clock, after which a running run is lost and "
    "`aiperf recover` or `aiperf run --resume` may take it over; at least 15 (three heartbeats)",
)
DB_RETRY_S = Variable(
    "AIPERF_DB_RETRY_S",
    "120",
    "seconds a database transaction is retried through transient faults (0: never)",
)
SQLITE_BUSY_TIMEOUT_S = Variable(
    "AIPERF_SQLITE_BUSY_TIMEOUT_S",
    "10",
    "seconds an SQLite connection waits for another's write lock before the retry takes over",
)
RUN_LOCK = Variable(
    "AIPERF_RUN_LOCK",
    "",
    "the lock file that keeps one local run per machine and user; "
    "default $XDG_CACHE_HOME/aiperf/local-run.lock",
)
MAX_CONSECUTIVE_FAILURES = Variable(
    "AIPERF_MAX_CONSECUTIVE_FAILURES",
    "",
    "failed trials in a row, none completed, after which a run stops as failed; default 3 x workers",
)
PEAK_SECONDS = Variable(
    "AIPERF_PEAK_SECONDS",
    "2",
    "seconds each worker measures its matmul peak before the timed window",
)
REFERENCE_SECONDS = Variable(
    "AIPERF_REFERENCE_SECONDS",
    "4",
    "seconds each worker's clean process times bare Keras (the run's seed model, data and batch) "
    "before the timed window, for show's trials-vs-bare-Keras line; 0 turns it off",
)
WORKERS_TIMEOUT = Variable(
    "AIPERF_WORKERS_TIMEOUT",
    "600",
    "seconds a run waits for its workers (batch jobs queue) before it fails",
)
SCHEDULER_TIMEOUT = Variable(
    "AIPERF_SCHEDULER_TIMEOUT",
    "10",
    "seconds a run waits for a running Dask scheduler (--cluster scheduler) to answer",
)
JOBQUEUE_CONFIG = Variable(
    "AIPERF_JOBQUEUE_CONFIG",
    "",
    "a jobqueue.yaml of the site's batch-queue settings, over its dask config and under the profile's",
)
PROFILE_DIR = Variable(
    "AIPERF_PROFILE_DIR",
    "",
    "a folder of profiles a flow run's `profile` may name (NAME for NAME.yaml), and of the site "
    "file _site.yaml (the machine's `system:` name, submitter, status); set where the work pool's "
    "worker starts, since a flow parameter never takes a path",
)
SIMULATED_OPS_PER_S = Variable(
    "AIPERF_SIMULATED_OPS_PER_S",
    "5e10",
    "one worker's modelled speed under the simulated trainer (train.trainer: simulated)",
)

ACCELERATOR_PLATFORMS = Variable(
    "AIPERF_ACCELERATOR_PLATFORMS",
    "gpu,cuda,rocm",
    "the JAX platforms whose devices are a node's accelerators (a worker on one trains, probes and "
    "sizes its batch as on GPUs); the GPU node stand-in (benchmarks/gpu_node_standin.sh) sets cpu",
)
GPU_MEMORY_FRACTION = Variable(
    "AIPERF_GPU_MEMORY_FRACTION",
    "0.9",
    "the share of each GPU's memory JAX takes on a GPU worker (XLA_PYTHON_CLIENT_MEM_FRACTION; "
    "JAX's own default is 0.75); recorded with each worker's peak",
)
POWERCAP = Variable(
    "AIPERF_POWERCAP",
    "/sys/class/powercap",
    "where each node's kernel exposes its RAPL energy counters (Linux powercap); read by the "
    "workers, which find the node's meters there (docs/rules.md, Energy)",
)
IDLE_POWER_S = Variable(
    "AIPERF_IDLE_POWER_S",
    "5",
    "seconds each metered node is measured idle, nothing running, just before the timed window",
)

# --- set by aiperf in its workers' environment ---------------------------------------------------
WORKER_CORES = Variable(
    "AIPERF_WORKER_CORES",
    "",
    "cores the worker owns; its trials size their thread pools to it (all the node's when unset)",
    "worker",
)
JOB_STARTED = Variable(
    "AIPERF_JOB_STARTED", "", "Unix time the batch job's script began", "worker"
)
WORKER_LIFETIME = Variable(
    "AIPERF_WORKER_LIFETIME",
    "",
    '"<lifetime>,<stagger>" seconds: when a batch worker stops taking trials',
    "worker",
)
JOB_GPUS = Variable("AIPERF_JOB_GPUS", "", "GPUs of the job, shared among its workers", "worker")
WORKER_DEVICES = Variable(
    "AIPERF_WORKER_DEVICES",
    "",
    "devices each worker owns and its trials train across, data-parallel (1 when unset): its "
    "GPUs, or as many logical devices on its CPU cores",
    "worker",
)
GPU_PINNED = Variable(
    "AIPERF_GPU_PINNED", "", "set once the worker process's GPU is chosen", "worker"
)

# --- read by infra/ and the tests ----------------------------------------------------------------
INSTALLER = Variable(
    "AIPERF_INSTALLER",
    "uv",
    "what infra/install.sh (make's install) installs with: uv where it can, or pip",
    "infra",
)
TEST_POSTGRES_URL = Variable(
    "AIPERF_TEST_POSTGRES_URL",
    "",
    "the PostgreSQL server the tests use (printed by infra/postgres/ctl.sh start)",
    "infra",
)
PG_SERVICE = Variable(
    "AIPERF_PG_SERVICE",
    "postgres",
    "names the server infra/postgres/ctl.sh runs (postgres or postgres-<name>)",
    "infra",
)
PG_DATABASE = Variable(
    "AIPERF_PG_DATABASE", "aiperf", "the database infra/postgres/ctl.sh creates", "infra"
)
PREFECT_PORT = Variable(
    "AIPERF_PREFECT_PORT", "4200", "the port `make serve` gives the Prefect server", "infra"
)
WORK_POOL = Variable(
    "AIPERF_WORK_POOL", "aiperf", "the Prefect work pool `make serve` creates", "infra"
)
SERVE_DIR = Variable(
    "AIPERF_SERVE_DIR",
    "$PREFECT_HOME/aiperf-serve",
    "where `make serve` keeps the server's state and logs",
    "infra",
)
REPORTS_PORT = Variable(
    "AIPERF_REPORTS_PORT",
    "4201",
    "the port `make serve` serves the runs' reports and event logs on (0: none)",
    "infra",
)
REPORTS_DIR = Variable(
    "AIPERF_REPORTS_DIR",
    "$AIPERF_REPO/aiperf-out",
    "the folder whose reports and event logs `make serve` serves (the profiles' out)",
    "infra",
)
REPORTS_URL = Variable(
    "AIPERF_REPORTS_URL",
    "",
    "the reports server's address, set by `make serve` for its flow runs' links",
    "infra",
)
REPO = Variable(
    "AIPERF_REPO",
    "",
    "the checkout the work pool's deployments run from (set by `make serve`, read by prefect.yaml)",
    "infra",
)
SLURMCTLD_PORT = Variable(
    "AIPERF_SLURMCTLD_PORT",
    "6817",
    "the port of the local SLURM controller of infra/slurm",
    "infra",
)
SLURMD_PORT = Variable(
    "AIPERF_SLURMD_PORT", "6818", "the port of the local SLURM node daemon of infra/slurm", "infra"
)

TEST_TWO_NODE_BUDGET = Variable(
    "AIPERF_TEST_TWO_NODE_BUDGET",
    "20s",
    "the budget of each run in tests/test_two_nodes.py",
    "infra",
)

VARIABLES: tuple[Variable, ...] = tuple(v for v in globals().values() if isinstance(v, Variable))


def text(variable: Variable) -> str | None:
    """The variable's value, else its default, else None."""
    return variable.raw() or variable.default or None


def number(variable: Variable, *, positive: bool = False) -> float:
    """The variable as a number (its default when unset): at least 0, or more than 0 when
    `positive`; anything else is the user's mistake, named in one line."""
    written = variable.raw() or variable.default
    try:
        value = float(written)
    except ValueError:
        value = float("nan")
    if not (value > 0 if positive else value >= 0):
        bound = "more than 0" if positive else "0 or more"
        example = f"e.g. {variable.default}" if variable.default else "a number"
        raise UserError(
            f"{variable.name}={written!r} is not a number {bound}; set it to {example} or unset it"
        )
    return value


def count(variable: Variable) -> int | None:
    """The variable as a whole number of at least 1 (None when unset and without a default)."""
    written = variable.raw() or variable.default
    if not written:
        return None
    if not written.isdigit() or int(written) < 1:
        raise UserError(
            f"{variable.name}={written!r} is not a whole number of at least 1; set it or unset it"
        )
    return int(written)
