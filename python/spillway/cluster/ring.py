"""The consistent-hash ring that places blocks and files on nodes.

EclipseMR's file system (its inner ring) gives every block and every file
name a 64-bit hash key and stores it on the node that owns the key, with
replicas on the owner's successors. Here each node has ``vnodes`` points on
the ring (virtual nodes, so that a node's share of the keys stays near
``1/n`` and a node that joins or leaves takes or gives keys from all the
others, not from one neighbour); a key belongs to the first point at or
after it, wrapping at 2^64.

A :class:`Ring` is an immutable value: membership changes make a new ring,
and :meth:`Ring.changes` says which replicas a key gains and loses between
two rings, which is all that joining, leaving and re-replication need.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from .._args import count
from ..errors import InvalidArgumentError

HASH_BITS = 64
VNODES_DEFAULT = 64
# More points than this per node buys no balance and costs memory per ring.
VNODES_MAX = 4096


def key_hash(name: Union[str, bytes]) -> int:
    """The 64-bit ring key of ``name`` (BLAKE2b, so stable across processes
    and machines, unlike Python's ``hash``)."""
    data = name.encode() if isinstance(name, str) else bytes(name)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def block_key(file_name: str, index: int) -> int:
    """The ring key of block ``index`` of the file ``file_name``."""
    return key_hash(f"{file_name}\0{index}")


class Ring:
    """Nodes (by id) placed on a 64-bit hash ring, ``vnodes`` points each."""

    __slots__ = ("nodes", "vnodes", "_points", "_owners")

    def __init__(self, nodes: Iterable[str], vnodes: int = VNODES_DEFAULT):
        nodes = tuple(sorted(nodes))
        if not nodes:
            raise InvalidArgumentError("a ring needs at least one node")
        for node in nodes:
            if not isinstance(node, str) or not node:
                raise InvalidArgumentError(f"node ids are non-empty strings, not {node!r}")
        duplicates = sorted({node for node in nodes if nodes.count(node) > 1})
        if duplicates:
            raise InvalidArgumentError(f"node ids must be distinct; repeated: {', '.join(duplicates)}")
        self.nodes: Tuple[str, ...] = nodes
        self.vnodes = count(vnodes, "vnodes", 1, VNODES_MAX)
        # Ties (two points with one hash) are broken by node id, so every
        # process builds the same ring from the same membership.
        points = sorted((key_hash(f"{node}\0vnode\0{index}"), node) for node in nodes for index in range(self.vnodes))
        self._points: List[int] = [point for point, _ in points]
        self._owners: List[str] = [node for _, node in points]

    def __repr__(self) -> str:
        return f"Ring(nodes={list(self.nodes)!r}, vnodes={self.vnodes})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ring) and (self.nodes, self.vnodes) == (other.nodes, other.vnodes)

    def __hash__(self) -> int:
        return hash((self.nodes, self.vnodes))

    def owner(self, key: int) -> str:
        """The node that owns ``key``: the first point at or after it."""
        return self._owners[self._index(key)]

    def replicas(self, key: int, factor: int) -> List[str]:
        """The nodes that hold ``key`` with replication ``factor``: its owner,
        then the next distinct nodes clockwise. Fewer when the ring has
        fewer nodes than ``factor``."""
        factor = count(factor, "replication factor", 1)
        wanted = min(factor, len(self.nodes))
        start = self._index(key)
        holders: List[str] = []
        for step in range(len(self._points)):
            node = self._owners[(start + step) % len(self._points)]
            if node not in holders:
                holders.append(node)
                if len(holders) == wanted:
                    break
        return holders

    def with_node(self, node: str) -> "Ring":
        """This ring with ``node`` joined."""
        if node in self.nodes:
            raise InvalidArgumentError(f"node {node} is already on the ring")
        return Ring((*self.nodes, node), self.vnodes)

    def without_node(self, node: str) -> "Ring":
        """This ring with ``node`` gone."""
        if node not in self.nodes:
            raise InvalidArgumentError(f"node {node} is not on the ring (its nodes: {', '.join(self.nodes)})")
        return Ring([other for other in self.nodes if other != node], self.vnodes)

    def changes(
        self, new: "Ring", key: int, factor: int, new_factor: Optional[int] = None
    ) -> Tuple[List[str], List[str]]:
        """What moving ``key`` from this ring (``factor`` copies) to ``new``
        (``new_factor`` copies, the same by default) takes: the nodes that
        must gain a replica, and those that hold one they no longer should."""
        before = self.replicas(key, factor)
        after = new.replicas(key, factor if new_factor is None else new_factor)
        return [node for node in after if node not in before], [node for node in before if node not in after]

    def share(self, node: str) -> float:
        """The fraction of the key space ``node`` owns (for balance checks
        and ``stat``)."""
        if node not in self.nodes:
            raise InvalidArgumentError(f"node {node} is not on the ring")
        owned = 0
        space = 1 << HASH_BITS
        for index, point in enumerate(self._points):
            if self._owners[index] == node:
                previous = self._points[index - 1] if index else self._points[-1] - space
                owned += point - previous
        return owned / space

    def _index(self, key: int) -> int:
        if not 0 <= key < (1 << HASH_BITS):
            raise InvalidArgumentError(f"ring keys are 0 to 2^{HASH_BITS} - 1, not {key}")
        index = bisect.bisect_left(self._points, key)
        return index % len(self._points)


def replication_factor(requested: Union[int, None], nodes: Sequence[str]) -> int:
    """The replication to use: ``requested``, or by default 3 (fewer when the
    cluster has fewer nodes)."""
    if requested is None:
        return min(3, len(nodes))
    return count(requested, "replication", 1)
