"""Where a trial's seconds go on its worker: build, count, compile and trace, train, evaluate, report.

`run_trial` holds one `PhaseClock` per trial and wraps each piece of its work in it; whatever the
trial does outside these pieces (imports, thread sizing, waiting) is the worker's idle time, which
is derived when the records are read, never measured here. Durations come from
time.perf_counter, on the worker, so clock differences between nodes do not enter them.

The rule for compile and trace (the frameworks compile a step function on its first call, inside
`fit` and `evaluate`): in the first `fit` and in the first `evaluate` of a trial, the first batch's
time (from its batch-begin hook to its batch-end hook) minus the median time of the later batches
of that same call is moved from train (or evaluate) to compile. What is moved is never negative,
and nothing is moved from a call with a single batch: there is no later batch to tell the tracing
from the step. Everything else inside `fit` is train and everything else inside `evaluate` is
evaluate (a pipeline's start-up, the epoch's callbacks); an evaluation run inside `fit` (a
validation set given to it) counts as evaluate, not train, and is not watched for tracing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

# The trials table's columns (aiperf.store.records.TRIAL_PHASE_COLUMNS), in the order they happen.
PHASES = ("build", "count", "compile", "train", "evaluate", "report")
STEPPING = ("train", "evaluate")

Message = TypeVar("Message")


class PhaseClock:
    """Seconds per phase of one trial. Use `phase(name)` around build, count and compile, `steps(kind)`
    around every fit ("train") and evaluate ("evaluate") with `callback()` among its callbacks, and
    `timed(report)` for the reporter; `seconds()` is what TrialResult.phases carries."""

    def __init__(self) -> None:
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self._first_calls: set[str] = set()  # the kinds whose first call has been measured
        self._open: str | None = None  # the stepping call running now
        self._batches: list[float] = []  # batch times of the call being measured
        self._batch_started: float | None = None
        self._nested_test_s = 0.0  # evaluation inside the current fit
        self._test_started: float | None = None

    def seconds(self) -> dict[str, float]:
        """{"build_s": ..., "report_s": ...}: the trials table's columns."""
        return {f"{name}_s": max(0.0, value) for name, value in self._seconds.items()}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
        started = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[name] += time.perf_counter() - started

    @contextmanager
    def steps(self, kind: str) -> Iterator[None]:
        """One fit ("train") or evaluate ("evaluate") call; its first batch is watched if it is the
        trial's first call of that kind."""
        if kind not in STEPPING:
            raise ValueError(f"unknown stepping phase {kind!r}; one of {STEPPING}")
        self._open, self._batches, self._nested_test_s = kind, [], 0.0
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started - self._nested_test_s
            traced = self._traced_s() if kind not in self._first_calls else 0.0
            self._first_calls.add(kind)
            self._seconds[kind] += spent - traced
            self._seconds["evaluate"] += self._nested_test_s
            self._seconds["compile"] += traced
            self._open = None

    def timed(self, report: Callable[[Message], Any]) -> Callable[[Message], None]:
        """The reporter, its every call counted as report."""

        def timed_report(message: Message) -> None:
            with self.phase("report"):
                report(message)

        return timed_report

    def _traced_s(self) -> float:
        if len(self._batches) < 2:
            return 0.0
        return max(0.0, self._batches[0] - statistics.median(self._batches[1:]))

    # --- the hooks of callback() ------------------------------------------------------------------

    def _watching(self, kind: str) -> bool:
        return self._open == kind and kind not in self._first_calls

    def _batch_begin(self, kind: str) -> None:
        if self._watching(kind):
            self._batch_started = time.perf_counter()

    def _batch_end(self, kind: str) -> None:
        if self._watching(kind) and self._batch_started is not None:
            self._batches.append(time.perf_counter() - self._batch_started)
            self._batch_started = None

    def _test_begin(self) -> None:
        if self._open == "train":
            self._test_started = time.perf_counter()

    def _test_end(self) -> None:
        if self._open == "train" and self._test_started is not None:
            self._nested_test_s += time.perf_counter() - self._test_started
            self._test_started = None

    def callback(self) -> Any:
        """A Keras callback feeding the clock: batch times of a first call, evaluation inside fit.

        Made inside `steps(kind)`: only the trial's first call of a kind gets the batch hooks (its
        batches are timed to tell tracing from stepping, which makes each of them wait for its
        step); later calls get none, so no step waits on the host for the clock
        (aiperf.train.watch says why that matters)."""
        import keras

        clock = self

        class NestedEvaluation(keras.callbacks.Callback):
            def on_test_begin(self, logs=None):
                clock._test_begin()

            def on_test_end(self, logs=None):
                clock._test_end()

        class PhaseWatch(NestedEvaluation):
            def on_train_batch_begin(self, batch, logs=None):
                clock._batch_begin("train")

            def on_train_batch_end(self, batch, logs=None):
                clock._batch_end("train")

            def on_test_batch_begin(self, batch, logs=None):
                clock._batch_begin("evaluate")

            def on_test_batch_end(self, batch, logs=None):
                clock._batch_end("evaluate")

        if self._open is not None and not self._watching(self._open):
            return NestedEvaluation()
        return PhaseWatch()
