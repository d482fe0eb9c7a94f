"""Named seed architectures: where a search starts, and names `aiperf flops` understands."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import keras

from aiperf.arch.builder import build_model
from aiperf.arch.compose import Composer, ConvStyle
from aiperf.arch.graph import Network
from aiperf.arch.spec import ArchSpec, StageSpec
from aiperf.errors import UserError

KERAS_BN_EPSILON = 1.001e-5
# keras.applications' ResNet-50: biased convolutions, its own BN epsilon (momentum as Keras').
_KERAS = ConvStyle(bias=True, epsilon=KERAS_BN_EPSILON)


def resnet50(
    input_shape: tuple[int, int, int] = (224, 224, 3), num_classes: int = 1000
) -> Network:
    """ResNet-50 v1 layer for layer as keras.applications.ResNet50 builds it (explicit zero padding,
    biased convolutions, BN epsilon 1.001e-5, stride in the first 1x1 conv of a block), so the
    published operation counts hold for it."""
    g = Composer()
    x = g.add("conv1_pad", "zeropad", "input", pad=3)
    x = g.conv_bn(x, "conv1", 64, 7, 2, style=replace(_KERAS, padding="valid"))
    x = g.add("pool1_pad", "zeropad", x, pad=1)
    x = g.add("pool1_pool", "maxpool", x, pool=3, stride=2, padding="valid")
    for stage, (filters, blocks, stride) in enumerate(
        ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), start=2
    ):
        for b in range(1, blocks + 1):
            name, s = f"conv{stage}_block{b}", stride if b == 1 else 1
            shortcut = x
            if b == 1:
                shortcut = g.conv_bn(
                    x,
                    f"{name}_0",
                    4 * filters,
                    1,
                    s,
                    relu=False,
                    style=_KERAS,
                )
            y = g.conv_bn(x, f"{name}_1", filters, 1, s, style=_KERAS)
            y = g.conv_bn(y, f"{name}_2", filters, 3, style=_KERAS)
            y = g.conv_bn(y, f"{name}_3", 4 * filters, 1, relu=False, style=_KERAS)
            y = g.add(f"{name}_add", "add", [shortcut, y])
            x = g.add(f"{name}_out", "relu", y)
    x = g.add("avg_pool", "gap", x)
    g.add("predictions", "dense", x, units="classes", activation="softmax")
    return g.network("resnet50", input_shape, num_classes)


def resnet_mini(input_shape: tuple[int, int, int] = (32, 32, 3), num_classes: int = 10) -> Network:
    """Three basic-block stages (16/32/64 filters), one block each: a ResNet-8 for small images."""
    return ArchSpec(
        input_shape=input_shape,
        num_classes=num_classes,
        name="resnet-mini",
        stem_filters=16,
        stages=(StageSpec(1, 16, 1), StageSpec(1, 32, 2), StageSpec(1, 64, 2)),
    ).to_network()


def resnet_small(
    input_shape: tuple[int, int, int] = (32, 32, 3), num_classes: int = 10
) -> Network:
    """ResNet-20 of He et al. for CIFAR-sized images (3 stages of 3 basic blocks)."""
    return ArchSpec(
        input_shape=input_shape,
        num_classes=num_classes,
        name="resnet-small",
        stem_filters=16,
        stages=(StageSpec(3, 16, 1), StageSpec(3, 32, 2), StageSpec(3, 64, 2)),
    ).to_network()


SEEDS: dict[str, Callable[..., Network]] = {
    "resnet50": resnet50,
    "resnet-mini": resnet_mini,
    "resnet-small": resnet_small,
}


def seed_names() -> list[str]:
    return sorted(SEEDS)


def seed_spec(
    name: str, input_shape: tuple[int, int, int] | None = None, num_classes: int | None = None
) -> Network:
    if name not in SEEDS:
        raise UserError(
            f"unknown seed architecture {name!r}; use one of: {', '.join(seed_names())}"
        )
    return SEEDS[name]().with_io(input_shape, num_classes)


def build_seed(
    name: str, input_shape: tuple[int, int, int] | None = None, num_classes: int | None = None
) -> keras.Model:
    return build_model(seed_spec(name, input_shape, num_classes))
