"""The workers prepared before the timed window opens: the framework warmed up, each worker's
peak matmul rate probed (MFU's divisor) and stored in the run's precision, what the profile leaves
to the devices resolved from those peaks (train.precision auto, search.space.batch_per_gib) and
stored with the run, GPUs the framework cannot see refused, and the workers' description of their
nodes and provenance (what ran) recorded. One chapter of the story in aiperf.lifecycle.run, kept
apart so the story reads as its steps.
"""

from __future__ import annotations

import logging
from typing import Any

from aiperf import paths
from aiperf.cluster.broadcast import on_every_worker
from aiperf.config import AUTO, BenchmarkConfig, set_dotted
from aiperf.errors import UserError
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.results.division import classify
from aiperf.train.fit import SEED_FIT
from aiperf.train.gpu_failures import refuse_unused_gpus, unprobed_gpus
from aiperf.train.trial import warm_up
from aiperf.units import format_ops

log = logging.getLogger(__name__)


def prepare_workers(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
    *,
    resumed: bool = False,
) -> BenchmarkConfig:
    """Warm the workers up and probe their peaks (real trials only), resolve what the profile
    leaves to the devices, and store the peaks in the resolved precision. Returns the config the
    trials run with. Settings are resolved once, before the first trial: a resumed run whose trials
    trained keeps the ones they trained with."""
    peaks = None
    if config.train.trainer == "keras":
        on_every_worker(client, warm_up)
        peaks = probe_peaks(config, recorder.run_id, client, logger)
        refuse_unused_gpus(config, peaks)  # a GPU run whose framework shows none: one line
    if not resumed or not recorder.store.get_run(recorder.run_id).trials:
        config = resolve_settings(config, recorder, peaks, logger)
    if peaks is not None:
        record_peaks(config, recorder, peaks, logger)
    return config


def probe_peaks(
    config: BenchmarkConfig,
    run_id: int,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> list[dict[str, Any]] | None:
    """Every worker's peak record (aiperf.train.worker.peak_on_worker), measured at once before the
    timed window: in the run's precision, or with train.precision auto in each closed precision
    its device supports. On CPUs a probe that fails costs the run its MFU (and auto its choice:
    float32), never the run; a run with GPUs (cluster.gpus > 0) is refused in one line instead
    (accelerators.unprobed_gpus), since only the probe's device facts say its workers compute on
    them."""
    from aiperf.train.auto import allowed_precisions
    from aiperf.train.peak import compute_dtype, peak_seconds
    from aiperf.train.worker import peak_on_worker

    auto = config.train.precision == AUTO
    dtype = compute_dtype("float32" if auto else config.train.precision)
    candidates = list(allowed_precisions(config)) if auto else None
    try:
        found = on_every_worker(
            client, peak_on_worker, dtype, peak_seconds(), candidates=candidates
        )
    except Exception as exc:
        _failed_before_window(
            config, run_id, exc, logger, "the workers' peak was not measured, so it has no MFU"
        )
        return None
    if not found and config.cluster.gpus:
        raise UserError(unprobed_gpus(config.cluster.gpus, "no worker answered"))
    return sorted(found.values(), key=lambda p: p["worker"])


def _failed_before_window(
    config: BenchmarkConfig,
    run_id: int,
    exc: Exception,
    logger: logging.Logger | logging.LoggerAdapter,
    cost: str,
) -> None:
    """A step before the window failed on the workers. A run with GPUs is refused in one line
    (accelerators.unprobed_gpus): without the workers' own device facts nothing says they compute
    on them. On CPUs it costs the run what `cost` says, logged, never the run."""
    if config.cluster.gpus:
        logger.error("run %d: %s", run_id, cost, exc_info=exc)
        said = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise UserError(unprobed_gpus(config.cluster.gpus, said)) from None
    logger.warning("run %d: %s: %s: %s", run_id, cost, type(exc).__name__, exc)


def resolve_settings(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    peaks: list[dict[str, Any]] | None,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> BenchmarkConfig:
    """The config with train.precision auto and search.space.batch_per_gib resolved from the
    workers' peak records (aiperf.train.auto), stored with the run in place of the one recorded,
    with the precision, division and workload hash judged from it again (in the database and the
    event log, whose latest config and division stand)."""
    from aiperf.train.auto import resolved_settings

    return store_resolved(config, recorder, resolved_settings(config, peaks), logger)


def store_resolved(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    resolved: dict[str, Any],
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> BenchmarkConfig:
    """The config with the `resolved` dotted settings set, stored with the run in place of the one
    recorded (precision, division and workload hash judged again); `config` itself when there are
    none. A value the config refuses is one line naming the settings that size it."""
    from pydantic import ValidationError

    if not resolved:
        return config
    raw = config.model_dump()
    for dotted, value in resolved.items():
        set_dotted(raw, dotted, value)
    shown = ", ".join(f"{dotted} {value}" for dotted, value in resolved.items())
    try:
        settled = BenchmarkConfig.model_validate(raw)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise UserError(
            f"this run's devices give {shown}, which is not valid: {message}; set "
            "search.space.batch_per_gib, search.space.batch_cap or train.precision to values "
            "that fit"
        ) from None
    division = classify(settled)
    stored = settled.model_dump(mode="json")
    recorder.resolved_settings(
        config=stored,
        precision=settled.train.precision,
        division=division.name,
        deviations=division.deviations,
        config_hash=division.config_hash,
    )
    logger.info("run %d: for its devices: %s (%s)", recorder.run_id, shown, division.name)
    return settled


def record_peaks(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    peaks: list[dict[str, Any]],
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> float:
    """The workers' peaks in the run's precision, stored with the run: MFU's divisor is their sum."""
    from aiperf.train.peak import compute_dtype, in_precision

    peaks = [in_precision(peak, config.train.precision) for peak in peaks]
    # A resumed run measures its peaks again; the seed's fit figures it stored before its window
    # (checked only then) stay with them: verify reads them to accept reduced batch sizes.
    stored = recorder.store.get_run(recorder.run_id).worker_peaks
    peaks = with_seed_fit(peaks, {p["worker"]: p[SEED_FIT] for p in stored if SEED_FIT in p})
    recorder.peaks(peaks)
    total = sum(p["flops"] for p in peaks)
    logger.info(
        "measured peak: %sFLOP/s in %s over %d workers (%s)",
        format_ops(total),
        compute_dtype(config.train.precision),
        len(peaks),
        ", ".join(sorted({p["device"] for p in peaks})),
    )
    return total


def with_seed_fit(
    peaks: list[dict[str, Any]], figures: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """`peaks` with each worker's seed fit figures (`figures`, by worker) under SEED_FIT."""
    return [
        {**peak, SEED_FIT: figures[peak["worker"]]} if peak["worker"] in figures else peak
        for peak in peaks
    ]


def record_seed_fit(recorder: RunRecorder, found: list[dict[str, Any]]) -> None:
    """The seed's fit figures before the window (aiperf.train.fit.seed_fit_on_worker: each
    worker's {"fits", "checked": [StepMemory dicts]}), stored with each worker's peak record in
    the run's worker_peaks: the evidence by which verify accepts a batch list the fit rule reduced
    (aiperf.results.division.batch_problem). A run whose peaks were not measured stores none."""
    stored = list(recorder.store.get_run(recorder.run_id).worker_peaks)
    if not stored:
        return
    figures = {f["worker"]: {"fits": f["fits"], "checked": f["checked"]} for f in found}
    recorder.peaks(with_seed_fit(stored, figures))


def describe_workers(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> dict[str, Any] | None:
    """The compute nodes as the workers describe them (aiperf.system.description), not the
    submitting host: stored with the run, written as system_description.json in its folder and
    logged. A description that fails costs the run its description, never the run."""
    import json

    from aiperf.system import description as system_description

    run_id = recorder.run_id
    try:
        description = system_description.describe_system(
            system_description.collect(client, config.out, _bmc(config)),
            division=classify(config).name,
            precision=config.train.precision,
        )
    except Exception as exc:
        _failed_before_window(
            config, run_id, exc, logger, "the workers did not describe their nodes"
        )
        return None
    recorder.system_description(description)
    folder = paths.run_folder(config.out, config.db, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / system_description.FILE_NAME).write_text(
        json.dumps(description, indent=2) + "\n", encoding="utf-8"
    )
    logger.info(
        "system: %d node(s): %s",
        description["number_of_nodes"],
        description.get("system_name", ""),
    )
    return description


def record_provenance(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> dict[str, Any]:
    """What ran (aiperf.system.provenance): the jobs' prologue, how the workers were started, and
    each worker's aiperf-relevant environment and code digest beside this host's; stored, logged
    and flagged where a closed result needs a person to look. Unlike the description, a run
    whose workers cannot say what they run has no provenance to show, so a failure here fails it."""
    from aiperf.cluster.plan import user_prologue
    from aiperf.system import provenance as what_ran

    run_id = recorder.run_id
    recorded = what_ran.run_provenance(
        user_prologue(config),
        config.cluster.kind,
        on_every_worker(client, what_ran.describe_process),
    )
    recorder.provenance(recorded)
    if classify(config).closed:
        for reason in what_ran.review_reasons(recorded):
            logger.warning("run %d: for review: %s", run_id, reason)
    return recorded


def _bmc(config: BenchmarkConfig) -> dict[str, Any] | None:
    """The run's cluster.bmc settings as the workers take them, if given."""
    bmc = config.cluster.bmc
    return None if bmc is None else bmc.model_dump()
