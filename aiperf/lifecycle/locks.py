"""One local run per machine and user: `aiperf run` refuses a second one that would share, and so
measure, the same cores, unless `--allow-concurrent`. The lock itself is aiperf.paths'."""

from __future__ import annotations

from aiperf.errors import UserError
from aiperf.paths import local_run_lock_path, try_hold


def hold_local_run_lock() -> int:
    """Hold this machine's local-run lock for the rest of the process (the descriptor returned),
    or fail in one line when another local run holds it."""
    path = local_run_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = try_hold(path)
    if fd is None:
        raise UserError(
            f"another local aiperf run is running on this machine (it holds {path}); wait for it "
            "to finish, or pass --allow-concurrent to run both (each then measures the other's load)"
        )
    return fd
