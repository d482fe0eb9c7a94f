"""The timed window's energy: one worker of each metered node samples the node's meters
(aiperf.system.power) from a stated few idle seconds before the window until it closes, and what
they measured is recorded with the window (runs.energy_windows and the event log, one call).

Only nodes whose description lists a meter are asked, so a run on machines without one (a laptop
in a VM, the test suite) pays nothing: no idle wait, no call. A metered node whose sampling
worker left before the window closed is recorded as such: its energy is missing, never guessed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aiperf.cluster.broadcast import on_every_worker
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.system import power
from aiperf.system.meters import NO_BMC_GIVEN

log = logging.getLogger(__name__)


def metered_nodes(description: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """hostname -> {"worker": the worker that samples it, "meters": what it listed}, for each
    described node that listed a meter."""
    nodes = (description or {}).get("nodes") or []
    metered = {}
    for node in nodes:
        listed = (node.get("energy_meters") or {}).get("meters") or []
        if listed and node.get("workers"):
            metered[str(node["hostname"])] = {"worker": node["workers"][0], "meters": listed}
    return metered


def unread_bmcs(description: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(hostname, why) for each node whose BMC the run was given but could not read."""
    unread = []
    for node in (description or {}).get("nodes") or []:
        why = ((node.get("energy_meters") or {}).get("absent") or {}).get("bmc")
        if why and not why.startswith(NO_BMC_GIVEN):
            unread.append((str(node.get("hostname")), str(why)))
    return unread


@contextmanager
def metered_window(
    client: Any,
    description: Mapping[str, Any] | None,
    recorder: RunRecorder,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> Iterator[None]:
    """The block is the timed window, each metered node sampled from its idle seconds before
    it to its end; the window's energy is recorded as the block ends, however it ends."""
    for host, why in unread_bmcs(description):  # given, yet silent: said before the window
        logger.warning("energy: %s: %s", host, why)
    nodes = metered_nodes(description)
    if not nodes:
        yield
        return
    key = f"aiperf-run-{recorder.run_id}-{time.time():.0f}"
    idle_s = power.idle_seconds()
    workers = [n["worker"] for n in nodes.values()]
    by_node = {host: n["meters"] for host, n in nodes.items()}
    sampling = _called(client, power.start, key, by_node, workers=workers, logger=logger)
    time.sleep(idle_s)  # the nodes idle: the workers are warm and wait for their first trial
    _called(client, power.open_window, key, workers=workers, logger=logger)
    opened = time.time()
    logger.info("energy: %d metered node(s), idle %g s before the window", len(nodes), idle_s)
    try:
        yield
    finally:
        closed = time.time()
        measured = _called(client, power.stop, key, workers=workers, logger=logger)
        try:
            recorder.energy(_segment(nodes, sampling, measured, idle_s, opened, closed))
        except Exception as exc:  # never in place of what ended the window
            logger.warning("energy: the window's energy was not recorded (%s)", exc)


def _called(
    client: Any, function: Any, *args: Any, workers: list[str], logger: Any
) -> dict[str, Any]:
    """worker -> what `function` answered there; {} if the call failed (said in the log): the
    window goes on unmetered rather than failing the run."""
    try:
        return on_every_worker(client, function, *args, workers=workers)
    except Exception as exc:
        logger.warning("energy: %s failed on the sampling workers (%s)", function.__name__, exc)
        return {}


def _segment(
    nodes: Mapping[str, Mapping[str, Any]],
    sampling: Mapping[str, Any],
    measured: Mapping[str, Any],
    idle_s: float,
    opened: float,
    closed: float,
) -> dict[str, Any]:
    """One window segment's energy: each metered node's meters as measured, or why none were."""
    entries = []
    for host, node in sorted(nodes.items()):
        worker = node["worker"]
        results = measured.get(worker)
        if results is not None:
            entries.append({"node": host, "meters": results})
        elif not sampling.get(worker):
            entries.append({"node": host, "missing": "its meters did not start"})
        else:
            entries.append({"node": host, "missing": "its sampling worker left before the end"})
    return {"opened": opened, "closed": closed, "idle_s": idle_s, "nodes": entries}
