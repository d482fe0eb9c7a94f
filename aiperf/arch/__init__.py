"""Architectures as plain data (a graph of layer nodes), the one builder that turns them into
Keras models, the seeds searches start from, and the morphisms that grow them."""

from aiperf.arch.builder import build_model
from aiperf.arch.graph import Network, Node, count_params, infer_shapes
from aiperf.arch.seeds import build_seed, seed_names, seed_spec
from aiperf.arch.spec import ArchSpec, StageSpec, load_spec, network_from_dict

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
