"""The 2-IO sort across a simulated 4-node cluster: valid for valsort with
the input's checksum, two reads and two writes per byte, a node lost midway."""

import pytest

import spillway
from spillway.cluster.sort import KEY_BYTES, SAMPLE_BLOCKS, SAMPLE_KEYS_PER_BLOCK
from spillway.errors import InvalidArgumentError

RECORDS = 200_000


@pytest.fixture(scope="module")
def records(cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("sort") / "records.dat"
    generated = spillway.gensort(path, RECORDS, skew=True)
    cluster.put(path, "records.dat", format="gensort", block_bytes="1M")
    return generated


def test_the_sorted_ranges_validate_as_one_file_with_the_inputs_checksum(cluster, records):
    report = cluster.sort("records.dat", "sorted")
    assert report.valsort.sorted and report.valsort.records == RECORDS
    assert report.valsort.checksum == records.checksum
    assert report.ranges == 4 and len(report.outputs) == 4
    assert {output["node"] for output in report.outputs} == {"node-0", "node-1", "node-2", "node-3"}
    assert report.local_share == 1.0
    # Each node sorts one of 4 ranges of about equal size, so about three
    # quarters of what a node reads go to another node.
    assert 0.6 < report.bytes_moved / report.input_bytes < 0.9, report.bytes_moved
    # Every byte read twice and written twice, cluster-wide: read by a
    # partition task, written to a logical disk by its range's receiver,
    # read back and written sorted. The sample reads the key of each sampled
    # record (320 kB here, 1.6% of this small input, 0.008% of the
    # benchmark's 4 GiB), and the summaries add a little.
    sample = SAMPLE_BLOCKS * SAMPLE_KEYS_PER_BLOCK * KEY_BYTES / report.input_bytes
    assert 2.0 <= report.reads_per_byte <= 2.005 + sample, report.io
    assert 2.0 <= report.writes_per_byte <= 2.01, report.io
    assert len(report.io) == 4, "every node did its share"


def test_only_gensort_files_are_sorted(cluster, tmp_path):
    (tmp_path / "lines.txt").write_text("b\na\n")
    cluster.put(tmp_path / "lines.txt", "lines.txt")
    with pytest.raises(InvalidArgumentError, match="stored as text"):
        cluster.sort("lines.txt", "nope")


def test_a_node_lost_halfway_leaves_a_valid_sort(cluster, records):
    def lose_one(phase, done, total):
        if phase == "partition" and done == total // 2 and "node-1" in {node["name"] for node in cluster.nodes()}:
            cluster.remove_node(1)

    report = cluster.sort("records.dat", "sorted-after-loss", progress=lose_one)
    assert report.valsort.sorted and report.valsort.records == RECORDS
    assert report.valsort.checksum == records.checksum
    # The lost node's range (its receiver held the range's logical disks)
    # was made again on a live node.
    assert report.ranges_made_again == 1
    assert "node-1" not in {output["node"] for output in report.outputs}


def test_a_node_lost_while_ranges_are_sorted_leaves_a_valid_sort(cluster, records):
    lost = []

    def lose_one(phase, done, total):
        if phase == "sort" and done == 1 and not lost:
            lost.append(cluster.remove_node(max(int(node["name"].split("-")[1]) for node in cluster.nodes())))

    report = cluster.sort("records.dat", "sorted-after-late-loss", progress=lose_one)
    assert lost
    assert report.valsort.sorted and report.valsort.records == RECORDS
    assert report.valsort.checksum == records.checksum
    # Sorted there or not yet, the lost node's range is made again.
    assert report.ranges_made_again == 1
    assert lost[0] not in {output["node"] for output in report.outputs}


def test_a_node_added_halfway_leaves_a_valid_sort(cluster, records):
    added = []

    def add_one(phase, done, total):
        if phase == "partition" and done == total // 2 and not added:
            added.append(cluster.add_node())

    report = cluster.sort("records.dat", "sorted-after-join", progress=add_one)
    assert added
    assert report.valsort.sorted and report.valsort.records == RECORDS
    assert report.valsort.checksum == records.checksum
    assert added[0] in {node["name"] for node in cluster.nodes()}
