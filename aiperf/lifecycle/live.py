"""Where a run's live figures go. The CLI installs a display (a Rich live line); a flow run from a
deployment has none and reports through its Prefect logs instead."""

from __future__ import annotations

from collections.abc import Callable

from aiperf.lifecycle.orchestrator import LiveFigures

Display = Callable[[LiveFigures], None]

_display: Display | None = None


def set_display(display: Display | None) -> None:
    global _display
    _display = display


def show(figures: LiveFigures) -> None:
    if _display is not None:
        _display(figures)
