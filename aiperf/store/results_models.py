"""The results list's table: one row per run imported from a verified result package
(`aiperf results import`, aiperf.ranking), so a site can rank machines whose runs were recorded in
other databases.

A row holds what the ranked list shows and groups by, read from the package's event log as it was
rebuilt and verified, never from the package's loose files; the run's own records stay in the
database that recorded them. The event log's sha256 is unique: a package imported twice (or a copy
of it under another folder name) is refused by the database itself, so two concurrent imports of
one package cannot both succeed.

Lives beside aiperf.store.models on the same declarative Base (Alembic's migrations and the
schema-drift check see it: aiperf.store imports this module); created by migration 0011.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Float,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from aiperf.store.models import Base

if TYPE_CHECKING:
    from aiperf.store.repository import Store


class Result(Base):
    """One imported run: the list's figures and the facts it is grouped by."""

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("events_sha256", name="result_event_log_unique"),
        CheckConstraint("accelerators >= 0", name="result_accelerators_nonnegative"),
        CheckConstraint("nodes >= 1", name="result_nodes_positive"),
        CheckConstraint("division IN ('closed', 'open')", name="result_division_known"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    events_sha256: Mapped[str] = mapped_column(
        String(64), doc="sha256 of the package's events.log: one import per event log"
    )
    run_id: Mapped[int] = mapped_column(
        Integer, doc="the run's id in the database that recorded it (not this one's)"
    )
    system_name: Mapped[str] = mapped_column(
        String(255), doc="the user's name for the system, else its nodes' hostnames"
    )
    submitter: Mapped[str | None] = mapped_column(String(255), doc="who submits the result")
    status: Mapped[str | None] = mapped_column(
        String(64), doc="MLPerf's availability: available, preview, research (None: not given)"
    )
    nodes: Mapped[int] = mapped_column(Integer, doc="compute nodes that ran the workers")
    accelerator_model: Mapped[str | None] = mapped_column(
        String(255), doc="accelerator model(s); None: CPU only"
    )
    accelerators: Mapped[int] = mapped_column(
        Integer, doc="accelerators across the nodes; 0: CPU only"
    )
    cores: Mapped[int | None] = mapped_column(Integer, doc="physical CPU cores across the nodes")
    workers: Mapped[int] = mapped_column(Integer, doc="the run's workers")
    ops: Mapped[float] = mapped_column(Float, doc="operations per second ('aiperf' convention)")
    regulated_score: Mapped[float] = mapped_column(Float, doc="ops * |ln(1 - capped accuracy)|")
    mfu: Mapped[float | None] = mapped_column(Float, doc="model FLOPs utilisation")
    ops_low: Mapped[float | None] = mapped_column(Float, doc="OPS's 95% interval, its low end")
    ops_high: Mapped[float | None] = mapped_column(Float, doc="OPS's 95% interval, its high end")
    regulated_low: Mapped[float | None] = mapped_column(Float, doc="the regulated score's, low")
    regulated_high: Mapped[float | None] = mapped_column(Float, doc="the regulated score's, high")
    energy_joules: Mapped[float | None] = mapped_column(
        Float, doc="the window's joules over every node (None: not fully metered)"
    )
    ops_per_watt: Mapped[float | None] = mapped_column(Float, doc="operations per joule")
    energy_level: Mapped[str | None] = mapped_column(String(16), doc="L1 or below L1")
    energy_meters: Mapped[str | None] = mapped_column(
        String(64), doc="the meter kinds the joules came from: bmc, or nvml+rapl, ..."
    )
    best_val_accuracy: Mapped[float | None] = mapped_column(Float)
    valid: Mapped[bool] = mapped_column(Boolean, doc="valid by its ruleset")
    reasons: Mapped[list[str] | None] = mapped_column(
        JSON, doc="every rule the run breaks, as its score names them (empty: valid)"
    )
    verified: Mapped[bool] = mapped_column(
        Boolean, doc="every check of `aiperf verify --package` passed when imported"
    )
    division: Mapped[str | None] = mapped_column(String(8), doc="closed or open")
    ruleset: Mapped[str | None] = mapped_column(String(64), doc="id-version of its rules")
    profile: Mapped[str] = mapped_column(String(64))
    workload_hash: Mapped[str | None] = mapped_column(
        String(64), doc="sha256 of the workload settings (runs.config_hash)"
    )
    run_date: Mapped[datetime] = mapped_column(doc="when the run was created (UTC)")
    series: Mapped[str | None] = mapped_column(
        String(36), doc="the run's series id (aiperf run --repeat); None: a run of its own"
    )
    series_index: Mapped[int | None] = mapped_column(Integer, doc="its place in its series, 1..N")
    package: Mapped[str] = mapped_column(Text, doc="the folder it was imported from")
    imported_at: Mapped[datetime]
    system_description: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, doc="the compute nodes as the run's event log describes them"
    )


@dataclass(frozen=True)
class ResultRecord:
    """One imported run as the ranking reads it (table results), detached from any session."""

    id: int
    events_sha256: str
    run_id: int
    system_name: str
    submitter: str | None
    status: str | None
    nodes: int
    accelerator_model: str | None
    accelerators: int
    cores: int | None
    workers: int
    ops: float
    regulated_score: float
    mfu: float | None
    best_val_accuracy: float | None
    valid: bool
    verified: bool
    division: str | None
    ruleset: str | None
    profile: str
    workload_hash: str | None
    run_date: datetime
    series: str | None
    series_index: int | None
    package: str
    imported_at: datetime
    system_description: dict[str, Any] | None = None
    # Every rule the run breaks, as its score names them ("too short: budget 8 s is under ...");
    # the list shows why an invalid result is not ranked.
    reasons: list[str] | None = None
    # The run's 95% intervals (aiperf.results.uncertainty; None: fewer than two trials measured,
    # or imported before results kept them).
    ops_low: float | None = None
    ops_high: float | None = None
    regulated_low: float | None = None
    regulated_high: float | None = None
    # The window's energy (aiperf.results.energy; None: not fully metered, or imported before).
    energy_joules: float | None = None
    ops_per_watt: float | None = None
    energy_level: str | None = None
    energy_meters: str | None = None

    def energy_class(self) -> str | None:
        """What an efficiency may be compared within: its level and meter kinds ("L1, bmc")."""
        if self.ops_per_watt is None:
            return None
        return f"{self.energy_level}, {self.energy_meters}"


class AlreadyImported(Exception):
    """An event log already in the results list (its sha256): what it was imported as."""

    def __init__(self, events_sha256: str, existing: ResultRecord | None, whose: str = "") -> None:
        """`whose`: whose event log, in the message ("its run-7's "; default "its ")."""
        self.events_sha256 = events_sha256
        self.existing = existing
        where = (
            ""
            if existing is None
            else f" as result {existing.id} (run {existing.run_id} of {existing.system_name}, "
            f"from {existing.package})"
        )
        super().__init__(f"{whose or 'its '}event log was imported already{where}")


RESULT_FIELDS = tuple(f.name for f in fields(ResultRecord))


def _record(row: Result) -> ResultRecord:
    values = {name: getattr(row, name) for name in RESULT_FIELDS}
    for moment in ("run_date", "imported_at"):
        value = values[moment]
        values[moment] = value if value.tzinfo else value.replace(tzinfo=UTC)
    return ResultRecord(**values)


def find_result(store: Store, events_sha256: str) -> ResultRecord | None:
    """The result imported from the event log of this sha256, if any."""
    with store.session() as s:
        row = s.scalar(select(Result).where(Result.events_sha256 == events_sha256))
        return None if row is None else _record(row)


def add_results(store: Store, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Insert results (every ResultRecord field but id) in one transaction: all or none.

    AlreadyImported when one's event log is there already, found before inserting or, when
    another import got there first, by the unique constraint; nothing is then inserted."""
    for row in rows:
        existing = find_result(store, str(row["events_sha256"]))
        if existing is not None:
            raise AlreadyImported(str(row["events_sha256"]), existing)
    try:
        with store.session() as s:
            added = [Result(**dict(row)) for row in rows]
            s.add_all(added)
            s.flush()
            return [r.id for r in added]
    except IntegrityError:
        for row in rows:
            existing = find_result(store, str(row["events_sha256"]))
            if existing is not None:
                raise AlreadyImported(str(row["events_sha256"]), existing) from None
        raise


def list_results(store: Store) -> list[ResultRecord]:
    """Every imported result, oldest import first."""
    with store.session() as s:
        return [_record(row) for row in s.scalars(select(Result).order_by(Result.id))]
