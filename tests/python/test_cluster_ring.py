"""The consistent-hash ring of the cluster's file system (no Ray needed)."""

import os
import subprocess
import sys

import pytest

from spillway.cluster.ring import Ring, block_key, key_hash, replication_factor
from spillway.errors import InvalidArgumentError

NODES = ["node-0", "node-1", "node-2", "node-3"]
KEYS = [block_key("words.txt", index) for index in range(20_000)]


def test_every_node_owns_about_its_share_of_the_keys():
    ring = Ring(NODES)
    shares = [ring.share(node) for node in NODES]
    assert sum(shares) == pytest.approx(1.0)
    owned = {node: 0 for node in NODES}
    for key in KEYS:
        owned[ring.owner(key)] += 1
    for node, share in zip(NODES, shares):
        assert 0.15 < share < 0.35, (node, share)
        assert owned[node] / len(KEYS) == pytest.approx(share, abs=0.02), node


def test_replicas_are_the_owner_then_distinct_successors():
    ring = Ring(NODES)
    for key in KEYS[:2000]:
        holders = ring.replicas(key, 3)
        assert len(holders) == len(set(holders)) == 3
        assert holders[0] == ring.owner(key)
    assert sorted(Ring(NODES[:2]).replicas(KEYS[0], 3)) == NODES[:2], "fewer nodes than the factor"
    assert Ring(NODES[:1]).replicas(KEYS[0], 3) == NODES[:1]


def test_a_joining_node_takes_only_keys_that_move_to_it():
    ring = Ring(NODES)
    joined = ring.with_node("node-4")
    moved = 0
    for key in KEYS:
        added, dropped = ring.changes(joined, key, 3)
        if added or dropped:
            moved += 1
            assert added == ["node-4"], "only the new node gains replicas"
            assert len(dropped) == 1 and dropped[0] != "node-4"
    # About factor / nodes of the keys gain the new node as a replica.
    assert 0.4 < moved / len(KEYS) < 0.8, moved


def test_a_leaving_node_has_each_of_its_replicas_made_again_once():
    ring = Ring(NODES)
    left = ring.without_node("node-2")
    for key in KEYS:
        added, dropped = ring.changes(left, key, 3)
        if "node-2" in ring.replicas(key, 3):
            assert dropped == ["node-2"] and len(added) == 1 and added[0] != "node-2"
        else:
            assert (added, dropped) == ([], [])


def test_placement_is_the_same_in_every_process():
    # Python's own hash() differs per process; the ring's must not.
    script = (
        "from spillway.cluster.ring import Ring, block_key\n"
        "ring = Ring(['node-0', 'node-1', 'node-2', 'node-3'])\n"
        "print(' '.join(ring.owner(block_key('words.txt', i)) for i in range(50)))\n"
    )
    environment = dict(os.environ, PYTHONHASHSEED="12345")
    other = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True)
    ring = Ring(list(reversed(NODES)))
    assert other.stdout.split() == [ring.owner(KEYS[index]) for index in range(50)]
    assert key_hash("a") != key_hash("b") and key_hash("a") == key_hash(b"a")


def test_bad_rings_and_keys_are_refused_naming_what_was_wrong():
    for nodes, message in [
        ([], "at least one node"),
        (["a", "b", "a"], "repeated: a"),
        (["a", ""], "non-empty strings"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            Ring(nodes)
    with pytest.raises(InvalidArgumentError, match="vnodes must be a whole number from 1"):
        Ring(NODES, vnodes=0)
    ring = Ring(NODES)
    with pytest.raises(InvalidArgumentError, match="already on the ring"):
        ring.with_node("node-1")
    with pytest.raises(InvalidArgumentError, match="node-9 is not on the ring"):
        ring.without_node("node-9")
    with pytest.raises(InvalidArgumentError, match="ring keys are 0 to"):
        ring.owner(1 << 64)
    with pytest.raises(InvalidArgumentError, match="replication factor must be a whole number from 1"):
        ring.replicas(KEYS[0], 0)
    assert replication_factor(None, NODES) == 3
    assert replication_factor(None, NODES[:2]) == 2
    assert replication_factor(5, NODES) == 5
