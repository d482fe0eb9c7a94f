"""The architectures a search has proposed, so that it never proposes one twice.

Two networks are the same architecture when their topology keys are equal (Network.topology_key:
a hash of every node's kind, inputs, parameters and shape). Hashing a whole ResNet-50 child takes
about half a millisecond, and a proposal checks some 25 candidates, nearly all of them new. So a
candidate is first compared by a fingerprint the search computes anyway: its node count, weight
count (the limits need it), convolution sequence and skip connections (the edit distance needs
them). Equal keys imply equal fingerprints, so a candidate whose fingerprint nothing tried shares
is new; only where fingerprints match are the keys computed and compared. The answers are exactly
those of comparing keys.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiperf.arch.graph import Network, count_params
from aiperf.search.distance import describe

Fingerprint = tuple


def fingerprint(net: Network) -> Fingerprint:
    """What equal topology keys have in common, cheap for a child the search just made."""
    convs, skips = describe(net)
    return len(net.nodes), count_params(net), tuple(convs), frozenset(skips.items())


class TriedArchitectures:
    """A set of architectures: `add` a network, ask `network in tried`.

    Each architecture is held as what is cheapest to keep until its key is needed (rarely): the
    network's JSON where the caller keeps it anyway (a trial's values; a run's set holds every
    trial's, and 10,000 parsed ResNet-50 children would be gigabytes), else the network itself
    (a proposal's candidates, which live for one proposal). Once computed, the key replaces it."""

    def __init__(self, networks: Iterable[Network | tuple[Network, str]] = ()) -> None:
        """`networks`: networks, or (network, its JSON) pairs."""
        # fingerprint -> the architectures with it: their keys, networks or JSON
        self._by_fingerprint: dict[Fingerprint, list[str | Network | _Json]] = {}
        for item in networks:
            net, spec = item if isinstance(item, tuple) else (item, None)
            self.add(net, spec)

    def add(self, net: Network, spec: str | None = None) -> None:
        """`spec`: the network's JSON, held instead of the network when given."""
        self._by_fingerprint.setdefault(fingerprint(net), []).append(
            net if spec is None else _Json(spec)
        )

    def __contains__(self, net: Network) -> bool:
        same = self._by_fingerprint.get(fingerprint(net), [])
        if not same:
            return False
        key = net.topology_key()
        return any(self._key(same, i) == key for i in range(len(same)))

    def __len__(self) -> int:
        return sum(map(len, self._by_fingerprint.values()))

    def keys(self) -> set[str]:
        """Every architecture's topology key."""
        return {
            self._key(group, i)
            for group in self._by_fingerprint.values()
            for i in range(len(group))
        }

    @staticmethod
    def _key(group: list[str | Network | _Json], i: int) -> str:
        held = group[i]
        if isinstance(held, _Json):
            held = Network.from_json(held.text)
        if isinstance(held, Network):
            group[i] = held = held.topology_key()
        return held


class _Json:
    """A network's JSON, held by reference (the caller's own string, not a copy)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text
