"""The batch systems aiperf submits to, and how a job's walltime becomes its workers' lifetimes.

Shared by the job plan (which writes them into job scripts), the worker (which reads its own end
from its environment) and the keeper (which retires the worker at that end), so it imports neither
Dask nor anything of theirs.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class QueueKind:
    """What one batch system needs that another does not: data only, as in dask-jobqueue."""

    cluster_class: str  # in dask_jobqueue
    account_kwarg: str  # SLURM and PBS charge an "account", LSF and SGE a "project"
    gpu_directive: (
        str  # job directive for {gpus} GPUs (dask-jobqueue adds the #SBATCH/#PBS/... prefix)
    )
    job_id_env: str  # set inside a job: its id
    walltime_fields: int  # 3: HH:MM:SS, 2: HH:MM (LSF)
    status_command: str  # how a user sees the jobs
    workdir_line: str = ""  # start the job where it was submitted (SLURM and LSF do by themselves)


QUEUES: dict[str, QueueKind] = {
    "slurm": QueueKind(
        "SLURMCluster", "account", "--gres=gpu:{gpus}", "SLURM_JOB_ID", 3, "squeue"
    ),
    "pbs": QueueKind(
        "PBSCluster",
        "account",
        "-l ngpus={gpus}",
        "PBS_JOBID",
        3,
        "qstat",
        'cd "${PBS_O_WORKDIR:-$PWD}"',
    ),
    "lsf": QueueKind("LSFCluster", "project", '-gpu "num={gpus}"', "LSB_JOBID", 2, "bjobs"),
    "sge": QueueKind(
        "SGECluster",
        "project",
        "-l gpu={gpus}",
        "JOB_ID",
        3,
        "qstat",
        'cd "${SGE_O_WORKDIR:-$PWD}"',
    ),
}


def format_walltime(seconds: float, fields: int = 3) -> str:
    """HH:MM:SS (or HH:MM, rounded up, for LSF) as batch systems take it."""
    seconds = int(math.ceil(seconds))
    if fields == 2:
        minutes = int(math.ceil(seconds / 60))
        return f"{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def worker_lifetime(walltime_s: float) -> tuple[float, float]:
    """(lifetime, stagger) of a worker in a job of this walltime: it retires between
    lifetime - stagger and lifetime + stagger, which still leaves half the margin (at least 5 s)
    for a clean exit before the queue's kill. The margin is 10% of the walltime, 10 s to 10 min."""
    margin = min(max(0.1 * walltime_s, 10.0), 600.0, walltime_s / 2)
    return walltime_s - margin, margin / 2


def staggered_lifetime(worker_name: str, lifetime_s: float, stagger_s: float) -> float:
    """This worker's own lifetime in [lifetime - stagger, lifetime + stagger], fixed by its name, so
    the worker (stopping its trial) and the keeper (retiring it) agree without talking."""
    fraction = zlib.crc32(worker_name.encode()) / 2**32
    return lifetime_s + stagger_s * (2 * fraction - 1)
