"""One worker per GPU, pinned before any framework starts in the worker's process.

No GPU is needed: what matters is the environment each worker process has at the moment of its
first framework import. A sitecustomize module (on PYTHONPATH, so every Python process the test
starts runs it first) installs an import hook that writes down, the first time the process imports
tensorflow, keras, jax or torch, which CUDA devices and which Keras backend it would start with.
The workers are then made to start a framework the way a run does (aiperf.train.trial.warm_up),
on a local cluster started as `aiperf run` starts it and on the workers of a batch job's script.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from importlib.util import find_spec
from pathlib import Path

import pytest

from aiperf.cluster import start_cluster
from aiperf.cluster.environment import JOB_GPUS_ENV, PINNED_ENV
from aiperf.config import load_config, machine_cores
from aiperf.train.trial import warm_up

pytestmark = pytest.mark.skipif(machine_cores() < 2, reason="two workers need two cores")
BACKEND = (
    "jax" if find_spec("jax") else "tensorflow"
)  # jax where installed: not the default, so the workers were told it

PROBE = textwrap.dedent('''
    import json, os, sys

    FRAMEWORKS = ("tensorflow", "keras", "jax", "torch")
    FOLDER = os.environ.get("GPU_PIN_PROBE_FOLDER")

    class FirstFrameworkImport:
        """Writes what this process sees when it first imports a framework; imports nothing."""
        seen = False

        def find_spec(self, name, path=None, target=None):
            if not self.seen and name in FRAMEWORKS:
                type(self).seen = True
                record = {"pid": os.getpid(), "module": name,
                          "already": sorted(m for m in FRAMEWORKS if m in sys.modules),
                          "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "backend": os.environ.get("KERAS_BACKEND"),
                          "pinned": os.environ.get("AIPERF_GPU_PINNED")}
                with open(os.path.join(FOLDER, f"{os.getpid()}.json"), "w") as handle:
                    json.dump(record, handle)
            return None

    if FOLDER:
        sys.meta_path.insert(0, FirstFrameworkImport())
''')


@pytest.fixture
def probe(tmp_path, monkeypatch) -> Path:
    """A folder where every process started from here on records its first framework import."""
    site, seen = tmp_path / "site", tmp_path / "seen"
    site.mkdir()
    seen.mkdir()
    (site / "sitecustomize.py").write_text(PROBE)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("GPU_PIN_PROBE_FOLDER", str(seen))
    for name in ("CUDA_VISIBLE_DEVICES", PINNED_ENV, JOB_GPUS_ENV, "KERAS_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    return seen


def _first_imports(client, seen: Path) -> dict[str, dict]:
    """Each worker's first framework import, by worker name, once `warm_up` has run on it."""
    backends = client.run(
        warm_up
    )  # imports Keras and starts its backend, as a run does before its window
    pids = client.run(os.getpid)
    names = {
        address: info["name"]
        for address, info in client.scheduler_info(n_workers=-1)["workers"].items()
    }
    records = {}
    for address, pid in pids.items():
        path = seen / f"{pid}.json"
        assert path.is_file(), (
            f"worker {names[address]} imported no framework, or not through the import system"
        )
        records[str(names[address])] = {
            **json.loads(path.read_text()),
            "warm_backend": backends[address],
        }
    return records


def _assert_pinned_first(records: dict[str, dict], backend: str, devices: set[str]) -> None:
    for name, record in records.items():
        assert record["already"] == [], (
            f"worker {name}: {record['already']} were imported before the probe saw it"
        )
        assert record["pinned"] == "1", (
            f"worker {name} imported {record['module']} before its GPU was pinned"
        )
        assert record["backend"] == backend == record["warm_backend"], f"worker {name}: {record}"
    seen = [record["cuda"] for record in records.values()]
    assert sorted(seen) == sorted(devices), f"each worker sees one distinct GPU: {records}"


@pytest.mark.slow
def test_local_workers_are_pinned_one_per_gpu_before_their_first_framework_import(probe, tmp_path):
    config = load_config(
        "quick",
        workers=2,
        out=str(tmp_path / "out"),
        cluster={"gpus": 2},
        overrides={"train.backend": BACKEND},
    )
    with start_cluster(config) as started:
        from distributed import Client

        with Client(
            started.scheduler_address, security=started.security, set_as_default=False
        ) as client:
            records = _first_imports(client, probe)
    assert set(records) == {"0", "1"}
    _assert_pinned_first(records, BACKEND, {"0", "1"})
    assert records["0"]["cuda"] == "0" and records["1"]["cuda"] == "1", "worker i on GPU i"


@pytest.mark.slow
def test_the_workers_of_a_job_script_are_pinned_before_their_first_framework_import(
    probe, tmp_path, monkeypatch
):
    """The job script a batch queue would run (dask-jobqueue's, with aiperf's prologue), run here by
    bash: its two workers share the job's GPUs 4 and 5 (as SLURM's CUDA_VISIBLE_DEVICES says), one each."""
    from distributed import Client

    from aiperf.cluster.plan import job_plan
    from aiperf.cluster.start import new_jobqueue_cluster

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(tmp_path))
    config = load_config(
        "quick",
        workers=2,
        out=str(tmp_path / "out"),
        overrides={"train.backend": BACKEND},
        cluster={"kind": "slurm", "gpus": 2, "cores": 2, "interface": "lo"},
    )
    plan = job_plan(config, None, log_directory=str(tmp_path))
    cluster = new_jobqueue_cluster(plan, tmp_path)
    job = None
    try:
        script = tmp_path / "job.sh"
        script.write_text(
            cluster.job_script().replace("dummy-name", "SLURMCluster-0")
        )  # as the job gets it
        job = subprocess.Popen(
            ["bash", str(script)],
            cwd=tmp_path,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "job.err").open("w"),
        )
        with Client(cluster, set_as_default=False) as client:
            try:
                client.wait_for_workers(2, timeout=120)
            except TimeoutError:
                pytest.fail(
                    "the job's workers did not start:\n"
                    + (tmp_path / "job.err").read_text()[-3000:]
                )
            records = _first_imports(client, probe)
    finally:
        if job is not None:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(timeout=60)
        cluster.close()
    assert set(records) == {"SLURMCluster-0-0", "SLURMCluster-0-1"}
    _assert_pinned_first(records, BACKEND, {"4", "5"})


def test_a_backend_that_is_not_installed_fails_in_one_line(monkeypatch):
    from aiperf.config import checks
    from aiperf.errors import UserError

    monkeypatch.setattr(checks, "backend_installed", lambda backend: backend != "torch")
    with pytest.raises(UserError) as error:
        load_config("quick", workers=1, overrides={"train.backend": "torch"})
    message = str(error.value)
    assert "\n" not in message and message.startswith("train.backend torch is not installed")
    assert "--set train.backend=" in message
    # A simulated run trains nothing: it needs no backend.
    load_config(
        "quick", workers=1, overrides={"train.backend": "torch", "train.trainer": "simulated"}
    )


def test_local_workers_are_one_per_gpu():
    from aiperf.errors import UserError

    assert load_config("quick", cluster={"gpus": 1}).workers == 1
    with pytest.raises(UserError, match="a local worker owns one GPU"):
        load_config("quick", workers=2, cluster={"gpus": 1})


def test_a_job_script_starts_its_workers_with_the_preload_and_the_runs_backend():
    from aiperf.cluster.plan import job_plan
    from aiperf.cluster.preload import PRELOAD

    config = load_config(
        "quick",
        workers=4,
        overrides={"train.backend": BACKEND},
        cluster={
            "kind": "slurm",
            "gpus": 2,
            "cores": 8,
            "prologue": ["export KERAS_BACKEND=torch"],
        },
    )
    plan = job_plan(config, None)
    args = plan.kwargs["worker_extra_args"]
    assert args[args.index("--preload") + 1] == PRELOAD == "aiperf.cluster.preload"
    prologue = plan.kwargs["job_script_prologue"]
    assert f"export {JOB_GPUS_ENV}=2" in prologue
    assert prologue[-1] == f"export KERAS_BACKEND={BACKEND}", (
        "the run's backend, whatever a site's line says"
    )
