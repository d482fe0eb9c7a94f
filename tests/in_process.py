"""`aiperf` commands run in the test's own process, for the tests that run one many times.

A process of its own imports TensorFlow again before `aiperf verify` can count a trial's operations,
seconds of CPU on a small machine for each call. Each test that checks a command's exit status and
output this way still runs the command once through a process of its own, as a user runs it."""

from __future__ import annotations

import subprocess

from typer.testing import CliRunner

from aiperf.cli.main import app


def aiperf_here(*args: str, columns: int = 250) -> subprocess.CompletedProcess:
    """The command's exit status, output and error output, as `subprocess.run` gives them. An
    exception out of the command is raised here, where a process would have printed its traceback."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)
