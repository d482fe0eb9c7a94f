"""A disk too small for a run's files: refused in one line before anything is recorded where the
size is known beforehand, named in one line (never a traceback) where it fills during the run, and
checked on each node before its local copy is made.

The small disks are real tmpfs mounts, which needs root (as CI and `make test` run); elsewhere
these tests are skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiperf.data.placement import copy_verified
from aiperf.errors import DiskFull
from aiperf.store import Store

PAGE = 4096
# The tiny synthetic data set of these runs: 512 images of 16x16x3 float32.
SAMPLES, SIDE = 512, 16
X_BYTES = SAMPLES * SIDE * SIDE * 3 * 4
TINY_DATA = [
    f"data.image_size={SIDE}",
    f"data.train_samples={SAMPLES - 128}",
    "data.val_samples=128",
]


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of the given bytes (rounded up to pages), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI and make test run as root)")
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True
        )
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _aiperf_run(out: Path, db: str, timeout: int) -> subprocess.CompletedProcess:
    sets = [arg for setting in TINY_DATA for arg in ("--set", setting)]
    return subprocess.run(
        [sys.executable, "-m", "aiperf.cli.main", "run", "--budget", "20s", "--workers", "1"]
        + ["--out", str(out), "--db", db, "--allow-concurrent", *sets],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "300"},
    )


def test_data_that_cannot_fit_under_out_is_refused_before_anything_is_recorded(
    small_disk, tmp_path
):
    disk = small_disk(X_BYTES // 2)
    db = tmp_path / "runs.db"
    result = _aiperf_run(disk / "out", f"sqlite:///{db}", timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--out" in result.stderr and "needs 1.6 MB" in result.stderr, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not db.exists()  # nothing recorded
    assert not any((disk / "out").rglob("*.npz*"))


@pytest.mark.slow
def test_a_disk_that_fills_during_staging_is_one_line_and_the_run_closes_failed(
    small_disk, tmp_path
):
    # Room for the images but not their labels and the run's event log: the check before
    # recording passes, and the write fills the disk half-way.
    disk = small_disk(X_BYTES + PAGE)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = _aiperf_run(disk / "out", db, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    (said,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "--out" in said and "its disk is full" in said, result.stderr
    with Store.open(db, migrate=False) as store:
        (run,) = store.list_runs()
        assert run.status == "failed" and "disk is full" in (run.message or "")
    assert not any((disk / "out").rglob("*.partial*"))  # no half-written file kept


def test_a_node_whose_disk_cannot_hold_its_copy_is_named_before_the_copy(small_disk, tmp_path):
    shard = tmp_path / "train-00000-of-00001"
    shard.write_bytes(os.urandom(64 * 1024))
    from aiperf.data.manifest import sha256_file

    entry = {"src": str(shard), "file": shard.name, "sha256": sha256_file(shard)}
    entry["size_bytes"] = shard.stat().st_size
    disk = small_disk(8 * PAGE)
    with pytest.raises(DiskFull, match=r"data\.stage_to .*node-local copy.* needs 65\.5 KB"):
        copy_verified([entry], str(disk / "copy"), None)
    assert not any((disk / "copy").iterdir())  # nothing copied
