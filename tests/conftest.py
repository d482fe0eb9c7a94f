"""Shared fixtures: one Prefect API for the whole session, tiny configs, fresh databases."""

from __future__ import annotations

import os

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

# Small enough to train in seconds on one core, still learnable.
TINY = {
    "data.image_size": 16,
    "data.train_samples": 384,
    "data.val_samples": 128,
    "data.noise": 0.5,
    "search.space.stages": [1, 2],
    "search.space.blocks_per_stage": [1],
    "search.space.base_filters": [4, 8],
    "search.space.kernel_size": [3],
    "search.space.batch_size": [32, 64],
    "train.epochs": 2,
}


@pytest.fixture(scope="session")
def prefect_api():
    """One temporary Prefect API for every test that runs a flow (starting one costs seconds)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'aiperf.db'}"
