"""Where a run's library chatter goes while its flow runs: into a log file, not the console.

`aiperf run` shows its live line, then the result; what the libraries write meanwhile (Prefect's
log lines and its temporary server's hint, TensorFlow's and absl's C++ lines from every process
the run starts, Dask's) concerns no one reading the result, and pushed the live line off the
screen. They all write to file descriptor 2, directly or through Python's sys.stderr, and the
processes the run starts inherit it: so while the flow runs, descriptor 2 is the log file, and
the console is given back before anything of aiperf's own is printed. The file is named after the
result (`log: PATH`). `aiperf run -v` leaves the console as it was.

aiperf's own warnings (a result foreseen invalid, an open run's data, a trial that failed) are the
run's, not the libraries': they are in the log, and said on the console too, above the live line.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path


def console_log_path(out: str) -> Path:
    """A new log file for one run under the run's --out folder: logs/run-<local time>.log."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(out) / "logs" / f"run-{stamp}-{os.getpid()}.log"


@contextmanager
def stderr_to(path: Path | None) -> Iterator[None]:
    """File descriptor 2 (sys.stderr, and every process started inside) appended to `path` until
    the block ends; None: left as it is."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    console = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(console, 2)
        os.close(console)
        os.close(log)


def quiet_at_exit() -> None:
    """Prefect's info lines left to come after the run (its temporary server's "Stopping temporary
    server", logged as the interpreter exits, once the console is the console again) not said: the
    console ends with the result. Its warnings still are."""
    logging.getLogger("prefect").setLevel(logging.WARNING)


# Where aiperf's lines are logged: its modules' loggers, and the flow's run loggers, which Prefect's
# engine writes to as well (a record's source file tells aiperf's from Prefect's).
_LOGGERS = ("aiperf", "prefect.flow_runs", "prefect.task_runs")


class _AiperfsWarnings(logging.Handler):
    """Each warning (or worse) that aiperf's own code logs, as one line to `say`."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.say = say
        # Found, not imported: the CLI loads the flows by entrypoint only (aiperf.cli.benchmark).
        packages = (find_spec(name) for name in ("aiperf", "aiperf_flows"))
        self.sources = tuple(
            str(Path(spec.origin).parent) + os.sep for spec in packages if spec and spec.origin
        )

    def emit(self, record: logging.LogRecord) -> None:
        if record.pathname.startswith(self.sources):
            self.say(record.getMessage())


@contextmanager
def warnings_to(say: Callable[[str], None] | None) -> Iterator[None]:
    """aiperf's warnings also said through `say` until the block ends; None: nothing added."""
    if say is None:
        yield
        return
    handler = _AiperfsWarnings(say)
    for name in _LOGGERS:
        logging.getLogger(name).addHandler(handler)
    try:
        yield
    finally:
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(handler)
