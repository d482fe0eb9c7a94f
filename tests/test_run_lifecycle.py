"""aiperf.lifecycle.run without Prefect: the whole lifecycle on a real Dask cluster with plain stages, and the
run's end states. The flow (tests/test_benchmark_flow.py) is the same story with Prefect tasks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import TINY

from aiperf import paths
from aiperf.config import load_config
from aiperf.lifecycle import run
from aiperf.lifecycle.stages import Stages
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import Store

pytestmark = pytest.mark.slow  # every test here runs the lifecycle on a real Dask cluster


def _config(tmp_path: Path, **overrides):
    return load_config(
        "quick",
        budget="8s",
        workers=4,
        db=f"sqlite:///{tmp_path / 'aiperf.db'}",
        seed=3,
        out=str(tmp_path / "out"),
        overrides={**TINY, "train.trainer": "simulated", **overrides},
    )


def test_a_run_without_prefect_records_scores_and_reports(tmp_path):
    config = _config(tmp_path)
    outcome = run.run_benchmark(config)
    with Store.open_existing(config.db) as store:
        record = store.get_run(outcome.run_id)
        counts = Counter(t.status for t in record.trials)
    assert record.status is RunStatus.COMPLETED, "completed before the report is written"
    assert record.score == outcome.score and outcome.score.total_ops > 0
    assert record.flow_run_id is None and record.config == config.model_dump(mode="json")
    assert sum(counts.values()) == len(record.trials) >= 4 and TrialStatus.RUNNING not in counts
    assert all(t.worker for t in record.trials), "every trial records its worker"
    page = paths.report_path(config.out, config.db, outcome.run_id)
    assert "completed" in page.read_text(), "the report shows the run completed"


class _FailingScore(Stages):
    def score(self, config, claim):
        raise RuntimeError("the scorer broke")


class _FailingReport(Stages):
    def publish(self, config, run_id, score):
        raise OSError("disk full")


def test_a_failure_marks_the_run_failed_with_its_reason(tmp_path):
    config = _config(tmp_path)
    with pytest.raises(RuntimeError, match="the scorer broke"):
        run.run_benchmark(config, _FailingScore())
    with Store.open_existing(config.db) as store:
        (record,) = store.list_runs()
    assert record.status is RunStatus.FAILED and record.message == "RuntimeError: the scorer broke"


def test_a_report_that_fails_does_not_fail_a_scored_run(tmp_path):
    config = _config(tmp_path)
    outcome = run.run_benchmark(config, _FailingReport())
    with Store.open_existing(config.db) as store:
        record = store.get_run(outcome.run_id)
    assert record.status is RunStatus.COMPLETED and record.score is not None
