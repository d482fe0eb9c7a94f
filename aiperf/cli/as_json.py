"""`--json` of the read commands: what scripts read instead of tables, with stable keys.

A key is added, never renamed or removed (docs/json.md lists them). Figures are plain numbers in
base units (operations, seconds, shares of 1), times are ISO 8601 in UTC, and `valid` is the same
word as the tables' column (aiperf.results.score.validity_label), so a script and a person read
one verdict.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any

from aiperf.history.query import RunPair
from aiperf.report.summary import for_review, verdict_text
from aiperf.results.energy import energy
from aiperf.results.overhead import overhead
from aiperf.results.score import validity_label
from aiperf.results.trial_figures import TrialFigures, run_trial_figures
from aiperf.store import CheckRecord, RunRecord, RunScoreRow


def dumps(value: Any) -> str:
    """JSON text for stdout: datetimes as ISO 8601, enums as their values."""
    return json.dumps(value, indent=2, default=_plain, sort_keys=False)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON")


def _interval(low: float | None, high: float | None) -> list[float] | None:
    """A 95% interval as [low, high] (None: the run measured too little to give one)."""
    return None if low is None or high is None else [low, high]


def run_json(record: RunRecord, *, with_trials: bool = False) -> dict[str, Any]:
    """One run: what `aiperf runs` lists, and with `with_trials` what `aiperf show` adds."""
    score = record.score
    out: dict[str, Any] = {
        "run_id": record.id,
        "created_at": record.created_at,
        "profile": record.profile,
        "status": str(record.status),
        "workers": record.workers,
        "budget_s": record.budget_s,
        "division": record.division,
        "ruleset": record.ruleset,
        "ops": score.ops if score else None,
        "regulated_score": score.regulated_score if score else None,
        "ops_interval": _interval(score.ops_low, score.ops_high) if score else None,
        "regulated_score_interval": _interval(score.regulated_low, score.regulated_high)
        if score
        else None,
        "best_val_accuracy": score.best_val_accuracy if score else None,
        "best_val_loss": score.best_val_loss if score else None,
        "valid": validity_label(score.valid, record.verified, bool(for_review(record)))
        if score
        else None,
        "verified": record.verified,
        "reasons": list(score.reasons) if score else [],
        "review": for_review(record),
        "series": record.series,
        "series_index": record.series_index,
    }
    if not with_trials:
        return out
    return out | _run_details(record)


def _run_details(record: RunRecord) -> dict[str, Any]:
    """What `aiperf show` adds to a run's line: its verdict, score, settings, feed, checks and
    every trial."""
    score = record.score
    figures = run_trial_figures(record)
    return {
        "verdict": verdict_text(record),
        "message": record.message,
        "score": score.to_dict() if score else None,
        "precision": record.precision,
        "backend": record.backend,
        "recipe": recipe_json(record),
        "peak_flops": record.peak_flops,
        "staging_s": record.staging_s,
        "data_feed": record.data_feed,
        "feed_rates": [dict(r) for r in record.feed_rates],
        "feed": _feed_json(record),
        "reference_rates": [dict(r) for r in record.reference_rates],
        "trials_vs_bare_keras": overhead(record).to_dict(),
        **_energy_json(record),
        "verification": checks_json(record.verification or ()),
        "trials": _trials_json(record, figures),
    }


def _trials_json(record: RunRecord, figures: Mapping[int, TrialFigures]) -> list[dict[str, Any]]:
    """Each trial of the run, its parent by number, as the trials themselves are named."""
    numbers: dict[int | None, int] = {t.id: t.number for t in record.trials}
    return [
        {
            "number": t.number,
            "status": str(t.status),
            "worker": t.worker,
            "operator": t.operator,
            "parent": numbers.get(t.parent_trial_id),
            "inherited_epoch": t.inherited_epoch,
            "parameters": t.parameters,
            "best_val_accuracy": t.best_val_accuracy,
            "best_val_loss": t.best_val_loss,
            "epochs": len(t.epochs),
            "train_ops_per_sample": t.train_ops_per_sample,
            "devices": t.devices,
            **figures[t.id].to_dict(),  # samples_per_s, tokens_per_s, mfu, compile_share
        }
        for t in record.trials
    ]


def recipe_json(record: RunRecord) -> dict[str, Any]:
    """How the run's trials trained, from its stored config (aiperf.train.recipe.SETTINGS): a
    setting the run recorded before it existed shows its default, as the run trained with it, and
    one the search chose per trial (the LM track's warm-up) the choices it had."""
    from aiperf.config import TrainConfig
    from aiperf.train.recipe import SETTINGS

    stored = record.config.get("train") or {}
    searched = (record.config.get("search") or {}).get("space") or {}
    defaults = TrainConfig.model_fields
    recipe = {k: stored.get(k, defaults[k].default) for k in SETTINGS}
    return recipe | {k: v for k, v in searched.items() if k in recipe and v is not None}


def _feed_json(record: RunRecord) -> dict[str, Any] | None:
    """Whether the run was feed-bound and by how much (aiperf.train.feedrate), or None."""
    from aiperf.train.feedrate import verdict

    judged = verdict(record.data_feed, record.feed_rates)
    return None if judged is None else judged.to_dict()


def _energy_json(record: RunRecord) -> dict[str, Any]:
    """The window's energy (aiperf.results.energy): the three figures a script ranks by, null
    where nothing was metered, and each node's meters or why it had none."""
    found = energy(record)
    return {
        "energy_joules": found.joules,
        "ops_per_watt": found.ops_per_watt,
        "energy_level": found.level,
        "energy": found.to_dict(),
    }


def checks_json(checks: Iterable[CheckRecord]) -> list[dict[str, Any]]:
    return [{"check": c.check, "passed": c.passed, "detail": c.detail} for c in checks]


def history_json(rows: Sequence[RunScoreRow]) -> list[dict[str, Any]]:
    """The run_scores view's rows, every column under its SQL name (README "SQL")."""
    return [dataclasses.asdict(row) for row in rows]


def compare_json(pair: RunPair) -> dict[str, Any]:
    """Both runs' rows and every compared figure with B's percent change from A."""
    return {
        "a": dataclasses.asdict(pair.a),
        "b": dataclasses.asdict(pair.b),
        "figures": [
            {
                "figure": f.figure,
                "unit": f.unit,
                "a": f.a,
                "b": f.b,
                "change_pct": f.change_pct,
            }
            for f in pair.figures
        ],
    }
