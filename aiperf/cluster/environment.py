"""What a worker process reads from its environment, and the names of those variables.

The job script (plan.py) and the local cluster (start.py) set them; a trial reads them on its
worker. Neither Dask nor a framework is imported here: a worker pins its GPU before TensorFlow or
JAX starts, and the CUDA devices a framework sees are fixed when it starts.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from aiperf import settings
from aiperf.cluster.queues import QUEUES, staggered_lifetime
from aiperf.errors import UserError

JOB_STARTED_ENV = settings.JOB_STARTED.name
JOB_GPUS_ENV = settings.JOB_GPUS.name
LIFETIME_ENV = settings.WORKER_LIFETIME.name
BACKEND_ENV = "KERAS_BACKEND"  # Keras reads it once, on its first import in the process
PINNED_ENV = settings.GPU_PINNED.name
CORES_ENV = settings.WORKER_CORES.name
DEVICES_ENV = settings.WORKER_DEVICES.name
# JAX's share of each GPU's memory, read as JAX starts (AIPERF_GPU_MEMORY_FRACTION sets it).
MEM_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
# JAX's CPU platform shows this many devices when the flag is in XLA_FLAGS as JAX starts.
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
# What aiperf changes in Dask's defaults for its workers. The scheduler and nannies take these from
# dask.config (start.py), the worker processes from their environment (`worker_environment`),
# wherever they start.
#
# Dask's own housekeeping, slowed down for a benchmark. By default every worker runs an event-loop
# health tick every 20 ms, a system monitor every 500 ms and (in its nanny) a memory check every
# 100 ms, and the statistical profiler samples the trial's thread every 10 ms, each taking the GIL:
# on a small machine that is CPU taken from the trials (docs/performance.md gives the figures).
# Trials are placed by resource, so work stealing has nothing to do.
#
# And glibc's allocator as a bare process has it. Dask's nanny starts each worker with
# MALLOC_TRIM_THRESHOLD_=65536 (distributed.nanny.pre-spawn-environ), so that freed memory goes
# back to the system sooner. Setting any malloc tunable switches off glibc's dynamic mmap threshold:
# every allocation over 128 KiB is then a fresh mmap that the kernel page-faults and zeroes, and
# munmaps when freed. TensorFlow takes its tensors from malloc wherever its oneDNN allocator is off,
# which is TensorFlow's default on CPUs without AVX-512 VNNI/BF16 or AMX (AMD Zen 3, for one): there
# a worker spent half its CPU in the kernel, and trials trained at 0.43-0.49 of bare Keras on the
# same model, batch and feed. XLA's CPU runtime (JAX) takes its buffers from malloc on every CPU,
# and lost half as well (docs/performance.md, "A 2-core Zen 3"). None unsets it.
WORKER_DASK: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.scheduler.work-stealing": False,
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


def dask_environment(settings: dict[str, Any]) -> dict[str, str]:
    """Dask config keys as the DASK_* variables dask.config reads when a process starts.

    Dask lowercases a variable's name into its key, so a key whose last part is not lowercase (an
    environment variable's name under distributed.nanny.pre-spawn-environ) travels as a Python
    literal of its parent, which dask.config merges into its defaults."""

    def name(key: str) -> str:
        return "DASK_" + key.upper().replace(".", "__").replace("-", "_")

    env: dict[str, str] = {}
    literals: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        parent, _, last = key.rpartition(".")
        if last != last.lower():
            literals.setdefault(parent, {})[last] = value
        else:
            env[name(key)] = str(value)
    env.update({name(parent): repr(values) for parent, values in literals.items()})
    return env


FRAMEWORKS = (
    "tensorflow",
    "keras",
    "jax",
    "torch",
)  # each fixes the CUDA devices it sees when it starts


def worker_environment(
    cores_per_worker: int,
    prefect_api_url: str | None = None,
    backend: str | None = None,
    gpus: int = 0,
    devices: int = 1,
    on_cpus: bool = False,
) -> dict[str, str]:
    """Environment of every worker process. Workers must report task runs to the flow's own
    Prefect API: without PREFECT_API_URL each would start a temporary server of its own. `backend`:
    the run's Keras backend (KERAS_BACKEND, read once, when Keras is first imported); `gpus`: the
    GPUs the worker's job (or this machine) shares, `devices` to a worker (pinned by `pin_gpu`).
    Without GPUs, `devices` > 1 makes that many logical devices on the worker's cores: JAX's from
    XLA_FLAGS as it starts, TensorFlow's as its trials configure it (aiperf.train.devices).
    `on_cpus`: the run asked for the CPUs (train.device cpu), so no framework in the worker may
    take a GPU the node has: CUDA shows none and JAX starts on its CPU platform."""
    env = {
        CORES_ENV: str(cores_per_worker),
        "OMP_NUM_THREADS": str(cores_per_worker),
        "TF_NUM_INTRAOP_THREADS": str(cores_per_worker),
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        **dask_environment(WORKER_DASK),  # no profiler or 20 ms ticks; glibc's own malloc
    }
    if prefect_api_url:
        env["PREFECT_API_URL"] = prefect_api_url
    if backend:
        env[BACKEND_ENV] = backend
    if gpus:
        env[JOB_GPUS_ENV] = str(gpus)
        # JAX preallocates this share of each GPU (its default, 0.75, leaves a quarter of the
        # memory the per-device batch is sized by unused); read as JAX starts in the worker.
        env[MEM_FRACTION_ENV] = gpu_memory_fraction()
    if on_cpus:
        env.update({"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"})
    if devices > 1:
        env[DEVICES_ENV] = str(devices)
        if not gpus:
            flags = [
                f for f in os.environ.get("XLA_FLAGS", "").split() if HOST_DEVICES_FLAG not in f
            ]
            env["XLA_FLAGS"] = " ".join([*flags, f"{HOST_DEVICES_FLAG}={devices}"])
    return env


def gpu_memory_fraction() -> str:
    """$AIPERF_GPU_MEMORY_FRACTION as JAX reads it: a number above 0 and at most 1, else one line
    naming the variable."""
    value = settings.number(settings.GPU_MEMORY_FRACTION, positive=True)
    if value > 1:
        raise UserError(
            f"{settings.GPU_MEMORY_FRACTION.name}={value:g} is more than the whole GPU; set it to "
            "a share from 0 to 1, e.g. 0.9, or unset it"
        )
    return f"{value:g}"


def job_id() -> str | None:
    """'slurm-job-123' inside a batch job, None elsewhere: recorded with every trial it runs."""
    for kind, queue_kind in QUEUES.items():
        value = os.environ.get(queue_kind.job_id_env)
        if value:
            return f"{kind}-job-{value}"
    return None


def worker_label(worker_name: str) -> str:
    """How trials, the system description and the provenance name a worker: the Dask worker's
    name, and its batch job when in one."""
    job = job_id()
    return f"{worker_name}@{job}" if job else worker_name


def worker_end(worker_name: str) -> float | None:
    """Unix time this worker stops taking trials (its job's start plus its staggered lifetime),
    inside a job with a walltime; None elsewhere."""
    started, lifetime = os.environ.get(JOB_STARTED_ENV), os.environ.get(LIFETIME_ENV)
    if not started or not lifetime:
        return None
    base, stagger = (float(v) for v in lifetime.split(","))
    return float(started) + staggered_lifetime(worker_name, base, stagger)


def pin_gpu(worker_name: str) -> str | None:
    """Each worker its own GPUs: with D devices per worker (AIPERF_WORKER_DEVICES, 1 when unset),
    the i-th worker of a job sees only the job's GPUs i*D to i*D + D - 1. dask-jobqueue names a
    job's workers '<job>-0', '<job>-1', ...; a LocalCluster names them 0, 1, ... Runs when the
    worker process starts (aiperf.cluster.preload), before any framework does. Returns the devices
    it pinned, as CUDA_VISIBLE_DEVICES now lists them (None: no GPUs, or pinned already)."""
    gpus = int(os.environ.get(JOB_GPUS_ENV) or 0)
    if gpus < 1 or os.environ.get(PINNED_ENV):
        return None
    per_worker = settings.count(settings.WORKER_DEVICES) or 1
    index = (
        int(worker_name.rsplit("-", 1)[-1])
        if gpus > per_worker and worker_name.rsplit("-", 1)[-1].isdigit()
        else 0
    )
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d] or [
        str(i) for i in range(gpus)
    ]
    first = (index * per_worker) % len(visible)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible[first : first + per_worker])
    os.environ[PINNED_ENV] = "1"
    return os.environ["CUDA_VISIBLE_DEVICES"]


def worker_settings(api_url: str | None = None) -> dict[str, Any]:
    """What this worker process took from its environment, for a run on workers it did not start
    (aiperf.cluster.external checks it on each): its Keras backend (the one already loaded, else the
    one it would load) and its cores; and, given the run's Prefect API, why this node cannot reach
    it (None: it can)."""
    backend, loaded = os.environ.get(BACKEND_ENV), None
    keras = sys.modules.get("keras")
    if keras is not None:
        try:
            loaded = keras.backend.backend()
        except Exception:  # pragma: no cover - a half-imported keras
            loaded = None
    return {
        "host": socket.gethostname(),
        "backend": loaded or backend,
        "backend_loaded": loaded is not None,
        "cores": os.environ.get(CORES_ENV),
        "api_unreachable": unreachable(api_url) if api_url else None,
    }


def unreachable(url: str, timeout_s: float = 5.0) -> str | None:
    """Why a TCP connection to the host and port of `url` fails from here (None: it opens)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            return None
    except (OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__
