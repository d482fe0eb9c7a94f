"""What nvidia-smi prints on some GPU nodes, and a stand-in nvidia-smi that prints it.

No test machine has a GPU: the stand-in is a bash script put first on PATH, answering the calls
aiperf makes (`-L`, both `--query-gpu` lines, `topo -m`, and the plain header) from these samples,
or failing as nvidia-smi does where no driver is loaded. The samples and the script live in
benchmarks/gpu_node_standin.py, shared with the stand-in GPU node (benchmarks/gpu_node_standin.sh);
this module gives the tests their names for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_node_standin import (
    FACTS_ARGS,
    H100_NODE,
    L40S_NODE,
    NO_DRIVER,
    QUERY_ARGS,
    h200_node,
    write,
)

__all__ = [
    "FACTS_ARGS",
    "H100_NODE",
    "L40S_NODE",
    "NO_DRIVER",
    "QUERY_ARGS",
    "calls",
    "h200_node",
    "put_first_on_path",
    "stand_in",
]


def stand_in(folder: Path, node: dict[str, str] | None = None, *, fail: bool = False) -> Path:
    """A folder holding an executable `nvidia-smi` that prints `node`'s samples (or fails as
    without a driver); put it on PATH. Returns the folder (its calls.log lists the calls)."""
    return write(folder, node, fail=fail)


def calls(folder: Path) -> list[str]:
    """The argument lines the stand-in in `folder` was called with."""
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def put_first_on_path(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', os.defpath)}")


def standin_node_run(folder: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`bash benchmarks/gpu_node_standin.sh DB 8 OUT` into `folder`, with `env` added (the
    script's STANDIN_PROFILE, STANDIN_BUDGET): its exit status and output, and its database."""
    db = folder / "x.db"
    environment = {**os.environ, "PYTHON": sys.executable, **env}
    environment.pop("XLA_FLAGS", None)  # the script sets the host platform's 8 devices
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_node_standin.sh"
    done = subprocess.run(
        ["bash", str(script), f"sqlite:///{db}", "8", str(folder / "out")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=folder,
    )
    return done, db


def said_and_logged(done: subprocess.CompletedProcess) -> str:
    """What a run printed, and its console log (aiperf.cli.console_log): its info lines are there."""
    said = done.stdout + done.stderr
    named = [line.removeprefix("log: ") for line in said.splitlines() if line.startswith("log: ")]
    return said + "".join(Path(path).read_text() for path in named)
