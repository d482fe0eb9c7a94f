"""A result package: one folder a reviewer can take away, and check without the database.

`aiperf package RUN_ID --to DIR` writes

    events.log               the run's event log (MLLOG lines, aiperf.results.mllog): enough to
                             recompute the score
    system_description.json  the system in MLPerf's form, as MLCommons' checker reads it, and the
                             compute nodes as the workers described them (aiperf.system.mlperf)
    config.json              the effective config the run ran with
    <ruleset>.yaml           the rules it is judged by (aiperf/rules/)
    verification.json        every check of `aiperf verify`, from the records and from the event log
    report.html              the run's HTML report
    README.md                what is there and how to check it
    package.json             the package's format, run and files
    weights/trial-N.weights.h5  the best trial's weights (their sha256 is in the event log), when kept

`aiperf verify --package DIR` rebuilds the run's records from DIR/events.log alone (aiperf.results.mllog.rebuild)
and runs the same checks as `aiperf verify RUN_ID` on them (aiperf.results.verify.verify_records): each
trial's operations per sample are recounted from the architecture in the log, every epoch's samples
and times checked, every figure of the score recomputed, and the best trial's weights evaluated again
on the run's data (generated data regenerated from the seed into a temporary folder); then the
package's JSON files (system_description.json, config.json, verification.json, package.json) are
held to the log, field by field (aiperf.report.package_files).

A package is untrusted input: its log is read only up to MAX_LOG_BYTES, no architecture over
MAX_LAYERS layers or MAX_PARAMETERS parameters is built, and whatever goes wrong while checking
(any exception, not only the ones foreseen) is a failed check (PACKAGE_CHECKED) with one line.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from aiperf import __version__, paths
from aiperf.errors import UserError
from aiperf.paths import EVENT_LOG
from aiperf.report.package_files import (
    CONFIG_FILE,
    PACKAGE_FILE,
    PACKAGE_FILES,
    VERIFICATION_FILE,
    check_package_files,
)
from aiperf.report.package_readme import README_FILE, REPORT_FILE, readme
from aiperf.report.power_logs import POWER_LOGS, check_power_logs, write_power_logs
from aiperf.report.summary import for_review
from aiperf.results.mllog import LoggedRun, read_run
from aiperf.store import CheckRecord, RunRecord, Store
from aiperf.system.description import FILE_NAME as SYSTEM_DESCRIPTION

FORMAT = "aiperf-package-1"

# Limits on what `verify --package` reads and builds from a package (untrusted input).
MAX_LOG_BYTES = 64 * 1024 * 1024  # a day's run with thousands of trials logs a few MiB
MAX_LAYERS = 2_000  # ResNet-50 has under 200; the search deepens by a few blocks per trial
MAX_PARAMETERS = 500_000_000  # 2 GB of float32 weights; ResNet-50 has 25.6 million
PACKAGE_CHECKED = "package_checked"  # the failed check of a package that could not be checked


class PackageLimit(ValueError):
    """What a package asks to build is over MAX_LAYERS or MAX_PARAMETERS."""


def default_log_path(record: RunRecord) -> Path:
    """Where the run wrote its event log: its folder under its --out (relative to where it was started)."""
    return paths.event_log_path(
        record.config.get("out", "aiperf-out"), record.config.get("db", ""), record.id
    )


def _memo(counter: Callable[[dict], tuple]) -> Callable[[dict], tuple]:
    """One recount per architecture across both verifications."""
    seen: dict[str, tuple] = {}

    def count(architecture: dict) -> tuple:
        key = json.dumps(architecture, sort_keys=True)
        if key not in seen:
            seen[key] = counter(architecture)
        return seen[key]

    return count


def _checks(checks: list[CheckRecord]) -> list[dict]:
    return [{"check": c.check, "passed": c.passed, "detail": c.detail} for c in checks]


def write_package(
    store: Store,
    run_id: int,
    to: Path,
    log: Path | None = None,
    *,
    submitter: str | None = None,
    status: str | None = None,
) -> Path:
    """Write run `run_id`'s package into the new (or empty) folder `to`; UserError for what cannot be.
    `submitter` and `status` go into the MLPerf system description over the run's config and the
    site file (aiperf.system.mlperf)."""
    from aiperf.report.html import build_report
    from aiperf.system.mlperf import mlperf_description

    to = Path(to)
    record = _packageable(store, run_id, to, submitter=submitter, status=status)
    log, logged = _run_log(record, log)
    from_records, from_log = _verifications(store, record, logged, log)
    report = build_report(store, run_id)

    to.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(log, to / EVENT_LOG)
    files = [EVENT_LOG]
    weights = _copy_weights(logged.run.best_weights, log.parent, to)
    if weights is not None:
        files.append(weights)
    description = record.system_description or logged.run.system_description or {}
    _write_json(
        to / SYSTEM_DESCRIPTION,
        mlperf_description(
            description,
            record.config,
            division=record.division,
            submitter=submitter,
            status=status,
        ),
    )
    files.append(SYSTEM_DESCRIPTION)
    _write_json(to / CONFIG_FILE, record.config)
    files.append(CONFIG_FILE)
    ruleset = _copy_ruleset(record.ruleset, to)
    if ruleset is not None:
        files.append(ruleset)
    _write_verification(to, record, from_records, from_log)
    files.append(VERIFICATION_FILE)
    files += write_power_logs(to, logged)
    (to / REPORT_FILE).write_text(report, encoding="utf-8")
    files.append(REPORT_FILE)
    (to / README_FILE).write_text(
        readme(record, files, from_records, from_log, ruleset), encoding="utf-8"
    )
    files.append(README_FILE)
    _write_package_file(to, run_id, files)
    return to


def _packageable(
    store: Store, run_id: int, to: Path, *, submitter: str | None, status: str | None
) -> RunRecord:
    """The run's record, once nothing stands in the way of packaging it: a folder to write into, a
    score to ship, and an MLPerf status that exists (refused before any work)."""
    from aiperf.system.mlperf import owner_facts

    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise UserError(
            f"--to {to} exists and is not an empty folder; give a new folder for the package"
        )
    record = store.get_run(run_id)
    if record.score is None:
        raise UserError(
            f"run {run_id} ({record.status}) has no score: only a scored run can be packaged"
        )
    owner_facts(record.config, submitter=submitter, status=status)  # a bad status: before any work
    return record


def _run_log(record: RunRecord, log: Path | None) -> tuple[Path, LoggedRun]:
    """The run's event log (given, or where the run wrote it), read: it must be this run's."""
    run_id = record.id
    log = Path(log) if log is not None else default_log_path(record)
    if not log.is_file():
        raise UserError(
            f"run {run_id}'s event log is not at {log} (its folder under the run's --out, relative to "
            "where the run was started); give it with --log PATH"
        )
    logged = read_run(log)
    if logged.run.id != run_id:
        raise UserError(f"{log} is the event log of run {logged.run.id}, not of run {run_id}")
    return log, logged


def _verifications(
    store: Store, record: RunRecord, logged: LoggedRun, log: Path
) -> tuple[list[CheckRecord], list[CheckRecord]]:
    """Every check of `aiperf verify`, from the database's records and from the event log alone,
    as the package is written; each architecture recounted once for both."""
    from aiperf.results.verify import count_architecture, verify_run

    counter = _memo(count_architecture)
    from_records = verify_run(store, record.id, counter)
    data = Path(record.config.get("out") or ".") / "data"
    from_log = _verify(logged, str(log), counter, log.parent, data)
    return from_records, from_log


def _write_verification(
    to: Path, record: RunRecord, from_records: list[CheckRecord], from_log: list[CheckRecord]
) -> None:
    """verification.json: both verifications, the stored one, and what ran on the workers."""
    _write_json(
        to / VERIFICATION_FILE,
        {
            "run_id": record.id,
            "verified": all(c.passed for c in from_records + from_log),
            "from_records": _checks(from_records),
            "from_event_log": _checks(from_log),
            "stored": None if record.verification is None else _checks(list(record.verification)),
            "review": for_review(record),  # what ran on the workers, for a person to look at
        },
    )


def _write_package_file(to: Path, run_id: int, files: list[str]) -> None:
    """package.json: the format, the aiperf that wrote it, the run, and every file, sorted."""
    _write_json(
        to / PACKAGE_FILE,
        {
            "format": FORMAT,
            "aiperf_version": __version__,
            "run_id": run_id,
            "packaged_at": datetime.now(tz=UTC).isoformat(),
            "files": sorted(files),
        },
    )


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _copy_weights(kept: dict | None, folder: Path, to: Path) -> str | None:
    """The best trial's weights file, at the same path in the package as in the run's folder (its
    sha256 is in the event log, so `verify --package` checks the copy); None when the run kept none
    or its file is gone (the package's verification then says so)."""
    from aiperf.results.remeasure import inside_folder

    if not kept:
        return None
    source = inside_folder(folder, str(kept.get("file")))
    if source is None or not source.is_file():
        return None
    target = to / str(kept["file"])
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return str(kept["file"])


def _copy_ruleset(name: str | None, to: Path) -> str | None:
    from aiperf.rules import available_rulesets

    if not name or name not in available_rulesets():
        return None
    (to / f"{name}.yaml").write_text(
        (resources.files("aiperf") / "rules" / f"{name}.yaml").read_text(), encoding="utf-8"
    )
    return f"{name}.yaml"


def capped(counter: Callable[[dict], tuple]) -> Callable[[dict], tuple]:
    """`counter`, refusing (PackageLimit) an architecture over MAX_LAYERS layers or MAX_PARAMETERS
    parameters, both counted from its description before anything is built."""
    from aiperf.arch import network_from_dict
    from aiperf.arch.graph import count_params
    from aiperf.arch.transformer import TransformerSpec, is_transformer

    def count(architecture: dict) -> tuple:
        if isinstance(architecture, dict) and is_transformer(architecture):
            spec = TransformerSpec.from_dict(architecture)  # an LM's size, from its numbers
            if spec.param_count > MAX_PARAMETERS:
                raise PackageLimit(
                    f"an architecture has {spec.param_count} parameters, over the "
                    f"{MAX_PARAMETERS} a package may build"
                )
            return counter(architecture)
        nodes = architecture.get("nodes") if isinstance(architecture, dict) else None
        if isinstance(nodes, list) and len(nodes) > MAX_LAYERS:
            raise PackageLimit(
                f"an architecture has {len(nodes)} layers, over the {MAX_LAYERS} a package may build"
            )
        network = network_from_dict(architecture)
        if len(network.nodes) > MAX_LAYERS:
            raise PackageLimit(
                f"an architecture has {len(network.nodes)} layers, over the {MAX_LAYERS} a "
                "package may build"
            )
        parameters = count_params(network)
        if parameters > MAX_PARAMETERS:
            raise PackageLimit(
                f"an architecture has {parameters} parameters, over the {MAX_PARAMETERS} a "
                "package may build"
            )
        return counter(architecture)

    return count


def _one_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _verify(
    logged: LoggedRun,
    where: str,
    counter: Callable[[dict], tuple] | None = None,
    folder: Path | None = None,
    data_folder: Path | None = None,
) -> list[CheckRecord]:
    """Every check on the log's records; anything that breaks the checking (a config the rules
    cannot read, an architecture over the limits, any exception) is one failed check, one line."""
    from aiperf.results.verify import count_architecture, verify_records

    if logged.run.score is None:
        raise UserError(
            f"{where} has no score: the run was not scored, so there is nothing to verify"
        )
    try:
        return verify_records(
            logged.run,
            logged.dataset,
            capped(counter or count_architecture),
            folder,
            data_folder,
        )
    except Exception as exc:  # noqa: BLE001 - untrusted input: whatever it breaks fails the check
        return [
            CheckRecord(PACKAGE_CHECKED, False, f"{where} cannot be checked: {_one_line(exc)}")
        ]


def verify_package(folder: Path) -> tuple[LoggedRun | None, list[CheckRecord]]:
    """The run in a package, and every check of `aiperf verify` on it, from its event log alone
    (and the weights beside it); no run when the log was too big to read."""
    folder = Path(folder)
    if not folder.exists():
        raise UserError(
            f"package {folder} does not exist; give the folder `aiperf package RUN_ID --to DIR` wrote"
        )
    if not folder.is_dir():
        raise UserError(
            f"package {folder} is not a folder; give the folder `aiperf package RUN_ID --to DIR` wrote"
        )
    log = folder / EVENT_LOG
    if not log.is_file():
        raise UserError(
            f"{folder} is not an aiperf package: it has no {EVENT_LOG} (write one with "
            f"`aiperf package RUN_ID --to {folder}`)"
        )
    size = log.stat().st_size
    if size > MAX_LOG_BYTES:
        return None, [
            CheckRecord(
                PACKAGE_CHECKED,
                False,
                f"{log} is {size} bytes, over the {MAX_LOG_BYTES} a package's log may have: not read",
            )
        ]
    try:
        logged = read_run(log)
    except UserError:
        raise  # a line that is not an event: named with its number, one line, exit 2
    except Exception as exc:  # noqa: BLE001 - untrusted input: whatever it breaks fails the check
        return None, [
            CheckRecord(PACKAGE_CHECKED, False, f"{log} cannot be read: {_one_line(exc)}")
        ]
    # Generated data is generated again from the run's seed, here, and removed afterwards.
    with tempfile.TemporaryDirectory(prefix="aiperf-verify-data-") as data:
        checks = _verify(logged, str(log), folder=folder, data_folder=Path(data))
    return logged, [
        *checks,
        _held(folder, logged, PACKAGE_FILES, check_package_files),
        _held(folder, logged, POWER_LOGS, check_power_logs),
    ]


def _held(
    folder: Path, logged: LoggedRun, name: str, check: Callable[[Path, LoggedRun], CheckRecord]
) -> CheckRecord:
    """The package's files held to its event log by `check` (its JSON files: aiperf.report
    .package_files; its power logs: aiperf.report.power_logs); whatever goes wrong while comparing
    them (untrusted input) fails that check, in one line."""
    try:
        return check(folder, logged)
    except Exception as exc:  # noqa: BLE001 - untrusted input: whatever it breaks fails the check
        return CheckRecord(name, False, f"{folder}'s files cannot be compared: {_one_line(exc)}")
