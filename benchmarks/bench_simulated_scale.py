"""Simulated scale: how much does orchestrating one trial cost, with hundreds of workers?

The real orchestrator (aiperf.orchestrator.Orchestrator: the oracle, the store, the event handling)
drives 64, 256 and 1024 simulated workers in this one process (aiperf.train.simulated: trials
take a modelled time and report modelled epochs, no model is trained, no worker process exists),
writing every trial and epoch to a real database. It prints, per scale:

- overhead per trial: CPU seconds the orchestrator's thread spent per trial it ran;
- database writes per second (INSERT and UPDATE statements, counted by SQLAlchemy) and trials/s;
- refill wait: how long a worker whose trial ended waited for its next one (mean);
- utilisation: the share of worker-seconds that were busy with a trial (1.0 = no worker ever idle).

    .venv/bin/python benchmarks/bench_simulated_scale.py [--workers 64 256 1024] [--budget 20]
                                                         [--db sqlite:///...] [--epoch-s 2] [--oracle random]
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@dataclass(frozen=True)
class ScalePoint:
    workers: int
    trials: int
    epochs: int
    wall_s: float
    cpu_s: float
    writes: int
    busy_worker_s: float
    refill_s: float  # mean wait of a freed worker for its next trial
    refills: int

    @property
    def overhead_per_trial_ms(self) -> float:
        return 1000 * self.cpu_s / max(1, self.trials)

    @property
    def writes_per_s(self) -> float:
        return self.writes / self.wall_s

    @property
    def utilisation(self) -> float:
        return self.busy_worker_s / (self.workers * self.wall_s)


def simulate(workers: int, budget_s: float, db: str, out: Path, epoch_s: float = 2.0,
             epochs: int = 3, seed: int = 0, oracle: str = "random") -> ScalePoint:
    """One run of the real orchestrator over `workers` simulated workers for `budget_s` seconds."""
    from sqlalchemy import event

    from aiperf.config import load_config
    from aiperf.orchestrator import Orchestrator
    from aiperf.search.oracles import make_oracle
    from aiperf.store import Store
    from aiperf.system import fingerprint
    from aiperf.train.simulated import SimulatedLauncher, SimulatedModel

    config = load_config("quick", budget=budget_s, workers=workers, db=db, seed=seed, out=str(out),
                         overrides={"train.trainer": "simulated", "train.epochs": epochs,
                                    "search.oracle": oracle})
    # A modelled worker speed at which an epoch of a mid-sized trial lasts about `epoch_s`.
    model = SimulatedModel(ops_per_s=3000 * 1.6e7 * 1.1 / epoch_s)
    store = Store.open(config.db)
    writes = [0]

    def count(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE"):
            writes[0] += 1

    try:
        run_id = store.create_run(system_id=store.upsert_system(fingerprint()), profile=config.profile,
                                  config=config.model_dump(mode="json"), seed=seed, budget_s=budget_s,
                                  workers=workers)
        shape, classes = (config.data.image_size,) * 2 + (config.data.channels,), config.data.classes
        oracle = make_oracle(config, out / f"run-{run_id}", shape, classes)
        events: queue.Queue = queue.Queue()
        launcher = SimulatedLauncher(workers, events, model)
        orchestrator = Orchestrator(config=config, store=store, run_id=run_id, oracle=oracle, data_path="simulated",
                                    image_shape=shape, num_classes=classes, launch=launcher, events=events,
                                    poll_s=0.05, grace_s=10.0)
        event.listen(store.engine, "before_cursor_execute", count)
        started = time.time()
        cpu = time.thread_time()
        store.start_search(run_id, started, started + budget_s)
        summary = orchestrator.run(started, started + budget_s)
        cpu = time.thread_time() - cpu
        store.finish_search(run_id, summary.ended_at)
        event.remove(store.engine, "before_cursor_execute", count)
        wall = summary.ended_at - started
        with store.engine.connect() as sql:
            from sqlalchemy import text

            spans = sql.execute(text(
                "SELECT MIN(e.started_at), MAX(e.ended_at) FROM epochs e JOIN trials t ON t.id = e.trial_id "
                "WHERE t.run_id = :r GROUP BY t.id"), {"r": run_id}).fetchall()
            epoch_count = sql.execute(text("SELECT COUNT(*) FROM epochs e JOIN trials t ON t.id = e.trial_id "
                                           "WHERE t.run_id = :r"), {"r": run_id}).scalar_one()
        busy = sum(_seconds(b) - _seconds(a) for a, b in spans)
        return ScalePoint(workers=workers, trials=summary.trials, epochs=epoch_count, wall_s=wall, cpu_s=cpu,
                          writes=writes[0], busy_worker_s=busy,
                          refill_s=sum(launcher.refill_s) / max(1, len(launcher.refill_s)),
                          refills=len(launcher.refill_s))
    finally:
        store.close()


def _seconds(value) -> float:
    from datetime import datetime, timezone

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per scale point")
    parser.add_argument("--epoch-s", type=float, default=2.0, help="modelled seconds per epoch")
    parser.add_argument("--oracle", default="random", help="random (default), morphism, bayesian, hyperband")
    parser.add_argument("--db", default=None, help="database URL (default: a fresh SQLite file per point)")
    args = parser.parse_args()
    print(f"oracle {args.oracle}, budget {args.budget:g} s per point, modelled epoch {args.epoch_s:g} s")
    print(f"{'workers':>8} {'trials':>7} {'epochs':>7} {'trials/s':>9} {'overhead/trial':>15} "
          f"{'DB writes/s':>12} {'refill wait':>12} {'utilisation':>12}")
    with tempfile.TemporaryDirectory(prefix="aiperf-simscale-") as tmp:
        for n in args.workers:
            folder = Path(tmp) / f"w{n}"
            folder.mkdir()
            db = args.db or f"sqlite:///{folder / 'aiperf.db'}"
            p = simulate(n, args.budget, db, folder, epoch_s=args.epoch_s, oracle=args.oracle)
            refill = f"{p.refill_s * 1000:.0f} ms" if p.refills else "none"  # none: no worker was freed and refilled
            print(f"{p.workers:>8} {p.trials:>7} {p.epochs:>7} {p.trials / p.wall_s:>9.1f} "
                  f"{p.overhead_per_trial_ms:>12.2f} ms {p.writes_per_s:>12.0f} {refill:>12} "
                  f"{p.utilisation:>12.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
