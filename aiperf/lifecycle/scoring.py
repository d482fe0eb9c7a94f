"""The steps after the search: the run's score from its records alone (score_run), its
verification of itself stored with that score (verify_and_record), and its published report
(write_report). Each opens the run by its claim, so the flow can run each as a Prefect task;
the story (aiperf.lifecycle.run) calls them through its `Stages`.
"""

from __future__ import annotations

from pathlib import Path

from aiperf import paths
from aiperf.config import BenchmarkConfig
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.results.division import classify
from aiperf.results.evidence import Evaluator
from aiperf.results.remeasure import keep_best_weights
from aiperf.results.score import ScoreResult, compute_score, verified_score
from aiperf.store import CheckRecord, RunClaim, Store


def score_run(config: BenchmarkConfig, claim: RunClaim, recovered: bool = False) -> ScoreResult:
    """OPS and the regulated score, computed from the records alone, then stored. `recovered`: the
    run is scored after a crash or a stop (aiperf recover), so it is never valid."""
    run_id = claim.run_id
    with RunRecorder.opened(config, claim) as recorder:
        score = compute_score(
            recorder.store.run_work(run_id),
            rules=config.validity,
            simulated=config.train.trainer == "simulated",
            recovered=recovered,
        )
        recorder.score(score, classify(config).ruleset)
        record = recorder.store.get_run(run_id)
        # Only the best trial's weights stay, for verify to evaluate again (issue 25 item 2).
        recorder.best_weights(
            keep_best_weights(record, paths.run_folder(config.out, config.db, run_id))
        )
    return score


def verify_and_record(
    config: BenchmarkConfig, claim: RunClaim, evaluator: Evaluator | None = None
) -> list[CheckRecord]:
    """Every check of `aiperf verify`, stored with the score: the run's verdict on itself. A result
    is valid only when every check passes: when one fails, the stored score is made invalid with the
    reason naming the failed checks (aiperf.results.score.verified_score), before the checks are
    stored, so no reader ever sees a failed verification beside a valid verdict; and the event log
    gets the score again with that verdict after the checks (its last score is the one that
    stands). `evaluator`: where the kept weights are evaluated again (the run's: on a worker)."""
    from aiperf.results.verify import verify_run

    with RunRecorder.opened(config, claim) as recorder:
        checks = verify_run(recorder.store, claim.run_id, evaluator=evaluator)
        stored = recorder.store.get_run(claim.run_id).score
        assert stored is not None  # verify_run refuses a run without a score
        score = verified_score(stored, checks)
        recorder.verification(
            checks, rescored=None if score is stored else score, ruleset=classify(config).ruleset
        )
    return checks


def write_report(config: BenchmarkConfig, run_id: int) -> tuple[Path, str]:
    """The run's HTML report under <out>/reports, and its score over time as markdown."""
    from aiperf.report.html import markdown_summary
    from aiperf.report.html import write_report as write_page

    page = paths.report_path(config.out, config.db, run_id)
    page.parent.mkdir(parents=True, exist_ok=True)
    with Store.open_existing(config.db) as store:
        page = write_page(store, run_id, page).resolve()
        return page, markdown_summary(store, run_id, page)
