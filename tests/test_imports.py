"""TensorFlow's and Keras' optional imports of JAX, scikit-learn and pandas are skipped, and only
theirs: aiperf's own imports, keras-tuner's and Keras' JAX backend still get the packages."""

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
        ("sklearn", "keras_tuner.src.tuners.bayesian", False),  # the Bayesian oracle needs it
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
def test_importing_keras_after_aiperf_leaves_the_optional_packages_out_until_asked_for():
    script = (
        "import sys, aiperf, keras, tensorflow\n"
        "print(sorted(m for m in ('jax', 'sklearn', 'pandas') if m in sys.modules))\n"
        "import jax, sklearn, pandas\n"
        "print('imported later')\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["[]", "imported later"]
