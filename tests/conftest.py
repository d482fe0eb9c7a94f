"""Shared fixtures: one Prefect API for the whole session, tiny configs, fresh databases."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("DO_NOT_TRACK", "1")
# pytest-xdist's workers start with COLUMNS=80 set, and rich's Console fixes its width to COLUMNS
# as it is when the console is made (aiperf.cli.common's, at import): the tests that render at
# another width (CliRunner's env COLUMNS) would get 80. Unset, the console reads it at each print.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Each run's workers measure their peak before the window (aiperf.train.peak): briefly, in tests.
os.environ.setdefault("AIPERF_PEAK_SECONDS", "0.2")
# Nor do they time bare Keras before the window (aiperf.lifecycle.reference) unless a test asks:
# make test's runs would each pay a process's start-up and its seconds.
os.environ.setdefault("AIPERF_REFERENCE_SECONDS", "0")
# Runs in tests take a lock of their own session, not the user's local-run lock (aiperf.lifecycle.locks): a
# developer's own run, or another test session, never gets a test's run refused. The lock's folder
# goes when the session ends.
# Under pytest-xdist every worker takes a lock of its own: the two workers of `make test` run tests
# side by side, and a run in one must not have another's refused.
if "AIPERF_RUN_LOCK" not in os.environ or os.environ.get("PYTEST_XDIST_WORKER"):
    _lock_folder = tempfile.mkdtemp(prefix="aiperf-tests-")
    atexit.register(shutil.rmtree, _lock_folder, ignore_errors=True)
    os.environ["AIPERF_RUN_LOCK"] = os.path.join(_lock_folder, "local-run.lock")

import absl.logging  # noqa: E402
import pytest  # noqa: E402

# absl's logging handler (TensorFlow and JAX import absl) writes to the sys.stderr of the moment it
# is made, and closes that stream when logging's handlers are reset (a dictConfig, as Prefect's)
# unless it is the sys.stderr of that moment. Made during a test, it held pytest's capture file,
# which an in-process `aiperf run` under CliRunner (another sys.stderr) then closed: every test
# after it on that worker errored "I/O operation on closed file". Made here and pointed at
# sys.__stderr__ (file descriptor 2, captured all the same), it never closes what it did not open.
absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__

# Prefect's console log handler is made, with the sys.stderr of that moment, the first time Prefect
# configures logging in a process. Made inside an in-process command (CliRunner's sys.stderr, closed
# after it), every later Prefect log line of that worker failed on a closed file. Made here, it holds
# the session's own stderr.
from prefect.logging.configuration import setup_logging  # noqa: E402

setup_logging()

if TYPE_CHECKING:
    from aiperf.config import BenchmarkConfig

# Small enough to train in seconds on one core, still learnable.
TINY = {
    "data.image_size": 16,
    "data.train_samples": 384,
    "data.val_samples": 128,
    "data.noise": 0.5,
    "data.clutter": 0.0,
    "search.space.stages": [1, 2],
    "search.space.blocks_per_stage": [1],
    "search.space.base_filters": [4, 8],
    "search.space.kernel_size": [3],
    "search.space.batch_size": [32, 64],
    "train.epochs": 2,
}
# TINY with the simulated trainer (aiperf.train.simulated), for runs whose tests ask what a run
# records, not what trains: the CLI or flow, Dask, SQL and SLURM stay real, nothing trains through
# the window, and no worker warms up a framework or probes its peak (make test's CPU:
# docs/performance.md, "The test suite").
TINY_SIMULATED = {**TINY, "train.trainer": "simulated"}


@dataclass(frozen=True)
class ShortRealRun:
    """`short_real_run`: its config, its run's id (1) and its SQLite database file, beside which it
    wrote everything else (config.out is the database's folder)."""

    config: BenchmarkConfig
    run_id: int
    path: Path


class FinishedTrial:
    """An orchestrator trial handle whose trial has already ended with `result`: for tests that
    drive the real orchestrator with modelled trials."""

    def __init__(self, result) -> None:
        self._result = result

    def done(self) -> bool:
        return True

    def result(self):
        return self._result

    def cancel(self) -> None:
        pass


@pytest.fixture(scope="session")
def prefect_api():
    """One temporary Prefect API for every test that runs a flow (starting one costs seconds)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def short_real_run(tmp_path_factory) -> ShortRealRun:
    """One short real run (`run_benchmark`, no Prefect: Keras trials on 2 workers, 12 s, seed 3,
    TINY data and models, 3 epochs a trial, its system named with --set as a submitter names theirs)
    for the tests that only read what it left: verify's tampered copies (each on a copy of the
    database), the utilisation figures, the package, MLCommons' tools reading it, and the results
    list's invalid result (12 s is under the quick profile's 60). Made once a session, on the one
    worker that runs the files asking for it (pytest_collection_modifyitems): a run like it costs
    about 30 s of CPU on the slowest machine the tests run on (docs/performance.md, "The test
    suite")."""
    from aiperf.config import load_config
    from aiperf.lifecycle import run

    folder = tmp_path_factory.mktemp("short-real-run")
    config = load_config(
        "quick",
        budget="12s",
        workers=2,
        db=f"sqlite:///{folder / 'real.db'}",
        out=str(folder),
        seed=3,
        overrides={**TINY, "train.epochs": 3, "system.name": "test-box", "system.cooling": "air"},
    )
    outcome = run.run_benchmark(config)
    assert outcome.run_id == 1 and outcome.verified, "the run's own verification passed"
    return ShortRealRun(config, outcome.run_id, folder / "real.db")


@pytest.fixture(autouse=True)
def _runs_in_subprocesses_report_to_the_session_api(request):
    """Every slow test's `aiperf run` in a subprocess (the CLI, the benchmarks' scripts) reports to
    the session's Prefect API, as a user's run does to the server `make serve` starts: without
    PREFECT_API_URL each run starts and stops a temporary server of its own, about 5 s of CPU on
    the Xeon of docs/performance.md, which the tests do not need. It goes in os.environ, which the
    subprocesses inherit; the tests of a run without a server remove it from their run's
    environment (test_concurrent_runs), and the served Prefect's scripts start from an environment
    without it (prefect_serve.py). A developer's own PREFECT_API_URL is left as it is."""
    if request.node.get_closest_marker("slow") is None or "PREFECT_API_URL" in os.environ:
        return
    request.getfixturevalue("prefect_api")
    from prefect.settings import PREFECT_API_URL

    os.environ["PREFECT_API_URL"] = str(PREFECT_API_URL.value())


SERVED_PREFECT = "served_prefect"
_SHARED_SERVE = pytest.StashKey["object"]()


def _file(item) -> str:
    return item.nodeid.split("::")[0]


def _uses_served_prefect(item) -> bool:
    return SERVED_PREFECT in getattr(item, "fixturenames", ())


# Fixtures that train a real run (Dask workers, Keras trials): every test that reads one is an
# integration test, out of `make test-fast` like those marked slow by hand.
SHORT_REAL_RUN = "short_real_run"
REAL_RUN_FIXTURES = {"real_run", "quick_run", SHORT_REAL_RUN}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks set here
def pytest_collection_modifyitems(config, items):
    """Tests that read a real run are slow. The tests that use the served Prefect (`served_prefect`)
    run one after another, from where the first of them was collected, so the serve.sh they share
    runs only while they do.

    Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`) a file's tests stay on one
    worker, so its module fixtures (a real run) are made once; every test of the served Prefect
    is on one worker, which starts one serve.sh; and the files whose tests read `short_real_run`
    are on one worker, which makes that run once. Files with slow tests are listed first, but xdist
    hands out the groups with the most tests first (its default --loadscope-reorder), so that order
    only settles ties between groups of as many tests."""
    for item in items:
        if REAL_RUN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    users = [item for item in items if _uses_served_prefect(item)]
    if len(users) > 1:
        first = items.index(users[0])
        others = [item for item in items if not _uses_served_prefect(item)]
        items[:] = others[:first] + users + others[first:]
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    groups: dict[str, list] = {}
    sharing = {
        _file(item) for item in items if SHORT_REAL_RUN in getattr(item, "fixturenames", ())
    }
    for item in items:
        if _uses_served_prefect(item):
            group = SERVED_PREFECT
        elif _file(item) in sharing:  # the files whose tests read the session's short real run
            group = SHORT_REAL_RUN
        else:
            group = _file(item)
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)
    slow_first = sorted(
        groups.values(), key=lambda g: not any(i.get_closest_marker("slow") for i in g)
    )
    items[:] = [item for group in slow_first for item in group]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under `--dist loadgroup`, stop at once when xdist ignored the groups set above (every test
    has one, so every node id it collected should end with its `@group`): the run would still pass,
    but with a file's real runs made on both workers and two serve.sh at once. pytest 9.2 made xdist
    3.8's group suffix a no-op (pytest-dev/pytest-xdist#1386); pyproject.toml keeps pytest below it."""
    if node.config.getvalue("dist") == "loadgroup" and ids and not any("@" in i for i in ids):
        pytest.exit(
            f"pytest-xdist ignores the test groups under pytest {pytest.__version__} (no node id "
            "carries its @group): `make install-dev` installs the pytest pyproject.toml pins",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared serve.sh after the last test in a row that uses it."""
    if _uses_served_prefect(item) and (nextitem is None or not _uses_served_prefect(nextitem)):
        shared = item.config.stash.get(_SHARED_SERVE, None)
        if shared is not None:
            shared.close()


@pytest.fixture(scope="session")
def _shared_serve(request, tmp_path_factory):
    from prefect_serve import SharedServe

    shared = SharedServe(lambda: tmp_path_factory.mktemp("prefect-serve"))
    request.config.stash[_SHARED_SERVE] = shared
    yield shared
    shared.close()


@pytest.fixture
def served_prefect(_shared_serve):
    """`make serve` (infra/prefect/serve.sh, tests/prefect_serve.py): server, work pool `aiperf`,
    both deployments and a worker, one for every test that asks for it (starting one takes most of a
    minute); each test runs and checks its own flow runs. Its API needs the auth string serve.sh
    made up (`.auth()`, `.headers()`), and its worker reads profiles by name from `.profiles`."""
    return _shared_serve.get()


@pytest.fixture
def served_benchmark_run(served_prefect, tmp_path_factory):
    """The served `benchmark` deployment's one shared run (tests/prefect_serve.py `benchmark_run`):
    made by the first test that asks for it, read by the others."""
    from prefect_serve import benchmark_run

    return benchmark_run(served_prefect, lambda: tmp_path_factory.mktemp("served-run"))


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'aiperf.db'}"


def _fresh_postgres_database(server_url: str):
    """A new, empty database on the test PostgreSQL server, dropped afterwards: no test sees
    another's records, and migrations start from nothing as they do on a fresh SQLite file."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"aiperf_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh database on each engine: SQLite in a temp file, PostgreSQL from
    AIPERF_TEST_POSTGRES_URL (infra/postgres/ctl.sh start; `make test` starts it). Without that
    variable the PostgreSQL case is skipped on a developer's machine and fails in CI (CI=true)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'aiperf.db'}"
        return
    server = os.environ.get("AIPERF_TEST_POSTGRES_URL")
    if not server:
        message = (
            "AIPERF_TEST_POSTGRES_URL is not set; run `eval $(infra/postgres/ctl.sh start)` first"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    yield from _fresh_postgres_database(server)


@pytest.fixture
def postgres_db():
    """A fresh database on the test PostgreSQL server, its URL with the server's password (skipped
    without a server, except in CI)."""
    server = os.environ.get("AIPERF_TEST_POSTGRES_URL")
    if not server:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("AIPERF_TEST_POSTGRES_URL is not set; `make test` starts PostgreSQL")
        pytest.skip(
            "AIPERF_TEST_POSTGRES_URL is not set; run `eval $(infra/postgres/ctl.sh start)` first"
        )
    yield from _fresh_postgres_database(server)


@pytest.fixture(scope="session")
def make_image_folder():
    """A writer of small ImageNet-layout folders of real JPEG files: ROOT/train/<class>/*.jpg and
    ROOT/val/<class>/*.jpg. Each class has its own colour and stripe direction, plus noise, so the
    images are learnable; sizes vary so the pipeline's crops and resizes are exercised."""
    import numpy as np
    from PIL import Image

    def write(root, classes=("cat", "dog", "fish"), train_per_class=10, val_per_class=4, seed=0):
        from pathlib import Path

        root = Path(root)
        rng = np.random.default_rng(seed)
        for c, name in enumerate(classes):
            colour = np.array(
                [(c * 97) % 256, (c * 57 + 80) % 256, (c * 151 + 30) % 256], dtype=np.float32
            )
            for split, count in (("train", train_per_class), ("val", val_per_class)):
                folder = root / split / name
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(count):
                    h, w = int(rng.integers(20, 33)), int(rng.integers(20, 33))
                    yy, xx = np.mgrid[0:h, 0:w]
                    stripes = np.sin((xx if c % 2 else yy) * (0.5 + 0.3 * c))[..., None] * 60
                    image = colour + stripes + rng.normal(0, 20, (h, w, 3))
                    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
                        folder / f"{name}_{i:04d}.jpg", "JPEG", quality=90
                    )
        return root

    return write


def scored(flow_fn, **parameters):
    """The benchmark flow's result, valid or not. A test run of seconds is invalid (too short): the
    flow run then ends in a failed state named Invalid whose exception carries the score."""
    from aiperf.lifecycle.run import ResultNotValid

    try:
        return flow_fn(**parameters)
    except ResultNotValid as not_valid:
        return not_valid.outcome


@pytest.fixture(scope="module")
def folder_data(make_image_folder, tmp_path_factory):
    """A small ImageNet-layout image folder staged as TFRecord shards (16 px, 3 classes, 10 train
    and 4 validation images each): real JPEGs through the real pipeline, for trial and feed tests."""
    from aiperf.config import DataConfig
    from aiperf.data.staging import stage

    images = make_image_folder(
        tmp_path_factory.mktemp("src") / "images", train_per_class=10, val_per_class=4
    )
    config = DataConfig(kind="folder", source=str(images), image_size=16, shard_images=8)
    return stage(config, 0, tmp_path_factory.mktemp("staged"))
