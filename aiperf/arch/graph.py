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

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

KINDS = ("input", "zeropad", "conv", "bn", "relu", "maxpool", "add", "gap", "dense")

Shape = tuple[int, ...]


def image_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    """`shape` as a tuple (a caller may pass a list, e.g. one read from JSON). Its length is not
    checked here: the network (or spec) it goes into rejects one that is not (height, width,
    channels)."""
    return cast("tuple[int, int, int]", tuple(shape))


@dataclass(frozen=True)
class Node:
    id: str
    kind: str
    inputs: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "inputs": list(self.inputs),
            "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        return cls(
            id=data["id"],
            kind=data["kind"],
            inputs=tuple(data.get("inputs", ())),
            params=dict(data.get("params", {})),
        )


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

    def with_io(
        self, input_shape: tuple[int, int, int] | None = None, num_classes: int | None = None
    ) -> Network:
        return replace(
            self,
            input_shape=image_shape(input_shape or self.input_shape),
            num_classes=num_classes or self.num_classes,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "aiperf-network/1",
            "name": self.name,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "history": list(self.history),
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Network:
        return cls(
            name=data.get("name", "network"),
            input_shape=tuple(data["input_shape"]),
            num_classes=int(data["num_classes"]),
            history=tuple(data.get("history", ())),
            nodes=tuple(Node.from_dict(n) for n in data["nodes"]),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Network:
        return cls.from_dict(json.loads(text))

    def topology_key(self) -> str:
        """Hash of the computation (not of names or history): equal keys build equal models.

        The hashed text is the JSON of one [kind, sorted input positions, sorted params, shape] entry
        per node. Keys are stored (the morphism oracle's tried set), so that text must never change;
        it is assembled from pieces cached on the nodes because a search keys thousands of children
        that share all but a few (frozen) nodes with their parent. Computed once per network."""
        cached = self.__dict__.get("_topology_key")
        if cached is None:
            shapes, index = _shapes(self), {n.id: str(i) for i, n in enumerate(self.nodes)}
            entries = []
            for n in self.nodes:
                head, tail = _node_json(n)
                inputs = (
                    index[n.inputs[0]]
                    if len(n.inputs) == 1
                    else ", ".join(map(str, sorted(int(index[i]) for i in n.inputs)))
                )
                entries.append(f"{head}{inputs}{tail}{_json(shapes[n.id])}]")
            cached = hashlib.sha256(f"[{', '.join(entries)}]".encode()).hexdigest()[:16]
            object.__setattr__(self, "_topology_key", cached)
        return cached

    def edited(
        self,
        nodes: tuple[Node, ...],
        history: tuple[str, ...],
        shapes: dict[str, Shape] | None = None,
        params: int | None = None,
    ) -> Network:
        """This network with other nodes and history, NOT validated: only for edits that keep a graph
        valid by construction (the morphisms, whose preconditions morph.py checks and whose results
        the tests validate). A search makes thousands of children to score a few; validating each
        would repeat the shape inference the edit already did (`shapes` and the parameter count
        `params`, when it knows them)."""
        child = object.__new__(Network)
        for name, value in (
            ("name", self.name),
            ("input_shape", self.input_shape),
            ("num_classes", self.num_classes),
            ("nodes", nodes),
            ("history", history),
        ):
            object.__setattr__(child, name, value)
        for attr, cached in (("_shapes", shapes), ("_params", params)):
            if cached is not None:
                object.__setattr__(child, attr, cached)
        return child

    # --- summaries ------------------------------------------------------------------------------

    @property
    def conv_count(self) -> int:
        return sum(n.kind == "conv" for n in self.nodes)

    @property
    def skip_count(self) -> int:
        return sum(n.kind == "add" for n in self.nodes)


def _spatial(size: int, kernel: int, stride: int, padding: str) -> int:
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel) // stride + 1


def infer_shapes(net: Network) -> dict[str, Shape]:
    """Output shape of every node (batch excluded); raises ValueError on an inconsistent graph.
    Computed once per network (a network is frozen; validation computes it at construction): the
    search calls this for every candidate morphism."""
    return dict(_shapes(net))


def _shapes(net: Network) -> dict[str, Shape]:
    """infer_shapes() without the copy, for this module's readers (which never change it)."""
    cached = net.__dict__.get("_shapes")
    if cached is None:
        cached = _infer_shapes(net)
        object.__setattr__(net, "_shapes", cached)
    return cached


@functools.lru_cache(maxsize=4096)
def _json(shape: Shape) -> str:
    return json.dumps(shape)


def _node_json(node: Node) -> tuple[str, str]:
    """A node's topology-key entry around its input positions and shape: '[kind, [' and
    '], sorted params, ' as JSON, cached on the (frozen, shared) node."""
    cached = node.__dict__.get("_json")
    if cached is None:
        cached = (
            f"[{json.dumps(node.kind)}, [",
            f"], {json.dumps(sorted(node.params.items()), default=str)}, ",
        )
        object.__setattr__(node, "_json", cached)
    return cached


def _infer_shapes(net: Network) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {}
    for n in net.nodes:
        shapes[n.id] = _node_shape(net, n, [shapes[i] for i in n.inputs])
    return shapes


def _node_shape(net: Network, n: Node, ins: list[Shape]) -> Shape:
    """One node's output shape from its inputs' (`net` gives the input shape and the classes)."""
    p = n.params
    if n.kind == "input":
        return tuple(net.input_shape)
    if n.kind == "zeropad":
        h, w, c = ins[0]
        return (h + 2 * p["pad"], w + 2 * p["pad"], c)
    if n.kind in ("conv", "maxpool"):
        h, w, c = ins[0]
        k = p["kernel"] if n.kind == "conv" else p["pool"]
        oh, ow = (
            _spatial(h, k, p["stride"], p["padding"]),
            _spatial(w, k, p["stride"], p["padding"]),
        )
        if oh < 1 or ow < 1:
            raise ValueError(f"node {n.id}: a {k}x{k} window does not fit a {h}x{w} input")
        return (oh, ow, p["filters"] if n.kind == "conv" else c)
    if n.kind in ("bn", "relu"):
        return ins[0]
    if n.kind == "add":
        if len(set(ins)) != 1:
            raise ValueError(f"node {n.id}: add of different shapes {ins}")
        return ins[0]
    if n.kind == "gap":
        return (ins[0][-1],)
    if n.kind == "dense":
        return (net.num_classes if p["units"] == "classes" else int(p["units"]),)
    raise ValueError(
        f"node {n.id}: unknown kind {n.kind!r}"
    )  # validate() rejects unknown kinds first


def reinfer(
    parent: Network, nodes: tuple[Node, ...], changed: set[str]
) -> tuple[dict[str, Shape], int]:
    """Shapes and parameter count of `parent` with the params of the nodes `changed` changed (`nodes`:
    the same ids in the same order). Only those nodes, and the ones downstream whose inputs change
    shape, are inferred again: a widened convolution changes a few shapes of a network of hundreds."""
    before, params = _shapes(parent), count_params(parent)
    shapes = dict(before)
    moved: set[str] = set()
    for node, old in zip(nodes, parent.nodes, strict=False):
        if node.id not in changed and moved.isdisjoint(node.inputs):
            continue
        shapes[node.id] = _node_shape(parent, node, [shapes[i] for i in node.inputs])
        if shapes[node.id] != before[node.id]:
            moved.add(node.id)
        params += node_params(node, shapes) - node_params(old, before)
    return shapes, params


def count_params(net: Network) -> int:
    """Weights of the built model (trainable and not), as Keras counts them. Once per network."""
    cached = net.__dict__.get("_params")
    if cached is None:
        cached = _count_params(net)
        object.__setattr__(net, "_params", cached)
    return cached


def _count_params(net: Network) -> int:
    shapes = _shapes(net)
    return sum(node_params(n, shapes) for n in net.nodes)


def node_params(node: Node, shapes: dict[str, Shape]) -> int:
    """Weights of one node, given the network's shapes (its own and its inputs')."""
    p = node.params
    if node.kind == "conv":
        cin = shapes[node.inputs[0]][-1]
        return p["kernel"] ** 2 * cin * p["filters"] + (p["filters"] if p.get("bias") else 0)
    if node.kind == "bn":
        return 4 * shapes[node.id][-1]
    if node.kind == "dense":
        fan_in, units = shapes[node.inputs[0]][-1], shapes[node.id][-1]
        return fan_in * units + units
    return 0


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
            raise ValueError(
                f"node {n.id}: a {n.kind} takes {expected} input(s), got {len(n.inputs)}"
            )
        if n.kind == "add" and len(n.inputs) < 2:
            raise ValueError(f"node {n.id}: an add needs at least two inputs")
        seen.add(n.id)
    if net.nodes[-1].kind != "dense":
        raise ValueError("the last node must be the dense classifier")
    infer_shapes(net)
