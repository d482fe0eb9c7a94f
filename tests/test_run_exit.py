"""`aiperf run`'s exit status is 0 only for a valid, verified result (issue 25 item 4, issue 26
item 2). A real short run of the CLI, through the Prefect flow, whose records are made to disagree
with its score between the score and the verify stage, exits 4 and is listed invalid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY
from typer.testing import CliRunner

from aiperf.cli.exit_codes import EXIT_VERIFICATION_FAILED
from aiperf.cli.main import app
from aiperf.store import Store

pytestmark = pytest.mark.slow

# `aiperf run` with one hook: the real score stage, then one epoch's samples changed behind its back,
# so the records no longer add up to the score the verify stage then checks.
TAMPERING_AIPERF = """
from sqlalchemy import text

from aiperf.cli.main import main
from aiperf.lifecycle import scoring
from aiperf.store import Store

scored = scoring.score_run


def score_then_tamper(config, claim, recovered=False):
    score = scored(config, claim, recovered)
    with Store.open(config.db, migrate=False) as store, store.engine.begin() as sql:
        sql.execute(text(
            "UPDATE epochs SET samples_trained = samples_trained - 1 "
            "WHERE id = (SELECT MIN(id) FROM epochs)"
        ))
    return score


scoring.score_run = score_then_tamper  # the flow's score task calls it
main()
"""


def tampering_aiperf(*args: str, prefect_home: Path) -> subprocess.CompletedProcess:
    """`aiperf ARGS` in its own process, as a user runs it, with the tampering hook."""
    return subprocess.run(
        [sys.executable, "-c", TAMPERING_AIPERF, *args],
        capture_output=True,
        text=True,
        timeout=300,
        # As a newcomer's first `aiperf run`: no Prefect server (the run starts a temporary one,
        # which says so as it starts and as the process exits), and TensorFlow's C++ lines not
        # silenced, as where a user runs aiperf without the Makefile.
        env={
            **{
                k: v
                for k, v in os.environ.items()
                if k not in ("TF_CPP_MIN_LOG_LEVEL", "PREFECT_API_URL")
            },
            "COLUMNS": "250",
            "PREFECT_HOME": str(prefect_home),
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        },
    )


def test_a_run_whose_verification_fails_exits_4_and_is_listed_invalid(tmp_path):
    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    settings = [f"--set={key}={json.dumps(value)}" for key, value in TINY.items()]
    # Keras trials: the simulated trainer's modelled operations never match a recount, so its
    # runs fail verification without any tampering.
    args = ["run", "--budget", "3s", "--workers", "1", "--seed", "3", "--db", db]
    args += ["--out", str(tmp_path / "out"), *settings]
    result = tampering_aiperf(*args, prefect_home=tmp_path / "prefect")
    assert result.returncode == EXIT_VERIFICATION_FAILED, result.stdout + result.stderr
    (said,) = [line for line in result.stderr.splitlines() if "verification FAILED" in line]
    assert said.startswith("run 1: ") and "total_operations" in said, said
    assert said.endswith("(exit status 4)"), said

    with Store.open_existing(db) as store:
        record = store.get_run(1)
    assert record.status == "completed" and record.verified is False
    assert record.score is not None and not record.score.valid
    vetoed = record.score.reasons[-1]
    assert vetoed.startswith("verification failed: ") and "total_operations" in vetoed

    _only_aiperfs_lines_on_the_console(result, record)

    listing = CliRunner().invoke(app, ["runs", "--db", db], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    (row,) = [line for line in listing.output.splitlines() if line.strip().startswith("1 ")]
    assert row.split()[-1] == "no", row


def _only_aiperfs_lines_on_the_console(result: subprocess.CompletedProcess, record) -> None:
    """Every line the run printed is aiperf's: its live line, its own warnings (each also in the
    log), the result's title and figures (a figure's value wrapped onto lines of its own), the
    verdict's line and the log's name. What the libraries wrote (Prefect, TensorFlow, Dask) is in
    that log instead."""
    from aiperf.report.summary import score_rows, title

    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    (named,) = [line.removeprefix("log: ") for line in lines if line.startswith("log: ")]
    logged = Path(named).read_text()
    assert "Beginning flow run" in logged, "Prefect's lines are in the log"
    warned = {line.split(" - ", 1)[-1] for line in logged.splitlines() if "| WARNING |" in line}
    assert any("INVALID whatever it measures" in line for line in warned), "its 3 s budget"
    figures = tuple(row["figure"] for row in score_rows(record))
    wrapped = " " * len(max(figures, key=len))  # a value's next line, under the values

    def aiperfs(line: str) -> bool:
        return (
            line in warned
            or line.startswith(("log: ", title(record), *figures, wrapped))
            or (line.startswith("run 1: ") and line.endswith(")"))  # the verdict
            or ("elapsed" in line and "trials" in line)  # the live line
        )

    assert [line for line in lines if not aiperfs(line)] == []
    assert any("INVALID whatever it measures" in line for line in lines), "said on the console"
