"""The watches stop a JAX loop from another thread without touching its state.

On JAX, a Keras callback's `model` property first writes the loop's latest state into the model's
variables and marks it synced (`jax_state_sync`). From the deadline's timer or Keras' callback
thread that races the loop: its next step donates those buffers and, told the state was synced, it
reads them back deleted, and the worker aborts ("Buffer has been deleted or donated", seen on a
two-device JAX trial stopped at its deadline in a full make test). So the watches set the loop's
flag on the model itself (aiperf.train.watch.stop_loop). In a fresh process with KERAS_BACKEND=jax,
since the backend is chosen once per process."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import json, math, time
import keras
from aiperf.train.watch import deadline_watch, nan_watch

def model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    m.compile(optimizer="sgd", loss="mse")
    # As the fit loop leaves it after a step: its state held outside the variables, not synced.
    m._jax_state = {"trainable_variables": [v.value for v in m.trainable_variables]}
    m._jax_state_synced = False
    return m

found = {"backend": keras.backend.backend()}
for name, watch, stop in [
    ("deadline", deadline_watch(time.time() - 1), lambda w: w.on_train_begin()),
    ("nan", nan_watch(every=1), lambda w: w.on_train_batch_end(0, {"loss": math.nan})),
]:
    m = model()
    watch.set_model(m)
    stop(watch)  # the deadline has passed: the timer's stop runs at once
    found[name] = {"stopped": bool(m.stop_training), "synced": m._jax_state_synced}
control = model()
watch = nan_watch()
watch.set_model(control)
watch.model  # what the watches must not do
found["control_synced"] = control._jax_state_synced
print(json.dumps(found))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="JAX is not installed (pip install -e '.[jax]')",
)
def test_the_watches_stop_a_jax_loop_without_syncing_its_state():
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["backend"] == "jax"
    assert found["control_synced"] is True, (
        "reading `model` syncs on this Keras: the test can tell"
    )
    assert found["deadline"] == {"stopped": True, "synced": False}
    assert found["nan"] == {"stopped": True, "synced": False}
