"""A run's score as rows: one source for the terminal table, the Prefect artifacts and `aiperf show`."""

from __future__ import annotations

from aiperf.score import ScoreResult, format_ops


def score_rows(run_id: int, profile: str, workers: int, budget_s: float, score: ScoreResult) -> list[dict[str, str]]:
    accuracy = "-" if score.best_val_accuracy is None else f"{score.best_val_accuracy:.4f}"
    verdict = "valid" if score.valid else "invalid: " + "; ".join(score.reasons)
    return [
        {"figure": "run", "value": str(run_id)},
        {"figure": "profile", "value": profile},
        {"figure": "workers", "value": str(workers)},
        {"figure": "budget", "value": f"{budget_s:g} s"},
        {"figure": "elapsed", "value": f"{score.elapsed_s:.1f} s"},
        {"figure": "OPS (aiperf convention)", "value": f"{format_ops(score.ops)}OPS ({score.ops:.6g})"},
        {"figure": "regulated score", "value": f"{format_ops(score.regulated_score)}OPS ({score.regulated_score:.6g})"},
        {"figure": "best val accuracy", "value": accuracy},
        {"figure": "tensor FLOP/s", "value": f"{format_ops(score.tensor_ops)}FLOP/s"},
        {"figure": "total operations", "value": f"{score.total_ops:.6g}"},
        {"figure": "trials completed", "value": str(score.trials_completed)},
        {"figure": "samples trained / evaluated", "value": f"{score.samples_trained} / {score.samples_evaluated}"},
        {"figure": "verdict", "value": verdict},
    ]


def markdown(rows: list[dict[str, str]]) -> str:
    lines = ["# aiperf score", "", "| figure | value |", "| --- | --- |"]
    lines += [f"| {r['figure']} | {r['value'].replace('|', '/')} |" for r in rows]
    return "\n".join(lines) + "\n"
