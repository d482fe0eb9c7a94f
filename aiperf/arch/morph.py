"""Network morphism: the three operators AIPerf grows networks with, as edits of the graph.

    deepen  insert Conv(k x k)-BN-ReLU after a ReLU, keeping its channel count
    widen   double the filters of a convolution whose output reaches no add (so every downstream
            shape stays consistent: later convolutions and the head take the wider input)
    skip    add a residual connection from an earlier ReLU to a later one: the later output
            becomes later + shortcut, with a strided 1x1 Conv+BN on the shortcut when the
            spatial size or the channel count differs

Each operator returns a new, valid Network whose history has one more entry, naming the
operator and its arguments; `apply` replays such an entry, so a child can always be checked
against its parent. Candidates are enumerated from the graph, so the search never proposes an
edit that would not build.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from aiperf.arch.graph import Network, Node, count_params, infer_shapes, node_params, reinfer

OPERATORS = ("deepen", "widen", "skip")
_PASS_THROUGH = ("bn", "relu", "maxpool", "zeropad")


@dataclass(frozen=True)
class Morphism:
    operator: str
    args: dict[str, Any]

    def describe(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return f"{self.operator}({args})"

    @classmethod
    def parse(cls, text: str) -> Morphism:
        operator, _, rest = text.partition("(")
        args: dict[str, Any] = {}
        for part in filter(None, rest.rstrip(")").split(",")):
            key, _, value = part.partition("=")
            args[key] = int(value) if value.lstrip("-").isdigit() else value
        return cls(operator, args)


def _prefix(net: Network) -> str:
    return f"m{len(net.history) + 1}"


def _bn_params(net: Network) -> dict[str, Any]:
    """Added BNs follow the network's own convention (its first BN's epsilon and momentum)."""
    first = next((n for n in net.nodes if n.kind == "bn"), None)
    return {"epsilon": 1e-3, "momentum": 0.99, **(first.params if first else {})}


def _rewire(net: Network, old: str, new: str) -> list[Node]:
    """`net`'s nodes, its consumers of `old` reading `new` instead. The other nodes are shared with
    the parent, not copied: nodes are frozen, and their cached pieces of the topology key carry over."""
    consumers = {n.id for n in net.consumers(old)}
    return [
        replace(n, inputs=tuple(new if i == old else i for i in n.inputs))
        if n.id in consumers
        else n
        for n in net.nodes
    ]


def _insert_after(net: Network, at: str, new: list[Node], entry: Morphism) -> Network:
    """`new` after node `at`, whose consumers read new[-1] instead. Each new node has `at`'s output
    shape (deepen and skip keep shapes), so the child's shapes and weights (the parent's, plus the
    new nodes') are known without going through the whole graph again."""
    nodes = _rewire(net, at, new[-1].id)
    position = [n.id for n in nodes].index(at) + 1
    nodes[position:position] = new
    shapes = infer_shapes(net)
    shapes.update((n.id, shapes[at]) for n in new)
    params = count_params(net) + sum(node_params(n, shapes) for n in new)
    return net.edited(tuple(nodes), net.history + (entry.describe(),), shapes, params)


def deepen(net: Network, after: str, kernel: int) -> Network:
    node = net.node(after)
    if node.kind != "relu":
        raise ValueError(f"deepen inserts after a relu, not after {node.kind} {after!r}")
    channels = infer_shapes(net)[after][-1]
    p = _prefix(net)
    new = [
        Node(
            f"{p}_conv",
            "conv",
            (after,),
            {"filters": channels, "kernel": kernel, "stride": 1, "padding": "same", "bias": False},
        ),
        Node(f"{p}_bn", "bn", (f"{p}_conv",), _bn_params(net)),
        Node(f"{p}_relu", "relu", (f"{p}_bn",)),
    ]
    return _insert_after(net, after, new, Morphism("deepen", {"after": after, "kernel": kernel}))


def _once(net: Network, name: str, compute: Callable[[Network], list]) -> list:
    """`compute(net)` once per network (a network is frozen): a search draws many morphisms of the
    same few parents. A copy is returned, so callers may change it."""
    cached = net.__dict__.get(name)
    if cached is None:
        cached = compute(net)
        object.__setattr__(net, name, cached)
    return list(cached)


def widenable(net: Network) -> list[str]:
    """Convolutions whose output reaches only convolutions, pooling or the head: widening one
    leaves every add's operands the same shape. The last convolution is never one of them."""
    return _once(net, "_widenable", _widenable)


def _widenable(net: Network) -> list[str]:
    convs = [n.id for n in net.nodes if n.kind == "conv"]
    result = []
    for conv_id in convs[:-1]:
        frontier, ok = [conv_id], True
        while frontier and ok:
            for consumer in net.consumers(frontier.pop()):
                if consumer.kind == "add":
                    ok = False
                    break
                if consumer.kind in _PASS_THROUGH:
                    frontier.append(consumer.id)
        if ok:
            result.append(conv_id)
    return result


def widen(net: Network, conv: str) -> Network:
    if conv not in widenable(net):
        raise ValueError(
            f"convolution {conv!r} cannot be widened without breaking a downstream shape"
        )
    nodes = [
        replace(n, params={**n.params, "filters": 2 * n.params["filters"]}) if n.id == conv else n
        for n in net.nodes
    ]
    entry = Morphism("widen", {"conv": conv}).describe()
    return net.edited(tuple(nodes), net.history + (entry,), *reinfer(net, tuple(nodes), {conv}))


def skip_pairs(net: Network) -> list[tuple[str, str]]:
    """(source, target) ReLU pairs a residual connection can join: the source comes earlier,
    they are not adjacent already, and the target's size divides the source's evenly."""
    return _once(net, "_skip_pairs", _skip_pairs)


def _skip_pairs(net: Network) -> list[tuple[str, str]]:
    shapes = infer_shapes(net)
    relus = [n.id for n in net.nodes if n.kind == "relu"]
    joined = {(a, b) for n in net.nodes if n.kind == "add" for a in n.inputs for b in n.inputs}
    pairs = []
    for i, src in enumerate(relus):
        for dst in relus[i + 1 :]:
            (hs, ws, _), (hd, wd, _) = shapes[src], shapes[dst]
            if hs % hd or ws % wd or hs // hd != ws // wd:
                continue
            if (src, dst) in joined:
                continue
            pairs.append((src, dst))
    return pairs


def skip(net: Network, source: str, target: str) -> Network:
    if (source, target) not in skip_pairs(net):
        raise ValueError(f"no residual connection can join {source!r} to {target!r}")
    shapes = infer_shapes(net)
    (hs, _, cs), (hd, _, cd) = shapes[source], shapes[target]
    p = _prefix(net)
    new: list[Node] = []
    shortcut = source
    if hs != hd or cs != cd:
        new += [
            Node(
                f"{p}_proj_conv",
                "conv",
                (source,),
                {"filters": cd, "kernel": 1, "stride": hs // hd, "padding": "same", "bias": False},
            ),
            Node(f"{p}_proj_bn", "bn", (f"{p}_proj_conv",), _bn_params(net)),
        ]
        shortcut = f"{p}_proj_bn"
    new.append(Node(f"{p}_add", "add", (target, shortcut)))
    return _insert_after(net, target, new, Morphism("skip", {"source": source, "target": target}))


def apply(net: Network, morphism: Morphism) -> Network:
    """Replay one recorded morphism."""
    if morphism.operator == "deepen":
        return deepen(net, morphism.args["after"], int(morphism.args["kernel"]))
    if morphism.operator == "widen":
        return widen(net, morphism.args["conv"])
    if morphism.operator == "skip":
        return skip(net, morphism.args["source"], morphism.args["target"])
    raise ValueError(f"unknown morphism {morphism.operator!r}; known: {', '.join(OPERATORS)}")


@dataclass(frozen=True)
class Limits:
    """Bounds from the profile: a morphism that would pass them is never proposed."""

    max_layers: int = 200
    max_params: int = 50_000_000


def within(net: Network, limits: Limits) -> bool:
    return len(net.nodes) <= limits.max_layers and count_params(net) <= limits.max_params


def random_morphism(
    net: Network,
    rng: random.Random,
    kernel: int,
    limits: Limits,
    operators: tuple[str, ...] = OPERATORS,
    attempts: int = 20,
) -> Network | None:
    """One random valid morphism of `net` within the limits, or None when none is found."""
    for _ in range(attempts):
        operator = rng.choice(operators)
        if operator == "deepen":
            choices = [n.id for n in net.nodes if n.kind == "relu"]
            child = deepen(net, rng.choice(choices), kernel) if choices else None
        elif operator == "widen":
            choices = widenable(net)
            child = widen(net, rng.choice(choices)) if choices else None
        else:
            pairs = skip_pairs(net)
            child = skip(net, *rng.choice(pairs)) if pairs else None
        if child is not None and within(child, limits):
            return child
    return None
