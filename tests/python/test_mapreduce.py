"""spillway.mapreduce: built-in jobs and Python jobs from Python."""

import collections

import pytest

import spillway
from spillway import InvalidArgumentError
from spillway import mapreduce as mr


def write_text(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


def read_tsv(output):
    rows = []
    for name in mr.output_files(output):
        with open(name) as file:
            rows.extend(tuple(line.rstrip("\n").split("\t")) for line in file)
    return rows


def corpus(tmp_path):
    lines = [" ".join(f"w{(i * j) % 200}" for j in range(1 + i % 7)) for i in range(3000)]
    path = tmp_path / "corpus.txt"
    write_text(path, lines)
    return path, lines


def test_word_count_equals_a_counter(tmp_path):
    path, lines = corpus(tmp_path)
    report = mr.run("wordcount", [path], tmp_path / "out", memory=32 << 20, partitions=3, sync=False)
    expected = collections.Counter(word for line in lines for word in line.split())
    assert report.output_records == len(expected)
    assert report.map_records == sum(expected.values())
    assert report.partitions == 3 and not report.resumed
    rows = read_tsv(tmp_path / "out")
    assert {word: int(count) for word, count in rows} == expected
    assert [word for word, _ in rows] == sorted(expected), "range partitions in order are sorted"
    assert report.details["phases"][-1]["stages"], "the stage tables are in the details"


def test_a_python_job_runs_its_callables(tmp_path):
    path, lines = corpus(tmp_path)

    def map_line(key, value):
        yield str(len(value.split())).encode(), value

    def reduce_lengths(key, values):
        return [(key, str(len(values)).encode())]

    report = mr.run("lines by word count", [path], tmp_path / "out", map=map_line, reduce=reduce_lengths, memory=32 << 20, sync=False)
    expected = collections.Counter(str(len(line.split())) for line in lines)
    assert {length: int(count) for length, count in read_tsv(tmp_path / "out")} == expected
    assert report.job == "lines by word count"


def test_an_exception_in_map_is_raised_again(tmp_path):
    path, _ = corpus(tmp_path)

    class Refused(Exception):
        pass

    def map_line(key, value):
        if b"w42" in value:
            raise Refused("no w42")
        return None

    with pytest.raises(Refused, match="no w42"):
        mr.run("refuses", [path], tmp_path / "out", map=map_line, reduce=lambda key, values: None, memory=32 << 20)


def test_pagerank_returns_a_report_per_job(tmp_path):
    edges = tmp_path / "edges.tsv"
    write_text(edges, [f"{i}\t{(i * 7 + 1) % 50}" for i in range(50)] + [f"{i}\t{(i + 3) % 50}" for i in range(50)])
    reports = mr.run("pagerank", [edges], tmp_path / "ranks", vertices=50, iterations=3, memory=32 << 20, sync=False)
    assert len(reports) == 4
    ranks = {int(vertex): float(rank) for vertex, rank in read_tsv(tmp_path / "ranks")}
    assert len(ranks) == 50
    # Every vertex has out-degree 2 (no rank is lost): the ranks sum to 1.
    assert sum(ranks.values()) == pytest.approx(1.0)


def test_bad_jobs_and_options_raise_invalid_argument(tmp_path):
    path, _ = corpus(tmp_path)
    with pytest.raises(InvalidArgumentError, match="unknown job"):
        mr.run("nope", [path], tmp_path / "o1")
    with pytest.raises(InvalidArgumentError, match="job ngram needs n"):
        mr.run("ngram", [path], tmp_path / "o2")
    with pytest.raises(InvalidArgumentError, match="both map= and reduce="):
        mr.run("half", [path], tmp_path / "o3", map=lambda key, value: None)
    with pytest.raises(InvalidArgumentError, match="unknown partitioning"):
        mr.run("wordcount", [path], tmp_path / "o4", partitioning="round-robin")
    with pytest.raises(spillway.SpillwayIOError, match="missing.txt"):
        mr.run("wordcount", [tmp_path / "missing.txt"], tmp_path / "o5")


def test_one_path_is_one_input_and_sizes_take_units(tmp_path):
    path, lines = corpus(tmp_path)
    # A str, a Path: one input each, never its characters.
    for number, given in enumerate([str(path), path]):
        report = mr.run("wordcount", given, tmp_path / f"counts{number}", memory="64M", block_size="64K", sync=False)
        expected = collections.Counter(word for line in lines for word in line.split())
        assert dict((word, int(count)) for word, count in read_tsv(tmp_path / f"counts{number}")) == expected
        assert report.input_bytes == path.stat().st_size


def test_job_names_take_hyphens_and_underscores(tmp_path):
    path = tmp_path / "documents.tsv"
    write_text(path, [f"{i}\tw{i % 7} w{i % 11} w{i % 13}" for i in range(500)])
    first = mr.run("inverted_index", [path], tmp_path / "a", memory="64M", sync=False)
    second = mr.run("inverted-index", [path], tmp_path / "b", memory="64M", sync=False)
    assert first.output_records == second.output_records > 0
    assert read_tsv(tmp_path / "a") == read_tsv(tmp_path / "b")


def test_a_map_that_gives_text_is_an_invalid_argument_naming_map(tmp_path):
    path, _ = corpus(tmp_path)

    def map_text(key, value):
        yield value.decode(), "1"

    def reduce(key, values):
        yield key, str(len(values)).encode()

    with pytest.raises(InvalidArgumentError, match=r"map .*pairs of bytes"):
        mr.run("texty", [path], tmp_path / "out", map=map_text, reduce=reduce, memory="64M", sync=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options, parameter",
    [
        ({"memory": "lots"}, "memory"),
        ({"memory": -5}, "memory"),
        ({"threads": -1}, "threads"),
        ({"partitions": 2.5}, "partitions"),
        ({"threads": 100_000}, "threads"),
    ],
)
def test_bad_numbers_name_the_parameter(tmp_path, options, parameter):
    path, _ = corpus(tmp_path)
    with pytest.raises(InvalidArgumentError, match=parameter):
        mr.run("wordcount", [path], tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_pagerank_refuses_a_vertex_past_the_count_and_leaves_nothing(tmp_path):
    edges = tmp_path / "edges.tsv"
    write_text(edges, [f"{i}\t{(i * 7 + 1) % 64}" for i in range(64)])
    with pytest.raises(InvalidArgumentError, match="vertex"):
        mr.run("pagerank", edges, tmp_path / "ranks", vertices=10, iterations=2, memory="32M", sync=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges.tsv"]


def test_ctrl_c_stops_a_job_and_leaves_nothing(tmp_path, ctrl_c):
    import time

    path = tmp_path / "corpus.txt"
    spillway.workload.text(path, bytes="128M", seed=3)
    signal = ctrl_c(after=0.3)
    with pytest.raises(KeyboardInterrupt):
        mr.run("wordcount", path, tmp_path / "counts", memory="64M", sync=False)
        time.sleep(30)  # reached only if the job ended before the signal
    latency = signal.latency()
    print(f"mapreduce raised KeyboardInterrupt {latency:.3f} s after SIGINT")
    assert latency < 0.5, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]
