"""A system's history of scores and side-by-side comparison of two runs.

Both read the run_scores view (migration 0002), so `aiperf history` and `aiperf compare` show the
figures a user gets from SQL, on SQLite and PostgreSQL alike. Nothing here prints: the CLI and the
HTML report render what these functions return.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiperf.errors import UserError
from aiperf.store import RunReads, RunScoreRow

SPARK = "▁▂▃▄▅▆▇█"


def resolve_system(store: RunReads, term: str | None) -> int | None:
    """A system id from an id, a hostname or a fingerprint prefix; None means every system."""
    if term is None:
        return None
    found = store.find_systems(term)
    if not found:
        known = ", ".join(
            f"{s.id} ({s.hostname}, {s.fingerprint[:8]})" for s in store.find_systems()
        )
        raise UserError(
            f"--system {term!r} matches no system; use an id, hostname or fingerprint prefix"
            + (f" of: {known}" if known else " (the database has no runs yet)")
        )
    if len(found) > 1:
        listed = ", ".join(f"{s.id} ({s.fingerprint[:8]})" for s in found)
        raise UserError(
            f"--system {term!r} matches {len(found)} systems ({listed}); give the id or a "
            "longer fingerprint prefix"
        )
    return found[0].id


def history(
    store: RunReads, *, system: str | None = None, profile: str | None = None
) -> list[RunScoreRow]:
    """Scored runs, oldest first, for one system and/or profile (all when not given)."""
    return store.run_scores(system_id=resolve_system(store, system), profile=profile)


def workloads(
    rows: list[RunScoreRow],
) -> dict[tuple[str, str | None, str | None], list[RunScoreRow]]:
    """Rows grouped by (profile, division, config hash), each group oldest first: like with like."""
    groups: dict[tuple[str, str | None, str | None], list[RunScoreRow]] = {}
    for row in rows:
        groups.setdefault((row.profile, row.division, row.config_hash), []).append(row)
    return groups


def sparkline(values: list[float]) -> str:
    """A one-line picture of a series (the trend of OPS in `aiperf history`)."""
    if not values:
        return ""
    low, high = min(values), max(values)
    if high == low:
        return SPARK[len(SPARK) // 2] * len(values)
    return "".join(SPARK[round((v - low) / (high - low) * (len(SPARK) - 1))] for v in values)


def percent_change(before: float | None, after: float | None) -> float | None:
    """(after - before) / before in percent; None when either is missing or before is 0."""
    if before is None or after is None or before == 0:
        return None
    return 100.0 * (after - before) / before


@dataclass(frozen=True)
class Comparison:
    """One figure of two runs side by side."""

    figure: str
    a: float | None
    b: float | None
    unit: str

    @property
    def change_pct(self) -> float | None:
        return percent_change(self.a, self.b)


# (figure, column of run_scores, unit): what `aiperf compare` lines up.
COMPARED = (
    ("OPS", "ops", "OPS"),
    ("regulated score", "regulated_score", "OPS"),
    ("tensor FLOP/s", "tensor_ops", "FLOP/s"),
    ("best val accuracy", "best_val_accuracy", ""),
    ("best val loss", "best_val_loss", "nats/token"),  # the LM track's quality
    ("total operations", "total_ops", "ops"),
    ("elapsed", "elapsed_s", "s"),
    ("trials completed", "trials_completed", ""),
    ("workers", "workers", ""),
    ("budget", "budget_s", "s"),
)


@dataclass(frozen=True)
class RunPair:
    a: RunScoreRow
    b: RunScoreRow
    figures: list[Comparison]


def compare(store: RunReads, run_a: int, run_b: int) -> RunPair:
    """Two scored runs side by side, with B's percent difference from A for every figure."""
    rows = {r.run_id: r for r in store.run_scores(run_ids=[run_a, run_b])}
    for run_id in (run_a, run_b):
        if run_id not in rows:
            raise UserError(
                f"run {run_id} has no score (it is missing, still running or failed); "
                "list scored runs with `aiperf history`"
            )
    a, b = rows[run_a], rows[run_b]
    if (a.division, a.config_hash) != (b.division, b.config_hash):
        raise UserError(
            f"runs {run_a} and {run_b} ran different workloads ({a.division} {(a.config_hash or '-')[:8]} "
            f"vs {b.division} {(b.config_hash or '-')[:8]}): only runs of one division and config are "
            "compared; `aiperf history` lists both"
        )
    figures = [
        Comparison(name, _number(getattr(a, column)), _number(getattr(b, column)), unit)
        for name, column, unit in COMPARED
    ]
    return RunPair(a=a, b=b, figures=figures)


def _number(value: float | int | None) -> float | None:
    return None if value is None else float(value)
