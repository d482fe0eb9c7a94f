"""The Dask cluster a run's trials execute on: this machine, or jobs on a batch queue.

Every worker runs one trial at a time (a "trial" resource of 1; a trial on GPUs also asks for its
"GPU" resource) and tells its trials how many cores it owns (AIPERF_WORKER_CORES), so framework
thread pools never oversubscribe a node.

- local: a LocalCluster, the machine's cores split evenly between worker processes.
- slurm, pbs, lsf, sge: dask-jobqueue. The batch systems differ only in data (`QUEUES`): one job
  per node (or part of one) running one worker, or one worker per GPU when jobs have GPUs. Defaults
  come from aiperf/cluster/jobqueue.yaml, then the profile's `cluster:` section, then the command line.
- scheduler: a Dask scheduler that is already running (workers started by hand, by Kubernetes, ...),
  reached at cluster.address with the user's TLS files; nothing is started or stopped (external).

Walltime: each worker retires (`--lifetime`, staggered so jobs do not all end at once) before the
queue would kill it, and a keeper replaces jobs that ended, whether retired, cancelled or killed.
A trial stops itself at its worker's end of life, like at the run's deadline, keeping every step
it finished. A worker lost mid-trial fails that trial at once (allowed-failures 0: Dask does not
rerun it from scratch); its reported epochs are already recorded, and the run goes on. Not yet: a
worker lost in the moment between its trial's end and the run collecting the result loses that
result, and Dask computes it again on another worker (the trial trains twice and is recorded as
completed, not as worker-lost).

Every cluster speaks TLS with a key and certificate made for the run (start.tls_credentials), carried
as `StartedCluster.security`: every client of the scheduler passes it.

GPUs: one worker per GPU, each pinned to its own as its process starts, before any framework can
start (preload, a Dask preload on every worker, local or in a job), under the Keras backend of
the run (KERAS_BACKEND in every worker's environment).

Modules: queues (the batch systems, walltimes and lifetimes), environment (what a worker reads;
no Dask), preload (what a worker does as it starts: pin its GPU), plan (the jobs, as pure data),
keeper (the thread that retires and resubmits jobs), dask_internals (every Dask internal aiperf
calls: the keeper's), start (starting a cluster and waiting for its workers), external (a running
scheduler: connecting, and checking its workers), broadcast (a function run on every worker).
"""

from aiperf.cluster.environment import (
    JOB_GPUS_ENV,
    JOB_STARTED_ENV,
    LIFETIME_ENV,
    job_id,
    pin_gpu,
    worker_end,
    worker_environment,
)
from aiperf.cluster.handle import StartedCluster
from aiperf.cluster.plan import (
    GPU_RESOURCE,
    TRIAL_RESOURCE,
    JobPlan,
    job_plan,
    jobqueue_cluster_class,
    jobqueue_defaults,
    trial_resources,
)
from aiperf.cluster.queues import (
    QUEUES,
    QueueKind,
    format_walltime,
    staggered_lifetime,
    worker_lifetime,
)
from aiperf.cluster.start import (
    jobqueue_cluster,
    local_cluster,
    preflight,
    start_cluster,
)
from aiperf.units import parse_walltime

__all__ = [
    "GPU_RESOURCE",
    "JOB_GPUS_ENV",
    "JOB_STARTED_ENV",
    "LIFETIME_ENV",
    "QUEUES",
    "TRIAL_RESOURCE",
    "JobPlan",
    "QueueKind",
    "StartedCluster",
    "format_walltime",
    "job_id",
    "job_plan",
    "jobqueue_cluster",
    "jobqueue_cluster_class",
    "jobqueue_defaults",
    "local_cluster",
    "parse_walltime",
    "pin_gpu",
    "preflight",
    "staggered_lifetime",
    "start_cluster",
    "trial_resources",
    "worker_end",
    "worker_environment",
    "worker_lifetime",
]
