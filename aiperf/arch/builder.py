"""Network -> keras.Model. The only place a network is assembled, so the operation counter,
the trainer and the search all see the same layers.

Every build starts from a seeded random initialisation: no pretrained weights exist anywhere in
aiperf. Layer names are the node ids, so two builds of one spec are identical layer for layer.
"""

from __future__ import annotations

import keras
from keras import layers

from aiperf.arch.graph import Network, Node
from aiperf.arch.spec import ArchSpec


def _layer(node: Node, num_classes: int, head: bool = False):
    """The node's layer; the head (the network's output) computes in float32 under any dtype policy,
    so a mixed-precision model's softmax and loss keep float32's range."""
    p = node.params
    if node.kind == "zeropad":
        return layers.ZeroPadding2D(padding=p["pad"], name=node.id)
    if node.kind == "conv":
        return layers.Conv2D(
            p["filters"],
            p["kernel"],
            strides=p["stride"],
            padding=p["padding"],
            use_bias=bool(p.get("bias", False)),
            name=node.id,
        )
    if node.kind == "bn":
        return layers.BatchNormalization(
            epsilon=p.get("epsilon", 1e-3), momentum=p.get("momentum", 0.99), name=node.id
        )
    if node.kind == "relu":
        return layers.Activation("relu", name=node.id)
    if node.kind == "maxpool":
        return layers.MaxPooling2D(
            p["pool"], strides=p["stride"], padding=p["padding"], name=node.id
        )
    if node.kind == "add":
        return layers.Add(name=node.id)
    if node.kind == "gap":
        return layers.GlobalAveragePooling2D(name=node.id)
    if node.kind == "dense":
        units = num_classes if p["units"] == "classes" else int(p["units"])
        return layers.Dense(
            units, activation=p.get("activation"), name=node.id, dtype="float32" if head else None
        )
    raise ValueError(f"node {node.id}: no Keras layer for kind {node.kind!r}")


def build_model(
    spec: Network | ArchSpec,
    input_shape: tuple[int, int, int] | None = None,
    num_classes: int | None = None,
    *,
    dropout: float = 0.0,
) -> keras.Model:
    """A fresh model for `spec`; `dropout` > 0 puts a Dropout layer of that rate before the head."""
    net = spec.to_network() if isinstance(spec, ArchSpec) else spec
    if input_shape is not None or num_classes is not None:
        net = net.with_io(input_shape, num_classes)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    tensors = {net.nodes[0].id: keras.Input(shape=net.input_shape, name=net.nodes[0].id)}
    for node in net.nodes[1:]:
        inputs = [tensors[i] for i in node.inputs]
        if node is net.output and dropout > 0:
            inputs = [layers.Dropout(dropout, name="head_dropout")(inputs[0])]
        layer = _layer(node, net.num_classes, head=node is net.output)
        tensors[node.id] = layer(inputs if node.kind == "add" else inputs[0])
    return keras.Model(tensors[net.nodes[0].id], tensors[net.output.id], name=net.name)
