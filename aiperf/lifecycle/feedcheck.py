"""Before the timed window, after the peaks: each worker measures its feed's rate against its
devices' (aiperf.train.feedrate), and the run records which feed ran (runs.data_feed) and both
rates per worker (runs.feed_rates; the event log's run_resources). A measurement that fails costs
the run its feed-bound verdict, never the run."""

from __future__ import annotations

import logging
from typing import Any

from aiperf.cluster.broadcast import on_every_worker
from aiperf.config import AUTO, TOKEN_KINDS, BenchmarkConfig, trial_devices
from aiperf.data.manifest import Manifest
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.train.feedrate import FeedVerdict, rates_on_worker, verdict
from aiperf.train.seed import SeedModel

# What feeds an LM trial, as runs.data_feed records it: windows of the staged token shards, held in
# memory and sliced per batch (aiperf.data.tokens).
TOKEN_FEED = "tokens"

log = logging.getLogger(__name__)


def seed_model(config: BenchmarkConfig, manifest: Manifest) -> dict[str, Any]:
    """What a measurement before the window trains as the run's trials would: the seed model at the
    staged data's shape and classes, on a trial's devices, in the run's precision (float32 while
    auto is unresolved) and XLA setting. Keyword arguments for aiperf.train.feedrate and
    aiperf.train.bare_reference."""
    precision = config.train.precision
    return {
        "input_shape": tuple(manifest.image_shape),
        "classes": int(manifest.classes),
        "seed_architecture": config.search.seed_architecture,
        "devices": trial_devices(config.cluster),
        "precision": "float32" if precision == AUTO else precision,
        "jit_compile": config.train.jit_compile,
        "feed": config.data.feed,
    }


def measure_feed(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    manifest: Manifest,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> FeedVerdict | None:
    """Every worker's feed and device rates at the run's largest global batch, recorded with the
    run; the run's verdict, logged in one line (None when nothing was measured)."""
    from aiperf.train.peak import peak_seconds

    run_id = recorder.run_id
    if config.train.trainer != "keras":
        return None
    if config.data.kind in TOKEN_KINDS:  # the LM track: token windows sliced from memory
        recorder.feed(TOKEN_FEED, [])
        logger.info(
            "run %d: the feed is token windows from memory (%s): its rate is not measured",
            run_id,
            TOKEN_FEED,
        )
        return None
    seed = seed_model(config, manifest)
    try:
        found = on_every_worker(
            client,
            rates_on_worker,
            manifest.path,
            SeedModel(**seed),
            batch=max(config.search.space.batch_size) * seed["devices"],
            seconds=peak_seconds()
            / 2,  # each of the two measures: the pair takes about a peak probe
        )
    except Exception as exc:
        logger.warning(
            "run %d: the feed's rate was not measured, so the run cannot say whether it was "
            "feed-bound: %s: %s",
            run_id,
            type(exc).__name__,
            exc,
        )
        return None
    rates = sorted(found.values(), key=lambda r: r["worker"])
    feeds = sorted({str(r["feed"]) for r in rates})
    data_feed = "+".join(feeds) if feeds else None
    recorder.feed(data_feed, rates)
    judged = verdict(data_feed, rates)
    if judged is not None:
        logger.info("run %d: before the window: %s", run_id, judged.line())
    return judged
