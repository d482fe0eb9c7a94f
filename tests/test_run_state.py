"""Issue 26 item 2: what makes a result invalid and is known before the run is said before
anything is staged, and the run still runs (a smoke test of seconds is short on purpose)."""

from __future__ import annotations

import logging

import pytest

from aiperf.config import load_config
from aiperf.lifecycle.run import run_benchmark
from aiperf.lifecycle.stages import Stages
from aiperf.results.score import known_in_advance


class _StopsBeforeStaging(Stages):
    """Records the run, then stops where staging would begin."""

    def recorded(self, config, run_id, event_log) -> None:
        raise RuntimeError("stopped before staging")


def test_a_too_short_run_says_so_before_it_stages(tmp_path, caplog):
    config = load_config(
        "quick", budget="1s", db=f"sqlite:///{tmp_path / 'r.db'}", out=str(tmp_path / "out")
    )
    logger = logging.getLogger("test-run-state")
    with caplog.at_level(logging.WARNING, logger="test-run-state"):
        with pytest.raises(RuntimeError, match="before staging"):
            run_benchmark(config, _StopsBeforeStaging(), logger=logger)
    (line,) = [r.getMessage() for r in caplog.records if "INVALID" in r.getMessage()]
    assert "too short: budget 1 s is under the profile's minimum 60 s" in line


def test_what_is_known_in_advance_is_the_budget_and_the_trainer():
    quick = load_config("quick", budget="1s")
    assert known_in_advance(budget_s=1, rules=quick.validity, simulated=True) == [
        "simulated trainer: trials were modelled, no model was trained",
        "too short: budget 1 s is under the profile's minimum 60 s",
    ]
    assert known_in_advance(budget_s=60, rules=quick.validity, simulated=False) == []
