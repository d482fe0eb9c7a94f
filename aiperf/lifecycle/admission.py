"""Admission: which trial runs where and when. The worker slots, the trials running on them, and
starting trials on free slots: a resumed run's interrupted trials first, then the oracle's
proposals, each recorded (with the oracle's state) before its request goes to a launcher.

Nothing here knows Prefect or Dask: a launcher is any callable returning a handle with done(),
result() and cancel(). The search loop (aiperf.lifecycle.orchestrator) owns an Admission and reads
its running trials; the reports those trials send are the loop's to check and record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import keras_tuner as kt

from aiperf import paths
from aiperf.config import BenchmarkConfig, trial_devices
from aiperf.lifecycle.proposals import OracleThread, retrain
from aiperf.lifecycle.recorder import RunRecorder, Turn
from aiperf.search import space
from aiperf.search.schedule import epochs_for
from aiperf.status import TrialStatus
from aiperf.store import TrialRecord, TrialStart
from aiperf.train.fit import fit_rule
from aiperf.train.messages import TrialRequest, TrialResult
from aiperf.train.recipe import scaled_rate

log = logging.getLogger("aiperf.lifecycle.admission")


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


@dataclass
class Running:
    """A trial on a worker slot: its handle, and what the loop has learnt of it so far."""

    trial_id: int
    kt_trial: kt.engine.trial.Trial
    handle: TrialHandle
    batch_size: int
    train_ops: int | None = None
    eval_ops: int | None = None
    epochs_seen: set[int] = field(default_factory=set)
    sender: str | None = None  # the Dask worker whose live events this trial accepts
    best_quality: float | None = None  # of its complete epochs, for the line its end logs
    operator: str | None = None  # how the search made it (a morphism, "seed"), for that line


@dataclass
class Launch:
    """A trial about to be recorded and handed to a worker."""

    trial: kt.engine.trial.Trial
    values: dict[str, Any]
    seed_number: int | None = None  # a retrained trial keeps the weight seed of the one it repeats


@dataclass(frozen=True)
class _Numbered:
    """A trial as its creation numbered it: the key the oracle gave it, its number, epochs and seed."""

    key: str
    number: int
    epochs: int
    seed: int


@dataclass(frozen=True)
class TrialData:
    """What every trial trains on: the staged data's folder, the shape models see and the classes
    (a token dataset's vocabulary), and the most samples one epoch can train and evaluate."""

    path: str
    image_shape: tuple[int, int, int]
    classes: int
    samples: tuple[int, int] | None = None  # (train, val); None: not checked

    @classmethod
    def of(cls, manifest: Any) -> TrialData:
        """From a staged dataset's manifest (aiperf.data.manifest.Manifest, or a token one)."""
        return cls(
            manifest.path,
            tuple(manifest.image_shape),
            manifest.classes,
            (manifest.train_samples, manifest.val_samples),
        )


class Admission:
    """The worker slots of one run's search and the trials running on them."""

    def __init__(
        self,
        config: BenchmarkConfig,
        recorder: RunRecorder,
        data: TrialData,
        launch: Launcher,
        events_topic: str | None = None,
    ) -> None:
        """`events_topic`: the Dask topic the trials' workers report on, live (None: only in
        their results)."""
        self.config, self.recorder, self.run_id = config, recorder, recorder.run_id
        self.data = data
        self.launch, self.events_topic = launch, events_topic
        # Set the moment a trial's handle reports it is done: the orchestrator's loop waits on it.
        self.ended = threading.Event()
        self.running: dict[str, Running] = {}
        self.trial_ids: dict[str, int] = {}  # oracle trial id -> trials.id, for parent links
        # oracle trial id -> (number, architecture): where a child finds its parent's weights
        self.lineage: dict[str, tuple[int, dict[str, Any]]] = {}
        self.created = 0
        self.retrain: list[
            TrialRecord
        ] = []  # a resumed run's interrupted trials, trained again first

    def resume_from(self, trials: list[TrialRecord]) -> None:
        """Continue a resumed run: number new trials after the recorded ones, link children to
        recorded parents, and train each interrupted trial again, from scratch, before anything new
        (its finished epochs stay recorded and counted)."""
        self.created = max((t.number for t in trials), default=-1) + 1
        self.trial_ids.update({t.trial_key: t.id for t in trials})
        self.lineage.update({t.trial_key: (t.number, t.architecture) for t in trials})
        self.retrain = sorted(
            (t for t in trials if t.status == TrialStatus.INTERRUPTED), key=lambda t: t.number
        )

    def _wake_when_done(self, handle: TrialHandle) -> None:
        add = getattr(handle, "add_done_callback", None)
        if callable(add):
            add(lambda *_: self.ended.set())

    def fill(self, proposals: OracleThread, slots: int, deadline: float) -> bool:
        """Start trials on free slots: interrupted trials of a resumed run first, then the oracle's
        proposals, as many as are ready (at least one, waited for) and as slots are free. False
        when nothing started (the oracle has nothing to propose right now)."""
        launches: list[Launch] = []
        state: dict[str, Any] | None = None  # the oracle's, right after the newest proposal taken
        while self.retrain and len(self.running) + len(launches) < slots:
            record = self.retrain.pop(0)
            trial = proposals.call(retrain, record, f"retrain-{record.number}").result()
            log.info(
                "trial %s trains interrupted trial %s again", trial.trial_id, record.trial_key
            )
            launches.append(
                Launch(trial, dict(trial.hyperparameters.values), seed_number=record.number)
            )
        free = slots - len(self.running) - len(launches)
        if free > 0 and not self.retrain:
            for proposal in proposals.take(free):
                launches.append(Launch(proposal.trial, proposal.values))
                state = proposal.state
        if launches:
            self._launch(launches, state, deadline)
        return bool(launches)

    def _launch(
        self, launches: list[Launch], state: dict[str, Any] | None, deadline: float
    ) -> None:
        """Record the trials and hand them to workers. The oracle's state goes in the same
        transaction, first: it includes every proposal recorded with it, so a resumed run (which
        restores it) never proposes a recorded trial again; as in a run without proposals made
        ahead, the state is stored with each proposal before its trial."""
        turn = self.recorder.turn()
        if state is not None:
            turn.search_state(self.config.search.oracle, state)
        started_at = time.time()
        requests = [self._record(turn, launch, started_at, deadline) for launch in launches]
        trial_ids = self.recorder.commit(turn)
        for (launch, request, operator), trial_id in zip(requests, trial_ids, strict=True):
            key = launch.trial.trial_id
            self.trial_ids[key] = trial_id
            handle = self.launch(request)
            self._wake_when_done(handle)
            self.running[key] = Running(
                trial_id, launch.trial, handle, request.global_batch, operator=operator
            )
            log.info("trial %s started: %s", key, operator or launch.values)

    def _record(
        self, turn: Turn, launch: Launch, started_at: float, deadline: float
    ) -> tuple[Launch, TrialRequest, str | None]:
        """Number one trial, add its creation to the turn and make its request (sent only once the
        turn is committed); its operator comes back for the line its start logs."""
        values = launch.values
        proposal = space.decode(values, self.data.image_shape, self.data.classes)
        number = self.created
        self.created += 1
        epochs = proposal.epochs or epochs_for(
            number, self.config.workers, self.config.train.epochs
        )
        seed = trial_seed(
            self.config.seed, number if launch.seed_number is None else launch.seed_number
        )
        key = launch.trial.trial_id
        turn.trial_created(
            TrialStart(
                trial_key=key,
                number=number,
                started_at=started_at,
                parent_trial_id=self.trial_ids.get(proposal.parent_key or ""),
                operator=proposal.operator,
                architecture=proposal.architecture,
                hyperparameters={k: v for k, v in values.items() if k != space.ARCHITECTURE},
                epochs=epochs,
                seed=seed,
            )
        )
        request = self._request(
            proposal, _Numbered(key=key, number=number, epochs=epochs, seed=seed), deadline
        )
        self.lineage[key] = (number, proposal.architecture)
        return launch, request, proposal.operator

    def _request(
        self, proposal: space.Proposal, trial: _Numbered, deadline: float
    ) -> TrialRequest:
        """What a worker needs to train the trial: the proposal's choices over the profile's
        train settings, and where a grown child finds its parent."""
        train = self.config.train
        return TrialRequest(
            run_id=self.run_id,
            trial_key=trial.key,
            architecture=proposal.architecture,
            learning_rate=scaled_rate(
                proposal.learning_rate,
                proposal.batch_size * trial_devices(self.config.cluster),
                train.lr_reference_batch,
            ),
            batch_size=proposal.batch_size,
            epochs=trial.epochs,
            deadline=deadline,
            data_path=self.data.path,
            seed=trial.seed,
            optimizer=train.optimizer,
            momentum=train.momentum,
            dropout=proposal.dropout,
            early_stopping_patience=train.early_stopping_patience,
            events_topic=self.events_topic,
            precision=train.precision,
            jit_compile=train.jit_compile,
            lr_schedule=train.lr_schedule,
            # searched per trial on the LM track (None: the profile's train settings)
            warmup_epochs=_either(proposal.warmup_epochs, train.warmup_epochs),
            weight_decay=_either(proposal.weight_decay, train.weight_decay),
            label_smoothing=train.label_smoothing,
            devices=trial_devices(self.config.cluster),
            fit_headroom=fit_rule(self.config.ruleset).headroom,
            weights_path=self._weights_path(trial.number),
            feed=self.config.data.feed,
            attention=train.attention,
            beta_2=train.beta_2,
            clip_norm=train.clip_norm,
            lr_floor=train.lr_floor,
            **self._inheritance(proposal.parent_key),
        )

    def _inheritance(self, parent_key: str | None) -> dict[str, Any]:
        """What a grown child needs to continue its parent (search.inherit): the parent's
        architecture and weights file. Nothing for a seed, or where children start fresh."""
        parent = self.lineage.get(parent_key or "")
        if not self.config.search.inherit or parent is None:
            return {}
        number, architecture = parent
        weights = self._weights_path(number)
        if weights is None:
            return {}
        return {"parent_architecture": architecture, "parent_weights": weights}

    def _weights_path(self, number: int) -> str | None:
        """Where trial `number` keeps its best epoch's weights, for verify to evaluate again
        (aiperf.results.remeasure): in the run's folder, beside its event log; none without a run
        folder (an orchestrator driven by tests) or for a trainer that trains nothing."""
        log_path = self.recorder.events.path
        if log_path is None or self.config.train.trainer == "simulated":
            return None
        return str((log_path.parent / paths.weights_file(number)).absolute())


def _either(searched: float | None, profile: float) -> float:
    """A training setting the search drew for this trial, or else the profile's for every trial."""
    return profile if searched is None else searched
