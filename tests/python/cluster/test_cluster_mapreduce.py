"""MapReduce across a simulated 4-node cluster: the same output as the
single-node engine, with nodes lost and added midway."""

from pathlib import Path

import pytest

import spillway
import spillway.mapreduce as mr
from spillway.errors import InvalidArgumentError


def single_node(job, local_input: Path, tmp_path: Path, **params) -> bytes:
    output = tmp_path / f"single-{job}"
    mr.run(job, [local_input], output, **params)
    return b"".join(Path(name).read_bytes() for name in mr.output_files(output))


def on_cluster(cluster, report, tmp_path: Path) -> bytes:
    pieces = []
    for index, name in enumerate(report.outputs):
        local = tmp_path / f"part-{index}"
        cluster.get(name, local)
        pieces.append(local.read_bytes())
    return b"".join(pieces)


@pytest.fixture(scope="module")
def corpus(cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    spillway.workload.text(path, bytes=3 << 20, vocabulary=20_000, seed=7)
    cluster.put(path, "corpus.txt", block_bytes="128K")
    return path


@pytest.fixture(scope="module")
def documents(cluster, corpus):
    """The corpus as documents: ``id<TAB>text`` lines, as the inverted index reads."""
    path = corpus.with_name("documents.tsv")
    lines = corpus.read_text().splitlines()
    path.write_text("".join(f"doc{index}\t{line}\n" for index, line in enumerate(lines)))
    cluster.put(path, "documents.tsv", format="tsv", block_bytes="128K")
    return path


@pytest.mark.parametrize(
    "job,params", [("wordcount", {}), ("inverted_index", {}), ("ngram", {"n": 2}), ("grep", {"pattern": "zicux"})]
)
def test_a_job_on_the_cluster_writes_what_the_single_node_engine_writes(cluster, corpus, documents, tmp_path, job, params):
    seen = []
    local, name = (documents, "documents.tsv") if job == "inverted_index" else (corpus, "corpus.txt")
    report = cluster.mapreduce(job, name, f"out-{job}", progress=lambda *step: seen.append(step), **params)
    assert on_cluster(cluster, report, tmp_path) == single_node(job, local, tmp_path, **params)
    assert report.partitions >= 2 and len(report.outputs) == report.partitions
    names = [phase.name for phase in report.phases]
    assert names == ["sample", "map", "reduce"]
    mapped = report.phases[1]
    assert mapped.bytes_read == local.stat().st_size
    assert report.locality == 1.0, "every map task ran where its blocks are"
    assert report.phases[2].bytes_moved > 0, "pieces crossed nodes on their way to the reducers"
    assert ("map", mapped.tasks, mapped.tasks) in seen


def test_bad_jobs_are_refused_by_name(cluster, corpus):
    with pytest.raises(InvalidArgumentError, match="no file missing.txt"):
        cluster.mapreduce("wordcount", "missing.txt", "out-missing")
    with pytest.raises(InvalidArgumentError, match="unknown output format"):
        cluster.mapreduce("wordcount", "corpus.txt", "out-bad", output_format="parquet")
    with pytest.raises(InvalidArgumentError):
        cluster.mapreduce("no-such-job", "corpus.txt", "out-bad")


def test_a_node_lost_halfway_changes_nothing_in_the_output(cluster, corpus, tmp_path):
    expected = single_node("wordcount", corpus, tmp_path)

    def lose_one(phase, done, total):
        if phase == "map" and done == total // 2 and "node-3" in {node["name"] for node in cluster.nodes()}:
            cluster.remove_node(3)

    report = cluster.mapreduce("wordcount", "corpus.txt", "out-lost", progress=lose_one)
    assert "node-3" not in {node["name"] for node in cluster.nodes()}
    assert on_cluster(cluster, report, tmp_path) == expected


def test_a_node_added_halfway_changes_nothing_in_the_output(cluster, corpus, tmp_path):
    expected = single_node("wordcount", corpus, tmp_path)
    added = []

    def add_one(phase, done, total):
        if phase == "map" and done == total // 2 and not added:
            added.append(cluster.add_node())

    report = cluster.mapreduce("wordcount", "corpus.txt", "out-added", progress=add_one)
    assert added
    assert on_cluster(cluster, report, tmp_path) == expected


def test_copies_damaged_on_one_node_midway_are_read_from_replicas_and_repaired(cluster, corpus, tmp_path):
    import zlib

    from spillway.cluster.store import key_name

    expected = single_node("wordcount", corpus, tmp_path)
    victim = next(node for node in cluster.nodes() if node["name"] != "node-0")
    blocks = [
        (cluster.store_directory(victim["id"]) / "blocks" / key_name(key), crc)
        for _, key, _, crc, holders in cluster.stat("corpus.txt").blocks
        if victim["name"] in holders
    ]
    assert blocks, "the victim holds copies of the corpus"

    def good(path, crc):
        return zlib.crc32(path.read_bytes()) == crc

    def damage_once(phase, done, total):
        if phase == "sample" and done == total:
            for path, _ in blocks:
                data = bytearray(path.read_bytes())
                data[len(data) // 2] ^= 0x20
                path.write_bytes(bytes(data))

    report = cluster.mapreduce("wordcount", "corpus.txt", "out-damaged", progress=damage_once)
    assert on_cluster(cluster, report, tmp_path) == expected
    assert report.locality < 1.0, "the victim's map tasks read a replica instead of their own copy"
    repaired = sum(good(path, crc) for path, crc in blocks)
    assert 0 < repaired, "the copies the job read were repaired"
    cluster.get("corpus.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == corpus.read_bytes()
