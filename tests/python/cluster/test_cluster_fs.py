"""The cluster's file system on a simulated 4-node Ray cluster: placement,
replication, damaged copies, nodes that leave and join, and the proof that
no Ray process touched an address outside loopback.

One cluster serves the module (starting one takes seconds); the tests that
change membership come last."""

import random
from pathlib import Path

import pytest

import spillway
from spillway.cluster import network
from spillway.cluster.store import key_name
from spillway.errors import InvalidArgumentError


def words(path: Path, lines: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    text = "".join(" ".join(rng.choice(["ray", "ring", "block", "node", "spill"]) for _ in range(rng.randint(1, 12))) + "\n" for _ in range(lines))
    path.write_text(text)
    return text.encode()


def holders_on_disk(cluster, key):
    """The nodes whose store directory holds a complete copy of block ``key``."""
    found = []
    for node in cluster.nodes():
        if (cluster.store_directory(node["id"]) / "blocks" / f"{key_name(key)}.sum").exists():
            found.append(node["name"])
    return sorted(found)


def test_a_file_is_cut_at_line_ends_and_each_block_lives_on_three_nodes(cluster, tmp_path):
    data = words(tmp_path / "words.txt", 20_000)
    stat = cluster.put(tmp_path / "words.txt", "words.txt", block_bytes="16K")
    assert stat.size == len(data) and stat.replication == 3
    assert len(stat.blocks) >= len(data) // (16 << 10)
    offset = 0
    for index, key, length, _, holders in stat.blocks:
        assert data[offset + length - 1 : offset + length] == b"\n", f"block {index} ends inside a line"
        offset += length
        assert len(set(holders)) == 3
        assert holders_on_disk(cluster, key) == sorted(holders)
    assert offset == len(data)
    assert len(stat.record_holders) == 3
    assert "words.txt" in cluster.ls()
    cluster.get("words.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == data


def test_gensort_blocks_hold_whole_records(cluster, tmp_path):
    spillway.gensort(tmp_path / "records.dat", records=3000)
    stat = cluster.put(tmp_path / "records.dat", "records.dat", format="gensort", block_bytes="64K")
    assert all(length % 100 == 0 for _, _, length, _, _ in stat.blocks)
    cluster.get("records.dat", tmp_path / "back.dat")
    assert (tmp_path / "back.dat").read_bytes() == (tmp_path / "records.dat").read_bytes()


def test_a_damaged_copy_is_read_from_another_holder_and_repaired(cluster, tmp_path):
    data = words(tmp_path / "damaged.txt", 5000, seed=2)
    stat = cluster.put(tmp_path / "damaged.txt", "damaged.txt", block_bytes="8K")
    _, key, _, _, holders = stat.blocks[1]
    owner = next(node for node in cluster.nodes() if node["name"] == holders[0])
    path = cluster.store_directory(owner["id"]) / "blocks" / key_name(key)
    good = path.read_bytes()
    path.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])
    cluster.get("damaged.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == data
    assert path.read_bytes() == good, "the owner's copy was written again"


def test_errors_name_what_was_wrong(cluster, tmp_path):
    words(tmp_path / "twice.txt", 10)
    cluster.put(tmp_path / "twice.txt", "twice.txt")
    with pytest.raises(InvalidArgumentError, match="twice.txt already exists"):
        cluster.put(tmp_path / "twice.txt", "twice.txt")
    with pytest.raises(InvalidArgumentError, match="no file missing.txt"):
        cluster.get("missing.txt", tmp_path / "x")
    with pytest.raises(InvalidArgumentError, match="unknown format 'parquet'"):
        cluster.put(tmp_path / "twice.txt", "other.txt", format="parquet")
    with pytest.raises(InvalidArgumentError, match="block_bytes"):
        cluster.put(tmp_path / "twice.txt", "other.txt", block_bytes=0)
    cluster.rm("twice.txt")
    assert "twice.txt" not in cluster.ls()
    assert not (tmp_path / "x").exists()


def test_no_ray_process_has_a_socket_outside_loopback(cluster):
    pids = network.namespace_pids()
    found = network.sockets(pids)
    assert len(found) > 10, "the audit sees the cluster's sockets"
    assert network.foreign_sockets(pids) == []


def test_a_node_that_dies_has_its_copies_made_again_and_a_new_node_takes_its_share(cluster, tmp_path):
    data = words(tmp_path / "membership.txt", 10_000, seed=3)
    cluster.put(tmp_path / "membership.txt", "membership.txt", block_bytes="8K")
    removed = cluster.remove_node(2)
    assert removed == "node-2"
    live = {node["name"] for node in cluster.nodes()}
    assert live == {"node-0", "node-1", "node-3"}
    for name in cluster.ls():
        for _, key, _, _, holders in cluster.stat(name).blocks:
            assert holders_on_disk(cluster, key) == sorted(holders) == sorted(live)
    cluster.get("membership.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == data

    added = cluster.add_node()
    assert added == "node-4"
    nodes = {node["name"]: node for node in cluster.nodes()}
    assert nodes["node-4"]["blocks"] > 0, "the new node took over its ring range"
    for name in cluster.ls():
        for _, key, _, _, holders in cluster.stat(name).blocks:
            assert len(holders) == 3 and holders_on_disk(cluster, key) == sorted(holders)
    cluster.get("membership.txt", tmp_path / "again.txt")
    assert (tmp_path / "again.txt").read_bytes() == data
