"""The benchmark on a real SLURM (slurmctld + slurmd on localhost, infra/slurm/ctl.sh): trials run
on Dask workers that are SLURM jobs, and a worker whose job is cancelled mid-trial costs only
the epoch in progress while the run goes on.

`make test` starts the local SLURM (infra/with-services.sh). Without `sinfo` these tests skip,
except in CI (CI=true), where a missing SLURM is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import TINY, TINY_SIMULATED, scored

pytestmark = pytest.mark.slow

JOB = re.compile(r"@slurm-job-(\d+)$")


def _slurm_available() -> bool:
    if shutil.which("sinfo") is None:
        return False
    result = subprocess.run(
        ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20
    )
    return result.returncode == 0 and any(
        s.strip("*~#") in ("idle", "mixed", "allocated") for s in result.stdout.split()
    )


@pytest.fixture(scope="module")
def slurm():
    if not _slurm_available():
        message = (
            "no running SLURM (sinfo missing or no idle node): start one with "
            '`eval "$(infra/slurm/ctl.sh start)"` or run `make test`'
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


class QueueWatch(threading.Thread):
    """Polls squeue while a run goes on: which aiperf-worker jobs were RUNNING."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.running: set[int] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            out = subprocess.run(
                ["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True
            ).stdout
            for line in out.splitlines():
                job, name, state = line.split()
                if name == "aiperf-worker" and state == "RUNNING":
                    self.running.add(int(job))
            self.stopping.wait(1.0)

    def stop(self) -> set[int]:
        self.stopping.set()
        self.join()
        return self.running


def _jobcomp(field: str = "JobState") -> dict[int, str]:
    """Job id -> final state (or another field), from slurmctld's job completion log (sacct needs slurmdbd)."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    log = conf.parent / "log" / "jobcomp.log"
    states = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "JobId" in fields:
                states[int(fields["JobId"])] = fields.get(field, "")
    return states


@pytest.fixture(scope="module")
def slurm_run(slurm, prefect_api, tmp_path_factory):
    from aiperf_flows.benchmark import benchmark

    folder = tmp_path_factory.mktemp("slurm")
    # A site prologue line, as a site's jobqueue config gives one: the run must record it, and the
    # variable it exports must show in what the workers say of their environment.
    site = folder / "site-jobqueue.yaml"
    site.write_text(f"jobqueue:\n  slurm:\n    job-script-prologue: ['{SITE_LINE}']\n")
    watch = QueueWatch()
    watch.start()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AIPERF_JOBQUEUE_CONFIG", str(site))
            result = scored(
                benchmark,
                profile="quick",
                budget="12s",
                workers=2,
                db=f"sqlite:///{folder / 'aiperf.db'}",
                seed=5,
                out=str(folder / "out"),
                overrides={**TINY_SIMULATED, "cluster.kind": "slurm"},
            )
    finally:
        seen = watch.stop()
    return result, folder / "aiperf.db", seen


SITE_LINE = "export KERAS_SITE_MARK=from-the-prologue"
# The run whose jobs' records are read and the one whose jobs are replaced before their walltime ask
# nothing of what trains: they use the simulated trainer (conftest's TINY_SIMULATED). The cancelled
# job's run trains Keras, epoch by epoch.


def test_what_ran_on_the_jobs_is_recorded(slurm_run):
    """Issue 25 item 6: the prologue lines, the workers' aiperf-relevant environment and the digest
    of the code each worker imported, beside the submitting host's."""
    from aiperf.system.provenance import code_digest, review_reasons

    result, path, _ = slurm_run
    with sqlite3.connect(path) as sql:
        (stored,) = sql.execute(
            "SELECT provenance FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()
    provenance = json.loads(stored)
    assert provenance["prologue"] == [SITE_LINE] and provenance["scheduler"] == "slurm"
    assert provenance["submit_files"] == code_digest()
    workers = provenance["workers"]
    assert len(workers) == 2 and all(JOB.search(w) for w in workers), workers
    for part in workers.values():
        assert part["files"] == provenance["submit_files"], "the jobs imported this checkout"
        assert part["env"]["KERAS_SITE_MARK"] == "from-the-prologue"
        assert "AIPERF_DB_URL" not in part["env"]
    assert review_reasons(provenance) == [f"job prologue ran before the workers: {SITE_LINE}"]


def test_trials_ran_on_workers_that_were_slurm_jobs(slurm_run):
    result, path, seen_running = slurm_run
    with sqlite3.connect(path) as sql:
        status = sql.execute(
            "SELECT status FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()[0]
        workers = [w for (w,) in sql.execute("SELECT worker FROM trials")]
        epochs = sql.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
        description = json.loads(
            sql.execute(
                "SELECT system_description FROM runs WHERE id = ?", (result["run_id"],)
            ).fetchone()[0]
        )
    assert status == "completed"
    assert epochs >= 1 and result["total_ops"] > 0
    jobs = {int(JOB.search(w).group(1)) for w in workers if w and JOB.search(w)}
    assert len(jobs) == 2 and len(jobs) == len({w for w in workers if w}), workers
    assert jobs <= seen_running, (
        f"trial jobs {jobs} were not all seen RUNNING in squeue ({seen_running})"
    )
    finished = _jobcomp()
    assert all(finished.get(j) in ("CANCELLED", "COMPLETED") for j in jobs), finished
    assert not any(JOB.search(w) is None for w in workers)
    # The system description is the nodes the jobs ran on, as the workers described them, not the
    # submitting host: each job it names ran there, on the node SLURM placed it on.
    described = {
        int(job["job_id"]): job["node"]
        for node in description["nodes"]
        for job in node["jobs"]
        if job["scheduler"] == "slurm"
    }
    assert described and set(described) <= seen_running and jobs <= set(described), (
        described,
        jobs,
    )
    placed = _jobcomp("NodeList")
    assert all(described[j] == placed[j] for j in described), (described, placed)
    assert description["number_of_nodes"] == len({n for n in described.values()})


def test_cancelled_job_costs_only_the_epoch_in_progress(slurm, prefect_api, tmp_path):
    """scancel a worker's job after its trial finished an epoch: the trial is recorded failed with
    that epoch kept, a new job replaces the worker, and the run completes with its score."""
    from aiperf_flows.benchmark import benchmark

    db = tmp_path / "aiperf.db"
    cancelled: dict[str, object] = {}
    problems: list[str] = []

    def cancel_when_an_epoch_is_done() -> None:
        try:
            watch_and_cancel()
        except Exception as exc:  # reported by the assertion below
            problems.append(repr(exc))

    def watch_and_cancel() -> None:
        end = time.time() + 120
        while time.time() < end and not cancelled:
            if db.exists():
                try:
                    with sqlite3.connect(db, timeout=1) as sql:
                        row = sql.execute(
                            "SELECT t.trial_key, t.worker, COUNT(e.id) "
                            "FROM trials t JOIN epochs e ON e.trial_id = t.id "
                            "WHERE t.status = 'running' AND e.complete GROUP BY t.id LIMIT 1"
                        ).fetchone()
                except sqlite3.Error as exc:  # not migrated yet, or busy: look again
                    problems[:] = [repr(exc)]
                    row = None
                if row and row[1] and JOB.search(row[1]):
                    job = JOB.search(row[1]).group(1)
                    subprocess.run(["scancel", job], check=True, capture_output=True)
                    cancelled.update(trial=row[0], job=int(job), epochs=row[2], at=time.time())
                    return
            time.sleep(0.3)

    killer = threading.Thread(target=cancel_when_an_epoch_is_done, daemon=True)
    killer.start()
    overrides = {
        **TINY,
        "train.epochs": 6,
        "search.space.base_filters": [8],
        "search.space.stages": [2],
        "cluster.kind": "slurm",
    }
    # The cancel comes with the first epoch (10-20 s into the window even on a loaded machine), the
    # lost worker is recorded and the next trial starts seconds later: 35 s leaves room for all of it.
    result = scored(
        benchmark,
        profile="quick",
        budget="35s",
        workers=2,
        db=f"sqlite:///{db}",
        seed=11,
        out=str(tmp_path / "out"),
        overrides=overrides,
    )
    killer.join(timeout=5)
    assert cancelled, f"no trial finished an epoch in time to cancel its job {problems}"

    with sqlite3.connect(db) as sql:
        run_status = sql.execute(
            "SELECT status FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()[0]
        status, message, kept = sql.execute(
            "SELECT t.status, t.message, COUNT(e.id) FROM trials t LEFT JOIN epochs e ON e.trial_id = t.id "
            "WHERE t.trial_key = ? GROUP BY t.id",
            (cancelled["trial"],),
        ).fetchone()
        later = sql.execute(
            "SELECT worker FROM trials WHERE started_at > (SELECT ended_at FROM trials "
            "WHERE trial_key = ?)",
            (cancelled["trial"],),
        ).fetchall()
        with_score = sql.execute(
            "SELECT COUNT(*) FROM scores WHERE run_id = ?", (result["run_id"],)
        ).fetchone()[0]
    assert run_status == "completed" and with_score == 1
    assert status == "failed" and "worker lost" in (message or ""), (status, message)
    assert kept >= cancelled["epochs"] >= 1, "the epochs it finished before the cancel are kept"
    assert later, "the run went on after the lost worker"
    replaced = {int(JOB.search(w).group(1)) for (w,) in later if w and JOB.search(w)}
    assert replaced - {cancelled["job"]}, "trials after the cancel ran on SLURM jobs"
    assert _jobcomp().get(cancelled["job"]) == "CANCELLED"


def test_jobs_are_replaced_before_their_walltime(slurm, prefect_api, tmp_path):
    """Jobs with a 40 s walltime in a 45 s run: workers retire before SLURM's limit (no job ends
    in TIMEOUT), new jobs replace them and run trials, and no trial fails. The keeper stops giving a
    worker trials 10-20 s after it joins and retires it once idle; Dask's own --lifetime backstop
    kills it at 37.5 s: without the keeper a busy worker would be killed and its trial fail. The
    first jobs start before the run's window; on a loaded machine the setup can outlast their
    10-20 s, and then they retire before the first trial (while the workers answer the run's
    broadcasts) and only their replacements run trials, which is what is asserted."""
    from aiperf_flows.benchmark import benchmark

    db = tmp_path / "aiperf.db"
    result = scored(
        benchmark,
        profile="quick",
        budget="45s",
        workers=2,
        db=f"sqlite:///{db}",
        seed=13,
        out=str(tmp_path / "out"),
        overrides={
            **TINY_SIMULATED,
            "train.epochs": 3,
            "cluster.kind": "slurm",
            "cluster.walltime": "00:00:40",
        },
    )
    with sqlite3.connect(db) as sql:
        run_status, deadline = sql.execute(
            "SELECT status, deadline FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()
        trials = sql.execute("SELECT status, worker FROM trials").fetchall()
    trial_jobs = {int(JOB.search(w).group(1)) for _s, w in trials if w and JOB.search(w)}
    # The run's own jobs, in the order they were submitted: each wrote its log in the run's folder.
    run_jobs = sorted(
        int(m.group(1))
        for log in (tmp_path / "out" / "jobs").glob("*.err")
        if (m := re.search(r"-(\d+)\.err$", log.name))
    )
    replacements = set(run_jobs[2:])  # after the first two, one per worker
    finished, ended = _jobcomp(), _jobcomp("EndTime")
    assert run_status == "completed"
    assert trial_jobs & replacements, (
        f"a replacement job ran trials: the run's jobs {run_jobs}, trials on {sorted(trial_jobs)}"
    )
    # slurmctld writes local time, the database UTC.
    run_deadline = datetime.fromisoformat(deadline).replace(tzinfo=UTC)
    retired = [
        j
        for j in run_jobs
        if ended.get(j) and datetime.fromisoformat(ended[j]).astimezone(UTC) < run_deadline
    ]
    assert retired, f"some job ended before the run's deadline {deadline}: {ended}"
    assert not any(finished.get(j) == "TIMEOUT" for j in run_jobs), (
        f"no job reached SLURM's time limit: {finished}"
    )
    assert not any(s == "failed" for s, _w in trials), trials
