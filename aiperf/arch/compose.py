"""A small helper for writing networks as code: each call appends one node and returns its id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiperf.arch.graph import Network, Node, image_shape


@dataclass(frozen=True)
class ConvStyle:
    """How a conv_bn's convolution pads and whether it has a bias, and its batch normalisation's
    epsilon and momentum: what a network's convolutions share (Keras' defaults otherwise)."""

    padding: str = "same"
    bias: bool = False
    epsilon: float = 1e-3
    momentum: float = 0.99


class Composer:
    def __init__(self) -> None:
        self.nodes: list[Node] = [Node("input", "input")]

    def add(self, node_id: str, kind: str, inputs: str | list[str], **params: Any) -> str:
        inputs = [inputs] if isinstance(inputs, str) else inputs
        self.nodes.append(Node(node_id, kind, tuple(inputs), params))
        return node_id

    def conv_bn(
        self,
        x: str,
        name: str,
        filters: int,
        kernel: int,
        stride: int = 1,
        *,
        relu: bool = True,
        style: ConvStyle = ConvStyle(),
    ) -> str:
        x = self.add(
            f"{name}_conv",
            "conv",
            x,
            filters=filters,
            kernel=kernel,
            stride=stride,
            padding=style.padding,
            bias=style.bias,
        )
        x = self.add(f"{name}_bn", "bn", x, epsilon=style.epsilon, momentum=style.momentum)
        return self.add(f"{name}_relu", "relu", x) if relu else x

    def network(self, name: str, input_shape: tuple[int, int, int], num_classes: int) -> Network:
        return Network(
            name=name,
            input_shape=image_shape(input_shape),
            num_classes=num_classes,
            nodes=tuple(self.nodes),
        )
