"""The search loop: the orchestrator that owns the oracle and keeps every worker busy.

It is the keras-tuner "chief": it asks the oracle for a trial whenever a worker slot is free,
hands the trial to a launcher (in the flow, a Prefect task on a Dask worker), records each epoch
the moment the worker reports it, tells the oracle, and starts the next trial as soon as one
ends. At the deadline it stops proposing and waits for the running trials to stop themselves.
It writes the search's records through the run's recorder (aiperf.lifecycle.recorder), as the
run's owner, each record with its event-log lines.

Two things keep a thousand workers busy from one process. The oracle lives on its own thread
(OracleThread), which proposes the next trials ahead of need, so a freed worker takes a proposal
that is already made; every oracle call goes through that thread, so only one thread ever touches
the oracle. And what one turn of the loop learns (epochs, ends, new trials) is committed in one
transaction (a recorder's Turn: an aiperf.store.WriteBatch), not one per report: a commit waits
for the disk.

Every report is checked when it arrives: samples within the dataset and in whole batches, epochs
in order, and a live event only from the worker the trial runs on (the Dask scheduler stamps each
event with its sender, `sent_from`). A report that fails is refused with a warning and its trial is
failed with the reason. What is expensive to check here (the operations per sample a worker counted)
is checked by the verification every run ends with (aiperf.results.verify).

Nothing here knows Prefect or Dask: a launcher is any callable returning a handle with done(),
result() and cancel(), and reports arrive on a plain queue (as message objects from launchers in
this process, as event dicts from Dask workers). Tests drive it with threads.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import keras_tuner as kt

from aiperf import paths, settings
from aiperf.config import BenchmarkConfig, trial_devices
from aiperf.errors import UserError
from aiperf.lifecycle import liveness
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.search import space
from aiperf.search.resume import stored_state
from aiperf.search.schedule import epochs_for
from aiperf.status import TrialStatus
from aiperf.store import TrialRecord
from aiperf.store.records import TrialPhases
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest, TrialResult, from_event
from aiperf.train.recipe import scaled_rate
from aiperf.units import ops_rate

log = logging.getLogger("aiperf.lifecycle.orchestrator")


def trial_seed(run_seed: int, number: int) -> int:
    """Each trial's weight seed, distinct per trial and within what numpy and the frameworks take."""
    return (run_seed * 100_003 + number) % 2**32


class TrialHandle(Protocol):
    def done(self) -> bool: ...
    def result(self) -> TrialResult: ...
    def cancel(self) -> None: ...

    # Optional: `add_done_callback(fn)`, as distributed.Future has it. A handle that offers it wakes
    # the loop the moment its trial ends, so its worker gets the next trial without waiting a poll.


Launcher = Callable[[TrialRequest], TrialHandle]


@dataclass(frozen=True)
class LiveFigures:
    """A snapshot for live displays: what the run has done so far (a resumed run: its segment)."""

    elapsed_s: float
    budget_s: float
    trials_done: int
    trials_running: int
    total_ops: int
    best_val_accuracy: float | None
    best_trial: str | None = None  # the trial whose complete epoch reached best_val_accuracy

    @property
    def ops_per_s(self) -> float:
        return self.total_ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def budget_used(self) -> float:
        """The share of the budget used, 0 to 1 (past the deadline, stopping trials: 1)."""
        return min(1.0, self.elapsed_s / self.budget_s) if self.budget_s > 0 else 1.0

    def milestone(self) -> tuple[str | None, int, bool]:
        """What a new version of the best-so-far table marks: a new best trial, another
        PROGRESS_STEP of the budget, or the search's end (no trial left running past the deadline).
        A trial's end alone moves the progress bar only, so a run of many trials does not fill its
        artifacts with versions."""
        step = math.floor(self.budget_used / PROGRESS_STEP + 1e-9)
        return self.best_trial, step, self.budget_used >= 1.0 and self.trials_running == 0

    def markdown(self, run_id: int) -> str:
        """The best figures so far as a markdown table, for a person following the run."""
        best = (
            "-"
            if self.best_val_accuracy is None
            else f"{self.best_val_accuracy:.4f} (trial {self.best_trial})"
        )
        rows = [
            (
                "budget used",
                f"{self.elapsed_s:.0f} s of {self.budget_s:.0f} s ({100 * self.budget_used:.0f}%)",
            ),
            ("trials ended", f"{self.trials_done} ({self.trials_running} running)"),
            ("best val accuracy", best),
            ("OPS so far", ops_rate(self.ops_per_s)),
        ]
        lines = [f"## aiperf run {run_id}: progress", "", "| | |", "|---|---|"]
        return "\n".join(lines + [f"| {name} | {value} |" for name, value in rows]) + "\n"


@dataclass
class _Running:
    trial_id: int
    kt_trial: kt.engine.trial.Trial
    handle: TrialHandle
    batch_size: int
    train_ops: int | None = None
    eval_ops: int | None = None
    epochs_seen: set[int] = field(default_factory=set)
    sender: str | None = None  # the Dask worker whose live events this trial accepts
    best_val_accuracy: float | None = None  # of its complete epochs, for the line its end logs
    operator: str | None = None  # how the search made it (a morphism, "seed"), for that line


# Where a report came from: a Dask worker's address, the trial's own result (trusted: it is the
# return value of the task that ran the trial), or an event that no scheduler stamped.
FROM_RESULT = "result"
UNSTAMPED = "unstamped"


# The coordinator shares the machine with the workers: its loop polls every poll_s, but redraws the
# live figures only this often (their rendering cost cores the trials want).
FIGURES_EVERY_S = 1.0

# The run's progress (on_progress: in a flow, Prefect artifacts) is published as each trial ends, and
# whenever another tenth of the budget is used, so it moves even while no trial ends; each
# publication is a call to the Prefect API, so not every turn of the loop.
PROGRESS_STEP = 0.1


def max_consecutive_failures(workers: int) -> int:
    """Failed trials in a row, with none completed, after which the run stops as failed:
    $AIPERF_MAX_CONSECUTIVE_FAILURES, else 3 x workers (every worker failed three times: nothing
    will train, and idling out the budget would only hide the error)."""
    return settings.count(settings.MAX_CONSECUTIVE_FAILURES) or 3 * workers


def proposals_ahead(workers: int) -> int:
    """How many proposals the oracle thread keeps ready beyond the one being taken.

    A proposal made ahead does not know the trials that end between its making and its launch.
    With W workers every proposal already misses the W - 1 trials still running, so k made ahead
    add k / (W - 1) to that: nothing at a thousand workers, where a slow proposal would idle
    them, and as much again at two, where a proposal costs little against a trial. Hence none
    under 4 workers (the oracle still runs on its thread, on demand), then one per 256 workers
    (ends arrive about workers / trial length per second, in bursts of a few per turn)."""
    return 0 if workers < 4 else math.ceil(workers / 256)


@dataclass(frozen=True)
class Proposal:
    """A trial the oracle proposed, its values, and the oracle's state right after proposing it.

    The run stores that state in the transaction that records the trial, never an older one: a
    resumed run then never proposes a recorded trial again. Proposals made after it (ready, not yet
    launched) are not in it, so one that never runs leaves no trace in the records."""

    trial: kt.engine.trial.Trial
    values: dict[str, Any]
    state: dict[str, Any]


class OracleThread:
    """The one thread that touches the oracle (keras-tuner oracles are not thread-safe, and a
    proposal of the morphism oracle takes long enough to idle workers if the loop waited for it).

    Every call runs on one worker thread, in the order it was made: what the loop tells the oracle
    (an epoch's score, a trial's end) is fire-and-forget; proposals are asked `ahead` at a time and
    taken in order. A failure in a told call is raised at the next take() or check()."""

    def __init__(self, oracle: kt.Oracle, ahead: int) -> None:
        self.oracle, self.ahead = oracle, ahead
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiperf-oracle")
        self._ready: deque[Future[Proposal | None]] = deque()
        self._asked = 0
        self._failure: BaseException | None = None

    def call(self, fn: Callable[..., Any], *args: Any) -> Future:
        """fn(oracle, *args) on the oracle's thread, after everything asked before it."""
        return self._executor.submit(fn, self.oracle, *args)

    def tell(self, fn: Callable[..., Any], *args: Any) -> None:
        """Like call, for calls whose answer nobody waits for; a failure is kept and raised later."""
        self.call(fn, *args).add_done_callback(self._keep_failure)

    def _keep_failure(self, done: Future) -> None:
        if not done.cancelled() and done.exception() is not None and self._failure is None:
            self._failure = done.exception()

    def check(self) -> None:
        """Raise what a told call raised, in the loop's thread."""
        if self._failure is not None:
            raise self._failure

    def take(self, wanted: int = 1) -> list[Proposal]:
        """Up to `wanted` proposals, in order: the next one (waited for when it is not made yet),
        then each one after it that is already made, so that a slow proposal never holds the ones
        before it. Empty when the oracle has nothing to propose now. Every proposal wanted is asked
        for, and `ahead` more are kept asked for."""
        self.check()
        while len(self._ready) < wanted:
            self._ask()
        taken = [self._ready.popleft().result()]
        while len(taken) < wanted and self._ready and self._ready[0].done():
            taken.append(self._ready.popleft().result())
        while len(self._ready) < self.ahead:
            self._ask()
        return [proposal for proposal in taken if proposal is not None]

    def _ask(self) -> None:
        self._asked += 1
        self._ready.append(self.call(_propose, f"proposal-{self._asked}"))

    def close(self) -> None:
        """Drop the proposals not yet started (nothing of theirs was recorded) and wait for the
        calls already made, so the oracle has learnt every end it was told."""
        for pending in self._ready:
            pending.cancel()
        self._ready.clear()
        self._executor.shutdown(wait=True)


def _propose(oracle: kt.Oracle, tuner_id: str) -> Proposal | None:
    """On the oracle's thread: a proposal and the state that includes it, as the run stores it."""
    trial = oracle.create_trial(tuner_id)
    if trial.status != kt.engine.trial.TrialStatus.RUNNING:
        return None  # the oracle has nothing to propose right now
    return Proposal(trial, dict(trial.hyperparameters.values), stored_state(oracle))


def _retrain(oracle: kt.Oracle, record: TrialRecord, tuner_id: str) -> kt.engine.trial.Trial:
    """On the oracle's thread: an interrupted trial of a resumed run registered again under a new
    trial key with the same values; the oracle counts it as its own, not as a proposal."""
    from aiperf.search.resume import trial_values

    trial_id = f"{{:0{len(str(oracle.max_trials))}d}}".format(len(oracle.trials))
    hp = oracle.hyperparameters.copy()
    hp.values = trial_values(record)
    trial = kt.engine.trial.Trial(
        hyperparameters=hp, trial_id=trial_id, status=kt.engine.trial.TrialStatus.RUNNING
    )
    oracle.trials[trial_id], oracle.ongoing_trials[tuner_id] = trial, trial
    oracle.start_order.append(trial_id)
    return trial


def _score(oracle: kt.Oracle, trial_id: str, objective: str, value: float, step: int) -> None:
    oracle.update_trial(trial_id, {objective: value}, step=step)


def _end_trial(
    oracle: kt.Oracle, trial: kt.engine.trial.Trial, objective: str, message: str | None
) -> None:
    """On the oracle's thread, after every score told before it: the trial ends for the oracle,
    completed if it was ever scored."""
    measured = trial.metrics.exists(objective)
    trial.status = (
        kt.engine.trial.TrialStatus.COMPLETED if measured else kt.engine.trial.TrialStatus.FAILED
    )
    trial.message = message
    oracle.end_trial(trial)


@dataclass
class _Launch:
    """A trial about to be recorded and handed to a worker."""

    trial: kt.engine.trial.Trial
    values: dict[str, Any]
    seed_number: int | None = None  # a retrained trial keeps the weight seed of the one it repeats


class NothingTrains(UserError):
    """Every trial fails: the run stops as failed, naming the first failure (usually a setting)."""


class RefusedReport(Exception):
    """A worker's report that breaks a rule: the trial fails with this reason."""


@dataclass(frozen=True)
class SearchSummary:
    trials: int
    completed: int
    stopped: int
    failed: int
    diverged: int
    ended_at: float


class Orchestrator:
    def __init__(
        self,
        *,
        config: BenchmarkConfig,
        recorder: RunRecorder,
        oracle: kt.Oracle,
        data_path: str,
        image_shape: tuple[int, int, int],
        num_classes: int,
        launch: Launcher,
        events: queue.Queue,
        events_topic: str | None = None,
        on_figures: Callable[[LiveFigures], None] | None = None,
        on_progress: Callable[[LiveFigures], None] | None = None,
        poll_s: float = 0.2,
        grace_s: float | None = None,
        dataset_samples: tuple[int, int] | None = None,
        ahead: int | None = None,
        logger: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        """`ahead`: proposals kept ready beyond the next (default: proposals_ahead(workers)).
        `logger`: where each trial's end is told in one line (the flow's run logger, so the Prefect
        UI shows the search's progress; this module's logger otherwise). `on_progress`: the
        figures as the search starts, as each trial ends, at each PROGRESS_STEP of the budget,
        and as it ends (a failure there is logged: a display never stops a run)."""
        self.config, self.recorder, self.oracle = config, recorder, oracle
        self.run_id = recorder.run_id
        self.data_path, self.image_shape, self.num_classes = data_path, image_shape, num_classes
        self.launch, self.events, self.events_topic = launch, events, events_topic
        self.on_figures = on_figures or (lambda _figures: None)
        self.on_progress = on_progress
        self._progress_step = -1  # the last PROGRESS_STEP published (-1: none yet)
        self.logger = logger or log
        self.deadline: float | None = None  # set by run(): the budget left, in each trial's line
        self.dataset_samples = dataset_samples  # (train, val): the most one epoch can use
        self.poll_s = poll_s
        self._ended = threading.Event()  # set when a trial's handle reports it is done
        # How long past the deadline a trial may take to notice it (one batch, one evaluation step).
        self.grace_s = grace_s if grace_s is not None else max(30.0, 0.25 * config.budget_s)
        self.running: dict[str, _Running] = {}
        self.trial_ids: dict[str, int] = {}  # oracle trial id -> trials.id, for parent links
        self.counts: dict[TrialStatus, int] = {
            status: 0 for status in TrialStatus if status != TrialStatus.RUNNING
        }
        self.created = 0
        self.total_ops = 0
        self.best_val_accuracy: float | None = None
        self.best_trial: str | None = None
        self.retrain: list[
            TrialRecord
        ] = []  # a resumed run's interrupted trials, trained again first
        self.failures_in_a_row = 0
        self.first_failure: str | None = (
            None  # its first line: what `aiperf run` prints when nothing trains
        )
        self.max_failures = max_consecutive_failures(config.workers)
        self.ahead = proposals_ahead(config.workers) if ahead is None else ahead
        self.proposals: OracleThread | None = None  # the oracle's thread, while run() runs
        # This turn's writes and their events, committed by _recording.
        self._turn = recorder.turn()

    def resume_from(self, trials: list[TrialRecord]) -> None:
        """Continue a resumed run: number new trials after the recorded ones, link children to
        recorded parents, and train each interrupted trial again, from scratch, before anything new
        (its finished epochs stay recorded and counted)."""
        self.created = max((t.number for t in trials), default=-1) + 1
        self.trial_ids.update({t.trial_key: t.id for t in trials})
        self.retrain = sorted(
            (t for t in trials if t.status == TrialStatus.INTERRUPTED), key=lambda t: t.number
        )

    # --- the loop --------------------------------------------------------------------------------

    def run(self, started_at: float, deadline: float) -> SearchSummary:
        """Keep the workers busy until the deadline. A stop signal (aiperf.lifecycle.liveness) is taken
        between two turns of the loop: every report already received is recorded, then
        Interrupted goes on up (the run ends interrupted)."""
        self.proposals = OracleThread(self.oracle, self.ahead)
        with liveness.deferred_signals():
            try:
                return self._run(started_at, deadline)
            except liveness.Interrupted:
                self._record_what_arrived()
                raise
            finally:
                self.proposals.close()

    def _record_what_arrived(self) -> None:
        """Record every report already queued and every trial already finished, nothing more."""
        with self._recording():
            self._drain_events()
            for key in [k for k, r in self.running.items() if r.handle.done()]:
                self._finish(key)

    @contextmanager
    def _recording(self) -> Iterator[None]:
        """Commit the writes made inside, in one transaction, even when what is inside raises
        (a run that stops as failed keeps what it learnt); then log them (aiperf.results.mllog), so the
        event log never holds what the database lacks."""
        try:
            yield
        finally:
            turn, self._turn = self._turn, self.recorder.turn()
            self.recorder.commit(turn)

    def _run(self, started_at: float, deadline: float) -> SearchSummary:
        self.deadline = deadline
        slots = self.config.workers
        shown = 0.0
        # The figures as the search starts, before the first proposal is waited for: a person
        # following the run sees it under way even while a slow oracle makes its first trial.
        self._progress(started_at, time.time(), ended=False)
        while True:
            liveness.raise_if_stopped()
            now = time.time()
            if now < deadline:
                while (
                    len(self.running) < slots
                    and time.time() < deadline
                    and self._fill(slots, deadline)
                ):
                    pass
            self._ended.clear()  # before looking: a trial that ends after this look wakes the wait below
            with self._recording():
                self._drain_events()
                finished = [k for k, r in self.running.items() if r.handle.done()]
                for key in finished:
                    self._finish(key)
            assert self.proposals is not None  # run() set it before calling _run
            self.proposals.check()
            now = time.time()
            self._progress(started_at, now, ended=bool(finished))
            if now >= deadline and not self.running:
                break
            if now >= deadline + self.grace_s:
                with self._recording():
                    self._abandon_stragglers()
                break
            if now >= shown + FIGURES_EVERY_S:  # the live view: a second's news, not every turn's
                self.on_figures(self._figures(started_at, now))
                shown = now
            if finished and now < deadline:
                continue  # a worker is free: its next trial now, not after a poll
            self._ended.wait(self.poll_s)  # a poll's time, or less when a trial ends
        self._drain_events()
        ended = time.time()
        self.on_figures(self._figures(started_at, ended))
        self._progress(started_at, ended, ended=True)
        return SearchSummary(
            trials=self.created,
            ended_at=ended,
            completed=self.counts[TrialStatus.COMPLETED],
            stopped=self.counts[TrialStatus.STOPPED],
            failed=self.counts[TrialStatus.FAILED],
            diverged=self.counts[TrialStatus.DIVERGED],
        )

    def _wake_when_done(self, handle: TrialHandle) -> None:
        add = getattr(handle, "add_done_callback", None)
        if callable(add):
            add(lambda *_: self._ended.set())

    def _fill(self, slots: int, deadline: float) -> bool:
        """Start trials on free slots: interrupted trials of a resumed run first, then the oracle's
        proposals, as many as are ready (at least one, waited for) and as slots are free. False
        when nothing started (the oracle has nothing to propose right now)."""
        assert self.proposals is not None
        launches: list[_Launch] = []
        state: dict[str, Any] | None = None  # the oracle's, right after the newest proposal taken
        while self.retrain and len(self.running) + len(launches) < slots:
            record = self.retrain.pop(0)
            trial = self.proposals.call(_retrain, record, f"retrain-{record.number}").result()
            log.info(
                "trial %s trains interrupted trial %s again", trial.trial_id, record.trial_key
            )
            launches.append(
                _Launch(trial, dict(trial.hyperparameters.values), seed_number=record.number)
            )
        free = slots - len(self.running) - len(launches)
        if free > 0 and not self.retrain:
            for proposal in self.proposals.take(free):
                launches.append(_Launch(proposal.trial, proposal.values))
                state = proposal.state
        if launches:
            self._launch(launches, state, deadline)
        return bool(launches)

    def _launch(
        self, launches: list[_Launch], state: dict[str, Any] | None, deadline: float
    ) -> None:
        """Record the trials and hand them to workers. The oracle's state goes in the same
        transaction, first: it includes every proposal recorded with it, so a resumed run (which
        restores it) never proposes a recorded trial again; as in a run without proposals made
        ahead, the state is stored with each proposal before its trial."""
        turn = self.recorder.turn()
        if state is not None:
            turn.search_state(self.config.search.oracle, state)
        requests: list[tuple[_Launch, TrialRequest, str | None]] = []
        started_at = time.time()
        for launch in launches:
            values = launch.values
            proposal = space.decode(values, self.image_shape, self.num_classes)
            number = self.created
            self.created += 1
            epochs = proposal.epochs or epochs_for(
                number, self.config.workers, self.config.train.epochs
            )
            architecture = proposal.network.to_dict()
            hyperparameters = {k: v for k, v in values.items() if k != space.ARCHITECTURE}
            parent_trial_id = self.trial_ids.get(proposal.parent_key or "")
            seed = trial_seed(
                self.config.seed, number if launch.seed_number is None else launch.seed_number
            )
            key = launch.trial.trial_id
            turn.trial_created(
                trial_key=key,
                number=number,
                started_at=started_at,
                parent_trial_id=parent_trial_id,
                operator=proposal.operator,
                architecture=architecture,
                hyperparameters=hyperparameters,
                epochs=epochs,
                seed=seed,
            )
            requests.append(
                (
                    launch,
                    TrialRequest(
                        run_id=self.run_id,
                        trial_key=key,
                        architecture=architecture,
                        learning_rate=scaled_rate(
                            proposal.learning_rate,
                            proposal.batch_size * trial_devices(self.config.cluster),
                            self.config.train.lr_reference_batch,
                        ),
                        batch_size=proposal.batch_size,
                        epochs=epochs,
                        deadline=deadline,
                        data_path=self.data_path,
                        seed=seed,
                        optimizer=self.config.train.optimizer,
                        momentum=self.config.train.momentum,
                        dropout=proposal.dropout,
                        early_stopping_patience=self.config.train.early_stopping_patience,
                        events_topic=self.events_topic,
                        precision=self.config.train.precision,
                        jit_compile=self.config.train.jit_compile,
                        lr_schedule=self.config.train.lr_schedule,
                        warmup_epochs=self.config.train.warmup_epochs,
                        weight_decay=self.config.train.weight_decay,
                        label_smoothing=self.config.train.label_smoothing,
                        devices=trial_devices(self.config.cluster),
                        weights_path=self._weights_path(number),
                    ),
                    proposal.operator,
                )
            )
        trial_ids = self.recorder.commit(turn)
        for (launch, request, operator), trial_id in zip(requests, trial_ids, strict=True):
            key = launch.trial.trial_id
            self.trial_ids[key] = trial_id
            handle = self.launch(request)
            self._wake_when_done(handle)
            self.running[key] = _Running(
                trial_id, launch.trial, handle, request.global_batch, operator=operator
            )
            log.info("trial %s started: %s", key, operator or launch.values)

    def _weights_path(self, number: int) -> str | None:
        """Where trial `number` keeps its best epoch's weights, for verify to evaluate again
        (aiperf.results.remeasure): in the run's folder, beside its event log; none without a run
        folder (an orchestrator driven by tests) or for a trainer that trains nothing."""
        log_path = self.recorder.events.path
        if log_path is None or self.config.train.trainer == "simulated":
            return None
        return str((log_path.parent / paths.weights_file(number)).absolute())

    # --- what workers report ---------------------------------------------------------------------

    def _drain_events(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            try:
                message = from_event(event) if isinstance(event, dict) else event
            except (TypeError, ValueError):
                log.warning("ignored a malformed trial event: %r", event)
                continue
            # A message object was put here by a launcher in this process: it speaks for its trial.
            sender = (
                (event.get("sent_from") or UNSTAMPED) if isinstance(event, dict) else FROM_RESULT
            )
            self._receive(message, sender)

    def _receive(self, message: TrialBuilt | EpochReport, sender: str) -> None:
        """Check a report, then apply it; a refused one fails its trial with the reason."""
        running = self.running.get(message.trial_key)
        if running is None:
            return  # a late repeat for a trial already finished: its result carried it too
        try:
            if not self._admissible(running, message, sender):
                return
        except RefusedReport as exc:
            log.warning(
                "refused a report for trial %s from %s: %s", message.trial_key, sender, exc
            )
            running.handle.cancel()
            self._end(message.trial_key, TrialStatus.FAILED, f"refused a worker's report: {exc}")
            return
        self._apply(running, message)

    def _admissible(
        self, running: _Running, message: TrialBuilt | EpochReport, sender: str
    ) -> bool:
        """True to apply the report, False to skip it for now; RefusedReport when it breaks a rule."""
        if sender == UNSTAMPED:
            raise RefusedReport("the event was not sent by a worker")
        if sender != FROM_RESULT:
            if running.sender is None:
                running.sender = sender  # the trial's first live event names its worker
            elif sender != running.sender:
                raise RefusedReport(
                    f"it came from {sender}, but the trial runs on {running.sender}"
                )
        if isinstance(message, TrialBuilt):
            return True
        expected = len(running.epochs_seen)
        if message.epoch in running.epochs_seen:
            return False  # a repeat: the live event and the result both carry every epoch
        if message.epoch != expected:
            if sender != FROM_RESULT:
                return False  # an earlier live event was lost: the trial's result brings them in order
            raise RefusedReport(f"epoch {message.epoch} arrived after epoch {expected - 1}")
        if message.samples_trained % running.batch_size:
            raise RefusedReport(
                f"epoch {message.epoch} trained {message.samples_trained} samples, not whole "
                f"batches of {running.batch_size}"
            )
        if self.dataset_samples is not None:
            train, val = self.dataset_samples
            if message.samples_trained > train or message.samples_evaluated > val:
                raise RefusedReport(
                    f"epoch {message.epoch} reports {message.samples_trained} trained and "
                    f"{message.samples_evaluated} evaluated samples; the dataset has {train} and {val}"
                )
        return True

    def _apply(self, running: _Running, message: TrialBuilt | EpochReport) -> None:
        if isinstance(message, TrialBuilt):
            if running.train_ops is not None:
                return  # the live event recorded it; the result repeats it
            self._turn.trial_built(
                running.trial_id,
                trial_key=message.trial_key,
                worker=message.worker,
                parameters=message.parameters,
                train_ops=message.train_ops,
                eval_ops=message.eval_ops,
                tensor_train_ops=message.tensor_train_ops,
                tensor_eval_ops=message.tensor_eval_ops,
                devices=message.devices,
                placement=message.placement,
            )
            running.train_ops, running.eval_ops = message.train_ops, message.eval_ops
            return
        # Recorded once: _admissible let through only the next epoch, and the write skips a row
        # that a retried commit already wrote.
        self._turn.epoch(running.trial_id, message.trial_key, message.fields())
        running.epochs_seen.add(message.epoch)
        if running.train_ops is not None and running.eval_ops is not None:
            self.total_ops += (
                message.samples_trained * running.train_ops
                + message.samples_evaluated * running.eval_ops
            )
        if message.complete and message.val_accuracy is not None:
            assert self.proposals is not None
            self.proposals.tell(
                _score,
                running.kt_trial.trial_id,
                self.config.search.objective,
                message.val_accuracy,
                message.epoch,
            )
            if self.best_val_accuracy is None or message.val_accuracy > self.best_val_accuracy:
                self.best_val_accuracy = message.val_accuracy
                self.best_trial = message.trial_key
            if (
                running.best_val_accuracy is None
                or message.val_accuracy > running.best_val_accuracy
            ):
                running.best_val_accuracy = message.val_accuracy

    def _finish(self, key: str) -> None:
        running = self.running[key]
        try:
            result = running.handle.result()
        except Exception as exc:  # the worker was lost: keep what it reported, record the failure
            result = TrialResult(
                key,
                TrialStatus.FAILED,
                None,
                [],
                message=f"worker lost: {type(exc).__name__}: {exc}",
            )
        for message in ([result.built] if result.built is not None else []) + list(result.epochs):
            self._receive(message, FROM_RESULT)
            if key not in self.running:
                return  # the result broke a rule: the trial is already failed
        if result.phases is not None:  # where its seconds went, measured on its worker
            try:
                self._turn.trial_phases(
                    running.trial_id, key, TrialPhases.from_seconds(result.phases)
                )
            except ValueError as exc:  # recorded without them: its seconds count as idle
                log.warning("ignored the phases of trial %s: %s", key, exc)
        self._end(key, result.status, result.message)

    def _end(self, key: str, status: TrialStatus, message: str | None) -> None:
        running = self.running.pop(key)
        ended_at = time.time()
        self._turn.trial_stopped(
            running.trial_id, key, status=status, ended_at=ended_at, message=message
        )
        self.counts[status] += 1
        self.logger.info("%s", self._ended_line(key, running, status, ended_at))
        # The oracle learns of the end on its thread; the state stored with the next proposal has it
        # (a resumed run rebuilds the trials themselves from the records: aiperf.search.resume).
        assert self.proposals is not None
        self.proposals.tell(_end_trial, running.kt_trial, self.config.search.objective, message)
        if status in (TrialStatus.FAILED, TrialStatus.DIVERGED, TrialStatus.OUT_OF_MEMORY):
            log.warning(
                "trial %s %s: %s", key, status, (message or "").splitlines()[0] if message else ""
            )
        self._count_failure(status, message)

    def _ended_line(
        self, key: str, running: _Running, status: TrialStatus, ended_at: float
    ) -> str:
        """One line per trial as it ends, for a person following the run: how it was made, its
        epochs, its accuracy beside the run's best, and the budget left."""
        accuracy = "-" if running.best_val_accuracy is None else f"{running.best_val_accuracy:.4f}"
        best = "-" if self.best_val_accuracy is None else f"{self.best_val_accuracy:.4f}"
        left = (
            "" if self.deadline is None else f"; {max(0.0, self.deadline - ended_at):.0f} s left"
        )
        return (
            f"trial {key} {status}: {running.operator or 'seed'}, "
            f"{len(running.epochs_seen)} epoch(s), val acc {accuracy} (run best {best}){left}"
        )

    def _count_failure(self, status: TrialStatus, message: str | None) -> None:
        """Fail fast: after max_failures failed trials in a row with none completed, nothing will
        train, so the run stops (NothingTrains) instead of idling out its budget."""
        if status not in (TrialStatus.FAILED, TrialStatus.OUT_OF_MEMORY):  # nothing trained
            self.failures_in_a_row = 0
            return
        self.failures_in_a_row += 1
        if self.first_failure is None:
            self.first_failure = ((message or "").strip().splitlines() or ["no message"])[0]
        if self.failures_in_a_row >= self.max_failures and not self.counts[TrialStatus.COMPLETED]:
            raise NothingTrains(
                f"{self.failures_in_a_row} trials failed in a row and none completed; the first "
                f"failed with: {self.first_failure}. Fix that (or set {settings.MAX_CONSECUTIVE_FAILURES.name})"
            )

    def _abandon_stragglers(self) -> None:
        for key in list(self.running):
            self.running[key].handle.cancel()
            self._end(
                key, TrialStatus.STOPPED, f"did not stop within {self.grace_s:g} s of the deadline"
            )

    def _progress(self, started_at: float, now: float, ended: bool) -> None:
        """Publish the figures when a trial ended or another PROGRESS_STEP of the budget is used."""
        if self.on_progress is None:
            return
        figures = self._figures(started_at, now)
        step = figures.milestone()[1]
        if not ended and step <= self._progress_step:
            return
        self._progress_step = step
        try:
            self.on_progress(figures)
        except Exception as exc:  # the run goes on; its records are what counts
            log.warning("progress not published: %s: %s", type(exc).__name__, exc)

    def _figures(self, started_at: float, now: float) -> LiveFigures:
        budget_s = self.config.budget_s if self.deadline is None else self.deadline - started_at
        return LiveFigures(
            elapsed_s=max(0.0, now - started_at),
            budget_s=budget_s,  # a resumed run's: what its segment has (resume_search)
            trials_done=sum(self.counts.values()),
            trials_running=len(self.running),
            total_ops=self.total_ops,
            best_val_accuracy=self.best_val_accuracy,
            best_trial=self.best_trial,
        )
