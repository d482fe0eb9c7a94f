"""A folder of images that cannot be staged fails the benchmark flow before anything is recorded.
A run on a good folder (staged on the flow's Dask workers, its manifest and staging time recorded
and shown) is tests/test_benchmark_flow.py's: its one run is on folder data."""

from __future__ import annotations

import pytest
from conftest import TINY

pytestmark = pytest.mark.slow


def test_a_broken_folder_fails_the_run_before_anything_is_recorded(
    prefect_api, make_image_folder, tmp_path
):
    import time

    from aiperf.data.problems import DataError
    from aiperf_flows.benchmark import benchmark

    images = make_image_folder(tmp_path / "images", train_per_class=2, val_per_class=1)
    for f in (images / "val" / "fish").iterdir():
        f.unlink()
    db = tmp_path / "aiperf.db"
    started = time.time()
    with pytest.raises(DataError, match="class folder val/fish is empty"):
        benchmark(
            profile="quick",
            budget="20s",
            workers=1,
            db=f"sqlite:///{db}",
            out=str(tmp_path / "out"),
            overrides={**TINY, "data.kind": "folder", "data.source": str(images)},
        )
    assert time.time() - started < 15, "no cluster was started for a folder that cannot be staged"
    # Checked with the rest of the run's input, before its row exists (aiperf.lifecycle.preflight).
    assert not db.exists() and not (tmp_path / "out").exists(), "nothing was recorded"
