"""Staging, the run's step before its search: the profile's dataset generated or converted where
every worker reads it, its manifest recorded (a resumed run must find the very data it started on)
and judged against the ruleset's pin, and the wall time it took recorded beside the score (it is
not in the timed window). Also the one way the run's steps open a client of its scheduler, and the
check of a batch the devices resolved against the images staging counted (the first place both
are known). A step of the story in aiperf.lifecycle.run; the flow runs it as a Prefect task.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from aiperf.config import BenchmarkConfig, batch_problem
from aiperf.data.staging import Manifest, OnProgress, stage
from aiperf.errors import UserError, disk_full
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.results.data_checks import open_data_note, refuse_unpinned
from aiperf.store import RunClaim

log = logging.getLogger(__name__)


def scheduler_client(scheduler_address: str, security: Any) -> Any:
    """A client of the run's scheduler, presenting the cluster's TLS credentials (StartedCluster.security)."""
    from distributed import Client

    return Client(scheduler_address, security=security, set_as_default=False)


def stage_dataset(
    config: BenchmarkConfig,
    claim: RunClaim,
    scheduler_address: str | None,
    security: Any = None,
    on_progress: OnProgress | None = None,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> Manifest:
    """Generate or convert the profile's data where every worker reads it and record its manifest.
    Shard work runs on the cluster's workers; node-local copies (data.stage_to) are made once per
    node. The staging's wall time is recorded with the run (runs.staging_s) and in its event log:
    it comes before the timed window and is not in it, and MLPerf HPC reports it beside the score.
    `claim`: the run's, handed to this step (a task of its own in the flow)."""
    with RunRecorder.opened(config, claim) as recorder:
        return _stage(config, recorder, scheduler_address, security, on_progress, logger)


def _stage(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    scheduler_address: str | None,
    security: Any,
    on_progress: OnProgress | None,
    logger: logging.Logger | logging.LoggerAdapter,
) -> Manifest:
    client = scheduler_client(scheduler_address, security) if scheduler_address else None
    started = time.time()
    began = time.perf_counter()
    try:
        manifest = stage(
            config.data,
            config.seed,
            Path(config.out) / "data",
            client=client,
            on_progress=on_progress,
        )
    except OSError as exc:  # a full disk is the folder's, named in one line: no traceback
        full = disk_full(exc, *_staging_folder(config, exc))
        if full is None:
            raise
        raise full from None
    finally:
        if client is not None:
            client.close()
    seconds = time.perf_counter() - began
    recorder.staging(started, time.time(), seconds)
    record_manifest(recorder, manifest)
    # Recorded first, then judged: a closed run on data other than its ruleset's pin (or with an
    # image in both splits, or a class missing from one) stops here, before its search.
    refuse_unpinned(config, manifest.to_dict())
    note = open_data_note(config, manifest.to_dict())
    if note:  # an open run on a corpus other than the pinned one (a stand-in) says so, and goes on
        logger.warning("run %d: %s", recorder.run_id, note)
    logger.info(
        "run %d: data staged in %.1f s, before the timed window (not counted in it)",
        recorder.run_id,
        seconds,
    )
    return manifest


def _staging_folder(config: BenchmarkConfig, exc: OSError) -> tuple[str, str]:
    """The folder a staging write failed in and the setting that chose it: node-local copies go to
    data.stage_to (where the failed file is there), everything else under --out."""
    stage_to = config.data.stage_to
    if stage_to and str(exc.filename or "").startswith(str(Path(stage_to).expanduser())):
        return stage_to, "data.stage_to"
    return config.out, "--out"


def refuse_batch_beyond_data(config: BenchmarkConfig, manifest: Manifest) -> None:
    """A trial's global batch against the train images staging counted, for a batch the devices
    resolved (search.space.batch_per_gib): for tfrecord and folder data the config holds no count
    (aiperf.config.FILE_COUNTED), and that batch is only known once the workers' peaks are, so
    this is the first place both are. A batch the profile lists is checked against the same count
    by each trial's feed (aiperf.data.feed), which fails the trial in one line, and the run after
    its first trials fail in a row."""
    problem = batch_problem(config, manifest.train_samples, "the staged dataset's train images")
    if problem:
        raise UserError(
            f"{problem}; stage more data, or use smaller batches (search.space.batch_size, "
            "batch_per_gib or batch_cap) or fewer devices per trial"
        )


def record_manifest(recorder: RunRecorder, manifest: Manifest) -> None:
    """Record the run's dataset; a resumed run must find the very data it started on."""
    recorded = recorder.store.run_dataset(recorder.run_id)
    if recorded is not None and recorded.sha256 != manifest.sha256:
        raise UserError(
            f"run {recorder.run_id} trained on dataset {recorded.name} (sha256 {recorded.sha256[:12]}), but "
            f"staging now gives sha256 {manifest.sha256[:12]}: restore that data to resume it"
        )
    recorder.dataset(manifest.to_dict())
