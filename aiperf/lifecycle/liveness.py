"""A run's process and its life: the heartbeat it writes, and the signals that end it.

Heartbeat: while a run's process lives, a daemon thread writes `runs.heartbeat_at` every
HEARTBEAT_S seconds. When the process dies (kill -9, a node lost, the OOM killer) the writes stop,
and every command that reads the run shows it `lost` once the heartbeat is older than the timeout
(aiperf.status.derived_status): no one has to be alive to say that the run died.

Signals: SIGTERM (a `kill`, a Prefect cancellation, SLURM's warning before it kills a job) and
SIGINT (Ctrl-C) end the run `interrupted`, never `failed`. While the orchestrator's loop runs, a
signal is deferred to the loop's next turn, so no record is cut in half and every epoch already
reported is recorded first (Orchestrator.run); anywhere else it raises at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiperf.status import HEARTBEAT_S

log = logging.getLogger("aiperf.lifecycle.liveness")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The run was told to stop by a signal: it ends interrupted (a KeyboardInterrupt, so every
    handler that treats Ctrl-C as an interruption treats SIGTERM the same)."""


# --- heartbeat ----------------------------------------------------------------------------------


@contextmanager
def heartbeat(store: Any, run_id: int, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Beat for the run while the block runs (a daemon thread: it dies with the process)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                store.heartbeat(run_id)
            except Exception as exc:  # a missed beat is not worth ending the run for
                log.warning(
                    "run %d: heartbeat not written: %s: %s", run_id, type(exc).__name__, exc
                )

    store.heartbeat(run_id)
    thread = threading.Thread(target=beat, name=f"aiperf-heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 5)


# --- signals ------------------------------------------------------------------------------------

_deferring = 0  # > 0 while a loop that checks for a stop at safe points runs
_pending: str | None = None  # the signal received while deferring


def _on_signal(number: int, _frame: Any) -> None:
    global _pending
    name = signal.Signals(number).name
    if _deferring and _pending is None:
        _pending = name  # the loop raises at its next turn, between two records
        return
    raise Interrupted(f"{name}: the run was stopped")


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise Interrupted in this (the main) thread while the block runs; the
    previous handlers come back after it. Elsewhere than the main thread, nothing is installed
    (Python only lets the main thread handle signals)."""
    global _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, _on_signal) for number in STOP_SIGNALS}
    _pending = None
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def deferred_signals() -> Iterator[None]:
    """While the block runs, a stop signal waits for `raise_if_stopped` (a second one raises at once)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


def raise_if_stopped() -> None:
    """Raise Interrupted if a stop signal arrived while deferred."""
    global _pending
    if _pending is not None:
        name, _pending = _pending, None
        raise Interrupted(f"{name}: the run was stopped")
