"""The real orchestrator, random oracle and store over simulated trials, built one way for every
test that drives a search loop without training a model."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

from conftest import TINY
from test_history_data import system_facts

from aiperf.config import load_config
from aiperf.lifecycle.admission import Admission, Launcher, TrialData
from aiperf.lifecycle.orchestrator import Orchestrator, Pacing
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.results.mllog import EventLog
from aiperf.search.oracles import make_oracle
from aiperf.store import RunStart, Store

SHAPE = (16, 16, 3)


def simulated_orchestrator(
    tmp_path: Path,
    launch: Launcher,
    *,
    workers: int = 1,
    overrides: dict[str, Any] | None = None,
    events: queue.Queue | None = None,
    poll_s: float = 0.02,
    grace_s: float = 5.0,
    **options: Any,
) -> Orchestrator:
    """A new quick run's orchestrator (TINY, simulated trainer, random oracle, SQLite under
    `tmp_path`) whose trials `launch` starts; `options` go to Orchestrator. The caller closes
    `orchestrator.recorder.store`."""
    config = load_config(
        "quick",
        budget="3s",
        workers=workers,
        db=f"sqlite:///{tmp_path / 'a.db'}",
        out=str(tmp_path),
        overrides={
            **TINY,
            "train.trainer": "simulated",
            "search.oracle": "random",
            **(overrides or {}),
        },
    )
    store = Store.open(config.db)
    claim = store.create_run(
        RunStart(profile="quick", config={}, seed=0, budget_s=3, workers=workers),
        system_id=store.upsert_system(system_facts()),
    )
    pacing = Pacing(poll_s=poll_s, grace_s=grace_s, ahead=options.pop("ahead", None))
    admission = Admission(
        config,
        RunRecorder(store, claim, EventLog(None)),
        TrialData("simulated", SHAPE, 10, (384, 128)),
        launch,
    )
    return Orchestrator(
        admission,
        make_oracle(config, SHAPE, 10),
        queue.Queue() if events is None else events,
        pacing=pacing,
        **options,
    )


class EndAfter:
    """A launcher that ends the search (Orchestrator.end_early) once `launch` has started `n`
    trials: a test that needs some trials waits for them, not for a window of wall-clock time a
    loaded machine may spend on one. Set `orchestrator` before the search runs."""

    def __init__(self, launch: Launcher, n: int) -> None:
        self.launch, self.n, self.launched = launch, n, 0
        self.orchestrator: Orchestrator | None = None

    def __call__(self, request: Any) -> Any:
        handle = self.launch(request)
        self.launched += 1
        if self.launched >= self.n and self.orchestrator is not None:
            self.orchestrator.end_early()
        return handle
