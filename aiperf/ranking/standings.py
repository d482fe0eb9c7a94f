"""The ranked list: imported results grouped by what may be compared, one row per system.

A group is one division, one ruleset and one workload (profile and workload hash): results of
different ones measure different things and are never ranked together. Within a group each system
has one row: its best unit, where a unit is a series of repeated runs (one series id) or
a run of its own, summarised by the ruleset's series rule (aiperf.results.series: MLPerf HPC's
manner from rulesets 1.3, else the median).

Only a qualified unit gets a rank, as MLPerf and TOP500 rank only results that meet their rules:
every run valid and verified, and in the closed division as many runs as the rule asks. Qualified
rows are ranked by their OPS's 95% intervals (aiperf.results.uncertainty: a run's own from what it
measured, a series' across its runs): a row ranks above another only when its whole interval lies
above the other's, so rows whose intervals overlap are tied and share a rank (1, 1, 3); a row
without an interval is its one figure, so equal figures tie too. Within a rank, the higher ranked
OPS first, then the earlier, then by name. Every other row stays listed below them, with no rank
and the reason it has none (`invalid: too short`, `unverified`, `closed: 1 of 5 runs`), so a site
sees why.

A system is its submitter, its name and its hardware (nodes, accelerators, cores), as MLPerf lists
a submitter's system at each scale: two sites' machines that both fall back to the hostname `node1`,
or one machine measured on 4 and on 64 nodes, are rows of their own. A system's best unit is its
qualified unit of highest ranked OPS, else its unqualified one of highest ranked OPS.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from aiperf.results.series import SeriesRule, SeriesSummary, enough_runs, series_rule, summarise
from aiperf.results.uncertainty import Interval, ranks
from aiperf.store.results_models import ResultRecord

BY = ("ops", "ops-per-watt")  # what a list is ranked by
NOT_METERED = "not metered"


@dataclass(frozen=True)
class GroupKey:
    """What a ranking may compare: one division, ruleset, profile and workload hash; ranked by
    efficiency, one energy class too (the level and meters, ResultRecord.energy_class), "not
    metered" for the results without one."""

    division: str | None
    ruleset: str | None
    profile: str
    workload_hash: str | None
    energy: str | None = None

    def heading(self) -> str:
        """The group's heading line."""
        workload = (self.workload_hash or "-")[:12]
        energy = "" if self.energy is None else f", energy {self.energy}"
        return (
            f"{self.division or 'no'} division, {self.ruleset or 'no ruleset'}, profile "
            f"{self.profile}, workload {workload}{energy}"
        )


@dataclass(frozen=True)
class Standing:
    """One row: a system's best unit in its group; ranked only when qualified."""

    rank: int | None  # None: not qualified, see `reason`
    system: str
    submitter: str | None
    status: str | None  # MLPerf's availability
    nodes: int
    accelerator_model: str | None  # None: CPU only
    accelerators: int
    cores: int | None
    ops: SeriesSummary
    regulated_score: SeriesSummary
    ops_interval: Interval | None  # 95%: a run's own, a series' across its runs (None: unknown)
    regulated_interval: Interval | None
    mfu: float | None  # the median of its runs' MFU (None where none was measured)
    ops_per_watt: float | None  # the median of its runs' operations per joule (None: not metered)
    key: GroupKey
    date: datetime  # its latest run's
    series: str | None
    valid: bool  # every run valid
    enough_runs: bool  # as many runs as a ranked closed result needs (always true when open)
    verified: bool
    reason: str | None  # why it is not ranked, in a few words (None: qualified)
    reasons: tuple[str, ...]  # every rule its runs break, in full
    result_ids: tuple[int, ...]
    run_ids: tuple[int, ...]
    description: dict[str, Any] | None
    tied: bool = False  # another ranked row's interval overlaps: they share a rank

    @property
    def system_key(self) -> tuple[Any, ...]:
        """What tells two systems apart in a group: one row each."""
        hardware = (self.nodes, self.accelerator_model, self.accelerators, self.cores)
        return (self.submitter, self.system, *hardware)

    @property
    def qualified(self) -> bool:
        """Ranked: every run valid and verified, and enough of them for a closed result."""
        return self.valid and self.enough_runs and self.verified

    @property
    def rank_text(self) -> str:
        """Its rank, or "-" for a row that is not ranked."""
        if self.rank is None:
            return "-"
        return f"={self.rank}" if self.tied else str(self.rank)

    @property
    def runs(self) -> int:
        return len(self.result_ids)

    @property
    def valid_word(self) -> str:
        """yes; no (a run breaks a rule); few (a closed series short of the rule's runs). Whether
        it verified is `verified`'s, apart."""
        if not self.valid:
            return "no"
        return "yes" if self.enough_runs else "few"

    def accelerators_text(self) -> str:
        """ "A100 x 8", or "CPU" when it has none."""
        if not self.accelerators:
            return "CPU"
        return f"{self.accelerator_model or 'unknown'} x {self.accelerators}"


@dataclass(frozen=True)
class Group:
    key: GroupKey
    rule: SeriesRule | None
    standings: tuple[Standing, ...]


def _units(results: Iterable[ResultRecord]) -> list[list[ResultRecord]]:
    """A series' runs together; a run of its own alone."""
    by_series: dict[str, list[ResultRecord]] = defaultdict(list)
    units: list[list[ResultRecord]] = []
    for r in results:
        if r.series:
            by_series[r.series].append(r)
        else:
            units.append([r])
    units += [
        sorted(runs, key=lambda r: (r.series_index or 0, r.id)) for runs in by_series.values()
    ]
    return units


def short_reason(reason: str) -> str:
    """A broken rule in a few words: its name before the colon ("too short: budget 8 s is under
    the profile's minimum 60 s" -> "too short")."""
    return reason.split(":", 1)[0].strip()


def unranked_reason(
    *,
    valid: bool,
    verified: bool,
    reasons: Sequence[str],
    closed: bool,
    runs: int,
    rule: SeriesRule | None,
) -> str | None:
    """Why a unit is not ranked, in a few words ("unverified", "invalid: too short", "closed: 1 of
    5 runs", joined by "; " when more than one holds); None when it is qualified."""
    why = []
    if not verified:
        why.append("unverified")
    if not valid:
        short = list(dict.fromkeys(short_reason(r) for r in reasons if r.strip()))
        why.append("invalid: " + ", ".join(short) if short else "invalid")
    if closed and not enough_runs(runs, rule):
        needed = 1 if rule is None else rule.runs
        why.append(f"closed: {runs} of {needed} runs")
    return "; ".join(why) or None


def _standing(unit: Sequence[ResultRecord], key: GroupKey, rule: SeriesRule | None) -> Standing:
    first = unit[0]
    mfus = [r.mfu for r in unit if r.mfu is not None]
    efficiency = [r.ops_per_watt for r in unit if r.ops_per_watt is not None]
    valid = all(r.valid for r in unit)
    verified = all(r.verified for r in unit)
    reasons = tuple(dict.fromkeys(x for r in unit if not r.valid for x in r.reasons or ()))
    closed = key.division == "closed"
    ops = summarise([r.ops for r in unit], rule)
    regulated = summarise([r.regulated_score for r in unit], rule)
    return Standing(
        rank=None,
        system=first.system_name,
        submitter=next((r.submitter for r in unit if r.submitter), None),
        status=next((r.status for r in unit if r.status), None),
        nodes=max(r.nodes for r in unit),
        accelerator_model=first.accelerator_model,
        accelerators=max(r.accelerators for r in unit),
        cores=first.cores,
        ops=ops,
        regulated_score=regulated,
        ops_interval=_unit_interval(unit, "ops", ops),
        regulated_interval=_unit_interval(unit, "regulated", regulated),
        mfu=statistics.median(mfus) if mfus else None,
        ops_per_watt=statistics.median(efficiency) if len(efficiency) == len(unit) else None,
        key=key,
        date=max(r.run_date for r in unit),
        series=first.series,
        valid=valid,
        enough_runs=not closed or enough_runs(len(unit), rule),
        verified=verified,
        reason=unranked_reason(
            valid=valid,
            verified=verified,
            reasons=reasons,
            closed=closed,
            runs=len(unit),
            rule=rule,
        ),
        reasons=reasons,
        result_ids=tuple(r.id for r in unit),
        run_ids=tuple(r.run_id for r in unit),
        description=first.system_description,
    )


def _unit_interval(
    unit: Sequence[ResultRecord], measure: str, summary: SeriesSummary
) -> Interval | None:
    """A unit's 95% interval of `measure` (ops, regulated): a series' across its runs (its
    summary's), a single run's own as it measured it (None where it has none)."""
    if len(unit) > 1:
        low, high = summary.low, summary.high
    else:
        low, high = getattr(unit[0], f"{measure}_low"), getattr(unit[0], f"{measure}_high")
    return None if low is None or high is None else Interval(low, high)


def _ranked(qualified: Sequence[Standing], by: str) -> list[Standing]:
    """The qualified rows with their ranks by interval (aiperf.results.uncertainty.ranks), tied
    where they share one, in rank order; by efficiency, by its figure (it has no interval)."""
    if by == "ops-per-watt":
        intervals = [Interval(s.ops_per_watt or 0.0, s.ops_per_watt or 0.0) for s in qualified]
    else:
        intervals = [s.ops_interval or Interval(s.ops.ranked, s.ops.ranked) for s in qualified]
    given = ranks(intervals)
    ranked = [
        replace(s, rank=rank, tied=given.count(rank) > 1)
        for s, rank in zip(qualified, given, strict=True)
    ]
    return sorted(ranked, key=lambda s: (s.rank, *_order(s, by)))


def _order(s: Standing, by: str = "ops") -> tuple[Any, ...]:
    figure = (s.ops_per_watt or 0.0) if by == "ops-per-watt" else s.ops.ranked
    return (not s.qualified, -figure, s.date, s.system)


def rank(
    results: Iterable[ResultRecord],
    *,
    division: str | None = None,
    ruleset: str | None = None,
    profile: str | None = None,
    by: str = "ops",
) -> list[Group]:
    """The groups of the list in a stable order (division, ruleset, profile, workload), each's
    qualified rows ranked from 1 and its others after them, unranked; only the results matching
    the filters given. `by` "ops-per-watt": by efficiency, each energy class a group of its own,
    and the results without one in a group where none is ranked ("energy not metered")."""
    grouped: dict[GroupKey, list[ResultRecord]] = defaultdict(list)
    for r in results:
        if division is not None and r.division != division:
            continue
        if ruleset is not None and r.ruleset != ruleset:
            continue
        if profile is not None and r.profile != profile:
            continue
        energy = (r.energy_class() or NOT_METERED) if by == "ops-per-watt" else None
        grouped[GroupKey(r.division, r.ruleset, r.profile, r.workload_hash, energy)].append(r)
    groups = []
    for key in sorted(grouped, key=lambda k: tuple(v or "" for v in vars(k).values())):
        rule = series_rule(key.ruleset)
        by_system: dict[tuple[Any, ...], list[Standing]] = defaultdict(list)
        for unit in _units(grouped[key]):
            standing = _standing(unit, key, rule)
            by_system[standing.system_key].append(standing)
        order = partial(_order, by=by)
        best = sorted((min(units, key=order) for units in by_system.values()), key=order)
        if key.energy == NOT_METERED:  # nothing to rank them by: each says so
            best = [replace(s, reason=s.reason or "energy not metered") for s in best]
            groups.append(Group(key, rule, tuple(best)))
            continue
        ranked = _ranked([q for q in best if q.qualified], by)
        unranked = tuple(s for s in best if not s.qualified)
        groups.append(Group(key, rule, (*ranked, *unranked)))
    return groups


# --- JSON and CSV ---------------------------------------------------------------------------------


def _summary_json(summary: SeriesSummary) -> dict[str, Any]:
    return summary.to_dict()


def _interval_json(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [interval.low, interval.high]


def standing_json(s: Standing) -> dict[str, Any]:
    """One row with stable keys (docs/json.md, `aiperf results list --json`)."""
    return {
        "rank": s.rank,
        "system": s.system,
        "submitter": s.submitter,
        "status": s.status,
        "nodes": s.nodes,
        "accelerator_model": s.accelerator_model,
        "accelerators": s.accelerators,
        "cores": s.cores,
        "ops": s.ops.ranked,
        "regulated_score": s.regulated_score.ranked,
        "mfu": s.mfu,
        "ops_per_watt": s.ops_per_watt,
        "energy": s.key.energy,
        "division": s.key.division,
        "ruleset": s.key.ruleset,
        "profile": s.key.profile,
        "workload_hash": s.key.workload_hash,
        "date": s.date,
        "runs": s.runs,
        "series": s.series,
        "ops_interval": _interval_json(s.ops_interval),
        "regulated_score_interval": _interval_json(s.regulated_interval),
        "tied": s.tied,
        "ops_summary": _summary_json(s.ops),
        "regulated_score_summary": _summary_json(s.regulated_score),
        "valid": s.valid_word,
        "verified": s.verified,
        "reason": s.reason,
        "reasons": list(s.reasons),
        "result_ids": list(s.result_ids),
        "run_ids": list(s.run_ids),
    }


def groups_json(groups: Sequence[Group]) -> list[dict[str, Any]]:
    return [
        {
            "division": g.key.division,
            "ruleset": g.key.ruleset,
            "profile": g.key.profile,
            "workload_hash": g.key.workload_hash,
            "series_rule": None if g.rule is None else g.rule.describe(),
            "rows": [standing_json(s) for s in g.standings],
        }
        for g in groups
    ]


# The columns of MLPerf's result summarizer (mlcommons/logging, mlperf_logging/result_summarizer:
# division, availability, submitter, system, number_of_nodes, host_processor_model_name,
# host_processors_count, accelerator_model_name, accelerators_count, framework, notes, then one
# column per benchmark's score), then aiperf's own.
CSV_COLUMNS = (
    "division",
    "availability",
    "submitter",
    "system",
    "number_of_nodes",
    "host_processor_model_name",
    "host_processors_count",
    "accelerator_model_name",
    "accelerators_count",
    "framework",
    "notes",
    "ruleset",
    "profile",
    "workload_hash",
    "rank",
    "reason",
    "ops",
    "regulated_score",
    "mfu",
    "runs",
    "ops_median",
    "ops_min",
    "ops_max",
    "ops_cv",
    "ops_low",
    "ops_high",
    "date",
    "valid",
    "verified",
    "ops_per_watt",
    "energy",
)


def _described(s: Standing, field: str) -> str:
    value = (s.description or {}).get(field)
    return "" if value is None else str(value)


def _processors(s: Standing) -> str:
    """Host processors across the nodes (sockets), as the summarizer counts them."""
    nodes = (s.description or {}).get("nodes") or []
    counts = []
    for n in nodes:
        try:
            counts.append(int(n.get("host_processors_per_node") or 0))
        except (TypeError, ValueError, AttributeError):
            return ""
    return str(sum(counts)) if counts else ""


def to_csv(groups: Sequence[Group]) -> str:
    """One line per row of the list (one per system and workload), MLPerf summarizer's columns
    first; figures in base units (OPS), the date in ISO 8601. An unranked row's rank is empty and
    its `reason` says why."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for g in groups:
        for s in g.standings:
            writer.writerow(
                [
                    s.key.division or "",
                    s.status or "",
                    s.submitter or "",
                    s.system,
                    s.nodes,
                    _described(s, "host_processor_model_name"),
                    _processors(s),
                    s.accelerator_model or "N/A",
                    s.accelerators,
                    _described(s, "framework"),
                    "",
                    s.key.ruleset or "",
                    s.key.profile,
                    s.key.workload_hash or "",
                    "" if s.rank is None else s.rank,
                    s.reason or "",
                    repr(s.ops.ranked),
                    repr(s.regulated_score.ranked),
                    "" if s.mfu is None else repr(s.mfu),
                    s.runs,
                    repr(s.ops.median),
                    repr(s.ops.minimum),
                    repr(s.ops.maximum),
                    repr(s.ops.cv),
                    "" if s.ops_interval is None else repr(s.ops_interval.low),
                    "" if s.ops_interval is None else repr(s.ops_interval.high),
                    s.date.isoformat(),
                    s.valid_word,
                    "yes" if s.verified else "no",
                    "" if s.ops_per_watt is None else repr(s.ops_per_watt),
                    s.key.energy or "",
                ]
            )
    return out.getvalue()
