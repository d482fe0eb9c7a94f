"""Train one trial on this worker until its epochs are done or the run's deadline comes.

The steps a trial finishes count toward the score even when the deadline cuts an epoch short,
so the deadline stops training and evaluation alike within the batch it comes in
(aiperf.train.watch, without making any step wait for the host). A trial
uses only the cores its worker owns (AIPERF_WORKER_CORES), so concurrent trials on one node do
not fight over cores.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aiperf import quality, settings
from aiperf.arch.transformer import is_transformer
from aiperf.status import TrialStatus
from aiperf.train import lm, recipe
from aiperf.train.devices import configure_logical_cpus, data_parallel, worker_devices
from aiperf.train.epochs import EpochPlan, epoch_end, stalled
from aiperf.train.fit import StepMemory, checks_fit, step_memory, too_large_message, trainable
from aiperf.train.gpu_failures import out_of_memory, out_of_memory_message
from aiperf.train.kept import BestWeights, inherited_lm
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest, TrialResult
from aiperf.train.phases import PhaseClock
from aiperf.train.watch import deadline_watch, nan_watch

Reporter = Callable[[TrialBuilt | EpochReport], None]

CORES_ENV = settings.WORKER_CORES.name


def configure_threads(cores: int | None) -> None:
    """Size TensorFlow's thread pools to this worker's cores, and make its logical CPU devices when
    the worker owns several (aiperf.train.devices), once, before TensorFlow starts."""
    configure_logical_cpus(worker_devices())
    if not cores:
        return
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(cores))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", str(cores))
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(cores)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass  # already initialised by an earlier trial in this process: same sizes


def warm_up() -> str:
    """Import the framework and size its thread pools on this worker before the timed window
    opens: a worker's start-up is not the machine's AI work and should not eat into the budget."""
    configure_threads(worker_cores())
    import keras

    keras.ops.convert_to_tensor([0.0])  # initialises the backend's runtime
    return keras.backend.backend()


def worker_cores() -> int | None:
    return settings.count(settings.WORKER_CORES)


def _learning_rate(request: TrialRequest, steps_per_epoch: int) -> Any:
    """The trial's learning rate, scheduled over the trial's own steps."""
    return recipe.learning_rate(
        request.learning_rate,
        request.lr_schedule,
        epochs=request.epochs,
        steps_per_epoch=steps_per_epoch,
        warmup_epochs=request.warmup_epochs,
        floor=request.lr_floor,
    )


def _step_memory(model: Any, request: TrialRequest) -> StepMemory | None:
    """What the trial's step needs of each device against what it has (aiperf.train.fit), where
    this worker checks it (JAX with jit on accelerators); None elsewhere, at no cost."""
    if not checks_fit(request.jit_compile):
        return None
    return step_memory(
        model,
        global_batch=request.global_batch,
        devices=request.devices,
        precision=request.precision,
        headroom=request.fit_headroom,
    )


@dataclass
class _Progress:
    """What a trial has to show so far, held outside its steps so that a failure's result still
    carries the TrialBuilt reported and every epoch that ended before the failure."""

    built: TrialBuilt | None = None
    epochs: list[EpochReport] = field(default_factory=list)


def run_trial(request: TrialRequest, report: Reporter, worker: str | None = None) -> TrialResult:
    """Build, count, train and evaluate; every epoch is reported the moment it ends. Where the
    trial's seconds went (aiperf.train.phases) comes back in TrialResult.phases."""
    clock = PhaseClock()
    report = clock.timed(report)
    scope = ExitStack()
    progress = _Progress()
    # A language model's trial (aiperf.train.lm): its best epoch is its lowest validation loss.
    language = is_transformer(request.architecture)
    best = BestWeights(request.weights_path, quality.LOSS if language else quality.ACCURACY)
    try:
        session = _Session(report, worker, clock, scope)
        return _train_trial(request, session, progress, language, best)
    except Exception as exc:  # the trial fails; the run and its other trials go on
        message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        oom = out_of_memory(exc)  # its own status and one line (aiperf.train.gpu_failures)
        if oom:
            message = out_of_memory_message(oom, request.batch_size, request.devices)
        return TrialResult(
            request.trial_key,
            TrialStatus.OUT_OF_MEMORY if oom else TrialStatus.FAILED,
            progress.built,
            progress.epochs,
            message=message,
            phases=clock.seconds(),
        )
    finally:
        scope.close()  # a distribution set for this trial is unset for the next


@dataclass(frozen=True)
class _Session:
    """Where one trial runs and reports: its (timed) reporter, the worker's name, its phase clock,
    and the scope its distribution is entered in (closed when the trial ends, however it ends)."""

    report: Reporter
    worker: str | None
    clock: PhaseClock
    scope: ExitStack


def _train_trial(
    request: TrialRequest,
    session: _Session,
    progress: _Progress,
    language: bool,
    best: BestWeights,
) -> TrialResult:
    """The trial's steps in order: build, count and report, compile (and stop here when its step
    does not fit the devices), train until done or the deadline, then say how it ended."""
    clock = session.clock
    placement = _prepare(request, session.scope)
    with clock.phase("build"):
        feed, model, inherited_epoch = _build(request, language)
    with clock.phase("count"):
        built = _built(request, model, placement, inherited_epoch, session.worker)
    progress.built = built
    session.report(built)
    with clock.phase("compile"):
        fed, memory = _compile(request, model, feed, language)
    if memory is not None and not memory.fits:
        return TrialResult(
            request.trial_key,
            TrialStatus.TOO_LARGE,
            built,
            [],
            message=too_large_message(memory),
            phases=clock.seconds(),
        )
    if time.time() < request.deadline:
        diverged_message = _fit(request, session, fed, feed, partial(best.offer, model), progress)
        if diverged_message is not None:
            return TrialResult(
                request.trial_key,
                TrialStatus.DIVERGED,
                built,
                progress.epochs,
                message=diverged_message,
                phases=clock.seconds(),
            )
    return _ended(request, progress, clock)


def _prepare(request: TrialRequest, scope: ExitStack) -> list[str]:
    """Ready the framework for the trial: this worker's threads, the trial's seed and precision
    (before the model is built), and its devices' scope, entered in `scope`, inside which model,
    optimizer and steps are made (one replica each); the devices it trains on."""
    configure_threads(worker_cores())
    import keras

    # Imported before the build phase opens, as they always were: an import is not the build.
    import aiperf.arch
    import aiperf.data.feed
    import aiperf.ops  # noqa: F401

    keras.utils.set_random_seed(request.seed)
    keras.mixed_precision.set_global_policy(request.precision)
    placement: list[str] = scope.enter_context(
        data_parallel(keras.backend.backend(), request.devices)
    )
    return placement


def _compile(
    request: TrialRequest, model: Any, feed: Any, language: bool
) -> tuple[Any, StepMemory | None]:
    """The model that trains and what its step needs of each device (None where not checked).
    What trains is the counted model behind the device-side scaling of uint8 pixels (a model
    sharing its variables); `model` itself is what is counted and saved. A token feed gives model
    inputs (feed.pixels is false): what trains is then `model` itself."""
    # The one builder of a trial's step (aiperf.train.fit.trainable), as the seed's fit
    # check and the GPU check compile it.
    fed = trainable(
        model,
        request.step_recipe(language),
        pixels=feed.pixels,
        rate=_learning_rate(request, feed.train_samples // request.global_batch),
        devices=request.devices,
    )
    # Fit before paying: on JAX accelerators the step is compiled now, from shapes, and
    # its memory read from XLA (the executable is the one fit runs: no second compile).
    return fed, _step_memory(fed, request)


def _build(request: TrialRequest, language: bool) -> tuple[Any, Any, int | None]:
    """The trial's feed and model, and the epoch a grown LM child's parent reached (search.inherit;
    None otherwise). Each step takes a batch per device: the feed's batch is the global batch."""
    if language:  # token windows, and the decoder the spec describes
        feed = lm.open_lm_feed(
            request.data_path,
            request.architecture,
            batch_size=request.global_batch,
            seed=request.seed,
            devices=request.devices,
        )
        model, inherited_epoch = inherited_lm(request)
        return feed, model, inherited_epoch
    from aiperf.arch import build_model, network_from_dict
    from aiperf.data.feed import open_feed

    feed = open_feed(
        request.data_path,
        batch_size=request.global_batch,
        seed=request.seed,
        input_shape=request.architecture["input_shape"],
        threads=worker_cores(),
        feed=request.feed,
        devices=request.devices,
    )
    model = build_model(network_from_dict(request.architecture), dropout=request.dropout)
    return feed, model, None


def _built(
    request: TrialRequest,
    model: Any,
    placement: list[str],
    inherited_epoch: int | None,
    worker: str | None,
) -> TrialBuilt:
    """The trial's TrialBuilt: its model counted in one walk, both conventions, per sample (a
    language model's sample is one sequence: aiperf.ops.transformer_costs)."""
    from aiperf.ops import count_all

    counts = count_all(model)
    counted, tensor = counts["aiperf"], counts["tensor"]
    return TrialBuilt(
        trial_key=request.trial_key,
        worker=worker or socket.gethostname(),
        parameters=int(model.count_params()),
        train_ops=counted.train_per_sample,
        eval_ops=counted.eval_per_sample,
        tensor_train_ops=tensor.train_per_sample,
        tensor_eval_ops=tensor.eval_per_sample,
        devices=len(placement),
        placement=tuple(placement),
        inherited_epoch=inherited_epoch,
    )


def _fit(
    request: TrialRequest,
    session: _Session,
    fed: Any,
    feed: Any,
    keep: Callable[[EpochReport], Any],
    progress: _Progress,
) -> str | None:
    """Train and evaluate every epoch in one fit, each epoch's report kept in `progress` as it
    ends; why the trial diverged, or None when it did not."""
    import keras

    clock = session.clock
    watch = deadline_watch(request.deadline)
    plan = EpochPlan(
        trial_key=request.trial_key,
        deadline=request.deadline,
        batch=request.global_batch,
        samples=(feed.train_samples, feed.val_samples),
        val=feed.val,
        patience=request.early_stopping_patience,
        gather_replicas=request.devices > 1 and keras.backend.backend() == "tensorflow",
    )
    ender = epoch_end(plan, watch=watch, clock=clock, keep=keep, report=session.report)
    progress.epochs = ender.epochs  # the same list: what ended before a failure is kept
    # One fit for every epoch: the training iterator lives across them (aiperf.train.
    # epochs). No callback makes a step wait for its loss on the host (aiperf.train.watch):
    # the deadline stops the loop from a timer, the loss is looked at every few batches on
    # Keras' callback thread and at each epoch's end; the batches trained still count.
    with clock.steps("train"):
        fed.fit(
            **feed.epochs,
            epochs=request.epochs,
            verbose=0,
            callbacks=[watch, clock.callback(), nan_watch(), ender],
        )
    diverged_message: str | None = ender.diverged_message
    return diverged_message


def _ended(request: TrialRequest, progress: _Progress, clock: PhaseClock) -> TrialResult:
    """A trial that neither failed nor diverged: done when every epoch trained, or stopped early
    by its own rule (not by the deadline); stopped otherwise."""
    epochs = progress.epochs
    done = (
        bool(epochs)
        and all(e.complete for e in epochs)
        and (len(epochs) == request.epochs or stalled(epochs, request.early_stopping_patience))
    )
    return TrialResult(
        request.trial_key,
        TrialStatus.COMPLETED if done else TrialStatus.STOPPED,
        progress.built,
        epochs,
        phases=clock.seconds(),
    )
