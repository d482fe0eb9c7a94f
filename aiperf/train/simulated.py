"""A simulated trainer: trials that take a modelled time and report modelled epochs and operations.

It lets the orchestrator, the store and the Dask plumbing be exercised at a scale no test machine
can train at (hundreds of workers on one machine): each trial's epochs last the time a worker of
a modelled speed would need for its modelled operations, end at the run's deadline like real
ones (a partial last epoch), and report the same messages as the Keras trainer. Nothing is
trained, so a result made with it is always marked invalid (aiperf.results.score.verdict).

Two ways to run it: `run_simulated_trial` on a real worker (it sleeps through its epochs), and
`SimulatedLauncher`, which hands the orchestrator handles that play the plan out by the clock in
the orchestrator's own thread (no worker at all: what is measured is the orchestration).
"""

from __future__ import annotations

import math
import queue
import random
import time
from dataclasses import dataclass, replace

from aiperf import settings
from aiperf.status import TrialStatus
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest, TrialResult
from aiperf.train.trial import Reporter


@dataclass(frozen=True)
class SimulatedModel:
    """The modelled machine and workload. Defaults: an epoch takes about 0.5-3 s."""

    ops_per_s: float = settings.number(settings.SIMULATED_OPS_PER_S)  # one worker's modelled speed
    train_ops_range: tuple[float, float] = (5e6, 5e7)  # per training sample; eval is a third of it
    train_samples: int = 3000
    val_samples: int = 1000
    parameters_range: tuple[int, int] = (10_000, 1_000_000)


@dataclass(frozen=True)
class SimulatedPlan:
    built: TrialBuilt
    epochs: list[EpochReport]  # each with its modelled end time
    status: TrialStatus
    ends_at: float
    stepping: tuple[tuple[float, float], ...] = ()  # per epoch: modelled (train, evaluate) seconds

    def phases(self, played: int | None = None) -> dict[str, float]:
        """Where the first `played` epochs' seconds went (all of them by default): a simulated trial
        builds, counts and compiles nothing, so its modelled time is all training and evaluation."""
        spans = self.stepping[:played]
        return {
            "build_s": 0.0,
            "count_s": 0.0,
            "compile_s": 0.0,
            "train_s": sum(t for t, _ in spans),
            "evaluate_s": sum(e for _, e in spans),
            "report_s": 0.0,
        }


def plan_trial(
    request: TrialRequest, started_at: float, worker: str, model: SimulatedModel = SimulatedModel()
) -> SimulatedPlan:
    """The whole trial, decided up front from its seed: operations, epoch times, accuracies."""
    rng = random.Random(request.seed)
    built = _built(request, worker, model, rng)
    seconds = (
        model.train_samples * built.train_ops / model.ops_per_s,
        model.val_samples * built.eval_ops / model.ops_per_s,
    )
    curve = rng.uniform(0.1, 0.3), rng.uniform(0.1, 0.5)
    epochs: list[EpochReport] = []
    stepping: list[tuple[float, float]] = []
    now = started_at
    for epoch in range(request.epochs):
        if now >= request.deadline:
            break
        report, trained_by = _epoch(request, model, epoch, now, seconds, curve)
        epochs.append(report)
        stepping.append((trained_by - now, report.ended_at - trained_by))
        now = report.ended_at
        if not report.complete:
            break
    done = len(epochs) == request.epochs and all(e.complete for e in epochs)
    return SimulatedPlan(
        built, epochs, TrialStatus.COMPLETED if done else TrialStatus.STOPPED, now, tuple(stepping)
    )


def _built(
    request: TrialRequest, worker: str, model: SimulatedModel, rng: random.Random
) -> TrialBuilt:
    """The trial's modelled model: its training operations drawn log-uniformly from the model's
    range (evaluation a third of them), then its parameters."""
    low, high = model.train_ops_range
    train_ops = int(math.exp(rng.uniform(math.log(low), math.log(high))))
    eval_ops = train_ops // 3
    return TrialBuilt(
        trial_key=request.trial_key,
        worker=worker,
        parameters=rng.randint(*model.parameters_range),
        train_ops=train_ops,
        eval_ops=eval_ops,
        tensor_train_ops=train_ops,
        tensor_eval_ops=eval_ops,
    )


def _epoch(
    request: TrialRequest,
    model: SimulatedModel,
    epoch: int,
    now: float,
    seconds: tuple[float, float],
    curve: tuple[float, float],
) -> tuple[EpochReport, float]:
    """One modelled epoch begun at `now`, a pass taking `seconds` (train, evaluate), its accuracy
    on the trial's `curve` (base, gain): its report, and when its training ended. An epoch the
    deadline cuts counts the batches done by then, as with the Keras trainer."""
    train_s, eval_s = seconds
    base, gain = curve
    # Whole batches only, as the Keras trainer trains them.
    batches = model.train_samples // request.batch_size
    epoch_samples = batches * request.batch_size
    if now + train_s + eval_s <= request.deadline:  # the whole epoch fits
        trained, evaluated, ended = epoch_samples, model.val_samples, now + train_s + eval_s
        trained_by = now + train_s
    else:  # cut at the deadline: the batches done by then count, as with the Keras trainer
        trained_by = min(request.deadline, now + train_s)
        trained = int(batches * (trained_by - now) / train_s) * request.batch_size
        evaluated = int(model.val_samples * max(0.0, request.deadline - trained_by) / eval_s)
        ended = request.deadline
    complete = trained == epoch_samples and evaluated == model.val_samples
    accuracy = min(0.95, base + gain * (1 - math.exp(-(epoch + 1) / 2)))
    report = EpochReport(
        trial_key=request.trial_key,
        epoch=epoch,
        started_at=now,
        ended_at=ended,
        samples_trained=trained,
        samples_evaluated=evaluated,
        loss=-math.log(max(accuracy, 1e-3)),
        accuracy=accuracy,
        val_loss=-math.log(max(accuracy - 0.02, 1e-3)) if complete else None,
        val_accuracy=accuracy - 0.02 if complete else None,
        complete=complete,
    )
    return report, trained_by


def sized_to(data_path: str, model: SimulatedModel = SimulatedModel()) -> SimulatedModel:
    """The model with the staged dataset's sizes, so modelled epochs use no more samples than the data
    has (the orchestrator refuses an epoch that does); the model's own sizes where nothing is staged."""
    from aiperf.data.manifest import read_manifest

    try:
        manifest = read_manifest(data_path)
    except (OSError, ValueError):
        return model
    return replace(
        model,
        train_samples=int(manifest["train_samples"]),
        val_samples=int(manifest["val_samples"]),
    )


def run_simulated_trial(
    request: TrialRequest,
    report: Reporter,
    worker: str | None = None,
    model: SimulatedModel = SimulatedModel(),
) -> TrialResult:
    """On a worker: live through the plan, reporting each epoch when its modelled end comes."""
    plan = plan_trial(request, time.time(), worker or "simulated", model)
    report(plan.built)
    for epoch in plan.epochs:
        time.sleep(max(0.0, epoch.ended_at - time.time()))
        report(epoch)
    return TrialResult(
        request.trial_key, plan.status, plan.built, plan.epochs, phases=plan.phases()
    )


class _PlayedTrial:
    """An orchestrator handle that plays a plan by the clock: epochs reach the event queue when
    their modelled end has passed, as a worker's Dask events would."""

    def __init__(self, plan: SimulatedPlan, events: queue.Queue, release) -> None:
        self.plan, self.events, self.release = plan, events, release
        self.sent = 0
        self.cancelled = False
        self.finished = False
        events.put(plan.built)

    def done(self) -> bool:
        now = time.time()
        while self.sent < len(self.plan.epochs) and self.plan.epochs[self.sent].ended_at <= now:
            self.events.put(self.plan.epochs[self.sent])
            self.sent += 1
        if not self.finished and (self.cancelled or now >= self.plan.ends_at):
            self.finished = True
            self.release()
        return self.finished

    def result(self) -> TrialResult:
        played = self.plan.epochs[: self.sent]
        return TrialResult(
            self.plan.built.trial_key,
            self.plan.status,
            self.plan.built,
            played,
            phases=self.plan.phases(self.sent),
        )

    def cancel(self) -> None:
        self.cancelled = True


class SimulatedLauncher:
    """The orchestrator's launcher for `workers` simulated workers in this process."""

    def __init__(
        self, workers: int, events: queue.Queue, model: SimulatedModel = SimulatedModel()
    ) -> None:
        self.events, self.model = events, model
        self.free = list(range(workers - 1, -1, -1))  # worker slots, lowest handed out first
        self.launched = 0
        self.freed_at: dict[int, float] = {}
        self.refill_s: list[
            float
        ] = []  # per relaunch: how long a freed worker waited for its next trial

    def __call__(self, request: TrialRequest) -> _PlayedTrial:
        if not self.free:
            raise RuntimeError(
                "every simulated worker is busy: the orchestrator launched too many trials"
            )
        slot = self.free.pop()
        self.launched += 1
        now = time.time()
        if slot in self.freed_at:
            self.refill_s.append(now - self.freed_at.pop(slot))
        plan = plan_trial(request, now, f"sim-{slot}", self.model)
        return _PlayedTrial(
            plan, self.events, lambda: self._release(slot, min(plan.ends_at, time.time()))
        )

    def _release(self, slot: int, ended_at: float) -> None:
        # The worker was free from its trial's modelled end, not from when the orchestrator noticed.
        self.free.append(slot)
        self.freed_at[slot] = ended_at
