"""`aiperf results import`: verified packages into the results list.

Each package is checked exactly as `aiperf verify --package` checks it (aiperf.report.package.
verify_package: the run rebuilt from its event log alone, every check of `aiperf verify`, the best
trial's kept weights evaluated again and the data against its pin where the ruleset has them). What
the list needs is read from that rebuilt run, never from the package's other files, with one
exception: the submitter and status (MLPerf's availability), declared facts and not measurements,
may come from the package's system_description.json when the run's own description and config do
not name them.

Per package, not all-or-nothing: each package given imports, or is refused with one line naming
it and why (its checks fail, it was imported already, it is not a package), and a refusal changes
nothing else; the other packages of the same command still import. A series package (series.json
and one run-<id>/ package per run, `aiperf package --series`, aiperf.report.series_package) is one
package in this sense: checked as `aiperf verify --package` checks it (every run, and the series
against its runs' logs), all its runs import together, or none does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiperf.data.manifest import sha256_file
from aiperf.errors import UserError
from aiperf.paths import EVENT_LOG
from aiperf.report.package import verify_package
from aiperf.report.series_package import (
    is_series_package,
    read_series,
    run_folder,
    verify_series_package,
)
from aiperf.results.energy import energy
from aiperf.results.mllog import LoggedRun
from aiperf.store import CheckRecord, Store
from aiperf.store.results_models import AlreadyImported, add_results, find_result
from aiperf.system.description import FILE_NAME as SYSTEM_DESCRIPTION
from aiperf.system.description import system_name

NOT_GIVEN = {"", "n/a", "none", "unknown", "-"}  # how a description says it does not know


@dataclass(frozen=True)
class Imported:
    """What became of one package (or series package) given to `aiperf results import`."""

    package: str
    imported: bool
    message: str  # the one line: what was imported, or why it was refused
    result_ids: tuple[int, ...] = ()


def import_packages(
    store: Store,
    folders: Sequence[Path],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(tz=UTC),
) -> list[Imported]:
    """Import each folder (a run package or a series package), independently of the others."""
    return [_import_one(store, Path(folder), now) for folder in folders]


def _import_one(store: Store, folder: Path, now: Callable[[], datetime]) -> Imported:
    name = str(folder)
    series = is_series_package(folder)
    try:
        rows = _series_rows(store, folder) if series else [_run_row(store, folder)]
        at = now()
        ids = add_results(store, [{**row, "imported_at": at} for row in rows])
    except (AlreadyImported, UserError) as exc:
        return Imported(name, False, f"{name}: {exc}")
    except OSError as exc:  # a file that cannot be read: this package only
        return Imported(name, False, f"{name}: cannot be read ({exc.strerror}: {exc.filename})")
    what = (
        f"series {rows[0]['series']} ({len(rows)} runs)"
        if series
        else f"run {rows[0]['run_id']}"
        + (
            f" (run {rows[0]['series_index']} of series {rows[0]['series']})"
            if rows[0]["series"]
            else ""
        )
    )
    return Imported(
        name,
        True,
        f"{name}: imported {what} of {rows[0]['system_name']} as result "
        + ", ".join(str(i) for i in ids),
        tuple(ids),
    )


def _not_imported_yet(store: Store, log: Path, what: str = "") -> str | None:
    """The log's sha256 (None when there is no log), or AlreadyImported: checked before the checks,
    which evaluate weights again (seconds)."""
    if not log.is_file():
        return None
    digest = sha256_file(log)
    existing = find_result(store, digest)
    if existing is not None:
        raise AlreadyImported(digest, existing, what)
    return digest


def _failed(checks: Sequence[CheckRecord], names: Sequence[str], folder: Path) -> UserError:
    details = "; ".join(c.detail for c in checks if not c.passed)[:300]
    return UserError(
        f"its checks fail ({', '.join(names) or 'none ran'}): {details}; see "
        f"`aiperf verify --package {folder}`"
    )


def _run_row(store: Store, folder: Path) -> dict[str, Any]:
    """The results row of one run package, after every check of `aiperf verify --package` passed;
    UserError (one line) when it is no package or a check fails, AlreadyImported."""
    digest = _not_imported_yet(store, folder / EVENT_LOG) if folder.is_dir() else None
    logged, checks = verify_package(folder)  # UserError for what is not a package
    failed = [c.check for c in checks if not c.passed]
    if logged is None or failed or not checks:
        raise _failed(checks, failed, folder)
    return result_row(logged, folder, digest or sha256_file(folder / EVENT_LOG))


def _series_rows(store: Store, folder: Path) -> list[dict[str, Any]]:
    """The rows of every run of a series package, after `aiperf verify --package` on it passed (every
    run's checks, and the series': its runs all there, each log naming the series, the summary)."""
    for entry in read_series(folder)["runs"]:
        name = str(entry["folder"])
        if name == run_folder(entry["run_id"]):  # else a check of the series fails, below
            _not_imported_yet(store, folder / name / EVENT_LOG, f"its {name}'s ")
    verified = verify_series_package(folder)
    if verified.failed:
        checks = [c for r in verified.runs for c in r.checks] + list(verified.checks)
        raise _failed(checks, verified.failed, folder)
    rows = []
    for run in verified.runs:
        assert run.logged is not None  # a log that could not be read fails a check
        rows.append(
            result_row(
                run.logged, folder / run.folder, sha256_file(folder / run.folder / EVENT_LOG)
            )
        )
    return rows


def _given(value: Any) -> str | None:
    """A declared fact as text, None where it says it is not known."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in NOT_GIVEN else text


def _clip(text: str | None, length: int) -> str | None:
    return None if text is None else text[:length]


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def hardware(description: Mapping[str, Any] | None) -> dict[str, Any]:
    """Nodes, accelerators (model and count; none: CPU only) and physical cores, from a system
    description: per node where it lists its nodes, else from MLPerf's top-level fields."""
    description = description or {}
    nodes = [n for n in description.get("nodes") or [] if isinstance(n, Mapping)]
    if nodes:
        gpus = [g for n in nodes for g in n.get("accelerators") or [] if isinstance(g, Mapping)]
        models = sorted({str(g.get("model")) for g in gpus if g.get("model")})
        counted = [_int(n.get("accelerators_per_node")) for n in nodes]
        count = len(gpus) or sum(c or 0 for c in counted)
        cores = [_int(n.get("host_cores_total")) for n in nodes]
        total_cores = sum(c for c in cores if c) or None
        number = len(nodes)
    else:
        number = _int(description.get("number_of_nodes")) or 1
        count = (_int(description.get("accelerators_per_node")) or 0) * number
        model = _given(description.get("accelerator_model_name"))
        models = [model] if model and count else []
        per_node = (_int(description.get("host_processor_core_count")) or 0) * (
            _int(description.get("host_processors_per_node")) or 1
        )
        total_cores = per_node * number or None
    if not models and count:
        model = _given(description.get("accelerator_model_name"))
        models = [model] if model else ["unknown"]
    return {
        "nodes": max(1, number),
        "accelerators": count,
        "accelerator_model": ", ".join(models) if count else None,
        "cores": total_cores,
    }


def _declared(logged: LoggedRun, folder: Path, field: str) -> str | None:
    """An owner's fact (submitter, status): the run's description or config (system.FIELD), else
    the package's system_description.json (written with `aiperf package --submitter/--status`)."""
    run = logged.run
    found = _given((run.system_description or {}).get(field))
    system = (run.config or {}).get("system")
    if found is None and isinstance(system, Mapping):
        found = _given(system.get(field))
    if found is None:
        try:
            packaged = json.loads((folder / SYSTEM_DESCRIPTION).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            packaged = None
        if isinstance(packaged, Mapping):
            found = _given(packaged.get(field))
    return found


def result_row(logged: LoggedRun, folder: Path, events_sha256: str) -> dict[str, Any]:
    """The results row of a verified run (every field of ResultRecord but id and imported_at)."""
    run = logged.run
    score = run.score
    if score is None:  # verify_package refuses a run without a score before this
        raise UserError(f"{folder}: the run has no score")
    description = run.system_description
    found = energy(run)
    kinds = sorted({k for n in found.measured for k in n.kinds}) if found.joules else []
    return {
        "events_sha256": events_sha256,
        "run_id": run.id,
        "system_name": system_name(description, run.config)[:255],
        "submitter": _clip(_declared(logged, folder, "submitter"), 255),
        "status": _clip(_declared(logged, folder, "status"), 64),
        **hardware(description),
        "workers": run.workers,
        "ops": score.ops,
        "regulated_score": score.regulated_score,
        "mfu": score.mfu,
        "ops_low": score.ops_low,
        "ops_high": score.ops_high,
        "regulated_low": score.regulated_low,
        "regulated_high": score.regulated_high,
        "energy_joules": found.joules,
        "ops_per_watt": found.ops_per_watt,
        "energy_level": found.level,
        "energy_meters": "+".join(kinds) or None,
        "best_val_accuracy": score.best_val_accuracy,
        "valid": bool(score.valid),
        "reasons": list(score.reasons),
        "verified": True,  # every check passed, or it is not imported
        "division": run.division,
        "ruleset": run.ruleset,
        "profile": run.profile,
        "workload_hash": run.config_hash,
        "run_date": run.created_at,
        "series": run.series,
        "series_index": run.series_index,
        "package": str(folder.resolve()),
        "system_description": description,
    }
