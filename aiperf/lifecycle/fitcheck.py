"""Before the timed window, after the settings are resolved: the seed network at the run's largest
per-device batch is compiled on every worker as a trial compiles it (aiperf.train.fit.trainable:
the trial's optimizer, loss, metrics and uint8 input, in its precision on its devices) and its
memory read from XLA (aiperf.train.fit). Where it does not fit the devices with the ruleset's headroom, the run's batch
sizes are reduced by the ruleset's fit rule (aiperf.rules.FitRule: "halve") until it does, and the
reduced list is stored with the run as resolved settings are; where even the smallest the rule
allows does not fit, the run is refused in one line before its window. Each proposal is checked
again as it trains (a grown architecture may not fit where the seed did).

Only a JAX run with jit on GPUs checks its CNN seed so (its trials check theirs the same way): a
CPU run, a run without jit (whose trials are not checked), the simulated trainer and the LM track
(whose seed is a transformer, checked per trial) skip it at no cost. A check that fails for another
reason (a worker lost) costs the run this check, never the run: its trials are checked anyway."""

from __future__ import annotations

import logging
from typing import Any

from aiperf.cluster.broadcast import on_every_worker
from aiperf.config import TOKEN_KINDS, BenchmarkConfig
from aiperf.data.manifest import Manifest
from aiperf.errors import UserError
from aiperf.lifecycle.feedcheck import seed_model
from aiperf.lifecycle.prepare import record_seed_fit, store_resolved
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.train.fit import StepRecipe, fit_rule, reductions, seed_fit_on_worker
from aiperf.train.seed import SeedModel

log = logging.getLogger(__name__)
BATCH_SIZE = "search.space.batch_size"


def checks_seed(config: BenchmarkConfig) -> bool:
    """Whether this run's seed is fitted before its window (a CNN run on GPUs with JAX and jit:
    where its trials check theirs, aiperf.train.fit.checks_fit)."""
    return (
        config.train.trainer == "keras"
        and config.train.backend == "jax"
        and config.train.jit_compile
        and config.cluster.gpus > 0
        and config.data.kind not in TOKEN_KINDS
    )


def fit_seed(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    manifest: Manifest,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> BenchmarkConfig:
    """The config the trials run with: `config`, or with its batch sizes reduced by the fit rule
    so that the seed at the largest fits every worker's devices (stored with the run)."""
    if not checks_seed(config):
        return config
    rule = fit_rule(config.ruleset)
    lists = reductions(
        list(config.search.space.batch_size), rule, config.search.space.batch_per_gib
    )
    seed = seed_model(config, manifest)
    try:
        found = on_every_worker(
            client,
            seed_fit_on_worker,
            SeedModel(**seed),
            batches=[max(sizes) for sizes in lists],
            headroom=rule.headroom,
            recipe=StepRecipe.of_train(config.train),
        )
    except Exception as exc:
        logger.warning(
            "run %d: the seed's memory was not checked before the window (each trial is): %s: %s",
            recorder.run_id,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return config
    return _settle(config, recorder, lists, list(found.values()), logger)


def _settle(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    lists: list[list[int]],
    found: list[dict[str, Any]],
    logger: logging.Logger | logging.LoggerAdapter,
) -> BenchmarkConfig:
    """The list every worker's seed fits at (the first of `lists` that all fit), logged and stored;
    a UserError when none does."""
    checked = [f for f in found if f.get("fits") != -1]
    if not checked:
        return config
    record_seed_fit(recorder, checked)  # verify's evidence for a reduced list
    if any(f.get("fits") is None for f in checked):
        worst = max(checked, key=lambda f: f["checked"][-1]["bytes_needed"])
        last = worst["checked"][-1]
        raise UserError(
            f"the seed network does not fit worker {worst['worker']}'s devices even at batch "
            f"{max(lists[-1])} per device: its step needs {last['bytes_needed'] / 2**20:,.0f} MiB "
            f"of {last['bytes_available'] / 2**20:,.0f} MiB; run it on GPUs with more memory, "
            "or lower the precision's cost (train.precision)"
        )
    # Each worker stops at its first batch that fits: the largest index is the run's, and its
    # figures are those of a worker that got that far (another's list may be shorter).
    index = max(int(f["fits"]) for f in checked)
    first = next(f for f in checked if f["fits"] == index)["checked"][index]
    logger.info(
        "run %d: before the window: the seed's step needs %.0f MiB a device of %.0f MiB",
        recorder.run_id,
        first["bytes_needed"] / 2**20,
        first["bytes_available"] / 2**20,
    )
    if index == 0:
        return config
    logger.warning(
        "run %d: the seed did not fit at batch %d per device; the fit rule halved the batch "
        "sizes to %s",
        recorder.run_id,
        max(lists[0]),
        lists[index],
    )
    return store_resolved(config, recorder, {BATCH_SIZE: lists[index]}, logger)
