"""Three ways a GPU run goes wrong that must be said in one line rather than found in a traceback or
a slow result: a worker whose framework shows no accelerator although its run has GPUs, a worker
whose GPUs nvidia-smi cannot describe, and a trial that runs out of device memory.

- No accelerator: a worker that probed its peak on a CPU (aiperf.train.peak.device: the backend
  shows no device of AIPERF_ACCELERATOR_PLATFORMS) while the run's cluster has GPUs would train
  every trial on its CPUs, its batch and precision sized as a CPU's, with a result that looks like
  the node's. The run refuses before its first trial instead (`unused_gpus`), naming the worker
  and the fix: JAX's CUDA wheels (`pip install '.[cuda]'`), or `--set train.device=cpu` for a
  run on the CPUs (an open one).
- Not described: a worker whose framework computes on NVIDIA GPUs that nvidia-smi cannot list or
  query (aiperf.train.auto.device_facts' `unqueried`) would train in float32 at the CPUs' batch
  sizes, as if the node had no GPU; the run refuses before its first trial (`unqueried_gpus`),
  naming the worker, the call that failed and the fix. The run's own node was checked before any
  worker started (aiperf.config.host.node_gpus); this catches a job queue's nodes.
- Out of memory: XLA's RESOURCE_EXHAUSTED (JAX), TensorFlow's ResourceExhaustedError and torch's
  OutOfMemoryError end the trial with its own status, TrialStatus.OUT_OF_MEMORY, and a one-line
  reason (`out_of_memory`); the run and its other trials go on, as after any failed trial. The
  error is recognised by its type's name (and XLA's status code in its text), so this module
  imports no framework: a worker has only the one it trains with.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aiperf import settings
from aiperf.config import BenchmarkConfig
from aiperf.config.gpu_backend import INSTALL
from aiperf.config.host import ON_THE_CPUS
from aiperf.errors import UserError

# Framework errors that mean "the device's memory is exhausted" whatever their text says.
_OOM_TYPES = frozenset({"ResourceExhaustedError", "OutOfMemoryError"})
# XLA's runtime error (jaxlib's XlaRuntimeError, JaxRuntimeError in later JAX) carries its status
# code as the first word of its text.
_XLA_TYPES = frozenset({"XlaRuntimeError", "JaxRuntimeError"})
_XLA_OOM = "RESOURCE_EXHAUSTED"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it was raised from or while handling (Keras re-raises some)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def out_of_memory(exc: BaseException) -> str | None:
    """A one-line reason when `exc` (or one it came from) says the device ran out of memory, else
    None: the first line of the framework's message, at most 200 characters."""
    for error in _chain(exc):
        names = {cls.__name__ for cls in type(error).__mro__}
        text = str(error)
        if names & _OOM_TYPES or (names & _XLA_TYPES and _XLA_OOM in text):
            first = next((line.strip() for line in text.splitlines() if line.strip()), "")
            return f"out of device memory ({type(error).__name__}: {first[:200]})"
    return None


def out_of_memory_message(reason: str, batch: int, devices: int) -> str:
    """The trial's message: what ran out, at which batch, and what to change."""
    per_device = f"batch {batch} per device" + (f" on {devices} devices" if devices > 1 else "")
    return (
        f"{reason} at {per_device}; lower search.space.batch_per_gib (or batch_size), or raise "
        f"{settings.GPU_MEMORY_FRACTION.name} (now {settings.text(settings.GPU_MEMORY_FRACTION)})"
    )


def unused_gpus(gpus: int, backend: str, peaks: Sequence[Mapping[str, Any]] | None) -> str | None:
    """Why the run must not start, in one line, when its cluster has `gpus` GPUs and a worker's
    peak record (aiperf.train.worker.peak_on_worker) says its framework computes on no
    accelerator; None when every worker has one, the run has no GPUs, or no probe ran."""
    if not gpus or not peaks:
        return None
    idle = [
        str(p.get("worker")) for p in peaks if not (p.get("device_facts") or {}).get("accelerator")
    ]
    if not idle:
        return None
    shown = ", ".join(idle[:3]) + (f" and {len(idle) - 3} more" if len(idle) > 3 else "")
    who = "worker" if len(idle) == 1 else "workers"
    return (
        f"{who} {shown}: Keras on {backend} shows no GPU although the run has {gpus} "
        f"(nvidia-smi lists them), so its trials would train on the CPUs; install JAX for CUDA "
        f"({INSTALL}), {ON_THE_CPUS}"
    )


def unqueried_gpus(peaks: Sequence[Mapping[str, Any]] | None) -> str | None:
    """Why the run must not start, in one line, when a worker's peak record says nvidia-smi could
    not list or describe the GPUs its framework computes on (`unqueried` in its device facts);
    None when every worker's GPUs were described, or no probe ran."""
    for peak in peaks or ():
        failed = (peak.get("device_facts") or {}).get("unqueried")
        if failed:
            return (
                f"worker {peak.get('worker')}: {failed}, so its GPUs' memory and compute "
                f"capability are unknown and its trials would train in float32 at the CPUs' batch; "
                f"fix the NVIDIA driver on its node until that command answers, {ON_THE_CPUS}"
            )
    return None


def unprobed_gpus(gpus: int, failure: str) -> str:
    """Why a run with `gpus` GPUs must not start when its workers' peak probe failed (`failure`:
    what was raised, in a few words): without the probe's device facts nothing says the framework
    computes on the GPUs, and the run would resolve float32, the CPUs' batch and unfused attention
    on them, as a silent fallback."""
    return (
        f"the workers' peak probe failed ({failure[:200]}), so nothing says their {gpus} GPUs can "
        f"be used, and the run would train in float32 at the CPUs' batch; fix what failed (the run's "
        f"log has its traceback), {ON_THE_CPUS}"
    )


def refuse_unused_gpus(config: BenchmarkConfig, peaks: Sequence[Mapping[str, Any]] | None) -> None:
    """A UserError (one line, before the first trial) when `unqueried_gpus` finds a worker whose
    GPUs nvidia-smi cannot describe, or `unused_gpus` a worker of this GPU run computing on its
    CPU."""
    problem = unqueried_gpus(peaks) or unused_gpus(
        config.cluster.gpus, config.train.backend, peaks
    )
    if problem:
        raise UserError(problem)
