"""Architecture specs (plain data) and the one builder that turns them into Keras models."""

from aiperf.arch.builder import build_model
from aiperf.arch.seeds import build_seed, seed_names, seed_spec
from aiperf.arch.spec import ArchSpec, StageSpec, load_spec

__all__ = ["ArchSpec", "StageSpec", "build_model", "build_seed", "load_spec", "seed_names", "seed_spec"]
