"""Keep TensorFlow, Keras and keras-tuner from importing JAX, scikit-learn and pandas for nothing.

These frameworks try a few imports at start-up for features aiperf never uses: TensorFlow Lite's
converter utilities and Keras' checkpoint callback try JAX, Keras' and keras-tuner's scikit-learn
wrappers try scikit-learn, their array adapters try pandas. Each `try: import X / except
ImportError` succeeds because aiperf installs the package for its own reasons (JAX for the GPU
path, scikit-learn for keras-tuner's Bayesian oracle and the digits dataset), and together they
cost 4-5 of the 12 CPU-seconds of `import keras` on a 2-vCPU Zen 3, and 2 more in a run's head,
which imports keras-tuner (docs/performance.md). Every trial worker, every run's head and many of
the test suite's processes pay those imports: on the suite's slowest machine, minutes of CPU spent
loading code nothing calls.

`install()` puts a finder first on `sys.meta_path` that answers ModuleNotFoundError when one of
the packages in OPTIONAL, not yet imported, is imported *by one of those frameworks' modules*,
which they already treat as "not installed". Every other importer is left alone (aiperf's own
`import jax`, scikit-learn's `import pandas`), Keras' JAX backend is exempt (with
KERAS_BACKEND=jax it imports JAX from keras.src.backend.jax), and a package once imported is
there for everyone. The one feature aiperf uses of what is refused, keras-tuner's Bayesian oracle,
is handed scikit-learn when a run builds one (aiperf.search.tuner_internals).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType

# Each optional package: the importers it is refused to (module-name prefixes), and those of them
# that truly need it (Keras' JAX backend). keras-tuner's Bayesian oracle gets scikit-learn when a
# run builds one (aiperf.search.tuner_internals.give_bayesian_oracle_scikit_learn).
OPTIONAL: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "jax": (("tensorflow.", "keras."), ("keras.src.backend.jax",)),
    "sklearn": (("tensorflow.", "keras.", "keras_tuner."), ()),
    "pandas": (("tensorflow.", "keras.", "keras_tuner."), ()),
}
_IMPORT_MACHINERY = ("importlib", "_frozen_importlib")


def _importer(frame: FrameType | None) -> str:
    """The module whose code runs the import statement: the first frame outside importlib."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_IMPORT_MACHINERY):
        frame = frame.f_back
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def refused(name: str, importer: str) -> bool:
    """Whether `importer` importing top-level package `name` is one of the optional imports."""
    if name not in OPTIONAL:
        return False
    refused_to, needed_by = OPTIONAL[name]
    return importer.startswith(refused_to) and not importer.startswith(needed_by)


class OptionalImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that answers "not installed" to the frameworks' optional imports."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname in OPTIONAL and refused(fullname, _importer(sys._getframe(1))):
            raise ModuleNotFoundError(f"aiperf.imports skips {fullname} here", name=fullname)
        return None


def install() -> None:
    """Put the finder first on sys.meta_path, once per process."""
    if not any(isinstance(finder, OptionalImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, OptionalImportFinder())
