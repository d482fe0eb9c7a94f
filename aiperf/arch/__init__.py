"""Architectures as plain data (a graph of layer nodes), the one builder that turns them into
Keras models, the seeds searches start from, and the morphisms that grow them.

The graph and the spec are plain Python; the builder and the seeds import Keras, and with it a
deep-learning framework (seconds, and log lines). They load on first use, so the commands that only
read records (`aiperf show`, `runs`, `history`, ...) never start a framework."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from aiperf.arch.graph import Network, Node, count_params, infer_shapes
from aiperf.arch.spec import ArchSpec, StageSpec, load_spec, network_from_dict

if TYPE_CHECKING:
    from aiperf.arch.builder import build_model
    from aiperf.arch.seeds import build_seed, seed_names, seed_spec

# What needs Keras, by the module that defines it.
_WITH_KERAS = {
    "build_model": "aiperf.arch.builder",
    "build_seed": "aiperf.arch.seeds",
    "seed_names": "aiperf.arch.seeds",
    "seed_spec": "aiperf.arch.seeds",
}


def __getattr__(name: str) -> Any:
    if name in _WITH_KERAS:
        return getattr(import_module(_WITH_KERAS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ArchSpec",
    "Network",
    "Node",
    "StageSpec",
    "build_model",
    "build_seed",
    "count_params",
    "infer_shapes",
    "load_spec",
    "network_from_dict",
    "seed_names",
    "seed_spec",
]
