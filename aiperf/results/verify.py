"""`aiperf verify`: recompute a run's score from its records alone and check every figure.

Nothing stored as a total is trusted. Each trial's operations per sample are counted again from its
stored architecture with the counter (a simulated trainer's are modelled, so taken as stored: such a
result is invalid anyway); every epoch's samples are checked against the staged
dataset, its times against the timed window and the other epochs of its worker; the totals, the
rates, the best accuracy, the regulated score and the verdict are recomputed and compared with what
the score says (operations to the unit, rates to 1e-9 relative), and so are its model FLOPs
utilisation (over the workers' measured peaks) and its window utilisation (from the trials' phases);
the run's division and validity are judged again from its stored config by its ruleset; and each
meter's energy is held to its own readings (aiperf.results.energy_checks).

This module gathers the evidence and runs every check in order (CHECKS); the checkers of the
records are aiperf.results.record_checks, one per concern, each returning a named CheckRecord.
Every run of the flow ends with this.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from aiperf import paths, quality
from aiperf.config import BenchmarkConfig
from aiperf.results.data_checks import DATASET_PINNED, check_dataset_pinned
from aiperf.results.division import judging_rules
from aiperf.results.energy_checks import ENERGY_READINGS, check_energy_readings
from aiperf.results.evidence import Counter, Counts, Evaluator, Evidence
from aiperf.results.physical import CHECKS as PHYSICAL_CHECKS
from aiperf.results.record_checks import (
    BEST_ACCURACY,
    DIVISION,
    ELAPSED_TIME,
    EPOCHS_INSIDE_WINDOW,
    MODEL_FLOPS_UTILISATION,
    NO_OVERLAP_ON_A_WORKER,
    OPERATIONS_PER_SAMPLE,
    OPERATIONS_PER_SECOND,
    REGULATED_SCORE,
    SAMPLES_WITHIN_DATASET,
    TOTAL_OPERATIONS,
    VALIDITY_RULES,
    WINDOW_UTILISATION,
    check_best_accuracy,
    check_division,
    check_elapsed_time,
    check_epochs_inside_window,
    check_model_flops_utilisation,
    check_no_overlap_on_a_worker,
    check_operations_per_sample,
    check_operations_per_second,
    check_regulated_score,
    check_samples_within_dataset,
    check_total_operations,
    check_validity_rules,
    check_window_utilisation,
    peak_flops,
    simulated,
)
from aiperf.results.remeasure import ACCURACY_REMEASURED, check_accuracy_remeasured
from aiperf.results.score import EpochWork, compute_score
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import (
    CheckRecord,
    DatasetRecord,
    RunReads,
    RunRecord,
    RunWork,
    TrialRecord,
    window_seconds,
)


def count_architecture(architecture: dict) -> Counts:
    """Operations per sample of a stored architecture, counted afresh from the model it builds.
    (A dropout layer before the head counts 0 in both conventions, so it is left out.) A
    transformer spec (the LM track) is built as its trial built it, and counted per sequence."""
    from aiperf.arch import build_model, network_from_dict
    from aiperf.arch.transformer import TransformerSpec, build_transformer, is_transformer
    from aiperf.ops import count_all

    if is_transformer(architecture):
        model = build_transformer(TransformerSpec.from_dict(architecture), seed=0)
    else:
        model = build_model(network_from_dict(architecture))
    counts = count_all(model)
    counted, tensor = counts["aiperf"], counts["tensor"]
    return (
        counted.train_per_sample,
        counted.eval_per_sample,
        tensor.train_per_sample,
        tensor.eval_per_sample,
    )


def verify_run(
    store: RunReads,
    run_id: int,
    counter: Counter = count_architecture,
    out: str | None = None,
    evaluator: Evaluator | None = None,
) -> list[CheckRecord]:
    """Every check of one run, in order; the run passes when every one passes. `out`: where the
    run's --out folder is now (default: as its config says, relative to where it was started).
    `evaluator`: where the kept weights are evaluated again (default: in this process)."""
    evidence = replace(gather(store, run_id, counter, out), evaluator=evaluator)
    return [check(evidence) for check in CHECKS.values()]


def verify_records(
    run: RunRecord,
    dataset: DatasetRecord | None,
    counter: Counter = count_architecture,
    folder: Path | None = None,
    data_folder: Path | None = None,
) -> list[CheckRecord]:
    """The same checks on records that come from elsewhere: a result package's event log
    (aiperf.report.package), rebuilt without a database (aiperf.results.mllog.rebuild); `folder`
    holds its files (the package's), `data_folder` is where its data is staged again."""
    evidence = gather_records(run, dataset, counter, folder, data_folder)
    return [check(evidence) for check in CHECKS.values()]


def gather(
    store: RunReads, run_id: int, counter: Counter = count_architecture, out: str | None = None
) -> Evidence:
    """A run of the database, its files where its stored config says (its folder under --out),
    or under `out` when given."""
    run = store.get_run(run_id)
    out, db = out or run.config.get("out"), run.config.get("db")
    folder = paths.run_folder(out, db, run.id) if out and db else None
    data = Path(out) / "data" if out else None
    return gather_records(run, store.run_dataset(run_id), counter, folder, data)


def gather_records(
    run: RunRecord,
    dataset: DatasetRecord | None,
    counter: Counter = count_architecture,
    folder: Path | None = None,
    data_folder: Path | None = None,
) -> Evidence:
    if run.score is None or run.search_started_at is None or run.search_ended_at is None:
        raise ValueError(f"run {run.id} has no score to verify (it is {run.status})")
    config = BenchmarkConfig.model_validate(run.config)
    cache: dict[str, Counts] = {}
    counts = {}
    for trial in run.trials:
        if trial.train_ops_per_sample is not None:
            if simulated(config):
                counts[trial.id] = _stored_counts(trial)
                continue
            key = json.dumps(trial.architecture, sort_keys=True)
            if key not in cache:
                cache[key] = counter(trial.architecture)
            counts[trial.id] = cache[key]
    elapsed = window_seconds(run.windows)  # the sum of its segments, as the score's seconds are
    work = [
        EpochWork(
            e.samples_trained,
            e.samples_evaluated,
            *counts[t.id],
            trial=t.id,
            seconds=(e.ended_at - e.started_at).total_seconds(),
        )
        for t in run.trials
        if t.id in counts
        for e in t.epochs
    ]
    complete = [e for t in run.trials for e in t.epochs if e.complete]
    rules = judging_rules(config)
    recomputed = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=elapsed,
            best_val_accuracy=quality.best(quality.ACCURACY, (e.val_accuracy for e in complete)),
            val_samples=dataset.val_samples if dataset else 0,
            best_val_loss=quality.best(quality.LOSS, (e.val_loss for e in complete)),
            vocab_size=dataset.classes if dataset else 0,
            trials_completed=sum(t.status == TrialStatus.COMPLETED for t in run.trials),
            budget_s=run.budget_s,
            workers=run.workers,
            peak_flops=peak_flops(run),
            stepping_s=tuple(t.phases.stepping_s for t in run.trials if t.phases is not None)
            or None,
        ),
        rules=rules,
        simulated=config.train.trainer == "simulated",
        recovered=run.stored_status == RunStatus.INTERRUPTED,
    )
    return Evidence(run, config, dataset, counts, elapsed, recomputed, folder, data_folder)


def _stored_counts(trial: TrialRecord) -> Counts:
    return (
        trial.train_ops_per_sample or 0,
        trial.eval_ops_per_sample or 0,
        trial.tensor_train_ops_per_sample or 0,
        trial.tensor_eval_ops_per_sample or 0,
    )


# Every check, by the name it reports, in the order it runs.
CHECKS: dict[str, Callable[[Evidence], CheckRecord]] = {
    OPERATIONS_PER_SAMPLE: check_operations_per_sample,
    SAMPLES_WITHIN_DATASET: check_samples_within_dataset,
    EPOCHS_INSIDE_WINDOW: check_epochs_inside_window,
    NO_OVERLAP_ON_A_WORKER: check_no_overlap_on_a_worker,
    ELAPSED_TIME: check_elapsed_time,
    TOTAL_OPERATIONS: check_total_operations,
    OPERATIONS_PER_SECOND: check_operations_per_second,
    BEST_ACCURACY: check_best_accuracy,
    REGULATED_SCORE: check_regulated_score,
    DIVISION: check_division,
    VALIDITY_RULES: check_validity_rules,
    MODEL_FLOPS_UTILISATION: check_model_flops_utilisation,
    WINDOW_UTILISATION: check_window_utilisation,
    DATASET_PINNED: check_dataset_pinned,
    ACCURACY_REMEASURED: check_accuracy_remeasured,
    **PHYSICAL_CHECKS,  # epochs within devices, workers within their peaks and in the system
    ENERGY_READINGS: check_energy_readings,
}
