"""Before the timed window, after the feed's rates: every worker at once times bare Keras in a
clean process on its node (aiperf.train.bare_reference), and the run records each worker's rate,
or why it has none (runs.reference_rates; the event log's run_resources). The run's seed trials
are then shown against it (aiperf.results.overhead): what the benchmark's own machinery costs a
trial on the nodes the run ran on, not only in a benchmark script.

It costs the window nothing (it runs before it) and the run about $AIPERF_REFERENCE_SECONDS plus
a process's start-up (Python, TensorFlow, the data opened, the model traced) in wall time; the
workers measure side by side, as their trials train. A measurement that cannot be fair is skipped
with its reason recorded: the simulated trainer (nothing trains), a GPU worker (its process holds
the devices), and any failure, which costs the run its comparison, never the run."""

from __future__ import annotations

import logging
from typing import Any

from aiperf import settings
from aiperf.cluster.broadcast import on_every_worker
from aiperf.config import TOKEN_KINDS, BenchmarkConfig
from aiperf.data.manifest import Manifest
from aiperf.lifecycle.feedcheck import seed_model
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.train.bare_reference import reference_on_worker
from aiperf.train.seed import SeedModel

log = logging.getLogger(__name__)


def reference_seconds() -> float:
    """The timed part of each worker's reference: $AIPERF_REFERENCE_SECONDS (0: none)."""
    return settings.number(settings.REFERENCE_SECONDS)


def measure_reference(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    manifest: Manifest,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> list[dict[str, Any]]:
    """Every worker's bare Keras rate at the run's seed batch (the smallest of
    search.space.batch_size, per device), recorded with the run and logged in one line; or one
    record saying why there is none."""
    run_id = recorder.run_id
    seconds = reference_seconds()
    if seconds == 0:
        rates = [_skipped(f"turned off: {settings.REFERENCE_SECONDS.name}=0")]
    elif config.train.trainer != "keras":
        rates = [_skipped(f"the {config.train.trainer} trainer trains no model to compare")]
    elif config.data.kind in TOKEN_KINDS:
        rates = [_skipped("the LM track has no bare Keras reference (its seed is a transformer)")]
    else:
        rates = _measured(config, run_id, client, manifest, seconds, logger)
    recorder.reference(rates)
    measured = [r for r in rates if "ops_per_s" in r]
    if measured:
        mean = sum(float(r["ops_per_s"]) for r in measured) / len(measured)
        logger.info(
            "run %d: before the window: bare Keras %.3g operations/s per worker (%d workers, "
            "%.1f s each)",
            run_id,
            mean,
            len(measured),
            seconds,
        )
    return rates


def _measured(
    config: BenchmarkConfig,
    run_id: int,
    client: Any,
    manifest: Manifest,
    seconds: float,
    logger: logging.Logger | logging.LoggerAdapter,
) -> list[dict[str, Any]]:
    seed = seed_model(config, manifest)
    try:
        found = on_every_worker(
            client,
            reference_on_worker,
            manifest.path,
            SeedModel(**seed),
            batch=min(config.search.space.batch_size) * seed["devices"],
            seconds=seconds,
        )
    except Exception as exc:
        logger.warning(
            "run %d: bare Keras was not measured, so the run cannot show its trials against it: "
            "%s: %s",
            run_id,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return [_skipped(f"failed: {type(exc).__name__}: {exc}".splitlines()[0])]
    rates = sorted(found.values(), key=lambda r: str(r["worker"]))
    return rates or [_skipped("no worker answered")]


def _skipped(reason: str) -> dict[str, Any]:
    return {"worker": None, "skipped": reason}
