"""Where live progress goes. The CLI installs a listener (a Rich live display); a flow run from
a deployment has none and reports through its Prefect logs instead."""

from __future__ import annotations

from collections.abc import Callable

from aiperf.orchestrator import Progress

_listener: Callable[[Progress], None] | None = None


def set_listener(listener: Callable[[Progress], None] | None) -> None:
    global _listener
    _listener = listener


def emit(progress: Progress) -> None:
    if _listener is not None:
        _listener(progress)
