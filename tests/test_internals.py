"""The private names aiperf uses from keras-tuner and Dask still exist in the installed releases,
as callables taking the parameters aiperf passes: a release that drops or changes one fails here,
naming it and the adapter module to update, rather than deep inside a run."""

from __future__ import annotations

import inspect

import pytest

from aiperf.cluster import dask_internals
from aiperf.search import tuner_internals


def _problem(owner: type, name: str, parameters: tuple[str, ...], adapter: str) -> str | None:
    """What is wrong with `owner.name` as aiperf calls it, or None."""
    where = f"{owner.__module__}.{owner.__qualname__}.{name}"
    member = inspect.getattr_static(owner, name, None)
    if member is None:
        return f"{where} is gone from the installed release; update {adapter}"
    function = getattr(owner, name)
    if not callable(function):
        return f"{where} is no longer callable; update {adapter}"
    accepted = list(inspect.signature(function).parameters.values())[1:]  # after self
    names = {p.name for p in accepted}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted)
    missing = [p for p in parameters if p not in names and not takes_any]
    if missing:
        return f"{where} takes no parameter {', '.join(missing)}; update {adapter}"
    required = [
        p.name
        for p in accepted
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    extra = [p for p in required if p not in parameters]
    if extra:
        return f"{where} now requires {', '.join(extra)}; update {adapter}"
    return None


@pytest.mark.parametrize("name", sorted(tuner_internals.PRIVATE_METHODS))
def test_keras_tuners_oracle_keeps_each_private_method(name):
    import keras_tuner as kt

    parameters = tuner_internals.PRIVATE_METHODS[name]
    problem = _problem(kt.Oracle, name, parameters, "aiperf/search/tuner_internals.py")
    assert problem is None, problem


@pytest.mark.parametrize("name", sorted(dask_internals.SPEC_CLUSTER_METHODS))
def test_dask_jobqueues_clusters_keep_each_spec_cluster_internal(name):
    from dask_jobqueue.core import JobQueueCluster
    from distributed.deploy.spec import SpecCluster

    assert issubclass(JobQueueCluster, SpecCluster), (
        "dask-jobqueue's JobQueueCluster is no longer a distributed SpecCluster; "
        "update aiperf/cluster/dask_internals.py"
    )
    parameters = dask_internals.SPEC_CLUSTER_METHODS[name]
    for owner in (SpecCluster, JobQueueCluster):
        problem = _problem(owner, name, parameters, "aiperf/cluster/dask_internals.py")
        assert problem is None, problem


@pytest.mark.parametrize("name", sorted(dask_internals.SCHEDULER_METHODS))
def test_the_scheduler_keeps_each_method_the_keeper_calls(name):
    from distributed.scheduler import Scheduler

    parameters = dask_internals.SCHEDULER_METHODS[name]
    problem = _problem(Scheduler, name, parameters, "aiperf/cluster/dask_internals.py")
    assert problem is None, problem


def test_worker_state_and_status_keep_what_the_keeper_reads():
    from distributed.core import Status
    from distributed.scheduler import WorkerState

    slots = {name for cls in WorkerState.__mro__ for name in getattr(cls, "__slots__", ())}
    missing = [
        name
        for name in dask_internals.WORKER_STATE_ATTRIBUTES
        if name not in slots and not hasattr(WorkerState, name)
    ]
    assert not missing, (
        f"distributed.scheduler.WorkerState has no {', '.join(missing)}; "
        "update aiperf/cluster/dask_internals.py"
    )
    for status in ("running", "closing_gracefully"):
        assert hasattr(Status, status), (
            f"distributed.core.Status has no {status}; update aiperf/cluster/dask_internals.py"
        )


def test_the_adapters_patch_and_call_real_oracles():
    """On a real keras-tuner oracle the patched methods do nothing and record_values records."""
    import keras_tuner as kt

    hyperparameters = kt.HyperParameters()
    hyperparameters.Choice("width", [8, 16])
    oracle = kt.oracles.RandomSearchOracle(
        objective=kt.Objective("score", "max"), max_trials=4, hyperparameters=hyperparameters
    )
    tuner_internals.skip_trial_files(oracle)
    tuner_internals.skip_failure_count(oracle)
    assert oracle._save_trial(None) is None and oracle._check_consecutive_failures() is None
    trial = kt.engine.trial.Trial(hyperparameters.copy(), trial_id="t0")
    trial.hyperparameters.values = {"width": 8}
    assert oracle.get_state()["tried_so_far"] == []
    tuner_internals.record_values(oracle, trial)
    assert len(oracle.get_state()["tried_so_far"]) == 1, "the trial's values are marked as tried"


def test_keras_tuners_bayesian_oracle_still_reads_scikit_learn_from_its_module_global():
    """aiperf sets `bayesian.sklearn` (tuner_internals.give_bayesian_oracle_scikit_learn): a
    release that imports scikit-learn some other way would leave the setting without effect."""
    from keras_tuner.src.tuners import bayesian

    source = inspect.getsource(bayesian)
    assert (
        "sklearn = None" in source
        and "sklearn.gaussian_process.GaussianProcessRegressor" in source
    )
