"""Keep TensorFlow and Keras from importing JAX, scikit-learn and pandas only because they exist.

TensorFlow and Keras try a few imports at start-up for features aiperf never uses: TensorFlow
Lite's converter utilities try JAX, Keras' checkpoint callback tries JAX, Keras' scikit-learn
wrappers try scikit-learn, and Keras' array adapters try pandas. Each `try: import X / except
ImportError` succeeds because aiperf installs the package for its own reasons (JAX for the GPU
path, scikit-learn for keras-tuner's Bayesian oracle and the digits dataset), and together they
cost about 3 of the 9 to 12 CPU-seconds of `import keras` on a 2-vCPU machine (docs/performance.md).
Every trial worker, every run's head and many of the test suite's processes pay that import, so on
the suite's slowest machine it is minutes of CPU spent loading code nothing calls.

`install()` puts a finder first on `sys.meta_path` that answers ModuleNotFoundError when one of
the packages below is imported *by a module of TensorFlow or Keras*, which those modules already
treat as "not installed". Every other importer is left alone: aiperf's own `import jax`,
keras-tuner's `import sklearn`, Keras' JAX backend (when KERAS_BACKEND=jax, it imports JAX from
keras.src.backend.jax, which is exempt), and a package once imported stays importable by anyone.
The rules are data (OPTIONAL); nothing else changes what a library does.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType

FRAMEWORKS = ("tensorflow.", "keras.")
# Packages refused to FRAMEWORKS' modules; and the frameworks' modules that truly need them.
OPTIONAL: dict[str, tuple[str, ...]] = {
    "jax": ("keras.src.backend.jax",),
    "sklearn": (),
    "pandas": (),
}
_IMPORT_MACHINERY = ("importlib", "_frozen_importlib")


def _importer(frame: FrameType | None) -> str:
    """The module whose code runs the import statement: the first frame outside importlib."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_IMPORT_MACHINERY):
        frame = frame.f_back
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def refused(name: str, importer: str) -> bool:
    """Whether `importer` importing top-level package `name` is one of the optional imports."""
    if name not in OPTIONAL or not importer.startswith(FRAMEWORKS):
        return False
    return not importer.startswith(OPTIONAL[name])


class OptionalImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that answers "not installed" to the frameworks' optional imports."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname in OPTIONAL and refused(fullname, _importer(sys._getframe(1))):
            raise ModuleNotFoundError(f"aiperf skips {fullname} for {FRAMEWORKS}", name=fullname)
        return None


def install() -> None:
    """Put the finder first on sys.meta_path, once per process."""
    if not any(isinstance(finder, OptionalImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, OptionalImportFinder())
