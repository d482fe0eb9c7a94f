"""Architectures as plain data (a graph of layer nodes; a decoder-only transformer's spec), the
builders that turn them into Keras models, the seeds searches start from, and the morphisms (growth
operators, for transformers) that grow them.

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
    from aiperf.arch.grow import grow_weights
    from aiperf.arch.seeds import build_seed, seed_names, seed_spec
    from aiperf.arch.transformer import (
        TransformerSpec,
        build_transformer,
        is_transformer,
        transformer_seed,
        transformer_seed_names,
    )

# What needs Keras, by the module that defines it.
_WITH_KERAS = {
    "build_model": "aiperf.arch.builder",
    "build_seed": "aiperf.arch.seeds",
    "seed_names": "aiperf.arch.seeds",
    "seed_spec": "aiperf.arch.seeds",
    "grow_weights": "aiperf.arch.grow",
    "build_transformer": "aiperf.arch.transformer",
}
# The transformer's spec is plain Python (its builder imports Keras when called), loaded on first
# use all the same: the CNN track's commands need none of it.
_LAZY = {
    **_WITH_KERAS,
    "TransformerSpec": "aiperf.arch.transformer",
    "transformer_seed": "aiperf.arch.transformer",
    "transformer_seed_names": "aiperf.arch.transformer",
    "is_transformer": "aiperf.arch.transformer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ArchSpec",
    "Network",
    "Node",
    "StageSpec",
    "TransformerSpec",
    "build_model",
    "build_seed",
    "build_transformer",
    "count_params",
    "grow_weights",
    "infer_shapes",
    "is_transformer",
    "load_spec",
    "network_from_dict",
    "seed_names",
    "seed_spec",
    "transformer_seed",
    "transformer_seed_names",
]
