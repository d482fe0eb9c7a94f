"""The tf.data pipeline feeds Keras on the JAX backend too: a real trial on the staged digits, in a
fresh process with KERAS_BACKEND=jax (the backend is chosen once per process)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys, time
from pathlib import Path
import keras
from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.search.space import architecture
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import run_trial

m = stage(DataConfig(kind="digits", image_size=16, channels=1, train_samples=480, val_samples=120), 0,
          Path(sys.argv[1]))
arch = architecture({"stages": 1, "blocks_per_stage": 1, "base_filters": 8, "kernel_size": 3}, m.image_shape, 10)
r = run_trial(TrialRequest(run_id=1, trial_key="t", architecture=arch.to_dict(), learning_rate=0.05,
                           batch_size=16, epochs=2, deadline=time.time() + 300, data_path=m.path, seed=1),
              lambda _m: None)
print(json.dumps({"backend": keras.backend.backend(), "status": r.status, "message": r.message,
                  "epochs": [[e.samples_trained, e.samples_evaluated] for e in r.epochs]}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="JAX is not installed (pip install -e '.[jax]')",
)
def test_pipeline_feeds_a_trial_on_jax(tmp_path):
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["backend"] == "jax"
    assert result["status"] == "completed", result["message"]
    assert result["epochs"] == [[480, 120]] * 2
