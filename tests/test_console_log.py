"""While a run's flow runs, what the libraries write to stderr (Python's, a C library's, a child
process's) goes to the run's console log, and the console is given back whole afterwards
(aiperf.cli.console_log). tests/test_run_exit.py checks a real `aiperf run`'s console."""

from __future__ import annotations

import os
import subprocess
import sys

from aiperf.cli.console_log import console_log_path, stderr_to

# A process as `aiperf run` is one: its sys.stderr is its descriptor 2 (pytest's capture is not).
WRITERS = r"""
import os, subprocess, sys
from pathlib import Path
from aiperf.cli.console_log import stderr_to

with stderr_to(Path(sys.argv[1])):
    child = "import sys; sys.stderr.write('a child process says\\n')"
    subprocess.run([sys.executable, "-c", child], check=True)
    print("python's stderr says", file=sys.stderr, flush=True)
    os.write(2, b"a C library says\n")
print("aiperf says, after the run", file=sys.stderr, flush=True)
"""


def test_every_writer_of_stderr_goes_to_the_log_until_the_block_ends(tmp_path):
    log = tmp_path / "logs" / "run.log"
    ran = subprocess.run(
        [sys.executable, "-c", WRITERS, str(log)], capture_output=True, text=True, check=True
    )
    assert ran.stderr == "aiperf says, after the run\n"
    assert log.read_text() == "a child process says\npython's stderr says\na C library says\n"


def test_without_a_log_the_console_is_left_as_it_is(capfd):
    with stderr_to(None):
        os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n"


def test_each_run_gets_a_log_of_its_own_under_its_out_folder(tmp_path):
    path = console_log_path(str(tmp_path))
    assert path.parent == tmp_path / "logs" and path.suffix == ".log"
    assert not path.exists(), "made when the run writes to it"


def test_aiperfs_own_warnings_are_said_and_nothing_else(tmp_path):
    """A warning logged by aiperf's code reaches the console; its info lines, and a warning from
    anyone else's code on the same loggers (Prefect's engine writes to the run loggers), do not."""
    import logging

    from aiperf.cli.console_log import warnings_to
    from aiperf.config import load_config
    from aiperf.lifecycle.run import _warn_foreseen

    said: list[str] = []
    config = load_config("quick", budget="12s", out=str(tmp_path))
    run_logger = logging.getLogger("prefect.flow_runs")
    with warnings_to(said.append):
        _warn_foreseen(config, 7, run_logger)  # aiperf's code, through a run logger
        _warn_foreseen(config, 8, logging.getLogger("aiperf.lifecycle.run"))  # its module's
        run_logger.warning("Prefect's engine warns")  # this file's: not aiperf's
        logging.getLogger("aiperf.lifecycle.run").info("run 9: an info line")
    _warn_foreseen(config, 10, run_logger)  # after the block
    assert [line.split(":")[0] for line in said] == ["run 7", "run 8"]
    assert "INVALID whatever it measures: too short" in said[0]
