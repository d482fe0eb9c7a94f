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
    """A set of architectures: `add` a network, ask `network in tried`."""

    def __init__(self, networks: Iterable[Network] = (), keys: Iterable[str] = ()) -> None:
        """`keys`: architectures known by their topology key alone (earlier versions stored the key
        of every network they proposed). Those of `networks` are dropped; while any are left, every
        question computes the candidate's key."""
        # fingerprint -> the networks with it (each replaced by its key once that was computed)
        self._by_fingerprint: dict[Fingerprint, list[Network | str]] = {}
        for net in networks:
            self.add(net)
        self._keys_alone: set[str] = set()
        if keys:
            self._keys_alone = set(keys) - self.keys()

    def add(self, net: Network) -> None:
        self._by_fingerprint.setdefault(fingerprint(net), []).append(net)

    def __contains__(self, net: Network) -> bool:
        same = self._by_fingerprint.get(fingerprint(net), [])
        if not same and not self._keys_alone:
            return False
        key = net.topology_key()
        return key in self._keys_alone or any(self._key(same, i) == key for i in range(len(same)))

    def __len__(self) -> int:
        return sum(map(len, self._by_fingerprint.values())) + len(self._keys_alone)

    def keys(self) -> set[str]:
        """Every architecture's topology key (what earlier versions stored)."""
        return {self._key(group, i) for group in self._by_fingerprint.values()
                for i in range(len(group))} | self._keys_alone

    @staticmethod
    def _key(group: list[Network | str], i: int) -> str:
        if isinstance(group[i], Network):
            group[i] = group[i].topology_key()  # the network is not needed again
        return group[i]  # type: ignore[return-value]
