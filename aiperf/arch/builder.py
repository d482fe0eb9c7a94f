"""Spec -> keras.Model. The only place a network is assembled, so the operation counter,
the trainer and the search all see the same layers.

Convolutions feeding a BatchNormalization carry no bias (BN's shift makes it redundant); layer
names are deterministic so two builds of one spec are identical layer for layer.
"""

from __future__ import annotations

import keras
from keras import layers

from aiperf.arch.spec import ArchSpec


def _conv_bn(x, filters: int, kernel: int, stride: int, name: str, relu: bool = True):
    x = layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                      name=f"{name}_conv")(x)
    x = layers.BatchNormalization(name=f"{name}_bn")(x)
    if relu:
        x = layers.Activation("relu", name=f"{name}_relu")(x)
    return x


def _basic_block(x, filters: int, kernel: int, stride: int, name: str):
    shortcut = x
    y = _conv_bn(x, filters, kernel, stride, f"{name}_1")
    y = _conv_bn(y, filters, kernel, 1, f"{name}_2", relu=False)
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _conv_bn(x, filters, 1, stride, f"{name}_proj", relu=False)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.Activation("relu", name=f"{name}_out")(y)


def _bottleneck_block(x, filters: int, kernel: int, stride: int, name: str):
    shortcut = x
    y = _conv_bn(x, filters, 1, stride, f"{name}_1")
    y = _conv_bn(y, filters, kernel, 1, f"{name}_2")
    y = _conv_bn(y, 4 * filters, 1, 1, f"{name}_3", relu=False)
    if stride != 1 or x.shape[-1] != 4 * filters:
        shortcut = _conv_bn(x, 4 * filters, 1, stride, f"{name}_proj", relu=False)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.Activation("relu", name=f"{name}_out")(y)


def build_model(spec: ArchSpec, input_shape: tuple[int, int, int] | None = None,
                num_classes: int | None = None) -> keras.Model:
    """A fresh, randomly initialised model (never pretrained weights) for `spec`."""
    if input_shape is not None or num_classes is not None:
        spec = spec.with_io(input_shape, num_classes)
    inputs = keras.Input(shape=spec.input_shape, name="image")
    x = _conv_bn(inputs, spec.stem_filters, spec.stem_kernel, spec.stem_stride, "stem")
    if spec.stem_pool:
        x = layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    block = _basic_block if spec.block == "basic" else _bottleneck_block
    for s, stage in enumerate(spec.stages, start=1):
        for b in range(stage.blocks):
            stride = stage.stride if b == 0 else 1
            x = block(x, stage.filters, spec.kernel_size, stride, f"stage{s}_block{b + 1}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    if spec.dropout > 0:
        x = layers.Dropout(spec.dropout, name="head_dropout")(x)
    outputs = layers.Dense(spec.num_classes, activation="softmax", name="predictions")(x)
    return keras.Model(inputs, outputs, name=spec.name)
