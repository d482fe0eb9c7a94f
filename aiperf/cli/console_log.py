"""Where a run's library chatter goes while its flow runs: into a log file, not the console.

`aiperf run` shows its live line, then the result; what the libraries write meanwhile (Prefect's
log lines and its temporary server's hint, TensorFlow's and absl's C++ lines from every process
the run starts, Dask's) concerns no one reading the result, and pushed the live line off the
screen. They all write to file descriptor 2, directly or through Python's sys.stderr, and the
processes the run starts inherit it: so while the flow runs, descriptor 2 is the log file, and
the console is given back before anything of aiperf's own is printed. The file is named after the
result (`log: PATH`). `aiperf run -v` leaves the console as it was.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
