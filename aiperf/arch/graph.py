"""A network as plain data: a directed acyclic graph of layer nodes, with a JSON round-trip.

This is the architecture spec every trial stores and every worker builds. It describes any
ResNet-family network (stem, residual blocks, skip connections, head) and whatever the morphism
operators (morph.py) add to one, so a child differs from its parent by an edit of this data.
Shapes and parameter counts are inferred here without Keras, so the search can check limits and
validity of thousands of candidates cheaply; the builder (builder.py) makes the Keras model.

Node kinds and their parameters:
    input                        the image
    zeropad   pad                symmetric zero padding
    conv      filters, kernel, stride, padding ('same'|'valid'), bias
    bn        epsilon, momentum (of the moving statistics; Keras' default 0.99)
    relu
    maxpool   pool, stride, padding
    add                          two or more inputs of one shape
    gap                          global average pooling
    dense     units ('classes' or a number), activation
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

KINDS = ("input", "zeropad", "conv", "bn", "relu", "maxpool", "add", "gap", "dense")

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Node:
    id: str
    kind: str
    inputs: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "inputs": list(self.inputs), "params": dict(self.params)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        return cls(id=data["id"], kind=data["kind"], inputs=tuple(data.get("inputs", ())),
                   params=dict(data.get("params", {})))


@dataclass(frozen=True)
class Network:
    """Nodes in topological order; the last node is the output. `history` lists the morphisms
    that made this network from its seed, one entry each, so lineage can be read from the spec."""

    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    nodes: tuple[Node, ...]
    history: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate(self)

    # --- lookup ---------------------------------------------------------------------------------

    def node(self, node_id: str) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def consumers(self, node_id: str) -> list[Node]:
        index = self.__dict__.get("_consumers")
        if index is None:  # built once per network: a network never changes (frozen)
            index = {}
            for n in self.nodes:
                for i in n.inputs:
                    index.setdefault(i, []).append(n)
            object.__setattr__(self, "_consumers", index)
        return list(index.get(node_id, ()))

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    # --- io -------------------------------------------------------------------------------------

    def with_io(self, input_shape: tuple[int, int, int] | None = None,
                num_classes: int | None = None) -> Network:
        return replace(self, input_shape=tuple(input_shape or self.input_shape),
                       num_classes=num_classes or self.num_classes)

    def to_dict(self) -> dict[str, Any]:
        return {"format": "aiperf-network/1", "name": self.name, "input_shape": list(self.input_shape),
                "num_classes": self.num_classes, "history": list(self.history),
                "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Network:
        return cls(name=data.get("name", "network"), input_shape=tuple(data["input_shape"]),
                   num_classes=int(data["num_classes"]), history=tuple(data.get("history", ())),
                   nodes=tuple(Node.from_dict(n) for n in data["nodes"]))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Network:
        return cls.from_dict(json.loads(text))

    def topology_key(self) -> str:
        """Hash of the computation (not of names or history): equal keys build equal models."""
        shapes = infer_shapes(self)
        index = {n.id: i for i, n in enumerate(self.nodes)}
        canon = [(n.kind, sorted(index[i] for i in n.inputs), sorted(n.params.items()), shapes[n.id])
                 for n in self.nodes]
        return hashlib.sha256(json.dumps(canon, default=str).encode()).hexdigest()[:16]

    # --- summaries ------------------------------------------------------------------------------

    @property
    def conv_count(self) -> int:
        return sum(n.kind == "conv" for n in self.nodes)

    @property
    def skip_count(self) -> int:
        return sum(n.kind == "add" for n in self.nodes)

    @property
    def max_filters(self) -> int:
        return max((n.params["filters"] for n in self.nodes if n.kind == "conv"), default=0)


def _spatial(size: int, kernel: int, stride: int, padding: str) -> int:
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel) // stride + 1


def infer_shapes(net: Network) -> dict[str, Shape]:
    """Output shape of every node (batch excluded); raises ValueError on an inconsistent graph.
    Computed once per network (a network is frozen; validation computes it at construction): the
    search calls this for every candidate morphism."""
    cached = net.__dict__.get("_shapes")
    if cached is None:
        cached = _infer_shapes(net)
        object.__setattr__(net, "_shapes", cached)
    return dict(cached)


def _infer_shapes(net: Network) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {}
    for n in net.nodes:
        ins = [shapes[i] for i in n.inputs]
        p = n.params
        if n.kind == "input":
            shape: Shape = tuple(net.input_shape)
        elif n.kind == "zeropad":
            h, w, c = ins[0]
            shape = (h + 2 * p["pad"], w + 2 * p["pad"], c)
        elif n.kind in ("conv", "maxpool"):
            h, w, c = ins[0]
            k = p["kernel"] if n.kind == "conv" else p["pool"]
            oh, ow = (_spatial(h, k, p["stride"], p["padding"]), _spatial(w, k, p["stride"], p["padding"]))
            if oh < 1 or ow < 1:
                raise ValueError(f"node {n.id}: a {k}x{k} window does not fit a {h}x{w} input")
            shape = (oh, ow, p["filters"] if n.kind == "conv" else c)
        elif n.kind in ("bn", "relu"):
            shape = ins[0]
        elif n.kind == "add":
            if len(set(ins)) != 1:
                raise ValueError(f"node {n.id}: add of different shapes {ins}")
            shape = ins[0]
        elif n.kind == "gap":
            shape = (ins[0][-1],)
        elif n.kind == "dense":
            units = net.num_classes if p["units"] == "classes" else int(p["units"])
            shape = (units,)
        else:  # validate() rejects unknown kinds first
            raise ValueError(f"node {n.id}: unknown kind {n.kind!r}")
        shapes[n.id] = shape
    return shapes


def count_params(net: Network) -> int:
    """Weights of the built model (trainable and not), as Keras counts them."""
    shapes = infer_shapes(net)
    total = 0
    for n in net.nodes:
        p = n.params
        if n.kind == "conv":
            cin = shapes[n.inputs[0]][-1]
            total += p["kernel"] ** 2 * cin * p["filters"] + (p["filters"] if p.get("bias") else 0)
        elif n.kind == "bn":
            total += 4 * shapes[n.id][-1]
        elif n.kind == "dense":
            fan_in, units = shapes[n.inputs[0]][-1], shapes[n.id][-1]
            total += fan_in * units + units
    return total


def validate(net: Network) -> None:
    """Every node known, ids unique, inputs defined before use, one input node first, shapes consistent."""
    seen: set[str] = set()
    for i, n in enumerate(net.nodes):
        if n.kind not in KINDS:
            raise ValueError(f"node {n.id}: unknown kind {n.kind!r}; known: {', '.join(KINDS)}")
        if n.id in seen:
            raise ValueError(f"node id {n.id!r} appears twice")
        if (n.kind == "input") != (i == 0):
            raise ValueError("the first node, and only the first, must be the input")
        missing = [x for x in n.inputs if x not in seen]
        if missing:
            raise ValueError(f"node {n.id}: inputs {missing} are not defined before it")
        expected = 0 if n.kind == "input" else (None if n.kind == "add" else 1)
        if expected is not None and len(n.inputs) != expected:
            raise ValueError(f"node {n.id}: a {n.kind} takes {expected} input(s), got {len(n.inputs)}")
        if n.kind == "add" and len(n.inputs) < 2:
            raise ValueError(f"node {n.id}: an add needs at least two inputs")
        seen.add(n.id)
    if net.nodes[-1].kind != "dense":
        raise ValueError("the last node must be the dense classifier")
    infer_shapes(net)
