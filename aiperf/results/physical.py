"""Physical limits: what no honest run's records can show, however well they agree with each other.

`aiperf verify`'s other checks recompute the score from the records; records edited together still
agree. These three compare the records with the machine they claim to come from (issue 25 item 3):

- EPOCHS_WITHIN_DEVICES: at no instant are more epochs in flight than the run has devices. The run's
  devices are its workers times each worker's devices (cluster.devices_per_trial, resolved as the
  trials were given it: aiperf.config.trial_devices), from its stored config; an epoch in flight
  holds its trial's devices (trials.devices). Each worker trains one trial at a time, so an honest
  run never exceeds this, whatever its workers' clocks: the sum counts each worker's own epochs,
  which do not overlap on its own clock.
- WORKER_MFU_WITHIN_PEAK: no worker is faster than its own measured peak (runs.worker_peaks, summed
  over its devices): its epochs' tensor FLOPs (recounted from their architectures) over its peak
  times the seconds its epochs took is at most 1. Why the epochs' own seconds: every operation an
  epoch counts (its training steps and its evaluation) runs between its start and its end on that
  worker's devices, so an honest worker cannot exceed its peak over them; they cannot be gamed
  either, since a worker's epochs may not overlap (no_overlap_on_a_worker) and lie inside the timed
  window (epochs_inside_window), so stretching them buys a forger at most the window, which is the
  score's own divisor. The trials' self-reported phases (train_s, evaluate_s) are not used: a
  forger could enlarge them freely. A run with no peak recorded at all (its probe failed) has
  nothing to bound: it passes in the open division and fails in the closed one. A worker that
  trained without a peak while others have one fails.
- WORKERS_IN_SYSTEM: every trial's worker is one the system description lists (its nodes'
  `worker_names`, as the workers named themselves when they described their nodes).

A worker is named `NAME@JOB` in a batch job (aiperf.cluster.environment.worker_label). The keeper
resubmits a job that ended under the same NAME (aiperf.cluster.keeper), so a long run's later
trials may run on `NAME@ANOTHER_JOB`, which neither measured a peak nor described its node before
the window: such a worker is the run's worker NAME, judged by NAME's peak and description. A name
without a job must be there as it is.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from aiperf.config import trial_devices
from aiperf.results.division import classify
from aiperf.store import CheckRecord, RunRecord

if TYPE_CHECKING:
    from aiperf.results.evidence import Evidence

EPOCHS_WITHIN_DEVICES = "epochs_within_devices"
WORKER_MFU_WITHIN_PEAK = "worker_mfu_within_peak"
WORKERS_IN_SYSTEM = "workers_in_system"


def _slot(worker: str) -> str:
    """The worker of the run's plan a label names: NAME of NAME@JOB (its job may be resubmitted)."""
    return worker.split("@", 1)[0]


def worker_peaks(run: RunRecord) -> dict[str, float]:
    """Each worker's measured peak FLOP/s (runs.worker_peaks), by the worker's label."""
    return {str(p.get("worker")): float(p.get("flops") or 0.0) for p in run.worker_peaks}


def recorded_for(worker: str, known: dict[str, float]) -> float | None:
    """A value recorded for `worker`: its own, else (a batch worker) its NAME's, the highest."""
    if worker in known:
        return known[worker]
    if "@" not in worker:
        return None
    same = [value for label, value in known.items() if _slot(label) == _slot(worker)]
    return max(same) if same else None


def check_epochs_within_devices(ev: Evidence) -> CheckRecord:
    """The most devices' worth of epochs in flight at one instant, against the run's devices."""
    per_worker = trial_devices(ev.config.cluster)
    capacity = ev.run.workers * per_worker
    problems = []
    events = []  # (when, 0 for an end and 1 for a start: an epoch ending as another starts is not overlap, devices)
    for t in ev.run.trials:
        used = t.devices or 1
        if used > per_worker:
            problems.append(
                f"trial {t.trial_key} records {used} devices, a worker of this run has {per_worker}"
            )
        for e in t.epochs:
            if e.ended_at <= e.started_at:
                continue  # no time in flight (an epoch ending before it starts fails elsewhere)
            events.append((e.started_at, 1, used))
            events.append((e.ended_at, 0, -used))
    events.sort(key=lambda event: (event[0], event[1]))
    in_flight, most, when = 0, 0, None
    for moment, _kind, change in events:
        in_flight += change
        if in_flight > most:
            most, when = in_flight, moment
    if most > capacity and when is not None:
        problems.append(
            f"{most} devices' worth of epochs in flight at {when:%Y-%m-%d %H:%M:%S.%f}, the run "
            f"has {capacity} ({ev.run.workers} workers x {per_worker} devices)"
        )
    return CheckRecord.of(
        EPOCHS_WITHIN_DEVICES,
        problems,
        f"at most {most} devices' worth of epochs in flight, of the run's {capacity} "
        f"({ev.run.workers} workers x {per_worker} devices)",
    )


def check_worker_mfu_within_peak(ev: Evidence) -> CheckRecord:
    """Each worker's model FLOPs utilisation over its epochs' seconds, against its own peak."""
    flops: dict[str, float] = defaultdict(float)
    seconds: dict[str, float] = defaultdict(float)
    for t in ev.run.trials:
        if t.id not in ev.counts:
            continue
        _train, _evaluate, tensor_train, tensor_eval = ev.counts[t.id]
        worker = t.worker or "?"
        for e in t.epochs:
            flops[worker] += e.samples_trained * tensor_train + e.samples_evaluated * tensor_eval
            seconds[worker] += max(0.0, (e.ended_at - e.started_at).total_seconds())
    working = {w: f for w, f in flops.items() if f > 0}
    peaks = worker_peaks(ev.run)
    if not peaks:
        # A probe that fails costs an open run its MFU, never the run (aiperf.lifecycle.prepare); a
        # closed result, which is ranked, must have its workers' speed bounded.
        if not working or ev.config.train.trainer == "simulated" or not classify(ev.config).closed:
            return CheckRecord(
                WORKER_MFU_WITHIN_PEAK, True, "no peak measured: no worker's speed to bound"
            )
        return CheckRecord(
            WORKER_MFU_WITHIN_PEAK,
            False,
            f"a closed result whose {len(working)} workers trained with no peak recorded to bound "
            "their speed",
        )
    problems = []
    highest: tuple[float, str] | None = None
    for worker, done in sorted(working.items()):
        peak = recorded_for(worker, peaks) or 0.0
        if not peak > 0:
            problems.append(f"worker {worker} trained, and has no measured peak")
            continue
        if not seconds[worker] > 0:
            problems.append(f"worker {worker} did {done:.4g} FLOPs in epochs of no time")
            continue
        mfu = done / (peak * seconds[worker])
        highest = max(highest or (mfu, worker), (mfu, worker))
        if mfu > 1.0:
            problems.append(
                f"worker {worker} ran at {mfu:.3g} times its measured peak: {done:.4g} FLOPs in "
                f"{seconds[worker]:.3f} s of epochs, its peak {peak:.4g} FLOP/s"
            )
    detail = (
        "no worker did any tensor FLOPs"
        if highest is None
        else f"the fastest worker, {highest[1]}, at {highest[0]:.2%} of its measured peak "
        "over its epochs' seconds"
    )
    return CheckRecord.of(WORKER_MFU_WITHIN_PEAK, problems, detail)


def described_workers(description: dict | None) -> set[str] | None:
    """The workers the system description names (None: it names none, or there is none)."""
    if not description or not description.get("nodes"):
        return None
    names = {str(n) for node in description["nodes"] for n in node.get("worker_names") or ()}
    return names or None


def check_workers_in_system(ev: Evidence) -> CheckRecord:
    """Every trial ran on a worker the system description lists."""
    workers = {t.worker for t in ev.run.trials if t.worker}
    named = described_workers(ev.run.system_description)
    if named is None:
        if not workers:
            return CheckRecord(WORKERS_IN_SYSTEM, True, "no trial reached a worker")
        return CheckRecord(
            WORKERS_IN_SYSTEM,
            False,
            "the run's system description names no workers, so its trials' workers "
            f"({len(workers)}) cannot be found in it",
        )
    listed = {name: 1.0 for name in named}
    problems = [
        f"trials ran on {worker}, which the system description does not list"
        for worker in sorted(workers)
        if recorded_for(worker, listed) is None
    ]
    return CheckRecord.of(
        WORKERS_IN_SYSTEM,
        problems,
        f"every trial's worker ({len(workers)}) is one of the {len(named)} the system "
        "description lists",
    )


CHECKS = {
    EPOCHS_WITHIN_DEVICES: check_epochs_within_devices,
    WORKER_MFU_WITHIN_PEAK: check_worker_mfu_within_peak,
    WORKERS_IN_SYSTEM: check_workers_in_system,
}
