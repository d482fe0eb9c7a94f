"""TensorFlow's and Keras' optional imports of JAX, scikit-learn and pandas are skipped, and only
theirs: aiperf's own imports, scikit-learn's and Keras' JAX backend still get the packages, and
keras-tuner's Bayesian oracle gets scikit-learn when a run builds one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from aiperf import imports


@pytest.mark.parametrize(
    ("name", "importer", "skipped"),
    [
        ("jax", "tensorflow.lite.python.util", True),
        ("jax", "keras.src.callbacks.orbax_checkpoint", True),
        ("sklearn", "keras.src.wrappers.fixes", True),
        ("pandas", "keras.src.trainers.data_adapters.array_slicing", True),
        ("jax", "keras.src.backend.jax.core", False),  # Keras' JAX backend needs it
        ("sklearn", "keras_tuner.src.tuners.bayesian", True),  # given when a run builds one
        ("pandas", "keras_tuner.src.tuners.sklearn_tuner", True),
        ("pandas", "sklearn.utils.fixes", False),
        ("jax", "aiperf.train.fit", False),
        ("numpy", "keras.src.backend", False),  # not an optional import
    ],
)
def test_only_the_frameworks_optional_imports_are_refused(name, importer, skipped):
    assert imports.refused(name, importer) is skipped


def test_the_finder_names_the_module_that_imports():
    """The finder reads the importing module from the frame that runs the import statement."""
    finder = imports.OptionalImportFinder()
    probe = "finder.find_spec('pandas')"
    with pytest.raises(ModuleNotFoundError):
        exec(probe, {"__name__": "keras.src.probe", "finder": finder})
    assert exec(probe, {"__name__": "aiperf.probe", "finder": finder}) is None


@pytest.mark.slow
def test_keras_and_keras_tuner_after_aiperf_leave_the_optional_packages_out_until_asked_for():
    script = (
        "import sys, aiperf, keras, tensorflow\n"
        "print(sorted(m for m in ('jax', 'sklearn', 'pandas') if m in sys.modules))\n"
        "import keras_tuner\n"
        "print(sorted(m for m in ('jax', 'sklearn', 'pandas') if m in sys.modules))\n"
        "from aiperf.search import tuner_internals\n"
        "tuner_internals.give_bayesian_oracle_scikit_learn()\n"
        "keras_tuner.oracles.BayesianOptimizationOracle(keras_tuner.Objective('loss', 'min'), 2)\n"
        "import jax, pandas\n"
        "print('imported later')\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["[]", "[]", "imported later"]
