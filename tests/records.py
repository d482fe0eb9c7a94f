"""Frozen records built by hand, for tests of what reads them (the report, the comparisons) without
a run: one system and one run whose every field a test does not set is a plain default."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiperf.status import RunStatus
from aiperf.store import RunRecord, SystemRecord

T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def system_record(at: datetime = T0) -> SystemRecord:
    return SystemRecord(
        id=1,
        fingerprint="f" * 64,
        hostname="h",
        cpu_model="c",
        cpu_cores=2,
        memory_bytes=2**30,
        gpus={"count": 0, "models": []},
        platform="p",
        python_version="3.11",
        tensorflow_version=None,
        keras_version="3",
        keras_backend="tensorflow",
        first_seen_at=at,
    )


def run_record(trials: Any = (), at: datetime = T0, **fields: Any) -> RunRecord:
    """Run 1 of the quick profile, completed, with `trials` and any other field given."""
    defaults: dict[str, Any] = {
        "id": 1,
        "system": system_record(at),
        "profile": "quick",
        "config": {},
        "seed": 0,
        "budget_s": 60,
        "workers": 1,
        "status": RunStatus.COMPLETED,
        "created_at": at,
        "search_started_at": at,
        "deadline": None,
        "search_ended_at": None,
        "flow_run_id": None,
        "message": None,
        "ruleset": None,
        "division": None,
        "deviations": (),
        "config_hash": None,
        "score": None,
        "verification": None,
    }
    return RunRecord(**{**defaults, **fields, "trials": tuple(trials)})
