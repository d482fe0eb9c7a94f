"""A wheel carries everything aiperf needs at run time: installed (not editable) into a fresh venv
outside the checkout, `aiperf db upgrade` and a short `aiperf run` work from another folder.

The fresh venv borrows the heavy dependencies (TensorFlow, Prefect, ...) from the test venv through a
path file instead of downloading them again; aiperf itself, its migrations, profiles, job-queue
defaults and flows (the package aiperf_flows, built from flows/) come from the wheel alone. The
checkout's editable install is not visible there: path files of a borrowed folder are not processed,
so its import hook never loads.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from aiperf.cli.exit_codes import EXIT_INVALID

REPO = Path(__file__).resolve().parents[1]
JUNK = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "aiperf-out",
    "*.db",
)


def _run(
    *args: str | Path, cwd: Path, env: dict[str, str], timeout: float = 600, status: int = 0
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == status, f"{args}: {result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=JUNK)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PREFECT_HOME": str(root / "prefect"), "COLUMNS": "200"}
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        root / "dist",
        source,
        cwd=root,
        env=env,
    )
    (wheel,) = (root / "dist").glob("aiperf_automl-*.whl")

    fresh = root / "fresh"
    _run(sys.executable, "-m", "venv", fresh, cwd=root, env=env)
    python = fresh / "bin" / "python"
    purelib = _run(
        python,
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        cwd=root,
        env=env,
    ).stdout.strip()
    borrowed = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    Path(purelib, "borrowed-dependencies.pth").write_text(
        "\n".join(dict.fromkeys(borrowed)) + "\n"
    )
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel, cwd=root, env=env)
    env["PATH"] = f"{fresh / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return fresh, env


@pytest.mark.slow
def test_the_wheel_imports_aiperf_and_its_flows_from_itself(wheel_venv, tmp_path):
    """The flows install as aiperf_flows: no top-level `flows` that another project's could shadow
    or overwrite."""
    fresh, env = wheel_venv
    where = _run(
        fresh / "bin" / "python",
        "-c",
        "import aiperf, aiperf_flows.benchmark, aiperf_flows.nightly, importlib.util; "
        "print(aiperf.__file__); print(aiperf_flows.benchmark.__file__); "
        "print(importlib.util.find_spec('flows'))",
        cwd=tmp_path,
        env=env,
    ).stdout.split()
    assert where[-1] == "None", "the wheel installs no top-level package `flows`"
    assert all(Path(p).is_relative_to(fresh) for p in where[:-1]), where
    assert Path(where[1]).parent.name == "aiperf_flows"


@pytest.mark.slow
def test_the_wheel_holds_aiperf_and_aiperf_flows_only(wheel_venv):
    fresh, env = wheel_venv
    (wheel,) = (fresh.parent / "dist").glob("aiperf_automl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
        top_level = archive.read("aiperf_automl-0.1.0.dist-info/top_level.txt").decode().split()
    assert tops == {"aiperf", "aiperf_flows", "aiperf_automl-0.1.0.dist-info"}, tops
    assert sorted(top_level) == ["aiperf", "aiperf_flows"]


@pytest.mark.slow
def test_db_upgrade_and_a_short_run_from_another_folder(wheel_venv, tmp_path):
    fresh, env = wheel_venv
    aiperf = fresh / "bin" / "aiperf"
    upgraded = _run(aiperf, "db", "upgrade", "--db", "sqlite:///results.db", cwd=tmp_path, env=env)
    assert "upgraded from empty to revision" in upgraded.stdout
    tiny = [
        "data.image_size=16",
        "data.train_samples=256",
        "data.val_samples=64",
        "data.clutter=0",
        "train.epochs=1",
        "search.space.batch_size=[32]",
    ]
    ran = _run(
        aiperf,
        "run",
        "--budget",
        "8s",
        "--workers",
        "1",
        "--db",
        "sqlite:///results.db",
        *[arg for setting in tiny for arg in ("--set", setting)],
        cwd=tmp_path,
        env=env,
        status=EXIT_INVALID,  # 8 s is under the profile's minimum: verified, and invalid
    )
    assert "regulated score" in ran.stdout and "OPS (aiperf convention)" in ran.stdout
    listed = _run(aiperf, "runs", "--db", "sqlite:///results.db", cwd=tmp_path, env=env)
    assert "completed" in listed.stdout
    assert (
        len(list((tmp_path / "aiperf-out" / "reports").glob("aiperf-report-results-*-1.html")))
        == 1
    )


@pytest.mark.slow
def test_the_wheel_is_aiperf_automl_with_its_commands_and_python_m(wheel_venv, tmp_path):
    """The distribution is aiperf-automl ("aiperf" on the package index is another project); the
    import package stays aiperf, and `aiperf`, `aiperf-automl` and `python -m aiperf` all run the
    command."""
    fresh, env = wheel_venv
    shown = _run(
        fresh / "bin" / "python", "-m", "pip", "show", "aiperf-automl", cwd=tmp_path, env=env
    )
    assert "Name: aiperf-automl" in shown.stdout
    for command in (
        [fresh / "bin" / "aiperf"],
        [fresh / "bin" / "aiperf-automl"],
        [fresh / "bin" / "python", "-m", "aiperf"],
    ):
        helped = _run(*command, "--help", cwd=tmp_path, env=env)
        assert "run" in helped.stdout and "verify" in helped.stdout, command
