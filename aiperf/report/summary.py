"""A run's score as rows: one source for the terminal table, the Prefect artifacts, `aiperf show`
and the HTML report."""

from __future__ import annotations

from aiperf.report.phases import percent
from aiperf.results.division import CLOSED
from aiperf.store import RunRecord
from aiperf.system.description import system_name as described_name
from aiperf.system.provenance import review_reasons
from aiperf.units import exact, flop_rate, operations, ops_rate, ops_span


def verification_text(run: RunRecord) -> str:
    """passed (n checks), failed: the failing checks, or not verified."""
    if run.verification is None:
        return "not verified"
    failed = [c.check for c in run.verification if not c.passed]
    if failed:
        return f"FAILED: {', '.join(failed)}"
    return f"passed ({len(run.verification)} checks)"


def verdict_text(run: RunRecord) -> str:
    """valid; invalid with every reason (a failed verification is one: aiperf.results.score.
    verified_score); or why a result its rules find valid is not: a result is valid only when every
    check of its verification passed."""
    score = run.score
    if score is None:
        return "no score"
    if not score.valid:
        return "invalid: " + "; ".join(score.reasons)
    if run.verified is False:  # verified before a failed check made the stored verdict invalid
        return "invalid: verification failed"
    if run.verified is None:
        return "not valid until verified (its rules find nothing wrong)"
    review = for_review(run)
    return "valid, for review: " + "; ".join(review) if review else "valid"


def for_review(run: RunRecord) -> list[str]:
    """Why a closed result needs a person to look at what ran on its workers (a prologue, workers
    started outside aiperf, code that differs from the submitting host's): not a broken rule, so
    the result stays valid, but every place that shows its verdict says so."""
    return review_reasons(run.provenance) if run.division == CLOSED else []


def peak_text(run: RunRecord) -> str:
    """The workers' summed peak, how many measured it and in what dtype; or why there is none."""
    if run.peak_flops is None:
        return "not measured"
    dtypes = ", ".join(sorted({str(p.get("dtype")) for p in run.worker_peaks})) or "-"
    return f"{flop_rate(run.peak_flops)} ({len(run.worker_peaks)} workers, {dtypes})"


def training_text(run: RunRecord) -> str:
    """How the run's trials trained: precision, Keras backend, XLA (or jax.jit) compilation, and
    an LM run's attention kernel as the run chose it (aiperf.train.attention; an image run has
    none, and a run recorded before the choice existed says nothing of it)."""
    if run.precision is None and run.backend is None:
        return "not recorded"
    jit = "-" if run.jit_compile is None else "on" if run.jit_compile else "off"
    text = f"{run.precision or '-'} on {run.backend or '-'}, jit_compile {jit}"
    attention = (run.config.get("train") or {}).get("attention")
    return text if attention in (None, "auto") else f"{text}, attention {attention}"


def feed_text(run: RunRecord) -> str:
    """Which feed ran and whether it kept the devices busy, from the rates measured before the
    window (aiperf.train.feedrate), e.g. "tf.data 640 img/s < devices 1,900 img/s: feed-bound,
    devices idle ~66%"; or why it cannot say."""
    from aiperf.train.feedrate import verdict

    judged = verdict(run.data_feed, run.feed_rates)
    if judged is None:
        return f"{run.data_feed}, rates not measured" if run.data_feed else "not recorded"
    return judged.line()


def feed_devices_text(run: RunRecord) -> str:
    """The feed per device and for the node, as the trials get it (aiperf.train.feedrate.
    trial_feed_rates), e.g. "dali: 8 pipelines on 8 devices, 1,210 img/s a device (1,180-1,240),
    node 9,680 img/s"; or why it cannot say."""
    from aiperf.train.feedrate import verdict

    judged = verdict(run.data_feed, run.feed_rates)
    line = None if judged is None else judged.devices_line()
    return line or "not recorded"


def reference_text(run: RunRecord) -> str:
    """The run's seed trials against bare Keras on the same nodes (aiperf.results.overhead), e.g.
    "seed trials trained at 52.1 GOPS, bare Keras 53.0 GOPS per worker on the same nodes: 0.98"."""
    from aiperf.results.overhead import overhead

    return overhead(run).line()


def energy_text(run: RunRecord) -> str:
    """The window's energy and operations per watt (aiperf.results.energy), or why the run has
    none, node by node: "not measured: no node had a meter (vm: bmc: ...; nvml: ...; rapl: ...)"."""
    from aiperf.results.energy import energy

    return energy(run).line()


def staging_text(run: RunRecord) -> str:
    """The data's staging time, shown beside the window it precedes and is not part of."""
    if run.staging_s is None:
        return "not recorded"
    return f"{run.staging_s:.1f} s, before the window (not in it)"


def mfu_text(run: RunRecord) -> str:
    """MFU against the measured peak it divides by, or why there is none."""
    score = run.score
    if score is None or score.mfu is None:
        return "none (no measured peak)" if run.peak_flops is None else "-"
    return f"{percent(score.mfu)} of {flop_rate(run.peak_flops or 0.0)} measured"


def system_name(run: RunRecord) -> str:
    """The name the report gives the system (aiperf.system.description.system_name): the user's
    (system.name in the site file, a profile or --set), else the compute nodes' hostnames; for a
    run recorded before nodes were described, the submitting host's."""
    if not run.system_description and not (run.config.get("system") or {}).get("name"):
        return run.system.hostname
    return described_name(run.system_description, run.config)


def verdict_word(run: RunRecord) -> str:
    """The verdict in a word or two, for a title: valid, invalid, unverified, for review, no score."""
    score = run.score
    if score is None:
        return "no score"
    if not score.valid or run.verified is False:
        return "invalid"
    if run.verified is None:
        return "unverified"
    return "valid, for review" if for_review(run) else "valid"


def verification_word(run: RunRecord) -> str:
    """verified, verification failed, or not verified."""
    if run.verified is None:
        return "not verified"
    return "verified" if run.verified else "verification failed"


def title(run: RunRecord) -> str:
    """The result in one line, as the report's title: "aiperf run 3 on node1: 18.3 GOPS, closed,
    valid, verified" (an unverified result says so once)."""
    name = system_name(run)
    score = run.score
    if score is None:
        return f"aiperf run {run.id} on {name}: no score ({run.status})"
    parts = [ops_rate(score.ops), run.division or "no division", verdict_word(run)]
    if run.verified is not None:
        parts.append(verification_word(run))
    return f"aiperf run {run.id} on {name}: {', '.join(parts)}"


def quality_row(best_val_loss: float | None, accuracy: str) -> dict[str, str]:
    """The result's quality: the LM track's best validation loss (with its next-token accuracy),
    or the CNN track's best validation accuracy (aiperf.quality)."""
    if best_val_loss is None:
        return {"figure": "best val accuracy", "value": accuracy}
    return {
        "figure": "best val loss",
        "value": f"{best_val_loss:.4f} nats/token (next-token accuracy {accuracy})",
    }


def interval_text(low: float | None, high: float | None) -> str:
    """ ", 95% interval LOW to HIGH" after a figure (aiperf.results.uncertainty); nothing without."""
    if low is None or high is None:
        return ""
    return f", 95% interval {ops_span(low, high)}"


def score_rows(run: RunRecord) -> list[dict[str, str]]:
    """The figures of a scored run, with its division, rules and verification: the score, OPS, the
    verdict and the verification first (a Prefect table shows ten rows a page, and a reader stops
    at the first screen), then MFU against the measured peak, then how the run was made."""
    score = run.score
    if score is None:
        raise ValueError(f"run {run.id} has no score")
    accuracy = "-" if score.best_val_accuracy is None else f"{score.best_val_accuracy:.4f}"
    division = run.division or "-"
    rows = [
        {
            "figure": "regulated score",
            "value": f"{ops_rate(score.regulated_score)}"
            f"{interval_text(score.regulated_low, score.regulated_high)} "
            f"({exact(score.regulated_score)} operations/s)",
        },
        {
            "figure": "OPS (aiperf convention)",
            "value": f"{ops_rate(score.ops)}{interval_text(score.ops_low, score.ops_high)} "
            f"({exact(score.ops)} operations/s)",
        },
        {"figure": "verdict", "value": verdict_text(run)},
        {"figure": "verification", "value": verification_text(run)},
        {"figure": "MFU", "value": mfu_text(run)},
        quality_row(score.best_val_loss, accuracy),
        {"figure": "division", "value": f"{division} ({run.ruleset or 'no ruleset'})"},
        {"figure": "run", "value": str(run.id)},
        {"figure": "profile", "value": run.profile},
        {"figure": "budget", "value": f"{run.budget_s:g} s"},
        {"figure": "tensor FLOP/s", "value": flop_rate(score.tensor_ops)},
        {"figure": "peak FLOP/s (measured)", "value": peak_text(run)},
        {"figure": "workers", "value": str(run.workers)},
        {"figure": "training", "value": training_text(run)},
        {"figure": "elapsed", "value": f"{score.elapsed_s:.1f} s"},
        {"figure": "data staging", "value": staging_text(run)},
        {"figure": "feed (before the window)", "value": feed_text(run)},
        {"figure": "feed per device", "value": feed_devices_text(run)},
        {"figure": "trials vs bare Keras", "value": reference_text(run)},
        {"figure": "energy", "value": energy_text(run)},
        {"figure": "window utilisation", "value": percent(score.utilisation)},
        {
            "figure": "total operations",
            "value": f"{operations(score.total_ops)} ({exact(score.total_ops)})",
        },
        {"figure": "trials completed", "value": str(score.trials_completed)},
        {
            "figure": "samples trained / evaluated",
            "value": f"{score.samples_trained} / {score.samples_evaluated}",
        },
    ]
    if run.deviations:
        rows.append({"figure": "deviations", "value": "; ".join(run.deviations)})
    return rows


def markdown(rows: list[dict[str, str]]) -> str:
    lines = ["# aiperf score", "", "| figure | value |", "| --- | --- |"]
    lines += [f"| {r['figure']} | {r['value'].replace('|', '/')} |" for r in rows]
    return "\n".join(lines) + "\n"
