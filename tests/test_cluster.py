"""Cluster settings: the job scripts dask-jobqueue writes for SLURM, PBS, LSF and SGE from
aiperf/cluster/jobqueue.yaml, the profile and the command line; walltime-aware lifetimes; worker
rules; the keeper's retire-and-resubmit decisions."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiperf.cluster import (
    JOB_GPUS_ENV,
    JOB_STARTED_ENV,
    LIFETIME_ENV,
    QUEUES,
    JobPlan,
    format_walltime,
    job_id,
    job_plan,
    jobqueue_cluster_class,
    parse_walltime,
    pin_gpu,
    staggered_lifetime,
    trial_resources,
    worker_end,
    worker_lifetime,
)
from aiperf.cluster.keeper import RETIRE_LEAD_S, Keeper
from aiperf.cluster.plan import DEFAULT_JOBQUEUE_CONFIG
from aiperf.config import load_config
from aiperf.errors import UserError

API = "http://10.1.2.3:4200/api"


def _script(kind: str, **cluster) -> str:
    """The real job script dask-jobqueue would submit (building the cluster submits nothing)."""
    config = load_config("quick", workers=4, cluster={"kind": kind, **cluster})
    plan = job_plan(config, API)
    cls = jobqueue_cluster_class(kind)
    cluster_obj = cls(**plan.kwargs)
    try:
        return cluster_obj.job_script()
    finally:
        cluster_obj.close()


@pytest.mark.parametrize(
    "text, seconds",
    [("01:00:00", 3600), ("00:30", 1800), ("1-02:00:00", 93600), ("90m", 5400), ("2h", 7200)],
)
def test_walltime_formats(text, seconds):
    assert parse_walltime(text) == seconds


def test_walltime_written_as_each_queue_takes_it():
    assert format_walltime(5400) == "01:30:00"
    assert format_walltime(5401, fields=2) == "01:31"  # LSF: minutes, rounded up


def test_workers_retire_before_the_walltime_with_staggered_ends():
    for walltime in (30, 600, 3600, 86400):
        lifetime, stagger = worker_lifetime(walltime)
        assert 0 < lifetime - stagger and lifetime + stagger <= walltime - 5
        assert stagger > 0
    assert worker_lifetime(3600) == (3240.0, 180.0)


def test_slurm_script_has_directives_resources_lifetime_and_prologue():
    script = _script(
        "slurm",
        queue="gpu",
        account="proj7",
        walltime="02:00:00",
        cores=8,
        memory="32GB",
        gpus=4,
        prologue=["module load cuda/12.4"],
        interface="lo",
    )
    assert "#SBATCH -p gpu" in script and "#SBATCH -A proj7" in script
    assert "#SBATCH -t 02:00:00" in script and "#SBATCH --gres=gpu:4" in script
    assert "#SBATCH -J aiperf-worker" in script and "#SBATCH --cpus-per-task=8" in script
    assert "--nworkers 4" in script, "one worker per GPU"
    assert "--resources trial=1,GPU=1" in script
    assert "export AIPERF_WORKER_LIFETIME=6600,300" in script, (
        "workers end at 6600 +- 300 s, staggered"
    )
    assert "--lifetime 7050s" in script, (
        "dask's own lifetime is only the backstop, before the 7200 s walltime"
    )
    assert "--interface lo" in script
    api = script.index(f"export PREFECT_API_URL={API}")
    assert api < script.index("module load cuda/12.4"), (
        "the user's prologue runs after ours and may override it"
    )
    assert (
        "export AIPERF_WORKER_CORES=2" in script
        and f"export {JOB_STARTED_ENV}=$(date +%s)" in script
    )
    assert "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False" in script, (
        "no profiler in the trials' way"
    )
    _assert_nanny_spawns_without_malloc_tunables(script)


def _assert_nanny_spawns_without_malloc_tunables(script: str) -> None:
    """A job's nanny reads the job script's DASK_* exports as its process starts: with them, the
    worker it spawns gets no MALLOC_TRIM_THRESHOLD_ (glibc's dynamic mmap threshold stays on, as in
    a bare process: aiperf.cluster.environment.WORKER_DASK says why) and Dask's other pre-spawn
    variables stay."""
    import shlex

    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in script.splitlines()
        if line.startswith("export DASK_")
    )
    env = {k: shlex.split(v)[0] for k, v in exports.items()}
    read = (
        "import distributed.nanny as n; "
        "print(sorted(n._get_env_variables('distributed.nanny.pre-spawn-environ')))"
    )
    keys = subprocess.run(
        [sys.executable, "-c", read],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DASK_")}, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "MALLOC_TRIM_THRESHOLD_" not in keys and "OMP_NUM_THREADS" in keys, keys


def test_local_workers_run_without_dasks_profiler_and_fast_ticks(monkeypatch):
    """The profiler would sample the trial's thread every 10 ms and the event loops tick every 20 ms
    (system monitor 500 ms, nanny memory check 100 ms), each holding the GIL: the scheduler, the
    nannies and the workers run with WORKER_DASK's intervals instead. And the workers start with
    glibc's malloc as a bare process has it: no MALLOC_TRIM_THRESHOLD_ from Dask's nanny.

    A nanny with Dask's defaults also writes its pre-spawn variables into its own process's
    environment, which every later child copies: another test's plain LocalCluster in this test
    process may have left MALLOC_TRIM_THRESHOLD_ there. `aiperf run` starts none, so this process
    starts as a user's shell would, without it."""
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    import dask
    from distributed import Client

    from aiperf.cluster.environment import WORKER_DASK
    from aiperf.cluster.start import local_cluster

    def intervals(server) -> dict[str, float]:
        return {
            name: callback.callback_time for name, callback in server.periodic_callbacks.items()
        }

    with local_cluster(1) as cluster, Client(cluster, security=cluster.security) as client:
        profiler = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
        trim = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_", "unset"))
        workers = list(client.run(lambda dask_worker: intervals(dask_worker)).values())
        scheduler = client.run_on_scheduler(lambda dask_scheduler: intervals(dask_scheduler))
        nannies = [intervals(nanny) for nanny in cluster.workers.values()]
    assert WORKER_DASK["distributed.admin.tick.interval"] == "1s"
    assert list(trim.values()) == ["unset"], (
        "Dask's malloc tunable would slow TensorFlow's tensors"
    )
    assert list(profiler.values()) == [False]
    for server in [*workers, scheduler, *nannies]:
        assert server["tick"] == 1000 and server["monitor"] == 5000, server
    assert nannies[0]["memory_monitor"] == 1000 and workers[0]["memory_monitor"] == 1000
    assert "stealing" not in scheduler


@pytest.mark.parametrize(
    "kind, expected",
    [
        (
            "pbs",
            [
                "#PBS -q batch",
                "#PBS -A proj7",
                "#PBS -l walltime=02:00:00",
                "#PBS -l ngpus=2",
                'cd "${PBS_O_WORKDIR:-$PWD}"',
            ],
        ),
        ("lsf", ["#BSUB -q batch", '#BSUB -P "proj7"', "#BSUB -W 02:00", '#BSUB -gpu "num=2"']),
        (
            "sge",
            [
                "#$ -q batch",
                "#$ -P proj7",
                "#$ -l h_rt=02:00:00",
                "#$ -l gpu=2",
                'cd "${SGE_O_WORKDIR:-$PWD}"',
            ],
        ),
    ],
)
def test_pbs_lsf_sge_scripts_differ_only_in_directives(kind, expected):
    script = _script(kind, queue="batch", account="proj7", walltime="02:00:00", cores=4, gpus=2)
    for line in expected:
        assert line in script, f"{line!r} missing from the {kind} script:\n{script}"
    assert "--resources trial=1,GPU=1" in script and "--nworkers 2" in script
    assert f"export PREFECT_API_URL={API}" in script


def test_without_gpus_one_worker_per_job_owns_every_core():
    config = load_config("quick", workers=3, cluster={"kind": "slurm", "cores": 16})
    plan = job_plan(config, API)
    assert (plan.jobs, plan.workers_per_job, plan.cores_per_worker) == (3, 1, 16)
    assert trial_resources(config) == {"trial": 1}
    with_gpus = load_config("quick", workers=8, cluster={"kind": "slurm", "cores": 32, "gpus": 4})
    assert job_plan(with_gpus, API).jobs == 2 and trial_resources(with_gpus) == {
        "trial": 1,
        "GPU": 1,
    }


def test_defaults_come_from_jobqueue_yaml_and_the_profile_wins(tmp_path, monkeypatch):
    site = tmp_path / "site.yaml"
    site.write_text(
        "jobqueue:\n  slurm:\n    cores: 6\n    memory: 12GB\n    queue: site-q\n"
        "    job-script-prologue: ['source /site/env.sh']\n"
    )
    monkeypatch.setenv("AIPERF_JOBQUEUE_CONFIG", str(site))
    plan = job_plan(load_config("quick", workers=1, cluster="slurm"), API)
    assert (plan.cores, plan.memory, plan.kwargs["queue"]) == (6, "12GB", "site-q")
    assert "source /site/env.sh" in plan.kwargs["job_script_prologue"]
    plan = job_plan(
        load_config("quick", workers=1, cluster={"kind": "slurm", "queue": "mine", "cores": 2}),
        API,
    )
    assert (plan.cores, plan.kwargs["queue"]) == (2, "mine")


SITE_JOBQUEUE = (
    "jobqueue:\n  slurm:\n    queue: site-q\n    memory: 12GB\n    walltime: '04:00:00'\n"
)


@pytest.fixture
def dask_site(tmp_path, monkeypatch):
    """Loads dask's config again as a fresh process would with $DASK_CONFIG naming a folder, whose
    files are the arguments (none: an empty site); dask's config is restored afterwards."""
    import copy

    import dask

    saved = copy.deepcopy(dask.config.config)
    monkeypatch.delenv("AIPERF_JOBQUEUE_CONFIG", raising=False)
    for name in [n for n in os.environ if n.startswith("DASK_JOBQUEUE__")]:
        monkeypatch.delenv(name)

    def load(**files: str) -> None:
        folder = tmp_path / "dask-site"
        folder.mkdir(exist_ok=True)
        for name, text in files.items():
            (folder / f"{name}.yaml").write_text(text)
        monkeypatch.setenv("DASK_CONFIG", str(folder))
        # Only the temporary folder: a site file of this machine's (~/.config/dask) stays out.
        dask.config.refresh(paths=[str(folder)])

    yield load
    dask.config.config.clear()
    dask.config.config.update(saved)


def test_a_sites_dask_config_beats_the_packaged_jobqueue_yaml(dask_site):
    dask_site(jobqueue=SITE_JOBQUEUE)
    plan = job_plan(load_config("quick", workers=1, cluster="slurm"), API)
    assert (plan.kwargs["queue"], plan.memory, plan.walltime) == ("site-q", "12GB", "04:00:00")
    assert (plan.cores, plan.kwargs["job_name"]) == (1, "aiperf-worker"), (
        "what the site leaves unset still comes from aiperf's packaged file, not dask-jobqueue's"
    )


def test_without_a_site_config_the_packaged_defaults_apply(dask_site):
    dask_site()  # after a refresh, which replays dask-jobqueue's defaults over aiperf's
    plan = job_plan(load_config("quick", workers=1, cluster="slurm"), API)
    assert "queue" not in plan.kwargs
    assert (plan.memory, plan.walltime, plan.kwargs["job_name"]) == (
        "2GB",
        "01:00:00",
        "aiperf-worker",
    )


def test_the_profile_and_the_command_line_beat_the_site(dask_site, tmp_path, monkeypatch):
    dask_site(jobqueue=SITE_JOBQUEUE)
    config = load_config(
        "quick", workers=1, cluster={"kind": "slurm", "queue": "mine", "memory": "3GB"}
    )
    plan = job_plan(config, API)
    assert (plan.kwargs["queue"], plan.memory, plan.walltime) == ("mine", "3GB", "04:00:00")
    named = tmp_path / "aiperf-site.yaml"
    named.write_text("jobqueue:\n  slurm:\n    queue: named-q\n")
    monkeypatch.setenv("AIPERF_JOBQUEUE_CONFIG", str(named))
    plan = job_plan(load_config("quick", workers=1, cluster="slurm"), API)
    assert (plan.kwargs["queue"], plan.memory) == ("named-q", "12GB"), (
        "$AIPERF_JOBQUEUE_CONFIG sits over the site's dask config, key by key"
    )


def test_a_fresh_process_reads_the_site_from_dask_config(tmp_path):
    (tmp_path / "jobqueue.yaml").write_text(SITE_JOBQUEUE)
    env = {k: v for k, v in os.environ.items() if k != "AIPERF_JOBQUEUE_CONFIG"}
    env["DASK_CONFIG"] = str(tmp_path)
    code = (
        "from aiperf.cluster import job_plan; from aiperf.config import load_config; "
        "p = job_plan(load_config('quick', workers=1, cluster='slurm'), None); "
        "print(p.kwargs['queue'], p.memory, p.kwargs['job_name'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["site-q", "12GB", "aiperf-worker"]


def test_packaged_jobqueue_yaml_sets_one_core_jobs_from_any_folder(tmp_path, monkeypatch):
    import aiperf

    assert DEFAULT_JOBQUEUE_CONFIG.parent.parent == Path(aiperf.__file__).resolve().parent, (
        "ships in the wheel"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AIPERF_JOBQUEUE_CONFIG", raising=False)
    plan = job_plan(load_config("quick", workers=2, cluster="slurm"), API)
    assert (plan.cores, plan.memory, plan.walltime, plan.kwargs["job_name"]) == (
        1,
        "2GB",
        "01:00:00",
        "aiperf-worker",
    )


def test_bad_cluster_settings_are_one_clear_error(monkeypatch):
    with pytest.raises(UserError, match="cluster.kind"):
        load_config("quick", cluster="moab")
    with pytest.raises(UserError, match="cluster.walltime"):
        job_plan(
            load_config("quick", workers=1, cluster={"kind": "slurm", "walltime": "soon"}), API
        )
    with pytest.raises(UserError, match="workers per job"):
        job_plan(
            load_config(
                "quick", workers=1, cluster={"kind": "slurm", "cores": 2, "workers_per_job": 4}
            ),
            API,
        )
    monkeypatch.setenv("AIPERF_JOBQUEUE_CONFIG", "/nonexistent/jobqueue.yaml")
    with pytest.raises(UserError, match="AIPERF_JOBQUEUE_CONFIG"):
        job_plan(load_config("quick", workers=1, cluster="slurm"), API)


def test_core_limit_applies_to_local_clusters_only():
    cores = os.cpu_count() or 1
    with pytest.raises(UserError, match="more than this machine"):
        load_config("quick", workers=cores + 64)
    assert load_config("quick", workers=cores + 64, cluster="slurm").workers == cores + 64
    assert load_config("quick", cluster="pbs").workers == 1  # 'auto' on a queue: one worker


def test_a_local_cluster_checks_the_cores_of_the_machine_it_starts_on(monkeypatch):
    """The config's check runs again where the cluster starts: the config may have been validated
    on a bigger machine. Both say the same, from aiperf.config.local_cores_problem."""
    import aiperf.config
    from aiperf.cluster import start
    from aiperf.config import checks

    if aiperf.config.machine_cores() < 2:
        pytest.skip("needs a machine of 2 cores or more")
    config = load_config("quick", workers=2, cluster={"kind": "local", "cores": 1})
    assert aiperf.config.local_cores_problem(config) is None
    monkeypatch.setattr(checks, "machine_cores", lambda: 1)
    problem = aiperf.config.local_cores_problem(config)
    assert problem and "more than this machine's 1 cores" in problem
    with pytest.raises(UserError) as raised, start.start_cluster(config):
        pass
    assert str(raised.value) == problem


def test_inside_a_job(monkeypatch):
    for queue in QUEUES.values():
        monkeypatch.delenv(queue.job_id_env, raising=False)
    assert job_id() is None
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert job_id() == "slurm-job-42"
    monkeypatch.delenv(LIFETIME_ENV, raising=False)
    assert worker_end("SLURMCluster-0") is None
    monkeypatch.setenv(JOB_STARTED_ENV, "1000")
    monkeypatch.setenv(LIFETIME_ENV, "300,30")
    ends = {worker_end(f"SLURMCluster-{i}") for i in range(20)}
    assert all(1270 <= e <= 1330 for e in ends) and len(ends) == 20, "staggered by worker name"
    assert worker_end("SLURMCluster-3") == 1000 + staggered_lifetime("SLURMCluster-3", 300, 30)


def test_one_gpu_per_worker(monkeypatch):
    monkeypatch.setenv(JOB_GPUS_ENV, "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    monkeypatch.delenv("AIPERF_GPU_PINNED", raising=False)
    pin_gpu("SLURMCluster-3-2")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6"


def test_cli_cluster_options_fail_in_one_line():
    def aiperf(*args):
        return subprocess.run(
            [sys.executable, "-m", "aiperf.cli.main", "run", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    for args, words in (
        (["--cluster", "moab"], "cluster.kind"),
        (["--cluster", "slurm", "--cluster-opt", "nodes=3"], "--cluster-opt"),
        (["--cluster", "slurm", "--cluster-opt", "gpus=two"], "cluster.gpus"),
    ):
        result = aiperf(*args)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_worker_environment_imports_neither_dask_distributed_nor_a_framework():
    """A worker pins its GPU before any framework starts: reading its environment must not start one."""
    code = (
        "import sys, aiperf.cluster.environment; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'distributed', 'tensorflow', 'keras', 'jax'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


class FakeDask:
    """The keeper's view of Dask, recorded: what it stopped, retired and resubmitted."""

    def __init__(self, workers: dict[str, bool]) -> None:  # address -> busy
        self.busy, self.stopped, self.retired, self.resubmits = workers, [], [], 0

    def workers(self):
        return [(address, f"SLURMCluster-{address}", address) for address in self.busy]

    def stop_sending_tasks(self, ws, stimulus_id):
        if ws in self.stopped:
            return False
        self.stopped.append(ws)
        return True

    def is_idle(self, ws):
        return not self.busy[ws]

    async def retire(self, address, stimulus_id):
        self.retired.append(address)

    def resubmit_ended_jobs(self):
        self.resubmits += 1


def test_keeper_stops_trials_near_a_workers_end_and_retires_it_once_idle():
    plan = JobPlan(
        kind="slurm",
        jobs=3,
        workers_per_job=1,
        cores=1,
        memory="2GB",
        gpus=0,
        walltime="01:00:00",
        lifetime_s=RETIRE_LEAD_S,
        stagger_s=0.0,
        adaptive=False,
    )
    keeper = Keeper(cluster=None, plan=plan)
    keeper.dask = FakeDask({"idle": False, "busy": True})
    asyncio.run(keeper._tend())
    assert keeper.dask.stopped == ["idle", "busy"] and keeper.dask.retired == ["idle"]
    assert keeper.dask.resubmits == 1, "ended jobs are resubmitted on every round"
    keeper.dask.busy.update(busy=False, young=False)
    keeper.first_seen["young"] = 1e12  # a worker whose end is far away is left alone
    asyncio.run(keeper._tend())
    assert keeper.dask.retired == ["idle", "busy"] and "young" not in keeper.dask.stopped
    assert keeper.dask.resubmits == 2
