"""Simulated scale: can one orchestrator keep 64, 256 and 1,024 workers busy, and at what cost per trial?

The real orchestrator (aiperf.lifecycle.orchestrator.Orchestrator: the profile's oracle on its own thread, the
store, the event handling) drives simulated workers in this one process (aiperf.train.simulated:
trials take a modelled time and report modelled epochs; nothing is trained, no worker process
exists, a trial sleeps and uses no core), writing every trial and epoch to a real database. Each
simulated trial calls back when it ends, as a Dask future does when its task returns. It prints, per
number of workers:

- utilisation: the share of worker-seconds that were busy with a trial (1.0 = no worker ever idle);
- refill wait p50 and p99: how long a worker whose trial ended waited for its next one;
- lost and duplicated events: modelled epochs missing from the database, and epochs recorded twice
  or never modelled;
- CPU per trial: CPU seconds of this whole process (the loop, the oracle's thread, the store's
  driver) per trial started, and of that the oracle's proposals alone (their mean wall time too);
- database writes per second (INSERT and UPDATE statements, counted by SQLAlchemy) and trials/s;
- first round: seconds until every worker had its first trial; tail: from the deadline until the
  last end was recorded (both count as idle worker-seconds).

Targets (issue 14): utilisation >= 0.98, refill wait p99 <= 100 ms, no lost or duplicated event and
<= 50 ms of CPU per trial, at 1,024 workers with a modelled epoch of 60 s, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/bench_simulated_scale.py [--workers 64 256 1024] [--budget 300]
        [--epoch-s 60] [--epochs 2] [--oracle morphism] [--db postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import heapq
import os
import platform
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from aiperf.store import RunStart

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PROFILE = "quick"


@dataclass(frozen=True)
class ScalePoint:
    workers: int
    trials: int
    epochs: int
    wall_s: float
    cpu_s: float  # the whole process, from the window's start to the loop's end
    writes: int
    busy_worker_s: float
    refill_s: tuple[float, ...]  # per refill: how long a freed worker waited for its next trial
    lost: int  # modelled epochs not in the database
    duplicated: int  # epochs in the database twice, or that no trial modelled
    proposals: int
    proposal_cpu_s: float  # CPU of the oracle's create_trial calls (on the oracle's thread)
    proposal_wall_s: float
    first_round_s: float  # from the window's start until every worker had its first trial
    tail_s: float  # from the deadline until the loop had recorded the last trial's end

    @property
    def cpu_per_trial_ms(self) -> float:
        return 1000 * self.cpu_s / max(1, self.trials)

    @property
    def proposal_cpu_per_trial_ms(self) -> float:
        return 1000 * self.proposal_cpu_s / max(1, self.trials)

    @property
    def proposal_mean_ms(self) -> float:
        return 1000 * self.proposal_wall_s / max(1, self.proposals)

    @property
    def writes_per_s(self) -> float:
        return self.writes / self.wall_s

    @property
    def utilisation(self) -> float:
        return self.busy_worker_s / (self.workers * self.wall_s)

    def refill_quantile_ms(self, q: float) -> float | None:
        """The q-quantile of the refill waits (nearest rank), None when no worker was refilled."""
        if not self.refill_s:
            return None
        ranked = sorted(self.refill_s)
        return 1000 * ranked[min(len(ranked) - 1, max(0, int(q * len(ranked) + 0.5) - 1))]


class _Clock:
    """One thread that calls each registered function at its time: the simulated trials' "task
    returned" callbacks, without a timer thread per trial."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._count = 0
        self._changed = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="sim-clock", daemon=True)
        self._thread.start()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        with self._changed:
            self._count += 1
            heapq.heappush(self._due, (when, self._count, fn))
            self._changed.notify()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopped and (not self._due or self._due[0][0] > time.time()):
                    self._changed.wait(
                        None if not self._due else max(0.0, self._due[0][0] - time.time())
                    )
                if self._stopped:
                    return
                _when, _n, fn = heapq.heappop(self._due)
            fn()


class _Returning:
    """A simulated trial's handle that also calls back at the trial's modelled end, as a Dask
    future calls its done callbacks when its task returns (the orchestrator then wakes at once)."""

    def __init__(self, played: Any, clock: _Clock) -> None:
        self.played, self.clock = played, clock

    def done(self) -> bool:
        return self.played.done()

    def result(self) -> Any:
        return self.played.result()

    def cancel(self) -> None:
        self.played.cancel()

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self.clock.at(self.played.plan.ends_at, lambda: fn(self))


class _TimedOracle:
    """Counts the CPU and wall time of the oracle's proposals, on whatever thread makes them."""

    def __init__(self, oracle: Any) -> None:
        self.calls, self.cpu_s, self.wall_s = 0, 0.0, 0.0
        propose = oracle.create_trial

        def create_trial(tuner_id: str) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return propose(tuner_id)
            finally:
                self.calls += 1
                self.cpu_s += time.thread_time() - cpu
                self.wall_s += time.perf_counter() - wall

        oracle.create_trial = create_trial


def simulate(
    workers: int,
    budget_s: float,
    db: str,
    out: Path,
    epoch_s: float = 60.0,
    epochs: int = 2,
    seed: int = 0,
    oracle: str | None = None,
    poll_s: float = 0.2,
) -> ScalePoint:
    """One run of the real orchestrator over `workers` simulated workers for `budget_s` seconds."""
    from sqlalchemy import event, text

    from aiperf.config import load_config
    from aiperf.lifecycle.admission import Admission, TrialData
    from aiperf.lifecycle.orchestrator import Orchestrator, Pacing
    from aiperf.lifecycle.recorder import RunRecorder
    from aiperf.results.mllog import EventLog
    from aiperf.search.oracles import make_oracle
    from aiperf.store import Store
    from aiperf.system.fingerprint import fingerprint
    from aiperf.train.simulated import SimulatedLauncher, SimulatedModel

    overrides: dict[str, Any] = {"train.trainer": "simulated", "train.epochs": epochs}
    if oracle is not None:
        overrides["search.oracle"] = oracle
    config = load_config(
        PROFILE,
        budget=budget_s,
        workers=workers,
        db=db,
        seed=seed,
        out=str(out),
        overrides=overrides,
    )
    # A modelled worker speed at which an epoch of a mid-sized trial (1.6e7 operations per sample,
    # the geometric middle of the simulated range) lasts about `epoch_s`.
    model = SimulatedModel(ops_per_s=3000 * 1.6e7 * 1.1 / epoch_s)
    store = Store.open(config.db)
    writes = [0]

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE"):
            writes[0] += 1

    clock = _Clock()
    try:
        claim = store.create_run(
            RunStart(
                profile=config.profile,
                config=config.model_dump(mode="json"),
                seed=seed,
                budget_s=budget_s,
                workers=workers,
            ),
            system_id=store.upsert_system(fingerprint()),
        )
        run_id = claim.run_id
        recorder = RunRecorder(store, claim, EventLog(None))
        shape, classes = (
            (config.data.image_size,) * 2 + (config.data.channels,),
            config.data.classes,
        )
        search = make_oracle(config, shape, classes)
        timed = _TimedOracle(search)
        events: queue.Queue = queue.Queue()
        launcher = SimulatedLauncher(workers, events, model)
        planned: list[tuple[str, int]] = []
        launched_at: list[float] = []

        def launch(request: Any) -> _Returning:
            played = launcher(request)
            launched_at.append(time.time())
            planned.extend((request.trial_key, e.epoch) for e in played.plan.epochs)
            return _Returning(played, clock)

        admission = Admission(config, recorder, TrialData("simulated", shape, classes), launch)
        orchestrator = Orchestrator(
            admission, search, events, pacing=Pacing(poll_s=poll_s, grace_s=10.0)
        )
        event.listen(store.engine, "before_cursor_execute", count)
        started = time.time()
        cpu = time.process_time()
        store.start_search(claim, started, started + budget_s)
        summary = orchestrator.run(started, started + budget_s)
        cpu = time.process_time() - cpu
        store.finish_search(claim, summary.ended_at)
        event.remove(store.engine, "before_cursor_execute", count)
        wall = summary.ended_at - started
        with store.engine.connect() as sql:
            spans = sql.execute(
                text(
                    "SELECT MIN(e.started_at), MAX(e.ended_at) FROM epochs e JOIN trials t ON t.id = e.trial_id "
                    "WHERE t.run_id = :r GROUP BY t.id"
                ),
                {"r": run_id},
            ).fetchall()
            recorded = [
                (key, epoch)
                for key, epoch in sql.execute(
                    text(
                        "SELECT t.trial_key, e.epoch FROM epochs e JOIN trials t ON t.id = e.trial_id "
                        "WHERE t.run_id = :r"
                    ),
                    {"r": run_id},
                )
            ]
        busy = sum(_seconds(b) - _seconds(a) for a, b in spans)
        expected, seen = set(planned), set(recorded)
        return ScalePoint(
            workers=workers,
            trials=summary.trials,
            epochs=len(recorded),
            wall_s=wall,
            cpu_s=cpu,
            writes=writes[0],
            busy_worker_s=busy,
            refill_s=tuple(launcher.refill_s),
            lost=len(expected - seen),
            duplicated=len(recorded) - len(seen) + len(seen - expected),
            proposals=timed.calls,
            proposal_cpu_s=timed.cpu_s,
            proposal_wall_s=timed.wall_s,
            first_round_s=launched_at[min(workers, len(launched_at)) - 1] - started,
            tail_s=summary.ended_at - (started + budget_s),
        )
    finally:
        clock.stop()
        store.close()


def _seconds(value: Any) -> float:
    from datetime import datetime

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _cpu_model() -> str:
    try:
        from aiperf.system.fingerprint import cpu_model

        return cpu_model()
    except Exception:  # the figures matter more than the label
        return platform.processor() or "unknown CPU"


def main() -> None:
    from aiperf.config import load_config
    from aiperf.urls import safe_url

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds per point (default 300: trials of two 60 s epochs refill about 2-8 times)",
    )
    parser.add_argument(
        "--epoch-s", type=float, default=60.0, help="modelled seconds of a mid-sized epoch"
    )
    parser.add_argument("--epochs", type=int, default=2, help="epochs per trial")
    parser.add_argument(
        "--oracle",
        default=None,
        help=f"morphism, random, bayesian or hyperband (default: the {PROFILE} profile's)",
    )
    parser.add_argument(
        "--poll", type=float, default=0.2, help="the orchestrator's poll (s); trials also wake it"
    )
    parser.add_argument(
        "--db", default=None, help="database URL (default: a fresh SQLite file per point)"
    )
    args = parser.parse_args()
    oracle = args.oracle or load_config(PROFILE).search.oracle
    print(
        f"oracle {oracle}, {args.budget:g} s per point, modelled epoch {args.epoch_s:g} s x {args.epochs} per trial, "
        f"database {safe_url(args.db) if args.db else 'SQLite (a file per point)'}"
    )
    print(
        f"{_cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start"
    )
    print(
        f"{'workers':>7} {'trials':>6} {'epochs':>6} {'util':>5} {'refills':>7} {'refill p50':>10} {'refill p99':>10} "
        f"{'lost':>4} {'dup':>4} {'CPU/trial':>10} {'oracle CPU/trial':>16} {'proposal':>9} {'writes/s':>8} "
        f"{'trials/s':>8} {'1st round':>9} {'tail':>6}"
    )
    with tempfile.TemporaryDirectory(prefix="aiperf-simscale-") as tmp:
        for n in args.workers:
            folder = Path(tmp) / f"w{n}"
            folder.mkdir()
            db = args.db or f"sqlite:///{folder / 'aiperf.db'}"
            p = simulate(
                n,
                args.budget,
                db,
                folder,
                epoch_s=args.epoch_s,
                epochs=args.epochs,
                oracle=oracle,
                poll_s=args.poll,
            )
            p50, p99 = p.refill_quantile_ms(0.5), p.refill_quantile_ms(0.99)
            # none: no worker was freed and refilled within the point
            refill = [f"{q:.1f} ms" if q is not None else "none" for q in (p50, p99)]
            print(
                f"{p.workers:>7} {p.trials:>6} {p.epochs:>6} {p.utilisation:>5.3f} {len(p.refill_s):>7} "
                f"{refill[0]:>10} {refill[1]:>10} "
                f"{p.lost:>4} {p.duplicated:>4} {p.cpu_per_trial_ms:>7.1f} ms "
                f"{p.proposal_cpu_per_trial_ms:>13.1f} ms "
                f"{p.proposal_mean_ms:>6.1f} ms {p.writes_per_s:>8.0f} {p.trials / p.wall_s:>8.2f} "
                f"{p.first_round_s:>7.2f} s {p.tail_s:>4.2f} s",
                flush=True,
            )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
