"""What is checked before a run records anything: a mistake in the command, the profile or the
machine is one line and exit status 2, with no run row left behind (a row that can never close).

Every entry point goes through `check_before_recording`: `aiperf run` calls it before it starts
Prefect, and the story (aiperf.lifecycle.run.run_benchmark) calls it again before its first
write, for the flow runs a deployment starts with parameters no CLI has seen. Every check costs
seconds at most; images are decoded later, by the workers that stage them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from aiperf.cluster import preflight as cluster_preflight
from aiperf.config import BenchmarkConfig
from aiperf.data.disk_space import check_space
from aiperf.data.staging import preflight as data_preflight
from aiperf.errors import UserError
from aiperf.lifecycle.reference import reference_seconds


def check_before_recording(config: BenchmarkConfig) -> None:
    """Refuse, with one line, what would otherwise fail after the run row exists."""
    check_writable_folder(config.out, "--out (out)")
    data_preflight(config.data)  # a missing or misshapen dataset
    check_space(config.data, config.seed, config.out)  # data that cannot fit under --out
    cluster_preflight(config)  # a running scheduler (cluster.kind scheduler) that does not answer
    reference_seconds()  # a bad $AIPERF_REFERENCE_SECONDS, read only once the workers are up


def check_writable_folder(folder: str, what: str) -> None:
    """`folder` is a folder this user can create files in, or can be made (the run's event log,
    its staged data and its weights go there), and nothing is left behind: a file is created and
    removed in it, or in the nearest folder above it that exists, which must then be a folder
    (os.access is not enough: root passes it on a read-only mount)."""
    path = Path(folder).expanduser().absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(existing))
        fd, probe = tempfile.mkstemp(prefix=".aiperf-write-check-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = (
            "it is a file, or a folder above it is"
            if isinstance(exc, (FileExistsError, NotADirectoryError))
            else exc.strerror or type(exc).__name__
        )
        raise UserError(
            f"{what} {folder}: cannot write there ({reason}); give a folder this user can write"
        ) from None
