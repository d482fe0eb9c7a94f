"""A result package's JSON files held to its event log: `aiperf verify --package`'s last check.

A package's event log is its one record of the run: the checks of `aiperf verify` run on the
records rebuilt from it, and nothing else in the package is trusted. But a reviewer, the results
list (aiperf.ranking) and MLCommons' tools also read the package's JSON files, which repeat facts
the log carries: config.json (the log's config event), system_description.json (the MLPerf form
of the log's system_description, config and division events, aiperf.system.mlperf), the
verification and review of verification.json (the log's verification event; the review from its
provenance and division) and the run of package.json. A package whose system_description.json
was edited to claim 8 H100s would otherwise pass every check. PACKAGE_FILES compares every such
fact with what the log's events give, field by field, and names each file and field that differ.

Not compared: what is not the log's to say. The owner's facts of system_description.json
(submitter, status, cooling, notes) are given when the package is written (`aiperf package
--submitter/--status`, the site file); verification.json's own verdicts were recomputed when it
was written, and `verify --package` recomputes them again; package.json's format, version, time
and file list describe the package. A file that is absent is not compared (it claims nothing).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf.config import SystemConfig
from aiperf.results import mllog
from aiperf.results.division import CLOSED
from aiperf.results.mllog import LoggedRun
from aiperf.store import CheckRecord
from aiperf.system.description import FILE_NAME as SYSTEM_DESCRIPTION
from aiperf.system.mlperf import mlperf_description
from aiperf.system.provenance import review_reasons

PACKAGE_FILES = "package_files"  # the check's name
MAX_FILE_BYTES = 16 * 1024 * 1024  # a fact file is a few KiB; a package is untrusted input
SHOWN = 5  # differences named in the check's detail; the rest are counted

# Names of files aiperf.report.package writes (named here, where they are held to the log; the
# writer imports them).
CONFIG_FILE = "config.json"
VERIFICATION_FILE = "verification.json"
PACKAGE_FILE = "package.json"


@dataclass(frozen=True)
class FactFile:
    """One JSON file of a package and what the log says it holds. `whole`: every field of the file
    is the log's (but `own`); else only the fields `expected` gives are compared."""

    name: str
    expected: Callable[[Mapping[str, list[mllog.Event]], LoggedRun], dict[str, Any]]
    whole: bool
    own: frozenset[str] = frozenset()


def _latest(events: Mapping[str, list[mllog.Event]], key: str) -> mllog.Event | None:
    """The log's last event of a kind (a resumed run repeats some; the latest stands)."""
    found = events.get(key)
    return found[-1] if found else None


def _value(events: Mapping[str, list[mllog.Event]], key: str, default: Any = None) -> Any:
    event = _latest(events, key)
    return default if event is None else event.value


def _config(events: Mapping[str, list[mllog.Event]], _logged: LoggedRun) -> dict[str, Any]:
    return dict(_value(events, mllog.CONFIG, {}) or {})


def _system(events: Mapping[str, list[mllog.Event]], _logged: LoggedRun) -> dict[str, Any]:
    """The MLPerf form aiperf.report.package writes, made from the log's events alone."""
    return mlperf_description(
        _value(events, mllog.SYSTEM_DESCRIPTION, {}) or {},
        _value(events, mllog.CONFIG, {}) or {},
        division=_value(events, mllog.SUBMISSION_DIVISION),
    )


def _verification(events: Mapping[str, list[mllog.Event]], logged: LoggedRun) -> dict[str, Any]:
    verified = _latest(events, mllog.VERIFICATION)
    division = _value(events, mllog.SUBMISSION_DIVISION)
    return {
        "run_id": logged.run.id,
        "stored": None if verified is None else verified.metadata.get("checks"),
        "review": (review_reasons(_value(events, mllog.PROVENANCE)) if division == CLOSED else []),
    }


def _package(_events: Mapping[str, list[mllog.Event]], logged: LoggedRun) -> dict[str, Any]:
    return {"run_id": logged.run.id}


# The owner's facts of MLPerf's description: given when the package is written, not logged. The
# system's name is not one of them: it is the run's config's, or its nodes' hostnames (logged).
OWNER_FIELDS = frozenset(SystemConfig.model_fields) - {"name"}

FACT_FILES = (
    FactFile(SYSTEM_DESCRIPTION, _system, whole=True, own=OWNER_FIELDS),
    FactFile(CONFIG_FILE, _config, whole=True),
    FactFile(VERIFICATION_FILE, _verification, whole=False),
    FactFile(PACKAGE_FILE, _package, whole=False),
)


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def differences(expected: Any, found: Any, where: str = "") -> list[str]:
    """Each field where `found` is not `expected`, by its dotted path: "a.b[2] is X, the log's Y"."""
    if isinstance(expected, Mapping) and isinstance(found, Mapping):
        out: list[str] = []
        for key in sorted(set(expected) | set(found), key=str):
            path = f"{where}.{key}" if where else str(key)
            if key not in found:
                out.append(f"{path} is missing, the log's {_shown(expected[key])}")
            elif key not in expected:
                out.append(f"{path} is {_shown(found[key])}, the log has none")
            else:
                out.extend(differences(expected[key], found[key], path))
        return out
    if isinstance(expected, list) and isinstance(found, list) and len(expected) == len(found):
        return [
            d
            for i, (e, f) in enumerate(zip(expected, found, strict=True))
            for d in differences(e, f, f"{where}[{i}]")
        ]
    if expected == found and type(expected) is type(found):
        return []
    return [f"{where or 'the file'} is {_shown(found)}, the log's {_shown(expected)}"]


def _compared(fact: FactFile, expected: dict[str, Any], found: Any) -> list[str]:
    if not isinstance(found, dict):
        return [f"{fact.name} is not a JSON object"]
    expected = json.loads(json.dumps(expected))  # as the file was written: tuples are lists
    if fact.whole:
        keep = set(expected) | set(found)
    else:
        keep = set(expected)
    keep -= fact.own
    return [
        f"{fact.name}: {d}"
        for d in differences(
            {k: v for k, v in expected.items() if k in keep},
            {k: v for k, v in found.items() if k in keep},
        )
    ]


def _read(path: Path) -> Any:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(
            f"{path.name} is {size} bytes, over the {MAX_FILE_BYTES} a fact file may have"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def _by_key(events: Iterable[mllog.Event]) -> dict[str, list[mllog.Event]]:
    found: dict[str, list[mllog.Event]] = {}
    for event in events:
        found.setdefault(event.key, []).append(event)
    return found


def check_package_files(folder: Path, logged: LoggedRun) -> CheckRecord:
    """PACKAGE_FILES: every fact file of the package in `folder` agrees with its event log."""
    events = _by_key(logged.events)
    problems: list[str] = []
    compared: list[str] = []
    for fact in FACT_FILES:
        path = Path(folder) / fact.name
        if not path.is_file():
            continue
        try:
            found = _read(path)
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError too
            problems.append(f"{fact.name} cannot be read: {str(exc).splitlines()[0]}")
            continue
        compared.append(fact.name)
        problems.extend(_compared(fact, fact.expected(events, logged), found))
    if problems:
        shown = "; ".join(problems[:SHOWN]) + (
            f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        )
        return CheckRecord(PACKAGE_FILES, False, f"not what the event log says: {shown}")
    return CheckRecord(
        PACKAGE_FILES,
        True,
        f"{', '.join(compared) or 'no fact file'} agree with the event log, field by field",
    )
