"""A trial on a Dask worker: what runs in the worker process, and how its reports travel back.

`train_on_worker` is what the flow's `train_trial` task (or a plain Dask submit) runs: it names
the worker for the records, caps the trial at the worker's own end of life (a batch job's
walltime), trains (or simulates), and sends every report back to the orchestrator as a Dask event
the moment it happens. (The worker's GPU was pinned when its process started, before any framework
did: aiperf.cluster.preload.) `received` turns such an event back into the
form the orchestrator reads. Nothing here knows Prefect.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from aiperf.cluster.environment import MEM_FRACTION_ENV, worker_label
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest, TrialResult, to_event

# The scheduler overwrites an event's "worker" with the worker's address: ours travels aside.
_LABEL_KEY = "worker_label"

SIMULATED = "simulated"


def train_on_worker(request: TrialRequest, trainer: str = "keras") -> TrialResult:
    """Run one trial in this Dask worker. trainer "simulated" trains nothing: the trial takes a
    modelled time (orchestration at scale)."""
    from distributed import get_worker

    from aiperf.cluster.environment import worker_end

    worker = get_worker()
    label = worker_label(str(worker.name))

    def report(message: TrialBuilt | EpochReport) -> None:
        if request.events_topic:
            worker.log_event(request.events_topic, {**to_event(message), _LABEL_KEY: label})

    # Walltime-aware: a trial stops at its worker's end of life as at the run's deadline.
    end = worker_end(str(worker.name))
    if end is not None and end < request.deadline:
        request = replace(request, deadline=end)
    if trainer == SIMULATED:
        from aiperf.train.simulated import run_simulated_trial, sized_to

        return run_simulated_trial(
            request, report, worker=label, model=sized_to(request.data_path)
        )
    from aiperf.train.trial import run_trial

    return run_trial(request, report, worker=label)


def peak_on_worker(
    dtype: str = "float32",
    seconds: float | None = None,
    dask_worker: Any = None,
    candidates: list[str] | None = None,
) -> dict[str, Any]:
    """This worker's measured peak (aiperf.train.peak), on its own GPU (pinned when its process
    started) and threads, named as its trials name their worker, with the facts of its device
    under "device_facts" (aiperf.train.auto: they size the per-device batch). `candidates`
    (train.precision auto: the precisions the run may choose) probes each of them that the device
    supports instead of `dtype`. Run on every worker with Client.run, which passes `dask_worker`.

    A worker that owns several accelerators (cluster.devices_per_trial) probes one and counts it
    once per device: its trials run on all of them, so MFU's divisor is their summed peak. Logical
    CPU devices share the worker's cores, which the probe already keeps busy: counted once."""
    from aiperf.train.attention import PROBED, fused_attention_runs
    from aiperf.train.auto import device_facts, supported_precisions
    from aiperf.train.devices import worker_devices
    from aiperf.train.peak import device, measure_peak, probe_precisions
    from aiperf.train.trial import configure_threads, worker_cores

    name = str(dask_worker.name) if dask_worker is not None else "local"
    configure_threads(worker_cores())
    accelerated = device()[1]
    facts = device_facts(accelerated=accelerated)
    if candidates:
        wanted = [p for p in supported_precisions(facts) if p in candidates] or ["float32"]
        peak = probe_precisions(wanted, seconds, worker=worker_label(name))
    else:
        peak = measure_peak(seconds, dtype, worker=worker_label(name))
    devices = worker_devices() if accelerated else 1
    record = {**across_devices(peak, devices), "device_facts": facts.to_dict()}
    record[PROBED] = accelerated and fused_attention_runs()  # aiperf.train.attention
    fraction = os.environ.get(MEM_FRACTION_ENV)  # JAX's share of each GPU, set on GPU workers
    return {**record, "memory_fraction": float(fraction)} if fraction else record


def across_devices(peak: dict[str, Any], devices: int) -> dict[str, Any]:
    """One device's peak record as the sum over `devices` identical ones (every rate, the probes'
    too), saying how many it counts."""
    scaled = {**peak, "flops": peak["flops"] * devices, "devices": devices}
    if peak.get("probes"):
        scaled["probes"] = {
            precision: {**probe, "flops": probe["flops"] * devices}
            for precision, probe in peak["probes"].items()
        }
    return scaled


def received(event: tuple[float, dict[str, Any]]) -> dict[str, Any]:
    """A Dask event (timestamp, message) as the orchestrator reads it: the address the scheduler
    stamped on it as `sent_from` (what the orchestrator trusts), and our worker label as `worker`."""
    message = dict(event[1])
    message["sent_from"] = message.pop("worker", None)
    if _LABEL_KEY in message:
        message["worker"] = message.pop(_LABEL_KEY)
    return message
