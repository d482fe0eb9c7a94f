"""Where a trial's seconds go on its worker: build, count, compile and trace, train, evaluate, report.

`run_trial` holds one `PhaseClock` per trial and wraps each piece of its work in it; whatever the
trial does outside these pieces (imports, thread sizing, waiting) is the worker's idle time, which
is derived when the records are read, never measured here. Durations come from
time.perf_counter, on the worker, so clock differences between nodes do not enter them.

The rule for compile and trace (the frameworks compile a step function on its first call, inside
`fit` and `evaluate`): in the first `fit` and in the first `evaluate` of a trial, the first batch's
time (from its batch-begin hook to its batch-end hook) minus the median time of the later batches
of that same call's first epoch (the time from one batch's end hook to the next's, which stays a
step's time when Keras runs the end hooks on a thread of their own and the host dispatches ahead)
is moved from train (or evaluate) to compile. What is moved is never negative,
and nothing is moved from a call with a single batch: there is no later batch to tell the tracing
from the step. Everything else inside `fit` is train and everything else inside `evaluate` is
evaluate (a pipeline's start-up, the epoch's callbacks); an evaluation run inside `fit` (a
validation set given to it) counts as evaluate, not train, and is not watched for tracing. A phase
or stepping call timed while a `fit` is open (the trial evaluates, reports and keeps weights at each
epoch's end, inside its one `fit`) is taken out of that fit's train time: it counts as itself, and
`outside()` counts as no phase (the worker's idle time, as before).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

# The trials table's columns (aiperf.store.records.TRIAL_PHASE_COLUMNS), in the order they happen.
PHASES = ("build", "count", "compile", "train", "evaluate", "report")
STEPPING = ("train", "evaluate")

Message = TypeVar("Message")


@dataclass
class _Call:
    """One open fit ("train") or evaluate ("evaluate") call."""

    kind: str
    watched: bool  # the trial's first call of its kind: its first epoch's batches are timed
    begins: dict[int, float] = field(default_factory=dict)
    ends: dict[int, float] = field(default_factory=dict)
    epochs_begun: int = 0
    nested_s: float = 0.0  # phases and calls timed inside this one
    nested_test_s: float = 0.0  # fit's own evaluation (a validation set), by its hooks
    test_started: float | None = None

    def traced_s(self) -> float:
        """The first batch's excess over the median later batch (end hook to end hook)."""
        if 0 not in self.begins or 0 not in self.ends:
            return 0.0
        later = [self.ends[i] - self.ends[i - 1] for i in sorted(self.ends) if i - 1 in self.ends]
        if not later:
            return 0.0
        return max(0.0, self.ends[0] - self.begins[0] - statistics.median(later))


class PhaseClock:
    """Seconds per phase of one trial. Use `phase(name)` around build, count and compile, `steps(kind)`
    around every fit ("train") and evaluate ("evaluate") with `callback()` among its callbacks, and
    `timed(report)` for the reporter; `seconds()` is what TrialResult.phases carries."""

    def __init__(self) -> None:
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self._first_calls: set[str] = set()  # the kinds whose first call has begun
        self._calls: list[_Call] = []  # the open stepping calls, innermost last

    def seconds(self) -> dict[str, float]:
        """{"build_s": ..., "report_s": ...}: the trials table's columns."""
        return {f"{name}_s": max(0.0, value) for name, value in self._seconds.items()}

    def _nested(self, elapsed: float) -> None:
        if self._calls:
            self._calls[-1].nested_s += elapsed

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self._seconds[name] += elapsed
            self._nested(elapsed)

    @contextmanager
    def outside(self) -> Iterator[None]:
        """Time that is no phase (the worker's idle time), taken out of an open call's."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._nested(time.perf_counter() - started)

    @contextmanager
    def steps(self, kind: str) -> Iterator[None]:
        """One fit ("train") or evaluate ("evaluate") call; its first epoch's batches are watched if
        it is the trial's first call of that kind."""
        if kind not in STEPPING:
            raise ValueError(f"unknown stepping phase {kind!r}; one of {STEPPING}")
        call = _Call(kind, watched=kind not in self._first_calls)
        self._first_calls.add(kind)
        self._calls.append(call)
        started = time.perf_counter()
        try:
            yield
        finally:
            self._calls.pop()
            elapsed = time.perf_counter() - started
            spent = elapsed - call.nested_s - call.nested_test_s
            traced = call.traced_s() if call.watched else 0.0
            self._seconds[kind] += spent - traced
            self._seconds["evaluate"] += call.nested_test_s
            self._seconds["compile"] += traced
            self._nested(elapsed)

    def timed(self, report: Callable[[Message], Any]) -> Callable[[Message], None]:
        """The reporter, its every call counted as report."""

        def timed_report(message: Message) -> None:
            with self.phase("report"):
                report(message)

        return timed_report

    # --- the hooks of callback() ------------------------------------------------------------------

    def _watched(self, kind: str) -> _Call | None:
        """The open call of `kind` whose batches are being timed now, if any."""
        call = self._calls[-1] if self._calls else None
        if call is None or call.kind != kind or not call.watched or call.epochs_begun > 1:
            return None
        return call

    def _batch_begin(self, kind: str, batch: int) -> None:
        call = self._watched(kind)
        if call is not None:
            call.begins[batch] = time.perf_counter()

    def _batch_end(self, kind: str, batch: int) -> None:
        call = self._watched(kind)
        if call is not None:
            call.ends[batch] = time.perf_counter()

    def _epoch_begin(self) -> None:
        if self._calls:
            self._calls[-1].epochs_begun += 1

    def _test_begin(self) -> None:
        call = self._calls[-1] if self._calls else None
        if call is not None and call.kind == "train":
            call.test_started = time.perf_counter()

    def _test_end(self) -> None:
        call = self._calls[-1] if self._calls else None
        if call is not None and call.kind == "train" and call.test_started is not None:
            call.nested_test_s += time.perf_counter() - call.test_started
            call.test_started = None

    def callback(self) -> Any:
        """A Keras callback feeding the clock: batch times of a first call's first epoch,
        evaluation inside fit.

        Made inside `steps(kind)`: only the trial's first call of a kind gets the batch hooks;
        later calls get none. The batch hooks are async-safe (they only read the clock, keyed by
        batch), so even the first call's steps do not wait on the host for them
        (aiperf.train.watch says why that matters)."""
        import keras

        clock = self

        class NestedEvaluation(keras.callbacks.Callback):
            def on_test_begin(self, logs=None):
                clock._test_begin()

            def on_test_end(self, logs=None):
                clock._test_end()

        class PhaseWatch(NestedEvaluation):
            async_safe = True  # reads the clock only; Keras may run the end hooks on its thread

            def on_epoch_begin(self, epoch, logs=None):
                clock._epoch_begin()

            def on_train_batch_begin(self, batch, logs=None):
                clock._batch_begin("train", batch)

            def on_train_batch_end(self, batch, logs=None):
                clock._batch_end("train", batch)

            def on_test_batch_begin(self, batch, logs=None):
                clock._batch_begin("evaluate", batch)

            def on_test_batch_end(self, batch, logs=None):
                clock._batch_end("evaluate", batch)

        call = self._calls[-1] if self._calls else None
        if call is not None and not call.watched:
            return NestedEvaluation()
        return PhaseWatch()
