"""Named seed architectures: where a search starts, and names `aiperf flops` understands."""

from __future__ import annotations

from collections.abc import Callable

import keras

from aiperf.arch.builder import build_model
from aiperf.arch.spec import ArchSpec, StageSpec
from aiperf.errors import UserError


def resnet_mini(input_shape: tuple[int, int, int] = (32, 32, 3), num_classes: int = 10) -> ArchSpec:
    """Three basic-block stages (16/32/64 filters): a ResNet-8 for small images."""
    return ArchSpec(input_shape=input_shape, num_classes=num_classes, name="resnet-mini",
                    stem_filters=16,
                    stages=(StageSpec(1, 16, 1), StageSpec(1, 32, 2), StageSpec(1, 64, 2)))


def resnet_small(input_shape: tuple[int, int, int] = (32, 32, 3), num_classes: int = 10) -> ArchSpec:
    """ResNet-20 of He et al. for CIFAR-sized images (3 stages of 3 basic blocks)."""
    return ArchSpec(input_shape=input_shape, num_classes=num_classes, name="resnet-small",
                    stem_filters=16,
                    stages=(StageSpec(3, 16, 1), StageSpec(3, 32, 2), StageSpec(3, 64, 2)))


SEEDS: dict[str, Callable[..., ArchSpec]] = {
    "resnet-mini": resnet_mini,
    "resnet-small": resnet_small,
}


def seed_names() -> list[str]:
    return sorted(SEEDS)


def seed_spec(name: str, input_shape: tuple[int, int, int] | None = None,
              num_classes: int | None = None) -> ArchSpec:
    if name not in SEEDS:
        raise UserError(f"unknown seed architecture {name!r}; use one of: {', '.join(seed_names())}")
    spec = SEEDS[name]()
    return spec.with_io(input_shape, num_classes)


def build_seed(name: str, input_shape: tuple[int, int, int] | None = None,
               num_classes: int | None = None) -> keras.Model:
    return build_model(seed_spec(name, input_shape, num_classes))
