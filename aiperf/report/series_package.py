"""A series package: the packages of a series of repeated runs (aiperf run --repeat), side by side,
with the series' summary, so a reviewer (or `aiperf results import`) takes the whole series away.

`aiperf package --series SERIES_ID --to DIR` writes

    DIR/series.json      the series: its id, ruleset and series rule, each run (id, index, folder,
                         OPS, regulated score, valid, verified) and the summary of OPS and the
                         regulated score (median, minimum, maximum, CV, ranked)
    DIR/run-<id>/        one run package per run, exactly as `aiperf package RUN_ID` writes it
                         (aiperf.report.package)

`aiperf verify --package DIR` on such a folder verifies every run package in it from its event log
alone, and checks the series itself against the logs: every run listed is there, each log names the
series and the run's place in it, and the summary recomputed from the logs' scores is the one
series.json states. series.json is a convenience, never trusted: each figure is checked against
the event logs, which are what a verification recomputes.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiperf import __version__
from aiperf.errors import UserError
from aiperf.report.package import (
    PACKAGE_CHECKED,
    default_log_path,
    verify_package,
    write_package,
)
from aiperf.results.mllog import LoggedRun
from aiperf.results.series import (
    MEASURES,
    SeriesSummary,
    enough_runs,
    series_rule,
    summarise_runs,
)
from aiperf.store import CheckRecord, Store

SERIES_FILE = "series.json"
SERIES_FORMAT = "aiperf-series-1"
MAX_SERIES_BYTES = 1024 * 1024  # a series of a thousand runs is under 1 MiB of series.json
MAX_SERIES_RUNS = 1_000

# The checks of the series itself, beside each run's own.
SERIES_RUNS = "series_runs"  # every run series.json lists has its package, indexes 1..N
SERIES_MEMBERSHIP = "series_membership"  # each run's event log names the series and its index
SERIES_SUMMARY = "series_summary"  # the summary series.json states is the logs' summary


def run_folder(run_id: int) -> str:
    """The folder of one run's package inside a series package."""
    return f"run-{run_id}"


def is_series_package(folder: Path) -> bool:
    """Whether `folder` is a series package (it has series.json) rather than one run's package."""
    return (Path(folder) / SERIES_FILE).is_file()


def write_series_package(store: Store, series: str, to: Path) -> Path:
    """Write series `series`'s package into the new (or empty) folder `to`; UserError (one line)
    for what cannot be, checked before anything is written."""
    to = Path(to)
    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise UserError(
            f"--to {to} exists and is not an empty folder; give a new folder for the package"
        )
    records = store.series_runs(series)
    if not records:
        raise UserError(
            f"no run of series {series!r} is in the database; `aiperf runs --json` shows each "
            "run's series"
        )
    unscored = [str(r.id) for r in records if r.score is None]
    if unscored:
        raise UserError(
            f"run {', '.join(unscored)} of series {series} has no score: only a series of scored "
            "runs can be packaged"
        )
    missing = [str(default_log_path(r)) for r in records if not default_log_path(r).is_file()]
    if missing:
        raise UserError(
            f"the event log of a run of series {series} is not where the run wrote it "
            f"({missing[0]}); package from the folder the runs were started in"
        )
    rule = series_rule(records[0].ruleset)
    summary = summarise_runs(records, rule)
    to.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for record in records:
        write_package(store, record.id, to / run_folder(record.id))
        score = record.score
        assert score is not None  # checked above
        runs.append(
            {
                "run_id": record.id,
                "index": record.series_index,
                "folder": run_folder(record.id),
                "ops": score.ops,
                "regulated_score": score.regulated_score,
                "valid": score.valid,
                "verified": record.verified,
            }
        )
    document = {
        "format": SERIES_FORMAT,
        "aiperf_version": __version__,
        "series": series,
        "profile": records[0].profile,
        "ruleset": records[0].ruleset,
        "division": records[0].division,
        "rule": None if rule is None else asdict(rule),
        "enough_runs": enough_runs(len(records), rule),
        "runs": runs,
        "summary": {measure: s.to_dict() for measure, s in summary.items()},
        "packaged_at": datetime.now(tz=UTC).isoformat(),
    }
    (to / SERIES_FILE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return to


@dataclass(frozen=True)
class RunVerification:
    """One run package of a series package, and every check of it."""

    folder: str
    logged: LoggedRun | None  # None: its log could not be read
    checks: list[CheckRecord]

    @property
    def verified(self) -> bool:
        return all(c.passed for c in self.checks)


@dataclass(frozen=True)
class SeriesVerification:
    """A series package's verification: each run's, and the checks of the series itself."""

    series: str | None  # None: series.json could not be read
    runs: list[RunVerification]
    checks: list[CheckRecord]

    @property
    def failed(self) -> list[str]:
        """Every failed check, a run's named with its folder (run-7/score_recomputed)."""
        return [f"{r.folder}/{c.check}" for r in self.runs for c in r.checks if not c.passed] + [
            c.check for c in self.checks if not c.passed
        ]


def read_series(folder: Path) -> dict[str, Any]:
    """series.json of a series package, its shape checked; UserError (one line) for a file that is
    not one. Untrusted input: read up to MAX_SERIES_BYTES and MAX_SERIES_RUNS runs."""
    path = Path(folder) / SERIES_FILE
    if path.stat().st_size > MAX_SERIES_BYTES:
        raise UserError(f"{path} is over the {MAX_SERIES_BYTES} bytes a series file may have")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != SERIES_FORMAT:
        raise UserError(f"{path} is not an aiperf series file (format {SERIES_FORMAT})")
    runs = document.get("runs")
    if (
        not isinstance(document.get("series"), str)
        or not isinstance(runs, list)
        or not 1 <= len(runs) <= MAX_SERIES_RUNS
        or not all(
            isinstance(r, dict)
            and isinstance(r.get("run_id"), int)
            and isinstance(r.get("index"), int)
            and isinstance(r.get("folder"), str)
            for r in runs
        )
        or not isinstance(document.get("summary"), dict)
    ):
        raise UserError(
            f"{path} lacks its series id, its runs (run_id, index, folder: 1 to "
            f"{MAX_SERIES_RUNS}) or its summary"
        )
    return document


def verify_series_package(folder: Path) -> SeriesVerification:
    """Every run package of a series package verified from its event log alone, and the series
    checked against the logs (SERIES_RUNS, SERIES_MEMBERSHIP, SERIES_SUMMARY)."""
    folder = Path(folder)
    document = read_series(folder)
    series = str(document["series"])
    listed: list[dict[str, Any]] = document["runs"]
    runs: list[RunVerification] = []
    problems: list[str] = []
    for entry in listed:
        name = entry["folder"]
        if name != run_folder(entry["run_id"]) or not (folder / name).is_dir():
            problems.append(f"run {entry['run_id']}'s package {name} is not in {folder}")
            continue
        try:
            logged, checks = verify_package(folder / name)
        except UserError as exc:
            logged, checks = None, [CheckRecord(PACKAGE_CHECKED, False, str(exc))]
        runs.append(RunVerification(name, logged, checks))
    indexes = sorted(entry["index"] for entry in listed)
    if indexes != list(range(1, len(listed) + 1)):
        problems.append(f"the runs' indexes are {indexes}, not 1 to {len(listed)}")
    checks = [
        CheckRecord(
            SERIES_RUNS,
            not problems,
            "; ".join(problems) or f"all {len(listed)} runs' packages, indexes 1 to {len(listed)}",
        ),
        _membership(series, listed, runs),
        _summary(document, runs),
    ]
    return SeriesVerification(series, runs, checks)


def _membership(
    series: str, listed: list[dict[str, Any]], runs: list[RunVerification]
) -> CheckRecord:
    """Each run's own event log names this series, the run id and the index series.json gives."""
    by_folder = {entry["folder"]: entry for entry in listed}
    wrong = []
    for run in runs:
        entry = by_folder[run.folder]
        if run.logged is None:
            wrong.append(f"{run.folder}: its event log could not be read")
            continue
        logged = run.logged.run
        if (logged.id, logged.series, logged.series_index) != (
            entry["run_id"],
            series,
            entry["index"],
        ):
            wrong.append(
                f"{run.folder}: its log says run {logged.id}, series {logged.series}, index "
                f"{logged.series_index}; series.json says run {entry['run_id']}, series {series}, "
                f"index {entry['index']}"
            )
    return CheckRecord(
        SERIES_MEMBERSHIP,
        not wrong,
        "; ".join(wrong) or f"every run's event log names series {series} and its index",
    )


def _summary(document: dict[str, Any], runs: list[RunVerification]) -> CheckRecord:
    """The summary series.json states, recomputed from the scores in the runs' event logs under
    the series rule of the ruleset the logs name."""
    logged = [r.logged.run for r in runs if r.logged is not None]
    if len(logged) != len(runs) or not logged:
        return CheckRecord(SERIES_SUMMARY, False, "not every run's event log could be read")
    try:
        recomputed = summarise_runs(logged, series_rule(logged[0].ruleset))
        stated = {measure: SeriesSummary(**document["summary"][measure]) for measure in MEASURES}
    except (KeyError, TypeError, ValueError) as exc:
        return CheckRecord(SERIES_SUMMARY, False, f"the summary cannot be checked: {exc}")
    wrong = [
        f"{MEASURES[m]} {field}: stated {getattr(stated[m], field)}, recomputed "
        f"{getattr(recomputed[m], field)}"
        for m in MEASURES
        for field in ("runs", "median", "minimum", "maximum", "cv", "ranked")
        if not _same(getattr(stated[m], field), getattr(recomputed[m], field))
    ]
    return CheckRecord(
        SERIES_SUMMARY,
        not wrong,
        "; ".join(wrong)
        or f"OPS and regulated score of {len(logged)} runs recomputed from their event logs",
    )


def _same(stated: Any, recomputed: float) -> bool:
    return (
        isinstance(stated, (int, float))
        and not isinstance(stated, bool)
        and math.isclose(stated, recomputed, rel_tol=1e-12, abs_tol=0.0)
    )
