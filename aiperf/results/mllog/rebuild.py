"""Reading the event log back: `rebuild` turns a run's events into the records the database holds
(RunRecord with its trials, epochs and windows, DatasetRecord), so aiperf.results.verify checks a
package's run (`aiperf verify --package`) without a database, as mlperf_logging's parser reads its
logs back. Events apply in order and the latest of a kind stands (a resumed run repeats some).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from aiperf.results.mllog.assemble import LoggedRun, logged_run
from aiperf.results.mllog.keys import Event, EventLogError, read_events
from aiperf.results.mllog.state import RunState


def rebuild(events: Iterable[Event], where: str = "event log") -> LoggedRun:
    """The run's records from its events; EventLogError naming the line of an event that does not fit."""
    events = tuple(events)
    state = RunState()
    for e in events:
        try:
            state.apply(e)
        except EventLogError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise EventLogError(
                f"{where} line {e.lineno}: a {e.key} event that does not fit: {detail}"
            ) from None
    try:
        logged = logged_run(state, where)
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise EventLogError(f"{where}: the run's events do not fit together: {detail}") from None
    return LoggedRun(logged.run, logged.dataset, events)


def read_run(path: Path | str) -> LoggedRun:
    """A log file's run, as records."""
    return rebuild(read_events(path), str(path))
