"""A run's process and its life: the heartbeat it writes, and the signals that end it.

Heartbeat: while a run's process lives, a daemon thread writes `runs.heartbeat_at` every
HEARTBEAT_S seconds. When the process dies (kill -9, a node lost, the OOM killer) the writes stop,
and every command that reads the run shows it `lost` once the heartbeat is older than the timeout
(aiperf.status.derived_status): no one has to be alive to say that the run died.

One writer: the process that creates a run stamps it with a fresh owner token (`new_owner`) and
holds the claim to write it (aiperf.store.ownership.RunClaim), and
`aiperf recover` / `aiperf run --resume` take a run over only by compare-and-set on that token
(`take_over`): one UPDATE that succeeds only when the row still carries the token the taker read
and the run is interrupted, or running with a heartbeat older than the timeout on the database's
own clock (aiperf.store.database.clock), which stamps the heartbeat too. So two takers cannot
both win, and a run whose process still beats cannot be taken, whatever the clocks of the
machines involved say. The run's process writes only while the row carries its token (every
write takes the claim and checks it in its transaction: aiperf.store.Store): when a beat finds
it taken over, the process stops at once with RunTakenOver and writes nothing more.

Signals: SIGTERM (a `kill`, a Prefect cancellation, SLURM's warning before it kills a job) and
SIGINT (Ctrl-C) end the run `interrupted`, never `failed`. While the orchestrator's loop runs, a
signal is deferred to the loop's next turn, so no record is cut in half and every epoch already
reported is recorded first (Orchestrator.run); anywhere else it raises at once.
"""

from __future__ import annotations

import _thread
import logging
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from aiperf import settings
from aiperf.errors import UserError
from aiperf.status import HEARTBEAT_S, heartbeat_timeout_s
from aiperf.store import RunClaim, RunRecord, RunTakenOver

if TYPE_CHECKING:
    from aiperf.lifecycle.recorder import RunRecorder

log = logging.getLogger("aiperf.lifecycle.liveness")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The run was told to stop by a signal: it ends interrupted (a KeyboardInterrupt, so every
    handler that treats Ctrl-C as an interruption treats SIGTERM the same)."""


# --- ownership ----------------------------------------------------------------------------------


def new_owner() -> str:
    """A fresh owner token for a run this process creates or takes over (runs.owner, 36 chars)."""
    return str(uuid.uuid4())


def take_over(store: Any, record: RunRecord, what: str) -> RunClaim:
    """Make the run this process's by compare-and-set (Store.take_over) on the token `record`
    was read with; this process's claim to write it. Refused in one line when its process still
    beats (on the database's clock) or another process took it first."""
    timeout = heartbeat_timeout_s()
    claim = store.take_over(
        record.id, owner=new_owner(), seen_owner=record.owner, timeout_s=timeout
    )
    if claim is None:
        raise UserError(
            f"run {record.id} was not {what}: its process is alive (a heartbeat within "
            f"${settings.HEARTBEAT_TIMEOUT.name}={timeout:g} s on the database's clock) or another "
            "process took it over first; `aiperf runs` shows what it is now"
        )
    return claim


_taken_over: str | None = None  # why this process lost its run, once a heartbeat found out


def _lose(exc: RunTakenOver) -> None:
    """The heartbeat found the run taken over: stop the run's main thread as a signal would (at
    the orchestrator's next turn, or at once elsewhere), with RunTakenOver instead of Interrupted."""
    global _taken_over
    _taken_over = str(exc)
    log.error("%s", exc)
    if _installed:
        _thread.interrupt_main(signal.SIGTERM)


# --- heartbeat ----------------------------------------------------------------------------------


@contextmanager
def heartbeat(recorder: RunRecorder, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Beat for the run of `recorder` (aiperf.lifecycle.recorder.RunRecorder, whose claim the
    thread writes with) while the block runs (a daemon thread: it dies with the process). A beat
    refused because another process took the run over ends the beating and stops the run."""
    global _taken_over
    stop = threading.Event()
    run_id = recorder.run_id

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                recorder.heartbeat()
            except RunTakenOver as exc:
                _lose(exc)
                return
            except Exception as exc:  # a missed beat is not worth ending the run for
                log.warning(
                    "run %d: heartbeat not written: %s: %s", run_id, type(exc).__name__, exc
                )

    _taken_over = None
    recorder.heartbeat()
    thread = threading.Thread(target=beat, name=f"aiperf-heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 5)
        _taken_over = None  # the run is over here: the next one this process runs starts owning


# --- signals ------------------------------------------------------------------------------------

_deferring = 0  # > 0 while a loop that checks for a stop at safe points runs
_pending: str | None = None  # the signal received while deferring
_installed = False  # stop_on_signals' handler is in place in the main thread


def _on_signal(number: int, _frame: Any) -> None:
    global _pending
    name = signal.Signals(number).name
    if _deferring and _pending is None:
        _pending = name  # the loop raises at its next turn, between two records
        return
    if _taken_over is not None:
        raise RunTakenOver(_taken_over)
    raise Interrupted(f"{name}: the run was stopped")


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise Interrupted in this (the main) thread while the block runs; the
    previous handlers come back after it. Elsewhere than the main thread, nothing is installed
    (Python only lets the main thread handle signals)."""
    global _pending, _installed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, _on_signal) for number in STOP_SIGNALS}
    _pending, _installed = None, True
    try:
        yield
    finally:
        _installed = False
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
    """Raise RunTakenOver if the run was taken over, else Interrupted if a stop signal arrived
    while deferred."""
    global _pending
    if _taken_over is not None:
        _pending = None
        raise RunTakenOver(_taken_over)
    if _pending is not None:
        name, _pending = _pending, None
        raise Interrupted(f"{name}: the run was stopped")
