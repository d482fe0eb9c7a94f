"""A result package's README: the run's figures and verdict, what each file of the package is, and
how to check it (aiperf.report.package writes it beside them)."""

from __future__ import annotations

from aiperf import paths
from aiperf.paths import EVENT_LOG
from aiperf.report.package_files import CONFIG_FILE, VERIFICATION_FILE
from aiperf.report.power_logs import DESCRIBED as POWER_DESCRIBED
from aiperf.report.power_logs import FOLDER as POWER_FOLDER
from aiperf.report.summary import (
    energy_text,
    feed_text,
    interval_text,
    reference_text,
    verdict_text,
)
from aiperf.store import CheckRecord, RunRecord
from aiperf.store.records import ScoreResult
from aiperf.system.description import FILE_NAME as SYSTEM_DESCRIPTION
from aiperf.units import exact, ops_rate

REPORT_FILE = "report.html"
README_FILE = "README.md"


def readme(
    record: RunRecord,
    files: list[str],
    from_records: list[CheckRecord],
    checks: list[CheckRecord],
    ruleset: str | None,
) -> str:
    """The package's README: the run's figures and verdict, what each file is, and how to check it."""
    score = record.score
    assert score is not None
    passed = sum(c.passed for c in checks)
    described = _described(files, ruleset)
    lines = [
        f"# aiperf result package: run {record.id}",
        "",
        f"Profile `{record.profile}`, {record.division or '-'} division under {record.ruleset or '-'}, "
        f"{record.workers} workers, budget {record.budget_s:g} s, seed {record.seed}; status {record.status}.",
        "",
        f"- OPS: {ops_rate(score.ops)}{interval_text(score.ops_low, score.ops_high)} "
        f"({exact(score.total_ops)} operations in {score.elapsed_s:.3f} s)",
        f"- regulated score: {ops_rate(score.regulated_score)}"
        f"{interval_text(score.regulated_low, score.regulated_high)} ({_judged_by(score)})",
        f"- verdict: {_verdict(record, from_records, checks)}",
        f"- feed, measured before the window: {feed_text(record)}",
        f"- trials vs bare Keras: {reference_text(record)}",
        f"- energy: {energy_text(record)}",
        f"- verification when packaged: from the records {sum(c.passed for c in from_records)} "
        f"of {len(from_records)} checks pass, from the event log {passed} of {len(checks)}",
        "",
        "## What is here",
        "",
        *[f"- `{name}`: {described.get(name, '')}" for name in files],
        "- `package.json`: the package's format, run id and files.",
        "",
        "## Checking it",
        "",
        "With aiperf installed, and no database:",
        "",
        "    aiperf verify --package .",
        "",
        "rebuilds the run's records from `events.log` alone and runs the same checks as `aiperf verify RUN_ID`: "
        "each trial's operations per sample recounted from its architecture, every epoch's samples within the "
        "dataset and inside the timed window, no two epochs at once on a worker, the elapsed time, total "
        "operations, OPS, best accuracy, regulated score, division and validity recomputed, and the best "
        "trial's weights evaluated again on the run's data (generated data is generated again from the "
        "seed), each energy meter's figures held to its readings and each node's power log (`power/`) "
        "to the joules the log records. It exits 0 when every check passes, 1 naming each check that "
        "fails.",
        "",
    ]
    return "\n".join(lines)


def _judged_by(score: ScoreResult) -> str:
    """The quality the regulated score was judged by: the LM track's loss, else accuracy."""
    if score.best_val_loss is not None:  # the LM track's quality (aiperf.quality)
        return f"best validation loss {score.best_val_loss:.4f} nats/token"
    accuracy = "-" if score.best_val_accuracy is None else f"{score.best_val_accuracy:.4f}"
    return f"best validation accuracy {accuracy} on {score.val_samples} samples"


def _verdict(record: RunRecord, from_records: list[CheckRecord], checks: list[CheckRecord]) -> str:
    """The stored verdict (aiperf.report.summary.verdict_text), unless a check run as the package
    was written fails: a result is valid only while every check passes, and records changed since
    the run would otherwise ship as valid."""
    score = record.score
    assert score is not None
    failed = sorted({c.check for c in [*from_records, *checks] if not c.passed})
    verdict = verdict_text(record)
    if failed and score.valid and record.verified:
        verdict = "invalid: verification failed when packaged: " + ", ".join(failed)
    return verdict


def _described(files: list[str], ruleset: str | None) -> dict[str, str]:
    """What each file of the package is, for the README's list."""
    described = {
        EVENT_LOG: "the run's event log, one `:::MLLOG {json}` line per event (MLPerf's format), written as "
        "the run went: run start and stop, ruleset, division, config, system, dataset, the timed "
        "window's segments, each trial's start, placement (worker), operations per sample (aiperf "
        "and tensor conventions) and end, every epoch's samples trained and evaluated, completeness "
        "and validation quality (accuracy, or loss on the LM track), the score and its verification. "
        "Alone, it is enough to recompute "
        "the score.",
        SYSTEM_DESCRIPTION: "the system in MLPerf's form (every field MLCommons' system-description "
        "checker requires, as strings; `N/A` where unknown), then aiperf's own: the compute nodes as "
        "the workers described them (CPU, memory, storage, accelerators and their links, OS, software).",
        CONFIG_FILE: "the effective config the run ran with (profile, overrides and all).",
        VERIFICATION_FILE: "every check of `aiperf verify`, recomputed when the package was written: from the "
        "database's records and from the event log alone.",
        REPORT_FILE: "the run's HTML report (self-contained: opens offline).",
        README_FILE: "this file.",
    }
    if ruleset:
        described[ruleset] = (
            "the ruleset the run is judged by (aiperf/rules/), as this aiperf ships it."
        )
    for name in files:
        if name.startswith(POWER_FOLDER + "/"):
            described[name] = POWER_DESCRIBED
        if name.startswith(paths.WEIGHTS_FOLDER + "/"):
            described[name] = (
                "the weights of the best trial's best epoch (Keras' .weights.h5); their sha256 is in "
                "`events.log`, and `aiperf verify --package` evaluates them again."
            )
    return described
