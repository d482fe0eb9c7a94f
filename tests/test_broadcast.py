"""aiperf.cluster.broadcast.on_every_worker on a real Dask cluster of worker processes: every worker's
answer, a worker's own error raised as such, and a worker that leaves as it answers left out (a
batch cluster's keeper retires idle workers near their walltime, and one answering a broadcast is
idle: Dask's Client.run had failed the whole run there)."""

from __future__ import annotations

import operator
import os

import pytest
from distributed import Client, LocalCluster

from aiperf.cluster.broadcast import on_every_worker


def _cluster(n_workers: int) -> LocalCluster:
    return LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0"
    )


@pytest.fixture(scope="module")
def client():
    with _cluster(3) as cluster, Client(cluster) as client:
        yield client


class _FailsToLoad:
    """An argument that unpickles on the worker as 1 / 0: Dask's own error, before the function."""

    def __reduce__(self):
        return (operator.truediv, (1, 0))


def test_every_worker_answers_with_its_worker_given_as_dask_would(client):
    workers = set(client.scheduler_info(n_workers=-1)["workers"])

    def where(scale, dask_worker=None, *, offset):
        return (dask_worker.address, scale * 2 + offset)

    answers = on_every_worker(client, where, 3, offset=1)
    assert set(answers) == workers
    assert all(answer == (worker, 7) for worker, answer in answers.items())

    named = sorted(workers)[:2]
    assert set(on_every_worker(client, os.getpid, workers=named)) == set(named)


def test_an_error_the_function_raises_on_a_worker_is_raised_with_that_workers_traceback(client):
    def refuse_on_one(dask_worker=None):
        if dask_worker.name == 1:
            raise OSError("disk full on this node")  # an OSError of its own, not a lost worker
        return "ok"

    with pytest.raises(OSError, match="disk full on this node") as raised:
        on_every_worker(client, refuse_on_one)
    note = "\n".join(raised.value.__notes__)
    assert "on worker tcp://" in note and "in refuse_on_one" in note


def test_an_error_dask_reports_before_the_function_runs_is_raised(client):
    with pytest.raises(Exception, match="division by zero"):  # Dask wraps it in an Exception
        on_every_worker(client, len, _FailsToLoad())


def test_a_worker_that_leaves_as_it_answers_is_left_out_and_the_others_answer():
    with _cluster(2) as cluster, Client(cluster) as client:
        leaving = next(
            address
            for address, worker in client.scheduler_info()["workers"].items()
            if worker["name"] == 0
        )

        def answer_or_leave(dask_worker=None):
            if dask_worker.name == 0:
                os._exit(0)  # its process ends mid-broadcast, as a retired job's does
            return dask_worker.name

        answers = on_every_worker(client, answer_or_leave)
        assert leaving not in answers
        assert list(answers.values()) == [1]
