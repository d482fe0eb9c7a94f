"""A small helper for writing networks as code: each call appends one node and returns its id."""

from __future__ import annotations

from typing import Any

from aiperf.arch.graph import Network, Node, image_shape


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
        padding: str = "same",
        bias: bool = False,
        epsilon: float = 1e-3,
        momentum: float = 0.99,
    ) -> str:
        x = self.add(
            f"{name}_conv",
            "conv",
            x,
            filters=filters,
            kernel=kernel,
            stride=stride,
            padding=padding,
            bias=bias,
        )
        x = self.add(f"{name}_bn", "bn", x, epsilon=epsilon, momentum=momentum)
        return self.add(f"{name}_relu", "relu", x) if relu else x

    def network(self, name: str, input_shape: tuple[int, int, int], num_classes: int) -> Network:
        return Network(
            name=name,
            input_shape=image_shape(input_shape),
            num_classes=num_classes,
            nodes=tuple(self.nodes),
        )
