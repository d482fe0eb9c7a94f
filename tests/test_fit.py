"""Fit before paying (aiperf.train.fit): a trial's step is compiled from shapes and its memory read
from XLA before it trains; a proposal whose step does not fit its devices (with the ruleset's
headroom) ends too_large, untrained, and the search goes on. The memory reading and the trial run
in a JAX process on two host devices that the stand-in's seam (AIPERF_ACCELERATOR_PLATFORMS=cpu)
makes the node's accelerators, with a stand-in nvidia-smi declaring 64 MiB per GPU."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nvidia_smi_samples import h200_node, stand_in
from simulated_search import EndAfter, simulated_orchestrator

from aiperf import settings
from aiperf.rules import FitRule, _fit_rule, load_ruleset
from aiperf.status import TrialStatus
from aiperf.train.fit import StepMemory, fit_rule, too_large_message
from aiperf.train.messages import TrialResult
from aiperf.train.simulated import SimulatedModel, plan_trial

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def test_the_fit_rule_is_read_from_the_ruleset_with_a_packaged_default():
    assert load_ruleset("aiperf-rules-1.5").fit == FitRule(headroom=0.1, reduce="halve")
    assert fit_rule(None) == FitRule()  # a run naming no ruleset: the default ruleset's
    assert _fit_rule({"headroom": 0.2, "min_batch": 8}) == FitRule(headroom=0.2, min_batch=8)
    for bad in ({"headroom": 1.0}, {"reduce": "quarter"}, {"min_batch": 0}):
        with pytest.raises(ValueError, match="a fit rule needs"):
            _fit_rule(bad)


def _memory(needed: int, available: int | None) -> StepMemory:
    return StepMemory(
        bytes_needed=needed,
        bytes_available=available,
        fits=available is None or needed <= available,
        global_batch=1024,
        devices=8,
        precision="mixed_bfloat16",
        argument_bytes=needed // 2,
        output_bytes=0,
        alias_bytes=0,
        temp_bytes=needed // 2,
        code_bytes=0,
        device_bytes=None if available is None else int(available / 0.9),
        headroom=0.1,
        compile_s=1.0,
    )


def test_a_step_that_does_not_fit_says_so_in_one_line():
    message = too_large_message(_memory(900 * MIB, 810 * MIB))
    assert "\n" not in message
    assert "the step needs 900 MiB per device at batch 128 per device on 8 devices" in message
    assert "does not fit in 810 MiB (10% headroom kept of 900 MiB)" in message
    assert "batch_per_gib" in message and "not trained" in message
    assert _memory(1, None).fits and "device memory unknown" in _memory(1, None).line()


def test_a_too_large_trial_is_stored_with_its_own_status_and_the_search_goes_on(tmp_path):
    """The first proposal ends too_large (as a worker's fit check ends it: no epoch); the oracle is
    told and the search proposes the next trials, which train; the status is one the trials
    table's CHECK constraint accepts (migration 0016)."""
    fast = SimulatedModel(ops_per_s=3e11, train_samples=384, val_samples=128)
    launched: list[str] = []

    class Done:
        def __init__(self, result: TrialResult) -> None:
            self._result = result

        def add_done_callback(self, fn) -> None:
            threading.Timer(0.05, fn, args=(self,)).start()

        def done(self) -> bool:
            return True

        def result(self) -> TrialResult:
            return self._result

        def cancel(self) -> None:
            pass

    def launch(request):
        launched.append(request.trial_key)
        plan = plan_trial(request, time.time(), "worker-a", fast)
        if len(launched) == 1:
            assert request.fit_headroom == 0.1  # the ruleset's rule travels with the request
            return Done(TrialResult(request.trial_key, TrialStatus.TOO_LARGE, plan.built, [], "x"))
        return Done(TrialResult(request.trial_key, plan.status, plan.built, plan.epochs))

    ending = EndAfter(launch, 3)
    orchestrator = simulated_orchestrator(tmp_path, ending)
    ending.orchestrator = orchestrator
    with orchestrator.recorder.store:
        started = time.time()
        summary = orchestrator.run(started, started + 600.0)
    assert summary.trials >= 2 and orchestrator.counts[TrialStatus.TOO_LARGE] == 1
    with sqlite3.connect(tmp_path / "a.db") as connection:
        statuses = [s for (s,) in connection.execute("SELECT status FROM trials ORDER BY id")]
    assert statuses[0] == "too_large" and "too_large" not in statuses[1:], statuses


FIT = """
import json, sys, time
from pathlib import Path
from aiperf.arch import build_model, network_from_dict
from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.search.space import architecture
from aiperf.train.devices import data_parallel
from aiperf.train.fit import step_memory
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import configure_threads, run_trial, worker_cores

configure_threads(worker_cores())
m = stage(DataConfig(kind="digits", image_size=16, channels=1, train_samples=256, val_samples=128),
          0, Path(sys.argv[1]))
small = architecture({"stages": 1, "blocks_per_stage": 1, "base_filters": 4, "kernel_size": 3},
                     m.image_shape, 10).to_dict()
large = architecture({"stages": 1, "blocks_per_stage": 1, "base_filters": 64, "kernel_size": 3},
                     m.image_shape, 10).to_dict()
found = {}
with data_parallel("jax", 2):
    model = build_model(network_from_dict(small))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=True)
    for batch in (32, 64):
        found[batch] = step_memory(model, global_batch=batch, devices=2,
                                   precision="float32").to_dict()
r = run_trial(TrialRequest(run_id=1, trial_key="t0", architecture=large, learning_rate=0.05,
                           batch_size=128, epochs=1, devices=2, jit_compile=True,
                           deadline=time.time() + 600, data_path=m.path, seed=0),
              lambda _m: None)
print(json.dumps({"memory": found, "status": r.status, "message": r.message,
                  "epochs": len(r.epochs), "phases": r.phases,
                  "built": r.built is not None}))
"""


@pytest.mark.slow
def test_xla_says_what_a_step_needs_per_device_and_a_proposal_too_large_is_never_trained(
    tmp_path,
):
    """On two devices declared as 64-MiB GPUs (JAX's 0.9 share, 10% headroom: 51.8 MiB a step):
    XLA's figures are each device's (a global batch twice as large adds one device's share of it:
    16 more 16x16 float32 images and labels), and a 64-filter ResNet at 128 a device needs more
    than the device has, so its trial ends too_large with no epoch and no training step."""
    bin_folder = stand_in(tmp_path / "bin", h200_node(2, memory_mib=64))
    env = {
        **os.environ,
        "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}",
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9",
        settings.ACCELERATOR_PLATFORMS.name: "cpu",
        settings.WORKER_DEVICES.name: "2",
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run(
        [sys.executable, "-c", FIT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    small, twice = found["memory"]["32"], found["memory"]["64"]
    share = int(64 * MIB * 0.9)
    assert small["device_bytes"] == share and small["bytes_available"] == int(share * 0.9)
    assert small["fits"] and 0 < small["bytes_needed"] < small["bytes_available"]
    one_device_more = 16 * (16 * 16 * 1 * 4 + 4)  # 16 images and their int32 labels
    assert twice["argument_bytes"] - small["argument_bytes"] == one_device_more, (small, twice)
    assert found["status"] == "too_large", found["message"]
    assert found["message"].startswith("too large for its devices: the step needs "), found
    assert "at batch 128 per device on 2 devices" in found["message"], found["message"]
    assert found["epochs"] == 0 and found["built"]
    assert found["phases"]["train_s"] == 0 and found["phases"]["evaluate_s"] == 0


COMPILES = """
import json, logging
import jax, keras, numpy as np
from aiperf.train.devices import data_parallel
from aiperf.train.fit import STEP_FREEVAR, StepRecipe, step_memory, trainable

finished = []
class Count(logging.Handler):
    def emit(self, record):
        text = record.getMessage()
        if "Finished XLA compilation" in text and "train_step" in text:
            finished.append(text)
jax.config.update("jax_log_compiles", True)
logging.getLogger("jax").addHandler(Count())
found = {}
for devices in (1, 2):
    finished.clear()
    with data_parallel("jax", devices):
        network = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model = trainable(network, StepRecipe(), pixels=False, devices=devices)
        step_memory(model, global_batch=8, devices=devices, precision="float32", available=2**30)
        model.fit(np.zeros((8, 4), "float32"), np.zeros((8,), "int32"), batch_size=8, epochs=2,
                  verbose=0)
        found[devices] = len(finished)
found["freevars"] = list(model.train_function.__code__.co_freevars)
found["freevar"] = STEP_FREEVAR
print(json.dumps(found))
"""


def test_the_fit_check_is_the_step_fit_runs_on_one_device_and_on_two(tmp_path):
    """step_memory compiles the trial's own step from shapes; fit then finds it in JAX's cache and
    compiles nothing more: one compile of train_step on one device (no distribution: no sharding in
    the shapes) and on two (the distribution's). And the installed Keras keeps the jitted step in
    its train function's closure under the free variable step_memory reads it by."""
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    done = subprocess.run(
        [sys.executable, "-c", COMPILES],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert (found["1"], found["2"]) == (1, 1), found
    assert found["freevar"] in found["freevars"], found


def _seed_found(worker: str, fits: list[bool], per_device: list[int]) -> dict:
    """A worker's seed_fit_on_worker answer: checked at each batch until the first that fits."""
    checked = [
        {**_memory(100 * MIB, (200 if ok else 50) * MIB).to_dict(), "global_batch": b * 8}
        for ok, b in zip(fits, per_device, strict=True)
    ]
    return {
        "worker": worker,
        "fits": fits.index(True) if True in fits else None,
        "checked": checked,
    }


def test_the_run_settles_where_the_workers_stopped_at_different_batches(tmp_path):
    """Each worker stops at its first batch that fits: a worker listed first that fit at once has
    one figure where another needed two. The run takes the second list, and stores every
    worker's figures with its peak record (verify's evidence)."""
    from aiperf.lifecycle.fitcheck import _settle
    from aiperf.train.fit import SEED_FIT

    orchestrator = simulated_orchestrator(tmp_path, lambda request: None)
    recorder, config = orchestrator.recorder, orchestrator.config
    lists = [[64], [32], [16]]
    found = [_seed_found("a", [True], [64]), _seed_found("b", [False, True], [64, 32])]
    with recorder.store:
        recorder.peaks([{"worker": w, "flops": 1.0} for w in ("a", "b")])
        settled = _settle(config, recorder, lists, found, logging.getLogger("test"))
        stored = recorder.store.get_run(recorder.run_id).worker_peaks
    assert settled.search.space.batch_size == [32]
    assert [p[SEED_FIT]["fits"] for p in stored] == [0, 1]
    assert len(stored[1][SEED_FIT]["checked"]) == 2


def test_verify_accepts_a_halved_batch_only_with_the_figures_that_it_did_not_fit():
    """Under aiperf-rules-1.6 (a fit rule in its YAML) the imagenet profile's [12, 13, 14] x 15 GiB
    halved to 7 GiB passes verify's batch check only where a worker's stored seed figures show the
    seed at 210 a device did not fit; under 1.5 (no fit rule) a reduced list is judged as any other."""
    from test_auto_settings import F16, F32, gpu, imagenet, peak, settle

    from aiperf.results.division import batch_problem

    t4 = peak("w0", {F32: 8e12, F16: 65e12}, gpu((7, 5), 15360))
    halved = settle(imagenet(), F16, [84, 91, 98])
    assert load_ruleset(halved.ruleset).fit_declared, halved.ruleset
    did_not_fit = {**t4, "seed_fit": _seed_found("w0", [False, True], [210, 98])}
    fitted = {**t4, "seed_fit": _seed_found("w0", [True], [210])}
    assert batch_problem(halved, [did_not_fit]) is None
    assert "is not [180, 195, 210]" in (batch_problem(halved, [t4]) or "")
    assert "is not [180, 195, 210]" in (batch_problem(halved, [fitted]) or "")
    older = halved.model_copy(update={"ruleset": "aiperf-rules-1.5"})
    assert not load_ruleset("aiperf-rules-1.5").fit_declared
    assert "is not [180, 195, 210]" in (batch_problem(older, [did_not_fit]) or "")
