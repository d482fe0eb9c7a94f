"""The checkers of `aiperf verify` over a run's records, one per concern, each returning a named
CheckRecord (the names are the constants below: what tests, logs and `aiperf verify` print).
Each reads the Evidence (aiperf.results.evidence) that aiperf.results.verify gathers and
recomputes: operations per sample against the recount, every epoch against the dataset, the
window and its worker's other epochs, the totals, rates, best accuracy, regulated score, the
division and the verdict, MFU and window utilisation. Apart from verify so that the gathering and
the order of the checks read in one short module, the checks' logic in this one.
"""

from __future__ import annotations

import math
from datetime import timedelta

from aiperf.config import BenchmarkConfig
from aiperf.results.division import CLOSED, batch_problem, classify
from aiperf.results.evidence import Evidence
from aiperf.results.score import rules_reasons
from aiperf.rules import load_ruleset
from aiperf.store import CheckRecord, RunRecord, TrialRecord
from aiperf.store.records import ScoreResult

OPERATIONS_PER_SAMPLE = "operations_per_sample"
SAMPLES_WITHIN_DATASET = "samples_within_dataset"
EPOCHS_INSIDE_WINDOW = "epochs_inside_window"
NO_OVERLAP_ON_A_WORKER = "no_overlap_on_a_worker"
ELAPSED_TIME = "elapsed_time"
TOTAL_OPERATIONS = "total_operations"
OPERATIONS_PER_SECOND = "operations_per_second"
BEST_ACCURACY = "best_accuracy"
REGULATED_SCORE = "regulated_score"
DIVISION = "division"
VALIDITY_RULES = "validity_rules"
MODEL_FLOPS_UTILISATION = "model_flops_utilisation"
WINDOW_UTILISATION = "window_utilisation"

RELATIVE = 1e-9  # rates must agree to this
CLOCK_SKEW_S = 1.0  # workers on other nodes stamp epochs with their own clocks
# A 95% interval's ends must agree to this: they rest on the spread of the trials' rates over
# their epochs' seconds, which the database keeps to the microsecond and the event log as float
# Unix seconds, so a recount from either moves them in the last digits, where rates do not move.
INTERVAL_RELATIVE = 1e-3


def simulated(config: BenchmarkConfig) -> bool:
    """A simulated trainer's trials report modelled operations per sample (aiperf.train.simulated):
    no model was built, so there is nothing to recount. Everything else is still checked, and such a
    result is invalid by every ruleset (aiperf.results.score.verdict), so trusting them here cannot
    make a result valid."""
    return config.train.trainer == "simulated"


def peak_flops(run: RunRecord) -> float | None:
    """MFU's divisor, from the workers' own measurements (runs.worker_peaks), not their stored sum."""
    if not run.worker_peaks:
        return None
    return float(sum(float(peak.get("flops") or 0.0) for peak in run.worker_peaks))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RELATIVE, abs_tol=0.0) or a == b


def _interval_problems(stored: ScoreResult, again: ScoreResult, figure: str) -> list[str]:
    """Where the stored 95% interval of `figure` ("ops", "regulated") differs from the recomputed
    one; a score recorded before scores kept intervals (None) has nothing to compare."""
    problems = []
    for end in ("low", "high"):
        said, found = getattr(stored, f"{figure}_{end}"), getattr(again, f"{figure}_{end}")
        if said is None:
            continue
        if found is None or not math.isclose(said, found, rel_tol=INTERVAL_RELATIVE):
            problems.append(
                f"{figure} interval's {end} end: score says {said!r}, recomputed {found!r}"
            )
    return problems


# --- the checkers ---------------------------------------------------------------------------------


def check_operations_per_sample(ev: Evidence) -> CheckRecord:
    if simulated(ev.config):
        return CheckRecord(
            OPERATIONS_PER_SAMPLE,
            True,
            f"simulated trainer: {len(ev.counts)} trials' operations were modelled, not counted "
            "(nothing to recount; the result is invalid)",
        )
    problems = []
    for t in ev.run.trials:
        if t.id not in ev.counts:
            continue
        stored = (
            t.train_ops_per_sample,
            t.eval_ops_per_sample,
            t.tensor_train_ops_per_sample,
            t.tensor_eval_ops_per_sample,
        )
        if stored != ev.counts[t.id]:
            problems.append(
                f"trial {t.trial_key} records {stored}, its architecture counts {ev.counts[t.id]}"
            )
    return CheckRecord.of(
        OPERATIONS_PER_SAMPLE,
        problems,
        f"{len(ev.counts)} trials recounted from their architectures",
    )


def _batch_size(trial: TrialRecord) -> int | None:
    value = trial.hyperparameters.get("batch_size")
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def check_samples_within_dataset(ev: Evidence) -> CheckRecord:
    if ev.dataset is None:
        return CheckRecord(SAMPLES_WITHIN_DATASET, False, "the run has no recorded dataset")
    problems = []
    for t in ev.run.trials:
        batch = _batch_size(t)
        for e in t.epochs:
            where = f"trial {t.trial_key} epoch {e.epoch}"
            if e.samples_trained > ev.dataset.train_samples:
                problems.append(
                    f"{where} trained {e.samples_trained} samples of {ev.dataset.train_samples}"
                )
            if e.samples_evaluated > ev.dataset.val_samples:
                problems.append(
                    f"{where} evaluated {e.samples_evaluated} samples of {ev.dataset.val_samples}"
                )
            if batch and e.samples_trained % batch:
                problems.append(
                    f"{where} trained {e.samples_trained} samples, not whole batches of {batch}"
                )
    return CheckRecord.of(
        SAMPLES_WITHIN_DATASET,
        problems,
        f"every epoch within {ev.dataset.train_samples} train / {ev.dataset.val_samples} val samples",
    )


def check_epochs_inside_window(ev: Evidence) -> CheckRecord:
    skew = timedelta(seconds=CLOCK_SKEW_S)
    segments = [
        (w.started_at - skew, w.ended_at + skew) for w in ev.run.windows if w.ended_at is not None
    ]
    problems = [
        f"trial {t.trial_key} epoch {e.epoch} ran {e.started_at:%H:%M:%S.%f}-{e.ended_at:%H:%M:%S.%f}, "
        f"outside the window"
        for t in ev.run.trials
        for e in t.epochs
        if e.ended_at < e.started_at
        or not any(start <= e.started_at and e.ended_at <= end for start, end in segments)
    ]
    return CheckRecord.of(
        EPOCHS_INSIDE_WINDOW, problems, f"every epoch inside the {ev.elapsed_s:.1f} s window"
    )


def check_no_overlap_on_a_worker(ev: Evidence) -> CheckRecord:
    by_worker: dict[str, list] = {}
    for t in ev.run.trials:
        for e in t.epochs:
            by_worker.setdefault(t.worker or "?", []).append(
                (e.started_at, e.ended_at, t.trial_key, e.epoch)
            )
    problems = []
    for worker, spans in by_worker.items():
        spans.sort()
        for (_s1, e1, k1, n1), (s2, _e2, k2, n2) in zip(spans, spans[1:], strict=False):
            if s2 < e1:
                problems.append(
                    f"on {worker}, trial {k2} epoch {n2} starts before trial {k1} epoch {n1} ends"
                )
    return CheckRecord.of(
        NO_OVERLAP_ON_A_WORKER, problems, f"{len(by_worker)} workers, one epoch at a time each"
    )


def check_elapsed_time(ev: Evidence) -> CheckRecord:
    stored = ev.stored.elapsed_s
    ok = abs(stored - ev.elapsed_s) <= 1e-6
    return CheckRecord.of(
        ELAPSED_TIME,
        [] if ok else [f"score says {stored!r} s, the window is {ev.elapsed_s!r} s"],
        f"{ev.elapsed_s:.6f} s, the sum of the window's segments",
    )


def check_total_operations(ev: Evidence) -> CheckRecord:
    stored, again = ev.stored, ev.recomputed
    problems = []
    if float(stored.total_ops) != float(again.total_ops):
        problems.append(
            f"score says {stored.total_ops} operations, the epochs add up to {again.total_ops}"
        )
    if (stored.samples_trained, stored.samples_evaluated) != (
        again.samples_trained,
        again.samples_evaluated,
    ):
        problems.append(
            f"score says {stored.samples_trained}/{stored.samples_evaluated} samples trained/"
            f"evaluated, the epochs add up to {again.samples_trained}/{again.samples_evaluated}"
        )
    return CheckRecord.of(TOTAL_OPERATIONS, problems, f"{again.total_ops} operations, to the unit")


def check_operations_per_second(ev: Evidence) -> CheckRecord:
    stored, again = ev.stored, ev.recomputed
    problems = [
        f"{name}: score says {a!r}, recomputed {b!r}"
        for name, a, b in (
            ("OPS", stored.ops, again.ops),
            ("tensor FLOP/s", stored.tensor_ops, again.tensor_ops),
        )
        if not _close(a, b)
    ] + _interval_problems(stored, again, "ops")
    return CheckRecord.of(
        OPERATIONS_PER_SECOND, problems, f"OPS {again.ops:.6g}, within {RELATIVE:g} relative"
    )


def check_best_accuracy(ev: Evidence) -> CheckRecord:
    stored, again = ev.stored, ev.recomputed
    problems = []
    if stored.best_val_accuracy != again.best_val_accuracy:
        problems.append(
            f"score says {stored.best_val_accuracy!r}, the best complete epoch has "
            f"{again.best_val_accuracy!r}"
        )
    if stored.best_val_loss != again.best_val_loss:  # the LM track's quality; None on the CNN's
        problems.append(
            f"score says best val loss {stored.best_val_loss!r}, the best complete epoch has "
            f"{again.best_val_loss!r}"
        )
    if stored.val_samples != again.val_samples:
        problems.append(
            f"score says {stored.val_samples} validation samples, the dataset has {again.val_samples}"
        )
    measured = (
        "no complete epoch measured a validation accuracy"
        if again.best_val_accuracy is None
        else f"{again.best_val_accuracy!r} on {again.val_samples} samples"
    )
    if again.best_val_loss is not None:
        measured += f"; best val loss {again.best_val_loss!r} nats/token"
    return CheckRecord.of(BEST_ACCURACY, problems, measured)


def check_regulated_score(ev: Evidence) -> CheckRecord:
    stored, again = ev.stored.regulated_score, ev.recomputed.regulated_score
    problems = [] if _close(stored, again) else [f"score says {stored!r}, recomputed {again!r}"]
    return CheckRecord.of(
        REGULATED_SCORE,
        problems + _interval_problems(ev.stored, ev.recomputed, "regulated"),
        f"{again:.6g}, within {RELATIVE:g} relative",
    )


def check_division(ev: Evidence) -> CheckRecord:
    again = classify(ev.config)
    stored = (ev.run.division, ev.run.ruleset, ev.run.deviations, ev.run.config_hash)
    expected = (again.name, again.ruleset, again.deviations, again.config_hash)
    problems = (
        []
        if stored == expected
        else [
            f"recorded {stored[0]} ({stored[1]}, {len(stored[2])} deviations), "
            f"its config is {again.name} ({again.ruleset}, "
            f"{len(again.deviations)} deviations)"
        ]
    )
    return CheckRecord.of(
        DIVISION,
        problems,
        f"{again.name} under {again.ruleset}"
        + (f", {len(again.deviations)} deviations" if again.deviations else ""),
    )


def check_validity_rules(ev: Evidence) -> CheckRecord:
    """The stored verdict is the rules' verdict, recomputed. A failed verification's reason
    (aiperf.results.score.verified_score) is set aside for the comparison, as no rule gives it;
    but a verdict carrying it must say invalid."""
    stored, again = ev.stored, ev.recomputed
    problems = []
    by_rules = rules_reasons(stored.reasons)
    vetoed = len(by_rules) != len(stored.reasons)
    if vetoed and stored.valid:
        problems.append("score says valid, and that its verification failed")
    stored_valid = not by_rules if vetoed else stored.valid
    if (stored_valid, by_rules) != (again.valid, list(again.reasons)):
        problems.append(
            f"score says {'valid' if stored_valid else 'invalid'} {by_rules}, the rules give "
            f"{'valid' if again.valid else 'invalid'} {list(again.reasons)}"
        )
    if stored.trials_completed != again.trials_completed:
        problems.append(
            f"score says {stored.trials_completed} trials completed, the trials say {again.trials_completed}"
        )
    division = classify(ev.config)
    if division.closed:
        ruleset = load_ruleset(division.ruleset)
        rules = ruleset.for_profile(ev.config.profile)
        if ev.config.search.seed_architecture != rules.seed_architecture:
            problems.append(
                f"seed network {ev.config.search.seed_architecture}, the rules say {rules.seed_architecture}"
            )
        if ev.config.train.trainer != ruleset.trainer:
            problems.append(f"trainer {ev.config.train.trainer}, the rules say {ruleset.trainer}")
        if ev.config.train.precision not in ruleset.precisions:
            problems.append(
                f"precision {ev.config.train.precision} is not one of {ruleset.precisions}"
            )
    # search.space.batch_per_gib: the batch sizes the run stored are those its recorded devices give
    batch = batch_problem(ev.config, ev.run.worker_peaks)
    if batch:
        problems.append(batch)
    name = (
        division.ruleset if division.name == CLOSED else "the run's own settings (open division)"
    )
    # The detail of a passing check says what was checked (the verdict was recomputed and agrees),
    # so an invalid result does not read as a passing one.
    verdict = "valid" if again.valid else "INVALID (" + "; ".join(again.reasons) + ")"
    return CheckRecord.of(
        VALIDITY_RULES, problems, f"the recorded verdict is what {name} gives: {verdict}"
    )


def _same(stored: float | None, again: float | None) -> bool:
    """Both missing (nothing measured), or both there and equal within RELATIVE."""
    if stored is None or again is None:
        return stored is None and again is None
    return _close(stored, again)


def _shown(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def check_model_flops_utilisation(ev: Evidence) -> CheckRecord:
    """MFU = tensor FLOP/s over the sum of the workers' measured peaks; the stored sum must be that sum."""
    problems = []
    peaks = peak_flops(ev.run)
    if ev.run.peak_flops is not None or peaks is not None:
        if ev.run.peak_flops is None or peaks is None or not _close(ev.run.peak_flops, peaks):
            problems.append(
                f"the run's peak is {_shown(ev.run.peak_flops)} FLOP/s, its {len(ev.run.worker_peaks)} "
                f"workers measured {_shown(peaks)} FLOP/s in all"
            )
        if any(not float(p.get("flops") or 0.0) > 0 for p in ev.run.worker_peaks):
            problems.append("a worker's measured peak is not a positive rate")
    stored, again = ev.stored.mfu, ev.recomputed.mfu
    if not _same(stored, again):
        problems.append(f"score says MFU {_shown(stored)}, recomputed {_shown(again)}")
    detail = (
        "no peak measured: no MFU"
        if again is None
        else f"MFU {again:.4%} of {peaks:.6g} FLOP/s, within {RELATIVE:g} relative"
    )
    return CheckRecord.of(MODEL_FLOPS_UTILISATION, problems, detail)


def check_window_utilisation(ev: Evidence) -> CheckRecord:
    """Seconds in training and evaluation steps over workers x window, recomputed from the trials'
    phases; and no worker's trials account for more seconds than the window has."""
    problems = []
    stored, again = ev.stored.utilisation, ev.recomputed.utilisation
    if not _same(stored, again):
        problems.append(f"score says utilisation {_shown(stored)}, recomputed {_shown(again)}")
    by_worker: dict[str, float] = {}
    for t in ev.run.trials:
        if t.phases is not None:
            by_worker[t.worker or "?"] = by_worker.get(t.worker or "?", 0.0) + t.phases.total_s
    for worker, seconds in sorted(by_worker.items()):
        if seconds > ev.elapsed_s + CLOCK_SKEW_S:
            problems.append(
                f"the trials on {worker} account for {seconds:.1f} s of a {ev.elapsed_s:.1f} s window"
            )
    detail = (
        "no trial recorded its phases: no utilisation"
        if again is None
        else f"{again:.4%} of {ev.run.workers} workers x {ev.elapsed_s:.1f} s in training and evaluation steps"
    )
    return CheckRecord.of(WINDOW_UTILISATION, problems, detail)
